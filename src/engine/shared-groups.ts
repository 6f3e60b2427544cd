/**
 * Shared groups (`$share/<group>/<filter>`): one member of a group gets each message, round-robin.
 *
 * Owns the table of groups, their trie entries, the listeners told when a group appears or disappears, and which
 * groups are external (fed by an integration link through publishToGroup, src/links/nats-shares.ts, never by local
 * routing). Choosing the member is here; handing it the copy is delivery.ts's.
 */
import { NONE, type EngineCore } from './engine-core.js';
import type { Delivery } from './delivery.js';
import type { Message } from './message.js';
import { SharedGroup, type Destination, type Subscription } from './subscription.js';

type GroupListener = (event: 'added' | 'removed', group: string, filter: string) => void;

function groupKey(group: string, filter: string): string {
  return `${group}\u0000${filter}`;
}

export class SharedGroups {
  private readonly groups = new Map<string, SharedGroup>();
  private readonly listeners = new Set<GroupListener>();
  /** Federated shared subscriptions: which groups a link feeds instead of local routing. */
  private externalShare: ((group: string, filter: string) => boolean) | undefined;

  constructor(
    private readonly core: EngineCore,
    private readonly delivery: Delivery,
  ) {}

  get(group: string, filter: string): SharedGroup | undefined {
    return this.groups.get(groupKey(group, filter));
  }

  /** See Engine.setExternalShares. */
  setExternal(fn: ((group: string, filter: string) => boolean) | undefined): void {
    this.externalShare = fn;
    for (const g of this.groups.values()) g.external = fn !== undefined && fn(g.group, g.filter);
  }

  /** See Engine.onSharedGroup. */
  listen(listener: GroupListener): () => void {
    this.listeners.add(listener);
    for (const g of this.groups.values()) listener('added', g.group, g.filter);
    return () => this.listeners.delete(listener);
  }

  /** A new member: the group is made (and routed to) with its first one. */
  join(sub: Subscription, group: string, filter: string): void {
    const key = groupKey(group, filter);
    let g = this.groups.get(key);
    if (g === undefined) {
      g = new SharedGroup(group, filter);
      g.external = this.externalShare !== undefined && this.externalShare(group, filter);
      this.groups.set(key, g);
      this.core.trie.add(filter, g);
      this.core.trieGen++;
      for (const l of this.listeners) l('added', group, filter);
    }
    g.members.push(sub);
    sub.group = g;
  }

  /**
   * A member left (its held and in-flight copies already taken out, `entries`): the group goes with its last member;
   * otherwise the member's undelivered messages go to the remaining members (MQTT 5 §4.8.2).
   */
  leave(sub: Subscription, g: SharedGroup, entries: Array<[Message, Destination]>): void {
    const at = g.members.indexOf(sub);
    if (at >= 0) {
      g.members.splice(at, 1);
      if (at < g.rr) g.rr--;
      if (g.rr >= g.members.length) g.rr = 0;
    }
    if (g.members.length === 0) {
      this.groups.delete(groupKey(g.group, g.filter));
      this.core.trie.remove(g.filter, g);
      this.core.trieGen++;
      for (const l of this.listeners) l('removed', g.group, g.filter);
    } else {
      for (const [msg, dest] of entries) this.offer(g, dest, msg);
    }
  }

  /**
   * One member of the group gets the message: the next member (round-robin) that takes it right away, else the
   * next one with room to hold it (a paused member only when every member with room is paused: the others take its
   * share while it is paused). Returns Outcome bits (0: no member could take it, counted as dropped by one).
   */
  offer(group: SharedGroup, dest: Destination, msg: Message): number {
    const core = this.core;
    const delivery = this.delivery;
    const members = group.members;
    const n = members.length;
    let fallback = -1;
    let pausedFallback = -1;
    for (let k = 0; k < n; k++) {
      const i = (group.rr + k) % n;
      const s = members[i]!;
      if (s.closed) continue;
      // noLocal does not apply to shared subscriptions [MQTT-3.8.3-4]
      if (!core.authorized(s, dest)) continue;
      if (s.selector !== undefined && !core.select(s, msg, dest)) continue;
      if (delivery.ready(s)) {
        const m = core.asPublished(s, msg);
        const out = s.sink!.kind === 'pull' ? delivery.keep(s, dest, m) : delivery.tryPush(s, dest, m);
        if (out !== NONE) {
          group.rr = (i + 1) % n;
          return out;
        }
      }
      if (s.sink !== undefined && (s.paused ? pausedFallback < 0 : fallback < 0) && !s.isFull()) {
        if (s.paused) pausedFallback = i;
        else fallback = i;
      }
    }
    if (fallback < 0) fallback = pausedFallback;
    if (fallback < 0) {
      for (let k = 0; k < n; k++) {
        const s = members[(group.rr + k) % n]!;
        if (!s.closed && core.authorized(s, dest) && (s.selector === undefined || core.select(s, msg, dest))) {
          delivery.dropped(s, dest);
          break;
        }
      }
      return NONE;
    }
    group.rr = (fallback + 1) % n;
    const s = members[fallback]!;
    return delivery.keep(s, dest, core.asPublished(s, msg));
  }
}
