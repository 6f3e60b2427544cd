/**
 * The messaging engine: routes every message by plain function calls (no xstate, no async per delivery).
 *
 * Destinations and the queue naming convention
 * --------------------------------------------
 * A destination is created on demand by the first publish to it or subscription to its exact name, or up front
 * by `createDestination` / `declareQueue` (from configuration). Its type is fixed at creation:
 * - a name starting with `queue/` or `/queue/` is a Queue (the default convention), as is any name passed to
 *   `declareQueue(name)`; every other name is a Topic. Temporary topics and queues exist only through
 *   `createDestination(name, 'TemporaryTopic' | 'TemporaryQueue', { owner })`; they are never persisted and are
 *   deleted by `closeSession(owner)`.
 * - Topic: every matching subscription (MQTT `+`/`#` filters, `$share/<group>/<filter>` groups) gets the message;
 *   one retained message per topic.
 * - Queue: each message goes to exactly one consumer (round-robin among competing consumers), ordered by priority
 *   (higher first) then arrival, kept — in memory and in the store — until consumed (acknowledged / committed /
 *   taken without a transaction). No consumer: it waits. Consumers subscribe to the exact queue name; wildcard
 *   filters never match queues (a wildcard filter under `queue/` is rejected).
 *
 * Durability: queue messages, retained messages and messages held for durable subscriptions are written through
 * group commit before `publish()`'s promise resolves; other publishes return a shared, already resolved promise.
 * Delivery to online consumers does not wait for the write (at-least-once: if the write fails the publisher sees
 * the rejection and may publish again).
 *
 * Paused destinations accept publishes (queue messages and retained messages are stored as usual) and hold
 * delivery until resumed: a paused queue does not dispatch, a paused topic keeps new messages (up to
 * `maxPausedHold`, counted as delayed; QoS >= 1 ones written to the store under `h!`, so publish resolves once they
 * are durable; beyond it QoS 0 is dropped and QoS >= 1 refused with QUOTA_EXCEEDED) and routes them in publish
 * order on resume. Messages already handed to a subscription are not held
 * back. The paused flag is written too (`pd!`), so a restart keeps the destination paused with its hold.
 *
 * Paused subscriptions (`pauseSubscription`) keep taking copies into their buffer, within their own caps and
 * overflow policy, and deliver nothing until resumed; a durable one's flag is written (`ps!`).
 *
 * Expiry is checked whenever a message would be handed out and by `sweepExpired(now)`, which the caller
 * schedules. Counters count expired copies (a topic message expiring in three subscriptions counts three).
 */
import { ConflictError, NotFoundError, QuotaExceededError, ValidationError } from '../errors.js';
import { RateMeter, ServerTotals } from './counters.js';
import { Destination as DestinationRecord, DestinationType, isDestinationType, isQueueName, type PayloadSchema } from './destination.js';
import type { EngineStore } from './engine-store.js';
import {
  DURABLE_PREFIX,
  STATE_PREFIX,
  encodeHeld,
  padId,
  pausedDestinationKey,
  pausedHeldKey,
  pausedSubscriptionKey,
  queueKey,
  retainedKey,
} from './engine-store.js';
import { GroupCommit } from './group-commit.js';
import type { Message, MessageInit } from './message.js';
import { MessageIdGenerator, createMessage, encodeMessage } from './message.js';
import type { RecoveryResult } from './recovery.js';
import { isSysTopic, loadFromStore } from './recovery.js';
import type {
  Authorizer,
  Delivery,
  Destination,
  PushSink,
  Route,
  Sink,
  SubscribeOptions,
  SubscriptionHost,
  SubscriptionQueueDTO,
  SubscriptionStateDTO,
  UnwrittenEntry,
} from './subscription.js';
import { SharedGroup, Subscription, subscriptionKey } from './subscription.js';
import { TopicTree, TopicTrie, hasWildcard, parseSharedFilter, validateTopicFilter, validateTopicName } from './topic-trie.js';
import type { DestinationDTO, EngineStats, RateKey } from './views.js';
import { RATE_KEYS, browseDestination, destinationDto, engineStats, subscriptionStatesOf } from './views.js';

export type { DestinationDTO, EngineStats } from './views.js';
export type { RecoveryResult } from './recovery.js';

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

export interface EngineOptions {
  store?: EngineStore;
  now?: () => number;
  events?: Partial<EngineEvents>;
  /** Queue depth that raises `onQueueHighWater`. Default 10 000. */
  queueHighWater?: number;
  /** maxDepth of subscriptions that do not set one. Default 1000. */
  defaultMaxDepth?: number;
  /**
   * maxBytes of subscriptions that do not set one (bytes held + in flight, `messageBytes`), the same cap for every
   * kind of subscription. Default 8 MiB (DestinationManager.maxQueuedBytes).
   */
  defaultMaxBytes?: number;
  /** Messages a paused topic keeps for delivery on resume; beyond that QoS 0 is dropped, QoS >= 1 refused. Default 100 000. */
  maxPausedHold?: number;
  /** Name prefixes that make a destination a Queue. Default `queue/` and `/queue/`. */
  queuePrefixes?: string[];
}

export interface PublishOptions {
  /** Publishing session / connection id (overrides `msg.origin`). */
  origin?: string;
  /** Create the destination when missing (default true); false → NotFoundError. */
  create?: boolean;
}

/** Default of `EngineOptions.defaultMaxBytes` and of DestinationManager.maxQueuedBytes: 8 MiB. */
export const DEFAULT_MAX_BYTES = 8 * 1024 * 1024;

/**
 * What `publish` returns when nothing waits for a store write: already resolved, never rejects (a caller that drops
 * the result need not attach a handler, e.g. MQTT QoS 0 without a promise per message).
 */
export const RESOLVED: Promise<void> = Promise.resolve();
/** The unsubscribe reason `closeSession(id, { expired: true })` gives (durable notice `expired`). */
const SESSION_EXPIRED = 'session expired';
function noop(): void {}

/**
 * What `publish` returns when flow control refuses the message: a subscription it would reach with an effective
 * QoS >= 1 is full (`refuseWhenFull`). One shared rejected promise, so a caller can tell it apart without waiting
 * (`p === QUOTA_EXCEEDED`); awaiting it throws a QuotaExceededError (REST: 429).
 */
export const QUOTA_EXCEEDED: Promise<void> = Promise.reject(
  new QuotaExceededError('Quota exceeded: a subscription this message would reach holds its maximum of queued messages or bytes; retry later'),
);
QUOTA_EXCEEDED.catch(noop);

/*
 * `$SYS/...` topics (isSysTopic, recovery.ts) carry server statistics that the server regenerates at boot
 * (src/runtime/sys-topics.ts), so their retained messages live in memory only: writing them to the store would
 * only add a write every interval and bring back stale figures after a restart.
 */

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

export class Engine {
  private readonly totals = new ServerTotals();
  private readonly store: EngineStore | undefined;
  private readonly commit: GroupCommit | undefined;
  private readonly now: () => number;
  private readonly events: EngineEvents;
  private readonly highWater: number;
  private readonly defaultMaxDepth: number;
  private readonly defaultMaxBytes: number;
  private readonly maxPausedHold: number;

  private readonly dests = new Map<string, Destination>();
  private readonly trie = new TopicTrie<Route>();
  /** Bumped on every trie change; destinations re-match lazily when their cached generation differs. */
  private trieGen = 0;
  private readonly retainedIndex = new TopicTree<Destination>();
  /** Federated shared subscriptions (src/links/nats-shares.ts): which groups a link feeds instead of local routing. */
  private externalShare: ((group: string, filter: string) => boolean) | undefined;
  /** Set by publishToGroup for the one route it starts. */
  private onlyGroup: SharedGroup | undefined;
  private readonly groupListeners = new Set<(event: 'added' | 'removed', group: string, filter: string) => void>();
  private readonly groups = new Map<string, SharedGroup>();
  private readonly subs = new Map<string, Subscription>();
  private readonly sessions = new Map<string, Set<Subscription>>();
  /** Owner index: the temporary destinations each session created (closeSession deletes them without a scan). */
  private readonly owned = new Map<string, Set<string>>();
  /** Durable-subscription messages found by `recover()`, adopted when that subscription is made again. */
  private readonly recoveredHeld = new Map<string, Array<[string, Message]>>();
  /** Durable subscriptions found paused by `recover()` (`ps!`), paused again when made again. */
  private readonly recoveredPaused = new Set<string>();
  /**
   * Subscriptions with `refuseWhenFull` that reached their maxDepth or maxBytes (a superset: entries are pruned
   * lazily). Empty in normal operation, so the flow-control check on the publish path is one size test.
   */
  private readonly fullSubs = new Set<Subscription>();
  private fullPrunedAt = 0;
  private readonly ids = new MessageIdGenerator(0, Date.now());
  private readonly rates: RateMeter<RateKey>;
  private nextSubId = 1;
  /** `authorized`'s memo within one route: the last hook asked, for which destination, and its answer. */
  private routing = false;
  private authFn: Authorizer | undefined = undefined;
  private authDest: Destination | undefined = undefined;
  private authOk = false;
  private closed = false;
  private recovered = false;

