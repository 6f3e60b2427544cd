/**
 * Fan-out: a topic message goes to every subscription whose filter matches its topic (the trie's match, cached on
 * the destination per trie generation) and to one member of every matching shared group.
 *
 * Owns the matching side of a topic publish: the route list, MQTT's one copy per session for overlapping
 * subscriptions [MQTT-3.3.4-2], the per-route ACL memo, and the no-interest count. Each copy is handed over by
 * delivery.ts (one subscription) or shared-groups.ts (one member of a group).
 */
import { ACCEPTED, NONE, type EngineCore } from './engine-core.js';
import type { Delivery } from './delivery.js';
import type { Message } from './message.js';
import type { SharedGroups } from './shared-groups.js';
import type { Destination, Route, SharedGroup, Subscription } from './subscription.js';

export class FanOut {
  constructor(
    private readonly core: EngineCore,
    private readonly delivery: Delivery,
    private readonly groups: SharedGroups,
  ) {}

  /**
   * Route a topic message to every matching subscription and shared group. Returns the Outcome bits of the copies
   * (STORED / DEFERRED when a durable subscription's copy was written). Kept small: it is inlined into publish.
   */
  route(dest: Destination, msg: Message): number {
    const core = this.core;
    const routes = core.routesOf(dest);
    let out = NONE;
    const outer = core.beginRoute();
    try {
      out = dest.overlaps ? this.routeOnce(dest, msg, routes) : this.routeAll(dest, msg, routes);
    } finally {
      core.endRoute(outer);
    }
    if ((out & ACCEPTED) === 0) this.noInterest(dest);
    return out;
  }

  /**
   * The loop over the routes, a function of its own: V8 then optimizes it with each subscription's delivery inlined
   * (offer, hold, tryPush), instead of spending the inlining budget of `route` on the trie match of its cold path.
   */
  private routeAll(dest: Destination, msg: Message, routes: Route[]): number {
    const delivery = this.delivery;
    let out = NONE;
    for (let i = 0; i < routes.length; i++) {
      const r = routes[i]!;
      // an external (link-fed) group gets messages only through publishToGroup
      out |= r.isGroup ? (r.external ? NONE : this.groups.offer(r, dest, msg)) : delivery.offer(r, dest, msg, false);
    }
    return out;
  }

  /** `route` for publishToGroup: only to the one group an integration link received the message for. */
  routeToGroup(dest: Destination, msg: Message, only: SharedGroup): number {
    const core = this.core;
    let out = NONE;
    const outer = core.beginRoute();
    try {
      if (core.routesOf(dest).includes(only)) out = this.groups.offer(only, dest, msg);
    } finally {
      core.endRoute(outer);
    }
    if ((out & ACCEPTED) === 0) this.noInterest(dest);
    return out;
  }

  private noInterest(dest: Destination): void {
    dest.counters.noInterest++;
    this.core.totals.totalNoInterestMessages++;
  }

  /**
   * `route` for a topic where one session has several `oneCopyPerSession` subscriptions (MQTT overlapping
   * subscriptions): that session gets one copy, through its matching subscription with the highest QoS
   * [MQTT-3.3.4-2], carrying the subscription identifiers of all of them (`Message.subscriptionIds`) [MQTT-3.3.4-4].
   * Returns the Outcome bits of all copies (ACCEPTED set when any was taken).
   */
  private routeOnce(dest: Destination, msg: Message, routes: Route[]): number {
    const core = this.core;
    const delivery = this.delivery;
    let out = NONE;
    let done: Set<string> | undefined;
    for (let i = 0; i < routes.length; i++) {
      const r = routes[i]!;
      if (r.isGroup) {
        if (!r.external) out |= this.groups.offer(r, dest, msg);
        continue;
      }
      if (!r.oneCopyPerSession) {
        out |= delivery.offer(r, dest, msg, false);
        continue;
      }
      if (done?.has(r.sessionId)) continue;
      (done ??= new Set()).add(r.sessionId);
      let carrier: Subscription | undefined;
      let ids: number[] | undefined;
      let n = 0;
      for (let j = i; j < routes.length; j++) {
        const s = routes[j]!;
        if (s.isGroup || !s.oneCopyPerSession || s.sessionId !== r.sessionId || s.closed) continue;
        if (
          (s.noLocal && msg.origin !== undefined && msg.origin === s.sessionId) ||
          !core.authorized(s, dest) ||
          (s.selector !== undefined && !core.select(s, msg, dest))
        ) {
          s.messagesIgnored++; // [MQTT-3.8.3-3]
          continue;
        }
        n++;
        if (carrier === undefined || s.qos > carrier.qos) carrier = s;
        if (s.subscriptionId !== undefined) (ids ??= []).push(s.subscriptionId);
      }
      if (carrier === undefined) continue;
      let m = core.asPublished(carrier, msg);
      if (n > 1 && ids !== undefined) m = { ...m, subscriptionIds: ids };
      out |= delivery.hold(carrier, dest, m);
    }
    return out;
  }
}
