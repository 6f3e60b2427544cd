/**
 * Delivery to one subscription: hand a copy to its push sink now, or keep it in its buffer (within `maxDepth` /
 * `maxBytes` and its overflow policy), push held copies when credit comes back (`drain`), hand them to a pull sink
 * (`take`), and finish them (acknowledged, committed, rolled back, expired, refused by a changed ACL).
 *
 * Owns the per-subscription counters and the engine's delivery totals, and what a finished message costs in the
 * store (through write-behind.ts). Which subscriptions get a copy is fan-out.ts's (topics), shared-groups.ts's
 * (one member) and queue-dispatch.ts's (one consumer); they all come here to deliver.
 *
 * Every step that takes a copy returns Outcome bits (engine-core.ts): ACCEPTED, plus STORED / DEFERRED when it
 * wrote the copy for a durable subscription; 0 when the copy was not taken.
 */
import { ACCEPTED, NONE, type EngineCore } from './engine-core.js';
import type { FlowControl } from './flow-control.js';
import type { Message } from './message.js';
import type { Delivery as Taken, Destination, PushSink, Subscription } from './subscription.js';
import type { WriteBehind } from './write-behind.js';

export class Delivery {
  constructor(
    private readonly core: EngineCore,
    private readonly writes: WriteBehind,
    private readonly flow: FlowControl,
  ) {}

  /** noLocal, ACL, accept hook, selector, retain-as-published, then deliver or hold. */
  offer(sub: Subscription, dest: Destination, msg: Message, retainedDelivery: boolean): number {
    if (sub.closed) return NONE;
    if (sub.noLocal && msg.origin !== undefined && msg.origin === sub.sessionId) {
      sub.messagesIgnored++; // [MQTT-3.8.3-3]
      return NONE;
    }
    const core = this.core;
    if (
      !core.authorized(sub, dest) ||
      (sub.accept !== undefined && !sub.accept(msg, dest.name)) ||
      (sub.selector !== undefined && !core.select(sub, msg, dest))
    ) {
      sub.messagesIgnored++;
      return NONE;
    }
    return this.hold(sub, dest, retainedDelivery ? msg : core.asPublished(sub, msg));
  }

  /** Can take a message right now without holding it. */
  ready(s: Subscription): boolean {
    const sink = s.sink;
    if (sink === undefined || s.hibernating || s.closed || s.paused) return false;
    if (sink.kind === 'push') return !s.blocked && s.held.size === 0;
    return !s.isFull();
  }

  /** Topic copy for one subscription: push it now when possible, else keep it (or drop it when full). */
  hold(sub: Subscription, dest: Destination, msg: Message): number {
    const sink = sub.sink;
    if (sink !== undefined && sink.kind === 'push' && !sub.hibernating && !sub.blocked && !sub.paused && sub.held.size === 0) {
      const out = this.tryPush(sub, dest, msg);
      if (out !== NONE) return out;
    }
    return this.keep(sub, dest, msg);
  }

  /** Hand a topic copy to an available push sink; 0 (and blocked) when the sink has no credit. */
  tryPush(sub: Subscription, dest: Destination, msg: Message): number {
    const sink = sub.sink as PushSink;
    const ack = sub.qos > 0 && msg.qos > 0;
    if (ack) sub.inFlight.set(msg.id, { msg, dest });
    if (sink.deliver(sub, msg, dest.name)) {
      sub.messagesRegistered++;
      dest.counters.subscribed++;
      this.core.totals.totalSubscribedMessages++;
      this.sent(sub, dest);
      let out = ACCEPTED;
      if (ack) {
        if (sub.durable && sub.inFlight.has(msg.id)) out |= this.writes.persistCopy(sub, dest, msg, true);
        this.flow.noteFull(sub);
      }
      return out;
    }
    if (ack) sub.inFlight.delete(msg.id);
    sub.blocked = true;
    return NONE;
  }