  /** Promise of the batch holding the writes made by the publish in progress. */
  private lastWrite: Promise<void> | undefined = undefined;
  /** Write-behind (SubscribeOptions.writeBehindMs): the settlement of the publish in progress's unwritten copy. */
  private lastUnwritten: Promise<void> | undefined = undefined;
  /**
   * Write-behind entries in the order they were made, which is due order while every subscription uses the same
   * window (the links all use `outboxWriteBehind`); settled ones are skipped when reached; `unwrittenAt` is the head.
   */
  private unwrittenQueue: UnwrittenEntry[] = [];
  private unwrittenAt = 0;
  private unwrittenTimer: NodeJS.Timeout | undefined = undefined;
  // one-entry caches so a message fanned out to many subscriptions is converted/encoded once
  private viewMsg: Message | undefined = undefined;
  private viewDest: Destination | undefined = undefined;
  private view: (Message & { destinationName: string }) | undefined = undefined;
  private liveMsg: Message | undefined = undefined;
  private live: Message | undefined = undefined;
  private heldMsg: Message | undefined = undefined;
  private heldDest: Destination | undefined = undefined;
  private heldValue: Buffer | undefined = undefined;

  /** The queue naming convention (configurable prefixes). */
  readonly isQueueName: (name: string) => boolean = isQueueName;

  /**
   * What a Subscription calls back into (its take/ack/commit/rollback/resume/hibernate/attach methods): the
   * engine's internals stay private, only this object reaches them.
   */
  private readonly host: SubscriptionHost = {
    take: (sub, n) => this.take(sub, n),
    settle: (sub, ids, commit) => this.settle(sub, ids, commit),
    resume: (sub) => this.resumeSub(sub),
    hibernate: (sub) => this.hibernate(sub),
    attach: (sub, sink) => this.attach(sub, sink),
    unsubscribe: (sub) => this.unsubscribe(sub),
  };

  constructor(opts: EngineOptions = {}) {
    this.store = opts.store;
    this.now = opts.now ?? Date.now;
    const events = opts.events ?? {};
    this.events = {
      onDestinationCreated: events.onDestinationCreated ?? noop,
      onDestinationDeleted: events.onDestinationDeleted ?? noop,
      onQueueHighWater: events.onQueueHighWater ?? noop,
      onQueueLowWater: events.onQueueLowWater ?? noop,
      onSlowConsumer: events.onSlowConsumer ?? noop,
      onStoreFailure: events.onStoreFailure ?? noop,
      onDurableSubscription: events.onDurableSubscription ?? noop,
      onSubscriptionFull: events.onSubscriptionFull ?? noop,
    };
    this.highWater = opts.queueHighWater ?? 10_000;
    this.defaultMaxDepth = opts.defaultMaxDepth ?? 1000;
    this.defaultMaxBytes = opts.defaultMaxBytes ?? DEFAULT_MAX_BYTES;
    if (!Number.isInteger(this.defaultMaxBytes) || this.defaultMaxBytes < 1) {
      throw new ValidationError(`defaultMaxBytes must be a positive integer, got ${String(opts.defaultMaxBytes)}`);
    }
    this.maxPausedHold = opts.maxPausedHold ?? 100_000;
    if (opts.queuePrefixes) {
      const prefixes = [...opts.queuePrefixes];
      this.isQueueName = (name) => prefixes.some((p) => name.startsWith(p));
    }
    if (this.store !== undefined) {
      this.commit = new GroupCommit(this.store, (err) => this.events.onStoreFailure(err));
    }
    this.rates = new RateMeter<RateKey>(RATE_KEYS, this.now());
  }

  // ------------------------------------------------------------------------------------------------------------
  // Publish
  // ------------------------------------------------------------------------------------------------------------

  /**
   * Publish to a topic or queue. Resolves once the message is durable (queue message, retained message, copies
   * held for durable subscriptions); otherwise returns an already resolved promise. Rejects with a
   * ValidationError (bad name, QoS), NotFoundError (`create: false`), ConflictError (closed) or the store error.
   */
  /**
   * Federated shared subscriptions (src/links/nats-shares.ts): a group for which `fn` answers true is *external*,
   * fed only through publishToGroup (by an integration link), never by local routing. Applied to the existing groups
   * at once; `undefined` ends it.
   */
  setExternalShares(fn: ((group: string, filter: string) => boolean) | undefined): void {
    this.externalShare = fn;
    for (const g of this.groups.values()) g.external = fn !== undefined && fn(g.group, g.filter);
  }

  /** Shared groups appearing (first member) and disappearing (last member); the existing ones are reported as added at once. */
  onSharedGroup(listener: (event: 'added' | 'removed', group: string, filter: string) => void): () => void {
    this.groupListeners.add(listener);
    for (const g of this.groups.values()) listener('added', g.group, g.filter);
    return () => this.groupListeners.delete(listener);
  }

  /**
   * Publish to one shared group only (a message an integration link received for it), never retained. Rejects with
   * NotFoundError when the group has no member here (the link leaves it unacknowledged for another broker).
   */
  publishToGroup(group: string, filter: string, destinationName: string, init: MessageInit, opts?: PublishOptions): Promise<void> {
    const g = this.groups.get(`${group}\u0000${filter}`);
    if (g === undefined) return Promise.reject(new NotFoundError(`shared group ${group} on ${filter} has no member`));
    this.onlyGroup = g;
    try {
      return this.publish(destinationName, { ...init, retain: false }, opts);
    } finally {
      this.onlyGroup = undefined;
    }
  }

  publish(destinationName: string, init: MessageInit, opts?: PublishOptions): Promise<void> {
    if (this.closed) return Promise.reject(new ConflictError('the messaging engine is closed'));
    let dest = this.dests.get(destinationName);
    let msg: Message;
    const now = this.now();
    try {
      if (dest === undefined) {
        if (opts?.create === false) throw new NotFoundError(`destination "${destinationName}" not found`);
        validateTopicName(destinationName);
        dest = this.createDest(destinationName, this.isQueueName(destinationName) ? DestinationType.Queue : DestinationType.Topic);
      }
      msg = createMessage(init, this.ids.next(), now);
    } catch (err) {
      return Promise.reject(err);
    }
    if (opts?.origin !== undefined) msg.origin = opts.origin;
    // flow control: a full refuseWhenFull subscription, or a paused topic whose hold is full, refuses QoS >= 1
    if (msg.qos !== 0 && !dest.isQueue && (dest.paused ? dest.held.length >= this.maxPausedHold : this.fullSubs.size !== 0 && this.wouldOverflow(dest, msg, now))) {
      this.totals.totalRefusedMessages++;
      return QUOTA_EXCEEDED;
    }
    dest.counters.published++;
    dest.lastUsed = now;
    this.totals.totalPublishedMessages++;
    if (msg.expiresAt !== 0 && msg.expiresAt <= now) {
      dest.counters.expired++;
      this.totals.totalExpiredMessages++;
      return RESOLVED;
    }
    const saved = this.lastWrite;
    const savedUnwritten = this.lastUnwritten;
    this.lastWrite = undefined;
    this.lastUnwritten = undefined;
    if (dest.isQueue) {
      this.enqueue(dest, msg);
    } else {
      if (msg.retain) this.setRetained(dest, msg);
      if (dest.paused) this.holdPaused(dest, msg);
      else this.route(dest, msg);
    }
    const written = this.lastWrite;
    const unwritten = this.lastUnwritten;
    this.lastWrite = saved;
    this.lastUnwritten = savedUnwritten;
    if (unwritten !== undefined) {
      if (written === undefined) return unwritten;
      const both = Promise.all([written, unwritten]).then(noop);
      both.catch(noop); // like the batch promises: a caller that does not await it causes no unhandled rejection
      return both;
    }
    return written ?? RESOLVED;
  }

  private enqueue(dest: Destination, msg: Message): void {
    if (this.commit !== undefined && dest.persistent) {
      this.lastWrite = this.commit.put(queueKey(dest.name, msg), encodeMessage(msg), dest.timings);
    }
    dest.queue!.push(msg);
    this.dispatch(dest);
    if (!dest.highWater && dest.queue!.size >= this.highWater) {
      dest.highWater = true;
      this.events.onQueueHighWater(dest.name, dest.queue!.size);
    }
  }

  private setRetained(dest: Destination, msg: Message): void {
    if (msg.payload.length === 0) {
      // an empty retained message removes the topic's retained message (3.1.1 [MQTT-3.3.1-10], 5 [MQTT-3.3.1-6])
      if (dest.retained !== undefined) this.dropRetained(dest);
      return;
    }
    if (dest.retained === undefined) this.retainedIndex.set(dest.name, dest);
    dest.retained = msg;
    if (this.commit !== undefined && dest.persistent && !isSysTopic(dest.name)) {
      this.lastWrite = this.commit.put(retainedKey(dest.name), encodeMessage(msg), dest.timings);
    }
  }

  private dropRetained(dest: Destination): void {
    dest.retained = undefined;
    this.retainedIndex.delete(dest.name);
    if (this.commit !== undefined && dest.persistent && !isSysTopic(dest.name)) {
      this.lastWrite = this.commit.del(retainedKey(dest.name), dest.timings);
    }
  }

  /** Keep a paused topic's message (a QoS >= 1 one was refused by publish when the hold is full; QoS 0 is dropped). */
  private holdPaused(dest: Destination, msg: Message): void {
    if (dest.held.length >= this.maxPausedHold) {
      dest.counters.dropped++;
      this.totals.totalDroppedMessages++;
      return;
    }
    dest.held.push(msg);
    if (msg.qos !== 0 && this.commit !== undefined && dest.persistent) {
      this.lastWrite = this.commit.put(pausedHeldKey(dest.name, msg), encodeMessage(msg), dest.timings);
    }
  }

