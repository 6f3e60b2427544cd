/**
 * Queue dispatch: a queue message goes to exactly one consumer, round-robin among the ready ones, ordered by
 * priority then arrival, kept (in memory and in the store) until consumed.
 *
 * Owns a queue's messages and its consumer list: enqueue (written through write-behind.ts), dispatch, the
 * high-water / low-water notices, expiry of waiting messages, purge and the clearing of a deleted queue. Handing a
 * message to the chosen consumer's sink or buffer, and finishing it, are delivery.ts's.
 */
import { NONE, type EngineCore } from './engine-core.js';
import type { Delivery } from './delivery.js';
import type { Message } from './message.js';
import type { Destination, Subscription } from './subscription.js';
import type { WriteBehind } from './write-behind.js';

export class QueueDispatch {
  constructor(
    private readonly core: EngineCore,
    private readonly writes: WriteBehind,
    private readonly delivery: Delivery,
  ) {}

  /** A message for a queue: written (a persistent queue), queued, dispatched. Returns STORED when written. */
  enqueue(dest: Destination, msg: Message): number {
    const out = this.writes.persistQueued(dest, msg);
    dest.queue!.push(msg);
    this.dispatch(dest);
    this.checkHighWater(dest);
    return out;
  }

  /** Hand waiting queue messages to ready consumers, round-robin, until the queue or the consumers run out. */
  dispatch(dest: Destination): void {
    const q = dest.queue;
    if (q === undefined || dest.dispatching || dest.paused || dest.deleted) return;
    const consumers = dest.consumers;
    if (q.size === 0 || consumers.length === 0) return;
    const core = this.core;
    const delivery = this.delivery;
    const totals = core.totals;
    dest.dispatching = true;
    try {
      const now = core.now();
      while (q.size > 0) {
        const n = consumers.length;
        if (n === 0) break;
        const msg = q.peek()!;
        if (msg.expiresAt !== 0 && msg.expiresAt <= now) {
          q.shift();
          this.expireQueued(dest, msg);
          continue;
        }
        let chosen: Subscription | undefined;
        let at = 0;
        for (let k = 0; k < n; k++) {
          const i = (dest.rr + k) % n;
          const c = consumers[i]!;
          if (!this.consumerReady(c)) continue;
          if (c.authorize !== undefined && !c.authorize(dest.name)) continue;
          if (c.selector !== undefined && !core.select(c, msg, dest)) continue;
          chosen = c;
          at = i;
          break;
        }
        if (chosen === undefined) break; // nobody can take the head message now
        dest.rr = (at + 1) % n;
        q.shift();
        dest.outstanding++;
        const sink = chosen.sink!;
        if (sink.kind === 'push') {
          const ack = chosen.qos > 0 && msg.qos > 0;
          if (ack) chosen.inFlight.set(msg.id, { msg, dest });
          if (!sink.deliver(chosen, msg, dest.name)) {
            if (ack) chosen.inFlight.delete(msg.id);
            dest.outstanding--;
            chosen.blocked = true;
            q.unshift(msg);
            continue;
          }
          chosen.messagesRegistered++;
          dest.counters.subscribed++;
          totals.totalSubscribedMessages++;
          delivery.sent(chosen, dest);
          if (!ack) delivery.consumeQueued(dest, msg);
        } else {
          chosen.held.push(msg, dest);
          chosen.messagesRegistered++;
          dest.counters.subscribed++;
          totals.totalSubscribedMessages++;
          if (chosen.held.size === 1 && sink.notify !== undefined) sink.notify(chosen);
        }
      }
    } finally {
      dest.dispatching = false;
    }
    this.checkLowWater(dest);
  }

  private consumerReady(c: Subscription): boolean {
    const sink = c.sink;
    if (sink === undefined || c.closed || c.hibernating || c.paused) return false;
    if (sink.kind === 'push' && c.blocked) return false;
    return !c.isFull() && (c.maxPerDestination === 0 || c.held.size < c.maxPerDestination);
  }

  /** A consumer joins its queue (and may take what waits). */
  addConsumer(sub: Subscription, dest: Destination): void {
    sub.queue = dest;
    dest.consumers.push(sub);
    this.dispatch(dest);
  }

  /** A consumer leaves: what it held or had in flight goes back to the queue for the others. */
  removeConsumer(sub: Subscription, dest: Destination): void {
    const at = dest.consumers.indexOf(sub);
    if (at >= 0) {
      dest.consumers.splice(at, 1);
      if (at < dest.rr) dest.rr--;
      if (dest.rr >= dest.consumers.length) dest.rr = 0;
    }
    this.delivery.releaseConsumer(sub);
    this.dispatch(dest);
  }

  /** Raise `onQueueHighWater` once the depth reaches the mark (re-armed at half of it). */
  checkHighWater(dest: Destination): void {
    const hw = this.core.limits.highWater;
    if (!dest.highWater && dest.queue!.size >= hw) {
      dest.highWater = true;
      this.core.events.onQueueHighWater(dest.name, dest.queue!.size);
    }
  }

  checkLowWater(dest: Destination): void {
    if (dest.highWater && dest.queue!.size <= this.core.limits.highWater / 2) {
      dest.highWater = false;
      this.core.events.onQueueLowWater(dest.name, dest.queue!.size);
    }
  }

  /** A queue message expired while waiting in the queue. */
  private expireQueued(dest: Destination, msg: Message): void {
    dest.counters.expired++;
    this.core.totals.totalExpiredMessages++;
    this.writes.unpersistQueued(dest, msg);
  }

  /** Drop the expired messages waiting in a queue; returns how many. */
  sweepExpired(dest: Destination, now: number): number {
    const q = dest.queue!;
    const n = q.size > 0 ? q.removeWhere((m) => m.expiresAt !== 0 && m.expiresAt <= now, (m) => this.expireQueued(dest, m)) : 0;
    this.checkLowWater(dest);
    return n;
  }

  /** Drop the messages waiting in a queue (not those handed to a consumer); returns how many. */
  purge(dest: Destination): number {
    let n = 0;
    for (const m of dest.queue!.clear()) {
      this.writes.unpersistQueued(dest, m);
      n++;
    }
    this.checkLowWater(dest);
    return n;
  }

  /** A deleted queue: its waiting messages and their records go, a high-water notice is taken back. Outcome bits. */
  clear(dest: Destination): number {
    let out = NONE;
    for (const m of dest.queue!.clear()) out |= this.writes.unpersistQueued(dest, m);
    if (dest.highWater) {
      dest.highWater = false;
      this.core.events.onQueueLowWater(dest.name, 0);
    }
    return out;
  }
}
