/**
 * The engine's shared state: the tables every part of the engine reads (destinations, subscriptions, the topic trie
 * and its generation), the server totals, the group commit, the clock and the lifecycle notices; and the few helpers
 * every delivery path needs (the route cache, the selector view, the retain-as-published copy, the per-route ACL
 * memo). It owns no behaviour of its own: fan-out, flow control, write-behind, queue dispatch, shared groups and
 * retained messages are modules over it (see engine.ts for the map), and the Engine facade wires them.
 *
 * A publish's outcome travels as the return value of each step, a small integer of `Outcome` bits, so the hot path
 * allocates nothing for it (QoS 0 without a store: every step returns 0).
 */
import { ServerTotals } from './counters.js';
import type { EngineStore } from './engine-store.js';
import type { GroupCommit } from './group-commit.js';
import type { Message } from './message.js';
import type { Authorizer, Destination, Route, Subscription } from './subscription.js';
import { TopicTrie } from './topic-trie.js';
import type { DestinationType } from './destination.js';

/** Lifecycle and threshold notices; never called per message. */
export interface EngineEvents {
  onDestinationCreated(name: string, type: DestinationType): void;
  onDestinationDeleted(name: string, type: DestinationType): void;
  /** Queue depth (messages waiting for a consumer) reached the high-water mark. Re-armed at half of it. */
  onQueueHighWater(name: string, depth: number): void;
  /** Queue depth fell back to half the high-water mark after a high-water notice. */
  onQueueLowWater(name: string, depth: number): void;
  /** A subscription started dropping messages (maxDepth or maxBytes reached). Re-armed when its buffer empties. */
  onSlowConsumer(sessionId: string, filter: string, depth: number): void;
  onStoreFailure(err: unknown): void;
  /**
   * A durable subscription (persistent session) was created, went offline (hibernated), came back (attached) or
   * ended (closed). Lifecycle only: subscriptions that live exactly as long as their connection are not reported.
   */
  onDurableSubscription(sub: Subscription, change: DurableChange): void;
  /**
   * A durable subscription reached its cap (`maxDepth` messages or `maxBytes`; `full` true) or is back down to half
   * of it (false). Edges only, so a subscription that stays full is reported once.
   */
  onSubscriptionFull(sub: Subscription, full: boolean): void;
}

/** Lifecycle changes of a durable subscription; `expired` is `closed` because its session's expiry interval ran out. */
export type DurableChange = 'created' | 'hibernated' | 'attached' | 'closed' | 'expired';

/*
 * Outcome bits of one step of a publish (and of the resume / delete steps that route or write), OR-ed together on
 * the way up. `publish` turns them into its promise: Stored → the group-commit batch being gathered now (every
 * write of one synchronous step lands in that one batch), Deferred → the settlement of the write-behind copy made
 * for this message. Accepted counts a copy a subscription took (no-interest accounting of a route).
 */
/** Nothing written, nothing taken. */
export const NONE = 0;
/** A store write (put or delete) joined the group-commit batch being gathered now. */
export const STORED = 1;
/** A write-behind copy was made for the message (WriteBehind.settledOf gives its settlement). */
export const DEFERRED = 2;
/** A subscription or group member took the copy. */
export const ACCEPTED = 4;

/**
 * What `publish` returns when nothing waits for a store write: already resolved, never rejects (a caller that drops
 * the result need not attach a handler, e.g. MQTT QoS 0 without a promise per message).
 */
export const RESOLVED: Promise<void> = Promise.resolve();

export function noop(): void {}

/** Limits the modules read; set once by the Engine's constructor from its options. */
export interface EngineLimits {
  /** Queue depth that raises `onQueueHighWater`. */
  readonly highWater: number;
  readonly defaultMaxDepth: number;
  readonly defaultMaxBytes: number;
  /** Messages a paused topic keeps for delivery on resume. */
  readonly maxPausedHold: number;
}