  /**
   * Keep a topic copy in the subscription's buffer. When the buffer is full (`maxDepth` messages or `maxBytes`
   * bytes): a `refuseWhenFull` subscription takes a copy with an effective QoS 0 in place of its oldest held copies
   * while those are QoS 0 too, as many as it takes to leave the cap (drop-oldest; a larger copy may replace several
   * smaller ones); anything else is dropped (counted). A QoS >= 1 copy only gets here full when publish's refusal
   * could not apply (a shared group's fallback, a retained message on subscribe).
   */
  keep(sub: Subscription, dest: Destination, msg: Message): number {
    if (sub.maxPerDestination !== 0 && sub.held.size >= sub.maxPerDestination && sub.held.countOf(dest) >= sub.maxPerDestination) {
      // REST (MAPS maxEventsPerDestination): this destination's share is full, its oldest held message goes
      const old = sub.held.removeOldestOf(dest);
      if (old !== undefined) {
        if (!dest.isQueue) dest.pendingCopies--;
        this.writes.unpersistHeld(sub, dest, old);
        this.dropped(sub, dest);
      }
    }
    if (sub.isFull()) {
      this.flow.noteFull(sub);
      if (!sub.refuseWhenFull || (sub.qos !== 0 && msg.qos !== 0)) {
        this.dropped(sub, dest);
        return NONE;
      }
      // what is in flight is not dropped: when it alone fills the cap, dropping held copies would make no room
      if (sub.inFlight.size >= sub.maxDepth || sub.inFlight.bytes >= sub.maxBytes) {
        this.dropped(sub, dest);
        return NONE;
      }
      do {
        const old = sub.held.peekMsg();
        if (old === undefined || (sub.qos !== 0 && old.qos !== 0)) {
          this.dropped(sub, dest);
          return NONE;
        }
        const oldDest = sub.held.peekDest()!;
        sub.held.drop();
        if (!oldDest.isQueue) oldDest.pendingCopies--;
        this.writes.unpersistHeld(sub, oldDest, old);
        this.dropped(sub, oldDest);
      } while (sub.isFull());
    }
    sub.held.push(msg, dest);
    dest.pendingCopies++;
    sub.messagesRegistered++;
    dest.counters.subscribed++;
    this.core.totals.totalSubscribedMessages++;
    let out = ACCEPTED;
    // write-behind applies while the sink is attached (the copy is about to go); a hibernating one writes it now
    if (sub.durable) out |= this.writes.persistCopy(sub, dest, msg, sub.sink !== undefined && !sub.hibernating);
    this.flow.noteFull(sub);
    const sink = sub.sink;
    if (sink !== undefined && sink.kind === 'pull' && sub.held.size === 1 && !sub.paused && sink.notify !== undefined) sink.notify(sub);
    return out;
  }

  /** A copy the subscription could not take (its cap): counted, and the first of a run reported as a slow consumer. */
  dropped(sub: Subscription, dest: Destination): void {
    sub.messagesDropped++;
    sub.messagesIgnored++;
    dest.counters.dropped++;
    this.core.totals.totalDroppedMessages++;
    if (!sub.slow) {
      sub.slow = true;
      this.core.events.onSlowConsumer(sub.sessionId, sub.filter, sub.held.size + sub.inFlight.size);
    }
  }

  /** A message went out to the subscription's sink. */
  sent(sub: Subscription, dest: Destination): void {
    sub.messagesSent++;
    dest.counters.delivered++;
    this.core.totals.totalDeliveredMessages++;
  }

  /** Push held messages until the sink runs out of credit. */
  drain(sub: Subscription): void {
    const sink = sub.sink;
    if (sink === undefined || sink.kind !== 'push' || sub.draining || sub.closed || sub.hibernating || sub.blocked || sub.paused) return;
    sub.draining = true;
    try {
      const now = this.core.now();
      const held = sub.held;
      while (held.size > 0) {
        const msg = held.peekMsg()!;
        const dest = held.peekDest()!;
        if (msg.expiresAt !== 0 && msg.expiresAt <= now) {
          held.drop();
          if (!dest.isQueue) dest.pendingCopies--;
          this.expireHeld(sub, dest, msg);
          continue;
        }
        if (sub.authorize !== undefined && !sub.authorize(dest.name)) {
          held.drop();
          if (!dest.isQueue) dest.pendingCopies--;
          this.refusedHeld(sub, dest, msg); // the ACL changed while it was held
          continue;
        }
        const ack = sub.qos > 0 && msg.qos > 0;
        if (ack) sub.inFlight.set(msg.id, { msg, dest });
        if (!sink.deliver(sub, msg, dest.name)) {
          if (ack) sub.inFlight.delete(msg.id);
          sub.blocked = true;
          break;
        }
        held.drop();
        if (!dest.isQueue) dest.pendingCopies--;
        this.sent(sub, dest);
        if (!ack) this.completed(sub, dest, msg);
      }
      if (held.size === 0) sub.slow = false;
    } finally {
      sub.draining = false;
    }
    if (sub.full) this.flow.noteRoom(sub);
  }

  /** Up to `n` held messages for a pull sink (a queue consumer's queue is dispatched again by the caller). */
  take(sub: Subscription, n: number): Taken[] {
    if (sub.closed || sub.paused || !(n > 0)) return [];
    const out: Taken[] = [];
    const now = this.core.now();
    const totals = this.core.totals;
    const held = sub.held;
    while (out.length < n && held.size > 0) {
      const msg = held.peekMsg()!;
      const dest = held.peekDest()!;
      held.drop();
      if (!dest.isQueue) dest.pendingCopies--;
      if (msg.expiresAt !== 0 && msg.expiresAt <= now) {
        this.expireHeld(sub, dest, msg);
        continue;
      }
      if (sub.authorize !== undefined && !sub.authorize(dest.name)) {
        this.refusedHeld(sub, dest, msg); // the ACL changed while it was held
        continue;
      }
      out.push({ eventId: msg.id, destinationName: dest.name, message: msg });
      this.sent(sub, dest);
      dest.counters.retrieved++;
      totals.totalRetrievedMessages++;
      if (sub.transactional) sub.inFlight.set(msg.id, { msg, dest });
      else this.completed(sub, dest, msg);
    }
    if (held.size === 0) sub.slow = false;
    if (sub.full) this.flow.noteRoom(sub);
    return out;
  }

