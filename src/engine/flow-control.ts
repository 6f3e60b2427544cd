/**
 * Flow control: whether a publish is refused before anything is routed, and the edges of a subscription's cap.
 *
 * Owns the set of full `refuseWhenFull` subscriptions (the publish path's check is one size test while it is
 * empty), the full / back-to-half notices of durable subscriptions (`onSubscriptionFull`), and a paused topic's
 * hold (`maxPausedHold` messages kept for delivery on resume; beyond it QoS 0 is dropped and QoS >= 1 refused).
 * What happens to a copy once it is taken (delivered, kept, dropped) is delivery.ts's.
 */
import { NONE, type EngineCore } from './engine-core.js';
import type { Message } from './message.js';
import type { Destination, SharedGroup, Subscription } from './subscription.js';
import type { WriteBehind } from './write-behind.js';

export class FlowControl {
  /**
   * Subscriptions with `refuseWhenFull` that reached their maxDepth or maxBytes (a superset: entries are pruned
   * lazily). Empty in normal operation, so the flow-control check on the publish path is one size test.
   */
  private readonly fullSubs = new Set<Subscription>();
  private fullPrunedAt = 0;

  constructor(
    private readonly core: EngineCore,
    private readonly writes: WriteBehind,
  ) {}

  /**
   * Is this message refused (QUOTA_EXCEEDED)? A QoS >= 1 topic message is when its topic is paused with a full hold,
   * or when it would reach a full `refuseWhenFull` subscription with an effective QoS >= 1. `only`: the one group a
   * publishToGroup feeds.
   */
  refuses(dest: Destination, msg: Message, now: number, only: SharedGroup | undefined): boolean {
    if (msg.qos === 0 || dest.isQueue) return false;
    if (dest.paused) return dest.held.length >= this.core.limits.maxPausedHold;
    return this.fullSubs.size !== 0 && this.wouldOverflow(dest, msg, now, only);
  }

  /**
   * Would this QoS >= 1 message reach a full `refuseWhenFull` subscription with an effective QoS >= 1 (a shared
   * group: every member that would take it is full)? Only called while some subscription is full.
   */
  private wouldOverflow(dest: Destination, msg: Message, now: number, only: SharedGroup | undefined): boolean {
    if (now - this.fullPrunedAt >= 200) {
      this.fullPrunedAt = now;
      for (const s of this.fullSubs) if (s.closed || !s.isFull()) this.fullSubs.delete(s);
      if (this.fullSubs.size === 0) return false;
    }
    const core = this.core;
    const routes = core.routesOf(dest);
    for (let i = 0; i < routes.length; i++) {
      const r = routes[i]!;
      // only the routes this message will take: one group for publishToGroup, no external group otherwise
      if (only !== undefined ? r !== only : r.isGroup && r.external) continue;
      if (!r.isGroup) {
        if (this.fullFor(r, dest, msg) && !(r.noLocal && msg.origin !== undefined && msg.origin === r.sessionId)) {
          r.messagesRefused++;
          return true;
        }
        continue;
      }
      let full: Subscription | undefined;
      let room = false;
      for (const s of r.members) {
        if (s.closed || (s.authorize !== undefined && !s.authorize(dest.name)) || (s.selector !== undefined && !core.select(s, msg, dest))) continue;
        if (s.refuseWhenFull && s.qos !== 0 && s.isFull()) full ??= s;
        else {
          room = true;
          break;
        }
      }
      if (full !== undefined && !room) {
        full.messagesRefused++;
        return true;
      }
    }
    return false;
  }

  private fullFor(s: Subscription, dest: Destination, msg: Message): boolean {
    return (
      s.refuseWhenFull &&
      s.qos !== 0 &&
      !s.closed &&
      s.isFull() &&
      (s.authorize === undefined || s.authorize(dest.name)) && // a subscription that may not read it never gets it
      (s.accept === undefined || s.accept(msg, dest.name)) &&
      (s.selector === undefined || this.core.select(s, msg, dest))
    );
  }

  /** Note a subscription that reached its cap: a `refuseWhenFull` one is checked by publish, a durable one reported. */
  noteFull(sub: Subscription): void {
    if ((sub.refuseWhenFull || sub.durable) && sub.isFull()) {
      if (sub.refuseWhenFull) this.fullSubs.add(sub);
      if (sub.durable && !sub.full) {
        sub.full = true;
        this.core.events.onSubscriptionFull(sub, true);
      }
    }
  }

  /**
   * A durable subscription reported full is back down to half its cap (messages and bytes): report it. Half, not
   * just below, so a consumer working at its cap does not turn every acknowledgement and publish into a pair of
   * lifecycle events (the queue high-water mark re-arms the same way).
   */
  noteRoom(sub: Subscription): void {
    if (sub.full && (sub.closed || (sub.held.size + sub.inFlight.size <= sub.maxDepth / 2 && sub.held.bytes + sub.inFlight.bytes <= sub.maxBytes / 2))) {
      sub.full = false;
      if (!sub.closed) this.core.events.onSubscriptionFull(sub, false);
    }
  }

  /**
   * Keep a paused topic's message for delivery on resume (a QoS >= 1 one was refused by `refuses` when the hold is
   * full; QoS 0 is dropped). Returns STORED when the held message was written.
   */
  holdPaused(dest: Destination, msg: Message): number {
    if (dest.held.length >= this.core.limits.maxPausedHold) {
      dest.counters.dropped++;
      this.core.totals.totalDroppedMessages++;
      return NONE;
    }
    dest.held.push(msg);
    return this.writes.persistPausedHeld(dest, msg);
  }
}