/** Whether one session has two or more `oneCopyPerSession` subscriptions among these routes (computed per trie generation). */
function overlapping(routes: Route[]): boolean {
  let seen: Set<string> | undefined;
  for (let i = 0; i < routes.length; i++) {
    const r = routes[i]!;
    if (r.isGroup || !r.oneCopyPerSession) continue;
    if (seen?.has(r.sessionId)) return true;
    (seen ??= new Set()).add(r.sessionId);
  }
  return false;
}

export class EngineCore {
  readonly totals = new ServerTotals();
  readonly dests = new Map<string, Destination>();
  readonly subs = new Map<string, Subscription>();
  readonly trie = new TopicTrie<Route>();
  /** Bumped on every trie change; destinations re-match lazily when their cached generation differs. */
  trieGen = 0;
  closed = false;

  /** `authorized`'s memo within one route: the last hook asked, for which destination, and its answer. */
  private routing = false;
  private authFn: Authorizer | undefined = undefined;
  private authDest: Destination | undefined = undefined;
  private authOk = false;
  // one-entry caches so a message fanned out to many subscriptions is converted once
  private viewMsg: Message | undefined = undefined;
  private viewDest: Destination | undefined = undefined;
  private view: (Message & { destinationName: string }) | undefined = undefined;
  private liveMsg: Message | undefined = undefined;
  private live: Message | undefined = undefined;

  constructor(
    readonly store: EngineStore | undefined,
    readonly commit: GroupCommit | undefined,
    readonly now: () => number,
    readonly events: EngineEvents,
    readonly limits: EngineLimits,
  ) {}

  /** The routes (subscriptions and shared groups) matching a topic, cached on the destination per trie generation. */
  routesOf(dest: Destination): Route[] {
    let routes = dest.routes;
    if (dest.routeGen !== this.trieGen) {
      // a fresh array: an outer publish may still be iterating the old one
      routes = dest.routes = this.trie.match(dest.levels, []);
      dest.routeGen = this.trieGen;
      dest.overlaps = routes.length > 1 && overlapping(routes);
    }
    return routes;
  }

  /**
   * Starts the `authorized` memo for one route; returns the state to give back to `endRoute` (a sink may publish
   * again inside a route, and that inner route has its own memo). The memo lives for one route only: an ACL may
   * change between two.
   */
  beginRoute(): boolean {
    const outer = this.routing;
    this.routing = true;
    this.authFn = undefined;
    return outer;
  }

  endRoute(outer: boolean): void {
    this.routing = outer;
    this.authFn = undefined;
  }

  /**
   * May the subscription receive from this destination (its `authorize` hook, ACLs per delivered topic)? The
   * security service hands out one hook per user, so in a fan-out to many subscriptions of one user the hook is
   * asked once per route, not once per subscription.
   */
  authorized(sub: Subscription, dest: Destination): boolean {
    const fn = sub.authorize;
    if (fn === undefined) return true;
    if (!this.routing) return fn(dest.name);
    if (fn === this.authFn && dest === this.authDest) return this.authOk;
    const ok = fn(dest.name);
    this.authFn = fn;
    this.authDest = dest;
    this.authOk = ok;
    return ok;
  }

  /** The subscription's selector on this message (a selector that throws does not match). */
  select(sub: Subscription, msg: Message, dest: Destination): boolean {
    if (this.viewMsg !== msg || this.viewDest !== dest) {
      this.viewMsg = msg;
      this.viewDest = dest;
      this.view = { ...msg, destinationName: dest.name };
    }
    try {
      return sub.selector!(this.view!) === true;
    } catch {
      return false; // a selector that fails at run time does not match
    }
  }

  /** Live deliveries clear the retain flag unless the subscription asked for retain-as-published [MQTT-3.3.1-12]. */
  asPublished(sub: Subscription, msg: Message): Message {
    if (!msg.retain || sub.retainAsPublished) return msg;
    if (this.liveMsg !== msg) {
      this.liveMsg = msg;
      this.live = { ...msg, retain: false };
    }
    return this.live!;
  }
}