  /**
   * Commit (ack) or abort (roll back) in-flight messages; every id counts. Rolled-back queue messages go back to
   * their queue, topic copies to the front of the buffer in their order. A topic subscription is drained again; a
   * queue consumer's queue is dispatched again by the caller.
   */
  settle(sub: Subscription, ids: readonly number[], commit: boolean): number {
    let n = 0;
    let returned: Array<{ msg: Message; dest: Destination }> | undefined;
    for (let i = 0; i < ids.length; i++) {
      const f = sub.inFlight.get(ids[i]!);
      if (f === undefined) continue;
      sub.inFlight.delete(ids[i]!);
      n++;
      if (commit) {
        sub.messagesAcked++;
        this.completed(sub, f.dest, f.msg);
      } else {
        sub.messagesRolledBack++;
        (returned ??= []).push(f);
      }
    }
    if (returned !== undefined) {
      if (sub.queue !== undefined) {
        for (const f of returned) this.returnToQueue(f.dest, f.msg);
      } else {
        returned.sort((a, b) => b.msg.id - a.msg.id);
        for (const f of returned) {
          sub.held.unshift(f.msg, f.dest);
          f.dest.pendingCopies++;
        }
        const sink = sub.sink;
        if (sink !== undefined && sink.kind === 'pull' && sink.notify !== undefined) sink.notify(sub);
      }
    }
    if (n > 0 && !sub.closed) {
      if (sub.full) this.flow.noteRoom(sub);
      if (sub.queue === undefined) this.drain(sub);
    }
    return n;
  }

  /** A topic subscription goes offline: unacknowledged messages are delivered again when it comes back [MQTT-4.4.0-1]. */
  requeueInFlight(sub: Subscription): void {
    if (sub.inFlight.size === 0) return;
    const back = [...sub.inFlight.values()].sort((a, b) => b.msg.id - a.msg.id);
    sub.inFlight.clear();
    for (const f of back) {
      sub.held.unshift(f.msg, f.dest);
      f.dest.pendingCopies++;
    }
  }

  /** Give a consumer's held and in-flight queue messages back to its queue. */
  releaseConsumer(sub: Subscription): void {
    for (const [msg, dest] of sub.held.drain()) this.returnToQueue(dest, msg);
    for (const f of sub.inFlight.values()) this.returnToQueue(f.dest, f.msg);
    sub.inFlight.clear();
  }

  /** A queue message was consumed: forget it and delete it from the store. */
  consumeQueued(dest: Destination, msg: Message): void {
    dest.outstanding--;
    this.writes.unpersistQueued(dest, msg);
  }

  /** Put a message a consumer will not consume back into its queue (in its original order). */
  returnToQueue(dest: Destination, msg: Message): void {
    dest.outstanding--;
    dest.queue!.requeue(msg);
  }

  /** A message held by a subscription expired (already removed from its buffer). */
  expireHeld(sub: Subscription, dest: Destination, msg: Message): void {
    sub.messagesExpired++;
    dest.counters.expired++;
    this.core.totals.totalExpiredMessages++;
    if (dest.isQueue) this.consumeQueued(dest, msg);
    else this.writes.unpersistHeld(sub, dest, msg);
  }

  /**
   * A held message the subscription may no longer read (its `authorize` changed its answer): a topic copy is
   * forgotten (counted as ignored), a queue message goes back to its queue for the other consumers.
   */
  private refusedHeld(sub: Subscription, dest: Destination, msg: Message): void {
    sub.messagesIgnored++;
    if (dest.isQueue) this.returnToQueue(dest, msg);
    else this.writes.unpersistHeld(sub, dest, msg);
  }

  /** The subscription is done with a message (acknowledged, committed or taken without a transaction). */
  private completed(sub: Subscription, dest: Destination, msg: Message): void {
    if (dest.isQueue) this.consumeQueued(dest, msg);
    else this.writes.unpersistHeld(sub, dest, msg);
  }

  /** Remove the copies of a topic's messages waiting in subscription buffers (O(subscriptions)); returns how many. */
  dropCopiesOf(d: Destination): number {
    if (d.pendingCopies <= 0) return 0;
    let n = 0;
    for (const s of this.core.subs.values()) {
      if (s.held.size === 0 || s.queue !== undefined) continue;
      const k = s.held.removeWhere(
        (_m, from) => from === d,
        (m) => {
          d.pendingCopies--;
          this.writes.unpersistHeld(s, d, m);
        },
      );
      if (k > 0) {
        n += k;
        if (s.held.size === 0) s.slow = false;
        if (s.full) this.flow.noteRoom(s);
      }
    }
    return n;
  }
}