  /** Fan a topic message out to every matching subscription / shared group. */
  private route(dest: Destination, msg: Message): void {
    const routes = this.routesOf(dest);
    let accepted = 0;
    const only = this.onlyGroup;
    this.onlyGroup = undefined; // a publish made by a sink during this route routes normally
    // the memo of `authorized` lives for one route only (an ACL may change in between; a sink may publish again)
    const outer = this.routing;
    this.routing = true;
    this.authFn = undefined;
    try {
      if (only !== undefined) {
        if (routes.includes(only) && this.offerGroup(only, dest, msg)) accepted++;
      } else if (dest.overlaps) accepted = this.routeOnce(dest, msg, routes);
      else {
        for (let i = 0; i < routes.length; i++) {
          const r = routes[i]!;
          // an external (link-fed) group gets messages only through publishToGroup
          if (r.isGroup ? !r.external && this.offerGroup(r, dest, msg) : this.offer(r, dest, msg, false)) accepted++;
        }
      }
    } finally {
      this.routing = outer;
      this.authFn = undefined;
    }
    if (accepted === 0) {
      dest.counters.noInterest++;
      this.totals.totalNoInterestMessages++;
    }
  }

  /**
   * May the subscription receive from this destination (its `authorize` hook, ACLs per delivered topic)? The
   * security service hands out one hook per user, so in a fan-out to many subscriptions of one user the hook is
   * asked once per route, not once per subscription.
   */
  private authorized(sub: Subscription, dest: Destination): boolean {
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

  private routesOf(dest: Destination): Route[] {
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
   * Flow control: would this QoS >= 1 message reach a full `refuseWhenFull` subscription with an effective QoS >= 1
   * (a shared group: every member that would take it is full)? Only called while some subscription is full.
   */
  private wouldOverflow(dest: Destination, msg: Message, now: number): boolean {
    if (now - this.fullPrunedAt >= 200) {
      this.fullPrunedAt = now;
      for (const s of this.fullSubs) if (s.closed || !s.isFull()) this.fullSubs.delete(s);
      if (this.fullSubs.size === 0) return false;
    }
    if (dest.paused) return false;
    const routes = this.routesOf(dest);
    for (let i = 0; i < routes.length; i++) {
      const r = routes[i]!;
      // only the routes this message will take: one group for publishToGroup, no external group otherwise
      if (this.onlyGroup !== undefined ? r !== this.onlyGroup : r.isGroup && r.external) continue;
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
        if (s.closed || (s.authorize !== undefined && !s.authorize(dest.name)) || (s.selector !== undefined && !this.select(s, msg, dest))) continue;
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
      (s.selector === undefined || this.select(s, msg, dest))
    );
  }

  /** Note a `refuseWhenFull` subscription that reached its cap (publish then checks it). */
  private noteFull(sub: Subscription): void {
    if ((sub.refuseWhenFull || sub.durable) && sub.isFull()) {
      if (sub.refuseWhenFull) this.fullSubs.add(sub);
      if (sub.durable && !sub.full) {
        sub.full = true;
        this.events.onSubscriptionFull(sub, true);
      }
    }
  }

  /**
   * A durable subscription reported full is back down to half its cap (messages and bytes): report it. Half, not
   * just below, so a consumer working at its cap does not turn every acknowledgement and publish into a pair of
   * lifecycle events (the queue high-water mark re-arms the same way).
   */
  private noteRoom(sub: Subscription): void {
    if (sub.full && (sub.closed || (sub.held.size + sub.inFlight.size <= sub.maxDepth / 2 && sub.held.bytes + sub.inFlight.bytes <= sub.maxBytes / 2))) {
      sub.full = false;
      if (!sub.closed) this.events.onSubscriptionFull(sub, false);
    }
  }

  /**
   * `route` for a topic where one session has several `oneCopyPerSession` subscriptions (MQTT overlapping
   * subscriptions): that session gets one copy, through its matching subscription with the highest QoS
   * [MQTT-3.3.4-2], carrying the subscription identifiers of all of them (`Message.subscriptionIds`) [MQTT-3.3.4-4].
   */
  private routeOnce(dest: Destination, msg: Message, routes: Route[]): number {
    let accepted = 0;
    let done: Set<string> | undefined;
    for (let i = 0; i < routes.length; i++) {
      const r = routes[i]!;
      if (r.isGroup) {
        if (!r.external && this.offerGroup(r, dest, msg)) accepted++;
        continue;
      }
      if (!r.oneCopyPerSession) {
        if (this.offer(r, dest, msg, false)) accepted++;
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
          !this.authorized(s, dest) ||
          (s.selector !== undefined && !this.select(s, msg, dest))
        ) {
          s.messagesIgnored++; // [MQTT-3.8.3-3]
          continue;
        }
        n++;
        if (carrier === undefined || s.qos > carrier.qos) carrier = s;
        if (s.subscriptionId !== undefined) (ids ??= []).push(s.subscriptionId);
      }
      if (carrier === undefined) continue;
      let m = this.asPublished(carrier, msg);
      if (n > 1 && ids !== undefined) m = { ...m, subscriptionIds: ids };
      if (this.hold(carrier, dest, m)) accepted++;
    }
    return accepted;
  }

  /** noLocal, selector, retain-as-published, then deliver or hold. */
  private offer(sub: Subscription, dest: Destination, msg: Message, retainedDelivery: boolean): boolean {
    if (sub.closed) return false;
    if (sub.noLocal && msg.origin !== undefined && msg.origin === sub.sessionId) {
      sub.messagesIgnored++; // [MQTT-3.8.3-3]
      return false;
    }
    if (
      !this.authorized(sub, dest) ||
      (sub.accept !== undefined && !sub.accept(msg, dest.name)) ||
      (sub.selector !== undefined && !this.select(sub, msg, dest))
    ) {
      sub.messagesIgnored++;
      return false;
    }
    return this.hold(sub, dest, retainedDelivery ? msg : this.asPublished(sub, msg));
  }

  /**
   * One member of the group gets the message: the next member (round-robin) that takes it right away, else the
   * next one with room to hold it (a paused member only when every member with room is paused: the others take its
   * share while it is paused).
   */
  private offerGroup(group: SharedGroup, dest: Destination, msg: Message): boolean {
    const members = group.members;
    const n = members.length;
    let fallback = -1;
    let pausedFallback = -1;
    for (let k = 0; k < n; k++) {
      const i = (group.rr + k) % n;
      const s = members[i]!;
      if (s.closed) continue;
      // noLocal does not apply to shared subscriptions [MQTT-3.8.3-4]
      if (!this.authorized(s, dest)) continue;
      if (s.selector !== undefined && !this.select(s, msg, dest)) continue;
      if (this.ready(s)) {
        const m = this.asPublished(s, msg);
        if (s.sink!.kind === 'pull' ? this.keep(s, dest, m) : this.tryPush(s, dest, m)) {
          group.rr = (i + 1) % n;
          return true;
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
        if (!s.closed && this.authorized(s, dest) && (s.selector === undefined || this.select(s, msg, dest))) {
          this.dropped(s, dest);
          break;
        }
      }
      return false;
    }
    group.rr = (fallback + 1) % n;
    const s = members[fallback]!;
    return this.keep(s, dest, this.asPublished(s, msg));
  }

  /** Can take a message right now without holding it. */
  private ready(s: Subscription): boolean {
    const sink = s.sink;
    if (sink === undefined || s.hibernating || s.closed || s.paused) return false;
    if (sink.kind === 'push') return !s.blocked && s.held.size === 0;
    return !s.isFull();
  }

  /** Topic copy for one subscription: push it now when possible, else keep it (or drop it when full). */
  private hold(sub: Subscription, dest: Destination, msg: Message): boolean {
    const sink = sub.sink;
    if (sink !== undefined && sink.kind === 'push' && !sub.hibernating && !sub.blocked && !sub.paused && sub.held.size === 0) {
      if (this.tryPush(sub, dest, msg)) return true;
    }
    return this.keep(sub, dest, msg);
  }

  /** Hand a topic copy to an available push sink; false (and blocked) when the sink has no credit. */
  private tryPush(sub: Subscription, dest: Destination, msg: Message): boolean {
    const sink = sub.sink as PushSink;
    const ack = sub.qos > 0 && msg.qos > 0;
    if (ack) sub.inFlight.set(msg.id, { msg, dest });
    if (sink.deliver(sub, msg, dest.name)) {
      sub.messagesRegistered++;
      dest.counters.subscribed++;
      this.totals.totalSubscribedMessages++;
      this.sent(sub, dest);
      if (ack) {
        if (sub.durable && sub.inFlight.has(msg.id)) {
          if (sub.writeBehindMs !== 0 && this.commit !== undefined && dest.persistent) this.writeBehind(sub, dest, msg);
          else this.persistHeld(sub, dest, msg);
        }
        this.noteFull(sub);
      }
      return true;
    }
    if (ack) sub.inFlight.delete(msg.id);
    sub.blocked = true;
    return false;
  }

  /**
   * Keep a topic copy in the subscription's buffer. When the buffer is full (`maxDepth` messages or `maxBytes`
   * bytes): a `refuseWhenFull` subscription takes a copy with an effective QoS 0 in place of its oldest held copies
   * while those are QoS 0 too, as many as it takes to leave the cap (drop-oldest; a larger copy may replace several
   * smaller ones); anything else is dropped (counted). A QoS >= 1 copy only gets here full when publish's refusal
   * could not apply (a shared group's fallback, a retained message on subscribe).
   */
  private keep(sub: Subscription, dest: Destination, msg: Message): boolean {
    if (sub.maxPerDestination !== 0 && sub.held.size >= sub.maxPerDestination && sub.held.countOf(dest) >= sub.maxPerDestination) {
      // REST (MAPS maxEventsPerDestination): this destination's share is full, its oldest held message goes
      const old = sub.held.removeOldestOf(dest);
      if (old !== undefined) {
        if (!dest.isQueue) dest.pendingCopies--;
        this.unpersistHeld(sub, dest, old);
        this.dropped(sub, dest);
      }
    }
    if (sub.isFull()) {
      this.noteFull(sub);
      if (!sub.refuseWhenFull || (sub.qos !== 0 && msg.qos !== 0)) {
        this.dropped(sub, dest);
        return false;
      }
      // what is in flight is not dropped: when it alone fills the cap, dropping held copies would make no room
      if (sub.inFlight.size >= sub.maxDepth || sub.inFlight.bytes >= sub.maxBytes) {
        this.dropped(sub, dest);
        return false;
      }
      do {
        const old = sub.held.peekMsg();
        if (old === undefined || (sub.qos !== 0 && old.qos !== 0)) {
          this.dropped(sub, dest);
          return false;
        }
        const oldDest = sub.held.peekDest()!;
        sub.held.drop();
        if (!oldDest.isQueue) oldDest.pendingCopies--;
        this.unpersistHeld(sub, oldDest, old);
        this.dropped(sub, oldDest);
      } while (sub.isFull());
    }
    sub.held.push(msg, dest);
    dest.pendingCopies++;
    sub.messagesRegistered++;
    dest.counters.subscribed++;
    this.totals.totalSubscribedMessages++;
    if (sub.durable) {
      // write-behind applies while the sink is attached (the copy is about to go); a hibernating one writes it now
      if (sub.writeBehindMs !== 0 && sub.sink !== undefined && !sub.hibernating && this.commit !== undefined && dest.persistent) this.writeBehind(sub, dest, msg);
      else this.persistHeld(sub, dest, msg);
    }
    this.noteFull(sub);
    const sink = sub.sink;
    if (sink !== undefined && sink.kind === 'pull' && sub.held.size === 1 && !sub.paused && sink.notify !== undefined) sink.notify(sub);
    return true;
  }

  private dropped(sub: Subscription, dest: Destination): void {
    sub.messagesDropped++;
    sub.messagesIgnored++;
    dest.counters.dropped++;
    this.totals.totalDroppedMessages++;
    if (!sub.slow) {
      sub.slow = true;
      this.events.onSlowConsumer(sub.sessionId, sub.filter, sub.held.size + sub.inFlight.size);
    }
  }

  private sent(sub: Subscription, dest: Destination): void {
    sub.messagesSent++;
    dest.counters.delivered++;
    this.totals.totalDeliveredMessages++;
  }

  private select(sub: Subscription, msg: Message, dest: Destination): boolean {
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
  private asPublished(sub: Subscription, msg: Message): Message {
    if (!msg.retain || sub.retainAsPublished) return msg;
    if (this.liveMsg !== msg) {
      this.liveMsg = msg;
      this.live = { ...msg, retain: false };
    }
    return this.live!;
  }

  private persistHeld(sub: Subscription, dest: Destination, msg: Message): void {
    if (this.commit === undefined || !dest.persistent) return;
    if (this.heldMsg !== msg || this.heldDest !== dest) {
      this.heldMsg = msg;
      this.heldDest = dest;
      this.heldValue = encodeHeld(dest.name, msg);
    }
    this.lastWrite = this.commit.put(sub.storePrefix + padId(msg.id), this.heldValue!, dest.timings);
  }

  private unpersistHeld(sub: Subscription, dest: Destination, msg: Message): void {
    if (this.commit === undefined || !dest.persistent || !sub.durable) return;
    const unwritten = sub.unwritten;
    if (unwritten !== undefined) {
      const e = unwritten.get(msg.id);
      if (e !== undefined) {
        // done with before it was written: nothing to write or delete
        unwritten.delete(msg.id);
        e.settled = true;
        e.resolve();
        return;
      }
    }
    this.commit.del(sub.storePrefix + padId(msg.id), dest.timings);
  }

  /**
   * Write-behind: the copy just handed to (or queued for) `sub`'s attached sink is written only if it is still
   * unsettled `writeBehindMs` from now; the publish resolves when it is settled (acknowledged, dropped or written).
   * Entries are bounded by the subscription's depth (`maxDepth`) and by what arrives within `writeBehindMs`.
   */
  private writeBehind(sub: Subscription, dest: Destination, msg: Message): void {
    let resolve!: () => void;
    let reject!: (err: unknown) => void;
    const settledPromise = new Promise<void>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    settledPromise.catch(noop); // like the batch promises: rejects only for the callers that await it
    const e: UnwrittenEntry = { sub, dest, msg, due: Date.now() + sub.writeBehindMs, settled: false, resolve, reject };
    (sub.unwritten ??= new Map()).set(msg.id, e);
    this.unwrittenQueue.push(e);
    this.lastUnwritten = settledPromise;
    if (this.unwrittenTimer === undefined) this.unwrittenTimer = setTimeout(this.writeDue, sub.writeBehindMs);
  }

  /** Writes the write-behind entries that are due (all of them when `all`), then waits for the next one. */
  private readonly writeDue = (all = false): void => {
    this.unwrittenTimer = undefined;
    const q = this.unwrittenQueue;
    const now = Date.now();
    const saved = this.lastWrite;
    let wrote: Promise<void> | undefined;
    const batch: UnwrittenEntry[] = [];
    while (this.unwrittenAt < q.length) {
      const e = q[this.unwrittenAt]!;
      if (!e.settled && !all && e.due > now) break;
      this.unwrittenAt++;
      if (e.settled) continue;
      e.settled = true;
      e.sub.unwritten?.delete(e.msg.id);
      this.lastWrite = undefined;
      this.persistHeld(e.sub, e.dest, e.msg);
      wrote = this.lastWrite;
      batch.push(e);
    }
    this.lastWrite = saved;
    if (this.unwrittenAt === q.length) {
      this.unwrittenQueue = [];
      this.unwrittenAt = 0;
    } else if (this.unwrittenAt > 1024 && this.unwrittenAt > q.length / 2) {
      this.unwrittenQueue = q.slice(this.unwrittenAt);
      this.unwrittenAt = 0;
    }
    if (batch.length > 0) {
      // every put above is in the same group-commit batch (or the one before it): the last one's promise covers all
      const done = wrote ?? RESOLVED;
      done.then(
        () => batch.forEach((e) => e.resolve()),
        (err: unknown) => batch.forEach((e) => e.reject(err)),
      );
    }
    const next = this.unwrittenQueue[this.unwrittenAt];
    if (next !== undefined && !all) this.unwrittenTimer = setTimeout(this.writeDue, Math.max(1, next.due - Date.now()));
  };

  // ------------------------------------------------------------------------------------------------------------
  // Queues
  // ------------------------------------------------------------------------------------------------------------

  /** Hand waiting queue messages to ready consumers, round-robin, until the queue or the consumers run out. */
  private dispatch(dest: Destination): void {
    const q = dest.queue;
    if (q === undefined || dest.dispatching || dest.paused || dest.deleted) return;
    const consumers = dest.consumers;
    if (q.size === 0 || consumers.length === 0) return;
    dest.dispatching = true;
    try {
      const now = this.now();
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
          if (c.selector !== undefined && !this.select(c, msg, dest)) continue;
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
          this.totals.totalSubscribedMessages++;
          this.sent(chosen, dest);
          if (!ack) this.consumeQueued(dest, msg);
        } else {
          chosen.held.push(msg, dest);
          chosen.messagesRegistered++;
          dest.counters.subscribed++;
          this.totals.totalSubscribedMessages++;
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

  private checkLowWater(dest: Destination): void {
    if (dest.highWater && dest.queue!.size <= this.highWater / 2) {
      dest.highWater = false;
      this.events.onQueueLowWater(dest.name, dest.queue!.size);
    }
  }

  /** A queue message was consumed: forget it and delete it from the store. */
  private consumeQueued(dest: Destination, msg: Message): void {
    dest.outstanding--;
    if (this.commit !== undefined && dest.persistent) this.commit.del(queueKey(dest.name, msg), dest.timings);
  }

  /** A queue message expired while waiting in the queue. */
  private expireQueued(dest: Destination, msg: Message): void {
    dest.counters.expired++;
    this.totals.totalExpiredMessages++;
    if (this.commit !== undefined && dest.persistent) this.commit.del(queueKey(dest.name, msg), dest.timings);
  }

  /** A message held by a subscription expired (already removed from its buffer). */
  private expireHeld(sub: Subscription, dest: Destination, msg: Message): void {
    sub.messagesExpired++;
    dest.counters.expired++;
    this.totals.totalExpiredMessages++;
    if (dest.isQueue) this.consumeQueued(dest, msg);
    else this.unpersistHeld(sub, dest, msg);
  }

  /**
   * A held message the subscription may no longer read (its `authorize` changed its answer): a topic copy is
   * forgotten (counted as ignored), a queue message goes back to its queue for the other consumers.
   */
  private refusedHeld(sub: Subscription, dest: Destination, msg: Message): void {
    sub.messagesIgnored++;
    if (dest.isQueue) this.returnToQueue(dest, msg);
    else this.unpersistHeld(sub, dest, msg);
  }

  /** The subscription is done with a message (acknowledged, committed or taken without a transaction). */
  private completed(sub: Subscription, dest: Destination, msg: Message): void {
    if (dest.isQueue) this.consumeQueued(dest, msg);
    else this.unpersistHeld(sub, dest, msg);
  }

  /** Put messages a consumer will not consume back into their queue (in their original order). */
  private returnToQueue(dest: Destination, msg: Message): void {
    dest.outstanding--;
    dest.queue!.requeue(msg);
  }

  // ------------------------------------------------------------------------------------------------------------
  // SubscriptionHost (called through Subscription methods)
  // ------------------------------------------------------------------------------------------------------------

  private take(sub: Subscription, n: number): Delivery[] {
    if (sub.closed || sub.paused || !(n > 0)) return [];
    const out: Delivery[] = [];
    const now = this.now();
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
      this.totals.totalRetrievedMessages++;
      if (sub.transactional) sub.inFlight.set(msg.id, { msg, dest });
      else this.completed(sub, dest, msg);
    }
    if (held.size === 0) sub.slow = false;
    if (sub.full) this.noteRoom(sub);
    if (sub.queue !== undefined) this.dispatch(sub.queue);
    return out;
  }

  /** Commit (ack) or abort (roll back) in-flight messages; every id counts. */
  private settle(sub: Subscription, ids: readonly number[], commit: boolean): number {
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
      if (sub.full) this.noteRoom(sub);
      if (sub.queue !== undefined) this.dispatch(sub.queue);
      else this.drain(sub);
    }
    return n;
  }

  private resumeSub(sub: Subscription): void {
    if (sub.closed) return;
    sub.blocked = false;
    if (sub.queue !== undefined) this.dispatch(sub.queue);
    else this.drain(sub);
  }

  private hibernate(sub: Subscription): void {
    if (sub.closed || sub.hibernating) return;
    sub.hibernating = true;
    sub.blocked = false;
    sub.sink = undefined;
    if (sub.durable) this.events.onDurableSubscription(sub, 'hibernated');
    if (sub.queue !== undefined) {
      // a queue consumer going offline gives its messages back to the other consumers
      this.releaseConsumer(sub);
      this.dispatch(sub.queue);
      return;
    }
    // unacknowledged messages are delivered again when the session comes back [MQTT-4.4.0-1]
    if (sub.inFlight.size > 0) {
      const back = [...sub.inFlight.values()].sort((a, b) => b.msg.id - a.msg.id);
      sub.inFlight.clear();
      for (const f of back) {
        sub.held.unshift(f.msg, f.dest);
        f.dest.pendingCopies++;
      }
    }
  }

  private attach(sub: Subscription, sink: Sink): void {
    if (sub.closed) return;
    const wasHibernating = sub.hibernating;
    sub.sink = sink;
    sub.hibernating = false;
    sub.blocked = false;
    if (sub.durable && wasHibernating) this.events.onDurableSubscription(sub, 'attached');
    if (sub.queue !== undefined) {
      this.dispatch(sub.queue);
      return;
    }
    if (sink.kind === 'push') this.drain(sub);
    else if (sub.held.size > 0 && !sub.paused && sink.notify !== undefined) sink.notify(sub);
  }

  /** Push held messages until the sink runs out of credit. */
  private drain(sub: Subscription): void {
    const sink = sub.sink;
    if (sink === undefined || sink.kind !== 'push' || sub.draining || sub.closed || sub.hibernating || sub.blocked || sub.paused) return;
    sub.draining = true;
    try {
      const now = this.now();
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
    if (sub.full) this.noteRoom(sub);
  }

  /** Give a consumer's held and in-flight queue messages back to its queue. */
  private releaseConsumer(sub: Subscription): void {
    for (const [msg, dest] of sub.held.drain()) this.returnToQueue(dest, msg);
    for (const f of sub.inFlight.values()) this.returnToQueue(f.dest, f.msg);
    sub.inFlight.clear();
  }

  // ------------------------------------------------------------------------------------------------------------
  // Subscribe / unsubscribe
  // ------------------------------------------------------------------------------------------------------------

  /**
   * Subscribe a session to a topic filter (`+`, `#`, `$share/<group>/<filter>`) or consume from a queue (its
   * exact name). Subscribing again with the same session and filter updates the existing subscription (and its
   * sink) and returns the same handle [MQTT-3.8.4-3]. Retained messages are delivered per `retainHandling`
   * [MQTT-3.3.1-9..11]; shared subscriptions get none (MQTT 5 §4.8.2).
   */
  subscribe(opts: SubscribeOptions): Subscription {
    if (this.closed) throw new ConflictError('the messaging engine is closed');
    if (typeof opts.sessionId !== 'string' || opts.sessionId.length === 0) {
      throw new ValidationError('a subscription needs a non-empty sessionId');
    }
    validateTopicFilter(opts.filter);
    const sink = opts.sink;
    if (sink === undefined || (sink.kind !== 'push' && sink.kind !== 'pull')) {
      throw new ValidationError('a subscription needs a sink of kind "push" or "pull"');
    }
    const maxDepth = opts.maxDepth ?? this.defaultMaxDepth;
    if (!Number.isInteger(maxDepth) || maxDepth < 1) {
      throw new ValidationError(`maxDepth must be a positive integer, got ${String(opts.maxDepth)}`);
    }
    const maxBytes = opts.maxBytes ?? this.defaultMaxBytes;
    if (!Number.isInteger(maxBytes) || maxBytes < 1) {
      throw new ValidationError(`maxBytes must be a positive integer, got ${String(opts.maxBytes)}`);
    }
    if (opts.maxPerDestination !== undefined && (!Number.isInteger(opts.maxPerDestination) || opts.maxPerDestination < 0)) {
      throw new ValidationError(`maxPerDestination must be a non-negative integer, got ${String(opts.maxPerDestination)}`);
    }
    if (opts.qos !== undefined && opts.qos !== 0 && opts.qos !== 1 && opts.qos !== 2) {
      throw new ValidationError(`qos must be 0, 1 or 2, got ${String(opts.qos)}`);
    }
    if (opts.retainHandling !== undefined && opts.retainHandling !== 0 && opts.retainHandling !== 1 && opts.retainHandling !== 2) {
      throw new ValidationError(`retainHandling must be 0, 1 or 2, got ${String(opts.retainHandling)}`);
    }

    const existing = this.subs.get(subscriptionKey(opts.sessionId, opts.filter));
    if (existing !== undefined) {
      this.replace(existing, opts, maxDepth, maxBytes);
      return existing;
    }

    const shared = parseSharedFilter(opts.filter);
    const topicFilter = shared !== null ? shared.filter : opts.filter;
    let queue: Destination | undefined;
    if (!hasWildcard(topicFilter)) {
      let dest = this.dests.get(topicFilter);
      if (dest === undefined) {
        dest = this.createDest(topicFilter, this.isQueueName(topicFilter) ? DestinationType.Queue : DestinationType.Topic);
      }
      if (dest.isQueue) queue = dest;
    } else if (this.isQueueName(topicFilter)) {
      throw new ValidationError(
        `"${opts.filter}": wildcards cannot consume from queues; subscribe to the exact queue name`,
      );
    }

    const sub = new Subscription(this.host, this.nextSubId++, opts.sessionId, opts, topicFilter, shared?.group, maxDepth, maxBytes);
    this.subs.set(sub.key, sub);
    let set = this.sessions.get(sub.sessionId);
    if (set === undefined) this.sessions.set(sub.sessionId, (set = new Set()));
    set.add(sub);

    if (sub.durable) this.events.onDurableSubscription(sub, 'created');
    if (queue !== undefined) {
      sub.queue = queue;
      queue.consumers.push(sub);
      this.dispatch(queue);
      return sub;
    }
    if (shared !== null) {
      const groupKey = `${shared.group}\u0000${topicFilter}`;
      let group = this.groups.get(groupKey);
      if (group === undefined) {
        group = new SharedGroup(shared.group, topicFilter);
        group.external = this.externalShare !== undefined && this.externalShare(shared.group, topicFilter);
        this.groups.set(groupKey, group);
        this.trie.add(topicFilter, group);
        this.trieGen++;
        for (const l of this.groupListeners) l('added', shared.group, topicFilter);
      }
      group.members.push(sub);
      sub.group = group;
    } else {
      this.trie.add(topicFilter, sub);
      this.trieGen++;
    }
    if (sub.durable) this.adoptRecovered(sub);
    // retained messages are not sent to shared subscriptions (MQTT 5 §4.8.2)
    if (shared === null && sub.retainHandling !== 2) this.sendRetained(sub);
    return sub;
  }

  private replace(sub: Subscription, opts: SubscribeOptions, maxDepth: number, maxBytes: number): void {
    if (sub.selector !== opts.selector) sub.selector?.release?.();
    sub.selector = opts.selector;
    sub.accept = opts.accept;
    sub.authorize = opts.authorize;
    sub.maxDepth = maxDepth;
    sub.maxBytes = maxBytes;
    sub.maxPerDestination = opts.maxPerDestination ?? 0;
    this.noteFull(sub);
    sub.qos = opts.qos ?? 0;
    sub.noLocal = opts.noLocal === true;
    sub.retainHandling = opts.retainHandling ?? 0;
    sub.retainAsPublished = opts.retainAsPublished === true;
    sub.subscriptionId = opts.subscriptionId;
    if (sub.sink !== opts.sink || sub.hibernating) this.attach(sub, opts.sink);
    // retainHandling 0 resends retained messages on a repeated subscribe [MQTT-3.3.1-9]; 1 only on a new one [MQTT-3.3.1-10]
    if (sub.queue === undefined && sub.group === undefined && sub.retainHandling === 0) this.sendRetained(sub);
  }

  private sendRetained(sub: Subscription): void {
    if (this.retainedIndex.size === 0) return;
    const found = this.retainedIndex.match(sub.topicFilter, []);
    const now = this.now();
    for (const dest of found) {
      const msg = dest.retained;
      if (msg === undefined || dest.paused) continue;
      if (msg.expiresAt !== 0 && msg.expiresAt <= now) {
        this.dropRetained(dest);
        dest.counters.expired++;
        this.totals.totalExpiredMessages++;
        continue;
      }
      this.offer(sub, dest, msg, true); // retained flag stays set on these [MQTT-3.3.1-8]
    }
  }

  private adoptRecovered(sub: Subscription): void {
    if (this.recoveredPaused.size !== 0 && this.recoveredPaused.delete(sub.key)) sub.paused = true;
    const list = this.recoveredHeld.get(sub.key);
    if (list === undefined) return;
    this.recoveredHeld.delete(sub.key);
    for (const [name, msg] of list) {
      const dest = this.dests.get(name) ?? this.createDest(name, DestinationType.Topic);
      sub.held.push(msg, dest);
      dest.pendingCopies++;
      sub.messagesRegistered++;
    }
    this.noteFull(sub);
    const sink = sub.sink;
    if (sink?.kind === 'push') this.drain(sub);
    else if (sink?.kind === 'pull' && sink.notify !== undefined && sub.held.size > 0 && !sub.paused) sink.notify(sub);
  }

  /**
   * End a subscription. Queue messages held by or in flight to it go back to the queue; a shared member's held
   * messages go to the other members; a durable subscription's stored messages are deleted.
   */
  unsubscribe(sub: Subscription, reason?: string): boolean;
  unsubscribe(sessionId: string, filter: string): boolean;
  unsubscribe(a: Subscription | string, b?: string): boolean {
    let sub: Subscription | undefined;
    let reason = 'unsubscribed';
    if (typeof a === 'string') sub = this.subs.get(subscriptionKey(a, b ?? ''));
    else {
      sub = a;
      if (b !== undefined) reason = b;
    }
    if (sub === undefined || sub.closed) return false;
    sub.closed = true;
    sub.selector?.release?.();
    if (sub.durable) this.events.onDurableSubscription(sub, reason === SESSION_EXPIRED ? 'expired' : 'closed');
    if (sub.paused && sub.durable && this.commit !== undefined) this.commit.del(pausedSubscriptionKey(sub.key));
    sub.full = false;
    if (this.subs.get(sub.key) === sub) this.subs.delete(sub.key);
    const set = this.sessions.get(sub.sessionId);
    if (set !== undefined) {
      set.delete(sub);
      if (set.size === 0) this.sessions.delete(sub.sessionId);
    }
    if (sub.queue !== undefined) {
      const dest = sub.queue;
      const at = dest.consumers.indexOf(sub);
      if (at >= 0) {
        dest.consumers.splice(at, 1);
        if (at < dest.rr) dest.rr--;
        if (dest.rr >= dest.consumers.length) dest.rr = 0;
      }
      this.releaseConsumer(sub);
      this.dispatch(dest);
    } else {
      const entries = sub.held.drain();
      for (const [, dest] of entries) dest.pendingCopies--;
      for (const f of sub.inFlight.values()) entries.push([f.msg, f.dest]);
      sub.inFlight.clear();
      for (const [msg, dest] of entries) this.unpersistHeld(sub, dest, msg);
      const group = sub.group;
      if (group !== undefined) {
        const at = group.members.indexOf(sub);
        if (at >= 0) {
          group.members.splice(at, 1);
          if (at < group.rr) group.rr--;
          if (group.rr >= group.members.length) group.rr = 0;
        }
        if (group.members.length === 0) {
          this.groups.delete(`${group.group}\u0000${group.filter}`);
          this.trie.remove(group.filter, group);
          this.trieGen++;
          for (const l of this.groupListeners) l('removed', group.group, group.filter);
        } else {
          // a shared subscription's undelivered messages go to the remaining members (MQTT 5 §4.8.2)
          for (const [msg, dest] of entries) this.offerGroup(group, dest, msg);
        }
      } else {
        this.trie.remove(sub.topicFilter, sub);
        this.trieGen++;
      }
    }
    const sink = sub.sink;
    sub.sink = undefined;
    if (sink?.closed !== undefined) sink.closed(sub, reason);
    return true;
  }

  /**
   * A session ended for good: unsubscribe all its subscriptions, forget recovered durable messages for it, and
   * delete the temporary destinations it owns. Returns the number of subscriptions removed.
   */
  closeSession(sessionId: string, opts?: { expired?: boolean }): number {
    const set = this.sessions.get(sessionId);
    let n = 0;
    const reason = opts?.expired === true ? SESSION_EXPIRED : 'session closed';
    if (set !== undefined) for (const sub of [...set]) if (this.unsubscribe(sub, reason)) n++;
    const prefix = `${encodeURIComponent(sessionId)}|`;
    for (const key of this.recoveredPaused) {
      if (!key.startsWith(prefix)) continue;
      this.recoveredPaused.delete(key);
      this.commit?.del(pausedSubscriptionKey(key));
    }
    for (const [key, list] of this.recoveredHeld) {
      if (!key.startsWith(prefix)) continue;
      this.recoveredHeld.delete(key);
      if (this.commit !== undefined) for (const [, msg] of list) this.commit.del(`${DURABLE_PREFIX}${key}!${padId(msg.id)}`);
    }
    // the owner index names the session's temporary destinations (no scan over every destination)
    for (const name of [...(this.owned.get(sessionId) ?? [])]) {
      const dest = this.dests.get(name);
      if (dest !== undefined && !dest.persistent) void this.deleteDestination(name, { force: true }).catch(noop);
    }
    this.owned.delete(sessionId);
    return n;
  }

  subscription(sessionId: string, filter: string): Subscription | undefined {
    return this.subs.get(subscriptionKey(sessionId, filter));
  }

  sessionSubscriptions(sessionId: string): Subscription[] {
    const set = this.sessions.get(sessionId);
    return set === undefined ? [] : [...set];
  }

  /** Every durable (persistent-session) subscription, online or hibernating. */
  durableSubscriptions(): Subscription[] {
    return [...this.eachDurableSubscription()];
  }

  /** The durable subscriptions one by one (a page stops iterating once it is full; nothing is copied). */
  *eachDurableSubscription(): IterableIterator<Subscription> {
    for (const sub of this.subs.values()) if (sub.durable && !sub.closed) yield sub;
  }

  get subscriptionCount(): number {
    return this.subs.size;
  }

  // ------------------------------------------------------------------------------------------------------------
  // Destinations
  // ------------------------------------------------------------------------------------------------------------

  private createDest(name: string, type: DestinationType, owner?: string): Destination {
    const dest: Destination = new DestinationRecord(name, type, this.now());
    dest.owner = owner;
    if (owner !== undefined) {
      let names = this.owned.get(owner);
      if (names === undefined) this.owned.set(owner, (names = new Set()));
      names.add(name);
    }
    if (this.schemaResolver !== undefined) this.bindSchema(dest);
    this.dests.set(name, dest);
    this.events.onDestinationCreated(name, type);
    return dest;
  }

  // ------------------------------------------------------------------------------------------------------------
  // Payload schemas (src/schemas/ binds them; the engine only keeps the binding and counts)
  // ------------------------------------------------------------------------------------------------------------

  private schemaResolver: ((name: string) => PayloadSchema | undefined) | undefined = undefined;

  /** Sets the function that names a destination's payload schema and (re)binds every destination with it. */
  setSchemaResolver(resolve: ((name: string) => PayloadSchema | undefined) | undefined): void {
    this.schemaResolver = resolve;
    for (const d of this.dests.values()) this.bindSchema(d);
  }

  private bindSchema(dest: Destination): void {
    const s = dest.name.startsWith('$') ? undefined : this.schemaResolver?.(dest.name);
    dest.schema = s;
    dest.schemaId = s?.schemaId ?? '';
  }

  /**
   * Checks a payload against the schema bound to a destination, before `publish`: the first problem when the
   * message must be refused (enforcement `reject`), undefined to go on. Counts per destination. A destination
   * without a schema costs one map look-up; a missing destination is created (as the publish would).
   */
  checkSchema(destinationName: string, payload: Buffer): string | undefined {
    let dest = this.dests.get(destinationName);
    if (dest === undefined) {
      if (this.schemaResolver === undefined || this.closed) return undefined;
      try {
        validateTopicName(destinationName);
      } catch {
        return undefined; // the publish reports it
      }
      dest = this.createDest(destinationName, this.isQueueName(destinationName) ? DestinationType.Queue : DestinationType.Topic);
    }
    const s = dest.schema;
    if (s === undefined || s.enforcement === 'off') return undefined;
    const problem = s.check(payload);
    const c = dest.schemaCounters;
    if (problem === undefined) {
      c.valid++;
      return undefined;
    }
    c.invalid++;
    s.violated?.(dest.name, problem);
    if (s.enforcement === 'warn') return undefined;
    c.rejected++;
    return problem;
  }

  /** The schema binding and payload-check counters of a destination (undefined: no such destination). */
  schemaState(name: string): { schemaId: string; enforcement: string; valid: number; invalid: number; rejected: number } | undefined {
    const d = this.dests.get(name);
    if (d === undefined) return undefined;
    const c = d.schemaCounters;
    return { schemaId: d.schemaId, enforcement: d.schema?.enforcement ?? 'off', valid: c.valid, invalid: c.invalid, rejected: c.rejected };
  }

  private require(name: string): Destination {
    const dest = this.dests.get(name);
    if (dest === undefined) throw new NotFoundError(`destination "${name}" not found`);
    return dest;
  }

  /**
   * Create a destination of a given type (idempotent for the same type; ConflictError for another type).
   * Temporary destinations may name their owning session; `closeSession(owner)` deletes them.
   */
  createDestination(name: string, type: DestinationType, opts?: { owner?: string }): DestinationDTO {
    if (!isDestinationType(type)) throw new ValidationError(`unknown destination type "${String(type)}"`);
    validateTopicName(name);
    const existing = this.dests.get(name);
    if (existing !== undefined) {
      if (existing.type !== type) {
        throw new ConflictError(`destination "${name}" already exists as a ${existing.type}, not a ${type}`);
      }
      existing.declared = true;
      return destinationDto(existing);
    }
    const created = this.createDest(name, type, opts?.owner);
    created.declared = true; // declared destinations are never removed for being idle
    return destinationDto(created);
  }

  /** Declare a queue whatever its name (configuration). */
  declareQueue(name: string): DestinationDTO {
    return this.createDestination(name, DestinationType.Queue);
  }

  hasDestination(name: string): boolean {
    return this.dests.has(name);
  }

  destinations(): DestinationDTO[] {
    const out: DestinationDTO[] = [];
    for (const d of this.dests.values()) out.push(destinationDto(d));
    return out;
  }

  destinationNames(): string[] {
    return [...this.dests.keys()];
  }

  /** The destination names in table order, lazily (no copy): the paged actor views iterate it. */
  destinationNameIterator(): IterableIterator<string> {
    return this.dests.keys();
  }

  /** Number of destinations (system ones included), O(1). */
  get destinationCount(): number {
    return this.dests.size;
  }

  /** The type of a destination without building its DTO, or undefined. */
  destinationType(name: string): DestinationType | undefined {
    return this.dests.get(name)?.type;
  }

  destination(name: string): DestinationDTO | undefined {
    const d = this.dests.get(name);
    return d === undefined ? undefined : destinationDto(d);
  }

  /** DestinationDTO of an existing destination; NotFoundError otherwise. */
  destinationDto(name: string): DestinationDTO {
    return destinationDto(this.require(name));
  }

  isPaused(name: string): boolean {
    return this.require(name).paused;
  }

  /** A queue that raised `onQueueHighWater` and has not yet fallen back to half of it (also after recovery). */
  isAboveHighWater(name: string): boolean {
    return this.dests.get(name)?.highWater === true;
  }

  /** SubscriptionStateDTO of every subscription receiving from the destination (queue consumers or matching filters). */
  subscriptionStates(name: string): SubscriptionStateDTO[] {
    return subscriptionStatesOf(this.require(name), this.trie);
  }

  /** Bytes held for (and in flight to) every subscription, as counted against their `maxBytes` (O(subscriptions)). */
  queuedBytes(): number {
    let n = 0;
    for (const s of this.subs.values()) n += s.held.bytes + s.inFlight.bytes;
    return n;
  }

  /** `subscriptionStates` with each subscription's byte depth and cap (SubscriptionQueueDTO). */
  subscriptionQueues(name: string): SubscriptionQueueDTO[] {
    return subscriptionStatesOf(this.require(name), this.trie, true) as SubscriptionQueueDTO[];
  }

  /** Messages waiting in a queue, in delivery order (or the retained message of a topic), without consuming them. */
  browse(name: string, limit = 100): Message[] {
    return browseDestination(this.require(name), limit);
  }

  /** The retained message of a topic, if any. */
  retained(name: string): Message | undefined {
    return this.dests.get(name)?.retained;
  }

  /**
   * Hold delivery from a destination (see the class comment). The flag is written to the store (a temporary
   * destination's is not); resolves once it is.
   */
  pauseDestination(name: string): Promise<void> {
    const d = this.require(name);
    if (d.paused) return RESOLVED;
    d.paused = true;
    if (this.commit === undefined || !d.persistent) return RESOLVED;
    return this.commit.put(pausedDestinationKey(name), Buffer.from(d.type, 'utf8'), d.timings);
  }

  /**
   * Deliver again: a queue dispatches, a topic routes what it held in publish order (expired ones are counted and
   * dropped). The flag and the held records are deleted in the batch that stores the copies the hold routed to
   * durable subscriptions, so a crash in between neither loses nor doubles them. Resolves once written.
   */
  resumeDestination(name: string): Promise<void> {
    const d = this.require(name);
    if (!d.paused) return RESOLVED;
    d.paused = false;
    const saved = this.lastWrite;
    this.lastWrite = undefined;
    if (this.commit !== undefined && d.persistent) this.lastWrite = this.commit.del(pausedDestinationKey(name), d.timings);
    if (d.isQueue) {
      this.dispatch(d);
    } else {
      const held = d.held;
      d.held = [];
      const now = this.now();
      for (const msg of held) {
        if (msg.qos !== 0 && this.commit !== undefined && d.persistent) this.lastWrite = this.commit.del(pausedHeldKey(name, msg), d.timings);
        if (msg.expiresAt !== 0 && msg.expiresAt <= now) {
          d.counters.expired++;
          this.totals.totalExpiredMessages++;
        } else {
          this.route(d, msg);
        }
      }
    }
    const written = this.lastWrite;
    this.lastWrite = saved;
    return written ?? RESOLVED;
  }

  /**
   * Drop the messages waiting for delivery from a destination: a queue's waiting messages (not those already
   * handed to a consumer), a topic's paused hold and the copies of its messages waiting in subscription buffers
   * (not those in flight). The retained message stays. Returns how many were dropped; the store deletes are
   * queued in the current batch (`flush()` waits for them).
   */
  purgeDestination(name: string): number {
    const d = this.require(name);
    let n = 0;
    if (d.queue !== undefined) {
      for (const m of d.queue.clear()) {
        if (this.commit !== undefined && d.persistent) this.commit.del(queueKey(name, m), d.timings);
        n++;
      }
      this.checkLowWater(d);
    } else {
      for (const m of d.held) {
        if (m.qos !== 0 && this.commit !== undefined && d.persistent) this.commit.del(pausedHeldKey(name, m), d.timings);
        n++;
      }
      d.held = [];
      n += this.dropCopiesOf(d);
    }
    d.counters.dropped += n;
    this.totals.totalDroppedMessages += n;
    return n;
  }

  /** Remove the copies of a topic's messages waiting in subscription buffers (O(subscriptions)); returns how many. */
  private dropCopiesOf(d: Destination): number {
    if (d.pendingCopies <= 0) return 0;
    let n = 0;
    for (const s of this.subs.values()) {
      if (s.held.size === 0 || s.queue !== undefined) continue;
      const k = s.held.removeWhere(
        (_m, from) => from === d,
        (m) => {
          d.pendingCopies--;
          this.unpersistHeld(s, d, m);
        },
      );
      if (k > 0) {
        n += k;
        if (s.held.size === 0) s.slow = false;
        if (s.full) this.noteRoom(s);
      }
    }
    return n;
  }

  // ------------------------------------------------------------------------------------------------------------
  // Subscription lifecycle (commanded through the runtime's subscription actors)

  /**
   * Hold delivery to a subscription: it keeps taking copies into its buffer (within maxDepth / maxBytes and its
   * overflow policy) and hands none out until resumed. A durable subscription's flag is written (`ps!`), so a
   * restart keeps it paused. Resolves once written.
   */
  pauseSubscription(sessionId: string, filter: string): Promise<void> {
    const sub = this.requireSubscription(sessionId, filter);
    if (sub.paused) return RESOLVED;
    sub.paused = true;
    if (!sub.durable || this.commit === undefined) return RESOLVED;
    return this.commit.put(pausedSubscriptionKey(sub.key), Buffer.alloc(0));
  }

  /** Deliver again what the paused subscription holds, in order; then as usual. Resolves once the flag is deleted. */
  resumeSubscription(sessionId: string, filter: string): Promise<void> {
    const sub = this.requireSubscription(sessionId, filter);
    if (!sub.paused) return RESOLVED;
    sub.paused = false;
    const written = sub.durable && this.commit !== undefined ? this.commit.del(pausedSubscriptionKey(sub.key)) : RESOLVED;
    if (sub.queue !== undefined) this.dispatch(sub.queue);
    else if (sub.sink?.kind === 'push') this.drain(sub);
    else if (sub.sink?.kind === 'pull' && sub.held.size > 0 && sub.sink.notify !== undefined) sub.sink.notify(sub);
    return written;
  }

  private requireSubscription(sessionId: string, filter: string): Subscription {
    const sub = this.subs.get(subscriptionKey(sessionId, filter));
    if (sub === undefined || sub.closed) throw new NotFoundError(`subscription "${filter}" of session "${sessionId}" not found`);
    return sub;
  }

  /**
   * Delete a destination with its stored messages and retained message. A queue with consumers is a conflict
   * unless `force`, which ends those subscriptions. Resolves once the deletes are written.
   */
  deleteDestination(name: string, opts?: { force?: boolean }): Promise<void> {
    const d = this.dests.get(name);
    if (d === undefined) return Promise.reject(new NotFoundError(`destination "${name}" not found`));
    if (d.isQueue && d.consumers.length > 0 && opts?.force !== true) {
      return Promise.reject(
        new ConflictError(`queue "${name}" has ${d.consumers.length} consumer(s); unsubscribe them first or delete with force`),
      );
    }
    const saved = this.lastWrite;
    this.lastWrite = undefined;
    d.deleted = true; // stops dispatch while consumers are released
    for (const c of [...d.consumers]) this.unsubscribe(c, 'destination deleted');
    this.dests.delete(name);
    if (d.owner !== undefined) {
      const names = this.owned.get(d.owner);
      names?.delete(name);
      if (names?.size === 0) this.owned.delete(d.owner);
    }
    if (d.queue !== undefined) {
      const msgs = d.queue.clear();
      if (this.commit !== undefined && d.persistent) {
        for (const m of msgs) this.lastWrite = this.commit.del(queueKey(name, m), d.timings);
      }
      if (d.highWater) {
        d.highWater = false;
        this.events.onQueueLowWater(name, 0);
      }
    }
    if (d.retained !== undefined) this.dropRetained(d);
    if (this.commit !== undefined && d.persistent) {
      if (d.paused) this.lastWrite = this.commit.del(pausedDestinationKey(name), d.timings);
      for (const m of d.held) if (m.qos !== 0) this.lastWrite = this.commit.del(pausedHeldKey(name, m), d.timings);
    }
    d.held = [];
    // nothing more is delivered from it: copies waiting in subscription buffers go too (those in flight complete)
    this.dropCopiesOf(d);
    d.routes = [];
    this.events.onDestinationDeleted(name, d.type);
    const written = this.lastWrite;
    this.lastWrite = saved;
    return written ?? RESOLVED;
  }

  // ------------------------------------------------------------------------------------------------------------
  // Expiry, stats, recovery, shutdown
  // ------------------------------------------------------------------------------------------------------------

  /**
   * Removes topics that have been idle for `idleMs`: a Topic (not a queue, not temporary, not declared with
   * `createDestination`) that no subscription matches, with no retained message, no copies waiting in a
   * subscription and nothing held while paused, and nothing published to it for `idleMs`. The runtime's actor of
   * each goes with it (onDestinationDeleted). A later publish creates the topic again. Returns the names removed.
   */
  sweepIdle(idleMs: number, now: number = this.now()): string[] {
    const removed: string[] = [];
    if (idleMs <= 0 || this.closed) return removed;
    for (const d of this.dests.values()) {
      if (d.isQueue || d.declared || !d.persistent || d.name.startsWith('$')) continue;
      if (d.retained !== undefined || d.pendingCopies > 0 || d.held.length > 0 || d.paused || this.routesOf(d).length > 0) {
        d.lastUsed = now; // in use: its idle period starts when it stops being so
        continue;
      }
      if (now - d.lastUsed >= idleMs) removed.push(d.name);
    }
    for (const name of removed) void this.deleteDestination(name).catch(noop);
    return removed;
  }

  /** Remove expired messages from queues, retained slots, paused holds and subscription buffers. Returns the count. */
  sweepExpired(now: number = this.now()): number {
    let n = 0;
    const isExpired = (m: Message): boolean => m.expiresAt !== 0 && m.expiresAt <= now;
    for (const d of this.dests.values()) {
      const q = d.queue;
      if (q !== undefined) {
        if (q.size > 0) n += q.removeWhere(isExpired, (m) => this.expireQueued(d, m));
        this.checkLowWater(d);
        continue;
      }
      if (d.retained !== undefined && isExpired(d.retained)) {
        this.dropRetained(d);
        d.counters.expired++;
        this.totals.totalExpiredMessages++;
        n++;
      }
      if (d.held.length > 0) {
        const keep = d.held.filter((m) => !isExpired(m));
        const gone = d.held.length - keep.length;
        if (gone > 0 && this.commit !== undefined && d.persistent) {
          for (const m of d.held) if (m.qos !== 0 && isExpired(m)) this.commit.del(pausedHeldKey(d.name, m), d.timings);
        }
        if (gone > 0) {
          d.held = keep;
          d.counters.expired += gone;
          this.totals.totalExpiredMessages += gone;
          n += gone;
        }
      }
    }
    for (const s of this.subs.values()) {
      if (s.held.size === 0) continue;
      n += s.held.removeWhere(isExpired, (m, d) => {
        if (!d.isQueue) d.pendingCopies--;
        this.expireHeld(s, d, m);
      });
      if (s.full) this.noteRoom(s);
      if (s.queue !== undefined) this.dispatch(s.queue);
    }
    return n;
  }

  stats(): EngineStats {
    return engineStats(this.totals, this.rates, this.now(), {
      destinations: this.dests.size,
      subscriptions: this.subs.size,
      storeBatches: this.commit?.batches ?? 0,
      storeOperations: this.commit?.opsWritten ?? 0,
    });
  }

  /**
   * Load queue messages, retained messages and durable-subscription messages from the store. Call once, at
   * start-up, before publishing. Expired messages are deleted instead of loaded.
   */
  async recover(): Promise<RecoveryResult> {
    if (this.recovered) throw new ConflictError('recover() was already called');
    this.recovered = true;
    if (this.store === undefined) return { queued: 0, retained: 0, held: 0, paused: 0, pausedHeld: 0, expired: 0, corrupt: 0 };
    const { result, maxId } = await loadFromStore(this.store, this.now(), {
      commit: this.commit!,
      totals: this.totals,
      existing: (name) => this.dests.get(name),
      destination: (name, type) => this.dests.get(name) ?? this.createDest(name, type),
      retain: (d, msg) => {
        if (d.retained === undefined) this.retainedIndex.set(d.name, d);
        d.retained = msg;
      },
      held: (storeKey, destination, msg) => {
        let list = this.recoveredHeld.get(storeKey);
        if (list === undefined) this.recoveredHeld.set(storeKey, (list = []));
        list.push([destination, msg]);
      },
      pausedSubscription: (storeKey) => this.recoveredPaused.add(storeKey),
    });
    this.ids.observe(maxId);
    for (const d of this.dests.values()) {
      if (d.queue === undefined) continue;
      this.dispatch(d);
      if (!d.highWater && d.queue.size >= this.highWater) {
        d.highWater = true;
        this.events.onQueueHighWater(d.name, d.queue.size);
      }
    }
    for (const sub of this.subs.values()) if (sub.durable) this.adoptRecovered(sub);
    return result;
  }

  /**
   * Messages held for a durable subscription that another broker of the cluster held (src/cluster/sessions.ts): kept
   * like recovered ones until the subscription `storeKey` is made, and written to this broker's store now.
   */
  adoptHeld(storeKey: string, list: Array<[destination: string, msg: Message]>): Promise<void> {
    const held = this.recoveredHeld.get(storeKey);
    if (held === undefined) this.recoveredHeld.set(storeKey, [...list]);
    else held.push(...list);
    for (const [, msg] of list) this.ids.observe(msg.id);
    if (this.commit === undefined) return RESOLVED;
    let last: Promise<void> = RESOLVED;
    for (const [name, msg] of list) last = this.commit.put(`${DURABLE_PREFIX}${storeKey}!${padId(msg.id)}`, encodeHeld(name, msg));
    return last;
  }

  // ------------------------------------------------------------------------------------------------------------
  // Protocol session state (`s!` keys): written through the same group commit as messages, so a record and the
  // message writes made in the same synchronous step land in ONE batch (atomic), and its promise is that batch's.

  /** Whether `putState` / `delState` write anywhere (the engine has a store). */
  get hasStore(): boolean {
    return this.commit !== undefined;
  }

  /**
   * Put a protocol state record under `s!<key>`, in the batch being gathered now (with every message write made
   * since the last batch started). Resolves when that batch is written; without a store, at once.
   */
  putState(key: string, value: Buffer): Promise<void> {
    return this.commit === undefined ? RESOLVED : this.commit.put(STATE_PREFIX + key, value);
  }

  /** Delete `s!<key>` in the batch being gathered now (see `putState`). */
  delState(key: string): Promise<void> {
    return this.commit === undefined ? RESOLVED : this.commit.del(STATE_PREFIX + key);
  }

  /** Every state record whose key (without `s!`) starts with `prefix`, in key order. */
  async *stateEntries(prefix = ''): AsyncGenerator<[string, Buffer]> {
    if (this.store === undefined) return;
    for await (const [key, value] of this.store.iterate(STATE_PREFIX + prefix)) yield [key.slice(STATE_PREFIX.length), value];
  }

  /** Wait until every write queued so far is in the store. */
  flush(): Promise<void> {
    return this.commit?.flush() ?? RESOLVED;
  }

  /** Stop accepting publishes and subscriptions, then flush the pending batch. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.unwrittenTimer !== undefined) clearTimeout(this.unwrittenTimer);
    this.writeDue(true); // write-behind copies still unsettled go to the store now
    await this.flush();
  }

  get isClosed(): boolean {
    return this.closed;
  }
}
