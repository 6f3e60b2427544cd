/**
 * The messaging engine: routes every message by plain function calls (no xstate, no async per delivery).
 *
 * This class is the facade the rest of the broker uses; the work is done by modules with one responsibility each,
 * all over the shared tables of engine-core.ts:
 *
 *   engine.ts          publish / subscribe / the destination and subscription lifecycles, recovery, sweeps (wiring)
 *   fan-out.ts         a topic message to every matching subscription and shared group
 *   shared-groups.ts   one member of a `$share` group per message; the group table
 *   queue-dispatch.ts  a queue message to exactly one consumer; high/low water
 *   retained.ts        one retained message per topic, sent on subscribe
 *   delivery.ts        one copy to one subscription: push, keep, drain, take, settle
 *   flow-control.ts    refusal at publish (full subscriptions, a paused topic's full hold), cap edges
 *   write-behind.ts    every store write of the message path to the group commit; the write-behind window
 *
 * A publish's outcome is the value each step returns (Outcome bits, engine-core.ts), turned into the promise
 * `publish` returns; nothing is carried in fields between calls.
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
import { RateMeter, type ServerTotals } from './counters.js';
import { Destination as DestinationRecord, DestinationType, isDestinationType, isQueueName, type PayloadSchema } from './destination.js';
import { Delivery } from './delivery.js';
import { DEFERRED, EngineCore, NONE, RESOLVED, STORED, noop, type EngineEvents } from './engine-core.js';
import type { EngineStore } from './engine-store.js';
import { DURABLE_PREFIX, STATE_PREFIX, encodeHeld, padId, pausedDestinationKey, pausedSubscriptionKey } from './engine-store.js';
import { FanOut } from './fan-out.js';
import { FlowControl } from './flow-control.js';
import { GroupCommit } from './group-commit.js';
import type { Message, MessageInit } from './message.js';
import { MessageIdGenerator, createMessage } from './message.js';
import { QueueDispatch } from './queue-dispatch.js';
import type { RecoveryResult } from './recovery.js';
import { loadFromStore } from './recovery.js';
import { Retained } from './retained.js';
import { SharedGroups } from './shared-groups.js';
import type {
  Delivery as Taken,
  Destination,
  SharedGroup,
  Sink,
  SubscribeOptions,
  SubscriptionHost,
  SubscriptionQueueDTO,
  SubscriptionStateDTO,
} from './subscription.js';
import { Subscription, subscriptionKey } from './subscription.js';
import { hasWildcard, parseSharedFilter, validateTopicFilter, validateTopicName } from './topic-trie.js';
import type { DestinationDTO, EngineStats, RateKey } from './views.js';
import { RATE_KEYS, browseDestination, destinationDto, engineStats, subscriptionStatesOf } from './views.js';
import { WriteBehind } from './write-behind.js';

export type { DestinationDTO, EngineStats } from './views.js';
export type { RecoveryResult } from './recovery.js';
export type { DurableChange, EngineEvents } from './engine-core.js';
export { RESOLVED } from './engine-core.js';

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

/** The unsubscribe reason `closeSession(id, { expired: true })` gives (durable notice `expired`). */
const SESSION_EXPIRED = 'session expired';

/**
 * What `publish` returns when flow control refuses the message: a subscription it would reach with an effective
 * QoS >= 1 is full (`refuseWhenFull`). One shared rejected promise, so a caller can tell it apart without waiting
 * (`p === QUOTA_EXCEEDED`); awaiting it throws a QuotaExceededError (REST: 429).
 */
export const QUOTA_EXCEEDED: Promise<void> = Promise.reject(
  new QuotaExceededError('Quota exceeded: a subscription this message would reach holds its maximum of queued messages or bytes; retry later'),
);
QUOTA_EXCEEDED.catch(noop);

export class Engine {
  // the shared tables and the modules over them (see the file comment); the aliases save a load on the hot path
  private readonly core: EngineCore;
  private readonly writes: WriteBehind;
  private readonly flow: FlowControl;
  private readonly delivery: Delivery;
  private readonly groups: SharedGroups;
  private readonly queues: QueueDispatch;
  private readonly retain: Retained;
  private readonly fanout: FanOut;
  private readonly totals: ServerTotals;
  private readonly store: EngineStore | undefined;
  private readonly commit: GroupCommit | undefined;
  private readonly now: () => number;
  private readonly events: EngineEvents;
  private readonly dests: Map<string, Destination>;
  private readonly subs: Map<string, Subscription>;

  private readonly sessions = new Map<string, Set<Subscription>>();
  /** Owner index: the temporary destinations each session created (closeSession deletes them without a scan). */
  private readonly owned = new Map<string, Set<string>>();
  /** Durable-subscription messages found by `recover()`, adopted when that subscription is made again. */
  private readonly recoveredHeld = new Map<string, Array<[string, Message]>>();
  /** Durable subscriptions found paused by `recover()` (`ps!`), paused again when made again. */
  private readonly recoveredPaused = new Set<string>();
  private readonly ids = new MessageIdGenerator(0, Date.now());
  private readonly rates: RateMeter<RateKey>;
  private nextSubId = 1;
  /** Durable subscriptions not closed (what `eachDurableSubscription` yields), kept so the actor views count in O(1). */
  private durableCount = 0;
  private recovered = false;

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
    const now = opts.now ?? Date.now;
    const events = opts.events ?? {};
    const notices: EngineEvents = {
      onDestinationCreated: events.onDestinationCreated ?? noop,
      onDestinationDeleted: events.onDestinationDeleted ?? noop,
      onQueueHighWater: events.onQueueHighWater ?? noop,
      onQueueLowWater: events.onQueueLowWater ?? noop,
      onSlowConsumer: events.onSlowConsumer ?? noop,
      onStoreFailure: events.onStoreFailure ?? noop,
      onDurableSubscription: events.onDurableSubscription ?? noop,
      onSubscriptionFull: events.onSubscriptionFull ?? noop,
    };
    const defaultMaxBytes = opts.defaultMaxBytes ?? DEFAULT_MAX_BYTES;
    if (!Number.isInteger(defaultMaxBytes) || defaultMaxBytes < 1) {
      throw new ValidationError(`defaultMaxBytes must be a positive integer, got ${String(opts.defaultMaxBytes)}`);
    }
    if (opts.queuePrefixes) {
      const prefixes = [...opts.queuePrefixes];
      this.isQueueName = (name) => prefixes.some((p) => name.startsWith(p));
    }
    const commit = opts.store !== undefined ? new GroupCommit(opts.store, (err) => notices.onStoreFailure(err)) : undefined;
    const core = new EngineCore(opts.store, commit, now, notices, {
      highWater: opts.queueHighWater ?? 10_000,
      defaultMaxDepth: opts.defaultMaxDepth ?? 1000,
      defaultMaxBytes,
      maxPausedHold: opts.maxPausedHold ?? 100_000,
    });
    this.core = core;
    this.writes = new WriteBehind(core);
    this.flow = new FlowControl(core, this.writes);
    this.delivery = new Delivery(core, this.writes, this.flow);
    this.groups = new SharedGroups(core, this.delivery);
    this.queues = new QueueDispatch(core, this.writes, this.delivery);
    this.retain = new Retained(core, this.writes, this.delivery);
    this.fanout = new FanOut(core, this.delivery, this.groups);
    this.totals = core.totals;
    this.store = opts.store;
    this.commit = commit;
    this.now = now;
    this.events = notices;
    this.dests = core.dests;
    this.subs = core.subs;
    this.rates = new RateMeter<RateKey>(RATE_KEYS, now());
  }

  // ------------------------------------------------------------------------------------------------------------
  // Publish
  // ------------------------------------------------------------------------------------------------------------

  /**
   * Federated shared subscriptions (src/links/nats-shares.ts): a group for which `fn` answers true is *external*,
   * fed only through publishToGroup (by an integration link), never by local routing. Applied to the existing groups
   * at once; `undefined` ends it.
   */
  setExternalShares(fn: ((group: string, filter: string) => boolean) | undefined): void {
    this.groups.setExternal(fn);
  }

  /** Shared groups appearing (first member) and disappearing (last member); the existing ones are reported as added at once. */
  onSharedGroup(listener: (event: 'added' | 'removed', group: string, filter: string) => void): () => void {
    return this.groups.listen(listener);
  }

  /**
   * Publish to one shared group only (a message an integration link received for it), never retained. Rejects with
   * NotFoundError when the group has no member here (the link leaves it unacknowledged for another broker).
   */
  publishToGroup(group: string, filter: string, destinationName: string, init: MessageInit, opts?: PublishOptions): Promise<void> {
    const g = this.groups.get(group, filter);
    if (g === undefined) return Promise.reject(new NotFoundError(`shared group ${group} on ${filter} has no member`));
    return this.publishVia(destinationName, { ...init, retain: false }, opts, g);
  }

  /**
   * Publish to a topic or queue. Resolves once the message is durable (queue message, retained message, copies
   * held for durable subscriptions); otherwise returns an already resolved promise. Rejects with a
   * ValidationError (bad name, QoS), NotFoundError (`create: false`), ConflictError (closed) or the store error.
   */
  publish(destinationName: string, init: MessageInit, opts?: PublishOptions): Promise<void> {
    return this.publishVia(destinationName, init, opts, undefined);
  }

  /** `publish`, routed to every matching route, or only to the group `only` (publishToGroup). */
  private publishVia(destinationName: string, init: MessageInit, opts: PublishOptions | undefined, only: SharedGroup | undefined): Promise<void> {
    if (this.core.closed) return Promise.reject(new ConflictError('the messaging engine is closed'));
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
    if (msg.qos !== 0 && this.flow.refuses(dest, msg, now, only)) {
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
    let out: number;
    if (dest.isQueue) out = this.queues.enqueue(dest, msg);
    else {
      out = msg.retain ? this.retain.set(dest, msg) : NONE;
      if (dest.paused) out |= this.flow.holdPaused(dest, msg);
      else out |= only === undefined ? this.fanout.route(dest, msg) : this.fanout.routeToGroup(dest, msg, only);
    }
    return (out & (STORED | DEFERRED)) === 0 ? RESOLVED : this.outcome(out, msg);
  }

  /** The promise of a publish that wrote (STORED) or made a write-behind copy (DEFERRED) of `msg`. */
  private outcome(out: number, msg: Message): Promise<void> {
    const written = (out & STORED) !== 0 ? this.writes.batch() : undefined;
    if ((out & DEFERRED) === 0) return written ?? RESOLVED;
    const unwritten = this.writes.settledOf(msg);
    if (written === undefined) return unwritten;
    const both = Promise.all([written, unwritten]).then(noop);
    both.catch(noop); // like the batch promises: a caller that does not await it causes no unhandled rejection
    return both;
  }

  // ------------------------------------------------------------------------------------------------------------
  // SubscriptionHost (called through Subscription methods): delivery.ts does the subscription's part, a queue
  // consumer's queue is dispatched again here
  // ------------------------------------------------------------------------------------------------------------

  private take(sub: Subscription, n: number): Taken[] {
    const out = this.delivery.take(sub, n);
    if (sub.queue !== undefined && !sub.closed && !sub.paused && n > 0) this.queues.dispatch(sub.queue);
    return out;
  }

  /** Commit (ack) or abort (roll back) in-flight messages; every id counts. */
  private settle(sub: Subscription, ids: readonly number[], commit: boolean): number {
    const n = this.delivery.settle(sub, ids, commit);
    if (n > 0 && !sub.closed && sub.queue !== undefined) this.queues.dispatch(sub.queue);
    return n;
  }

  private resumeSub(sub: Subscription): void {
    if (sub.closed) return;
    sub.blocked = false;
    if (sub.queue !== undefined) this.queues.dispatch(sub.queue);
    else this.delivery.drain(sub);
  }

  private hibernate(sub: Subscription): void {
    if (sub.closed || sub.hibernating) return;
    sub.hibernating = true;
    sub.blocked = false;
    sub.sink = undefined;
    if (sub.durable) this.events.onDurableSubscription(sub, 'hibernated');
    if (sub.queue !== undefined) {
      // a queue consumer going offline gives its messages back to the other consumers
      this.delivery.releaseConsumer(sub);
      this.queues.dispatch(sub.queue);
      return;
    }
    this.delivery.requeueInFlight(sub);
  }

  private attach(sub: Subscription, sink: Sink): void {
    if (sub.closed) return;
    const wasHibernating = sub.hibernating;
    sub.sink = sink;
    sub.hibernating = false;
    sub.blocked = false;
    if (sub.durable && wasHibernating) this.events.onDurableSubscription(sub, 'attached');
    if (sub.queue !== undefined) {
      this.queues.dispatch(sub.queue);
      return;
    }
    if (sink.kind === 'push') this.delivery.drain(sub);
    else if (sub.held.size > 0 && !sub.paused && sink.notify !== undefined) sink.notify(sub);
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
    if (this.core.closed) throw new ConflictError('the messaging engine is closed');
    if (typeof opts.sessionId !== 'string' || opts.sessionId.length === 0) {
      throw new ValidationError('a subscription needs a non-empty sessionId');
    }
    validateTopicFilter(opts.filter);
    const sink = opts.sink;
    if (sink === undefined || (sink.kind !== 'push' && sink.kind !== 'pull')) {
      throw new ValidationError('a subscription needs a sink of kind "push" or "pull"');
    }
    const maxDepth = opts.maxDepth ?? this.core.limits.defaultMaxDepth;
    if (!Number.isInteger(maxDepth) || maxDepth < 1) {
      throw new ValidationError(`maxDepth must be a positive integer, got ${String(opts.maxDepth)}`);
    }
    const maxBytes = opts.maxBytes ?? this.core.limits.defaultMaxBytes;
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
    if (sub.durable) this.durableCount++;
    let set = this.sessions.get(sub.sessionId);
    if (set === undefined) this.sessions.set(sub.sessionId, (set = new Set()));
    set.add(sub);

    if (sub.durable) this.events.onDurableSubscription(sub, 'created');
    if (queue !== undefined) {
      // a queue consumer holds no `d!` messages, but its paused flag comes back like a topic subscription's
      if (sub.durable && this.recoveredPaused.size !== 0 && this.recoveredPaused.delete(sub.key)) sub.paused = true;
      this.queues.addConsumer(sub, queue);
      return sub;
    }
    if (shared !== null) this.groups.join(sub, shared.group, topicFilter);
    else {
      this.core.trie.add(topicFilter, sub);
      this.core.trieGen++;
    }
    if (sub.durable) this.adoptRecovered(sub);
    // retained messages are not sent to shared subscriptions (MQTT 5 §4.8.2)
    if (shared === null && sub.retainHandling !== 2) this.retain.sendTo(sub);
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
    this.flow.noteFull(sub);
    sub.qos = opts.qos ?? 0;
    sub.noLocal = opts.noLocal === true;
    sub.retainHandling = opts.retainHandling ?? 0;
    sub.retainAsPublished = opts.retainAsPublished === true;
    sub.subscriptionId = opts.subscriptionId;
    if (sub.sink !== opts.sink || sub.hibernating) this.attach(sub, opts.sink);
    // retainHandling 0 resends retained messages on a repeated subscribe [MQTT-3.3.1-9]; 1 only on a new one [MQTT-3.3.1-10]
    if (sub.queue === undefined && sub.group === undefined && sub.retainHandling === 0) this.retain.sendTo(sub);
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
    this.flow.noteFull(sub);
    const sink = sub.sink;
    if (sink?.kind === 'push') this.delivery.drain(sub);
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
    if (sub.durable) this.durableCount--;
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
    if (sub.queue !== undefined) this.queues.removeConsumer(sub, sub.queue);
    else {
      const entries = sub.held.drain();
      for (const [, dest] of entries) dest.pendingCopies--;
      for (const f of sub.inFlight.values()) entries.push([f.msg, f.dest]);
      sub.inFlight.clear();
      for (const [msg, dest] of entries) this.writes.unpersistHeld(sub, dest, msg);
      if (sub.group !== undefined) this.groups.leave(sub, sub.group, entries);
      else {
        this.core.trie.remove(sub.topicFilter, sub);
        this.core.trieGen++;
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

  /**
   * Every session the protocol layers keep was restored (MQTT and REST sessions make their durable subscriptions
   * during boot): a paused flag recovered from the store that no subscription claimed belongs to a session that
   * ended without its `ps!` delete reaching the store (a crash in between, an engine closed first). The flags go,
   * from memory and store, so they neither grow without bound nor pause a later subscription of the same key.
   * Returns how many went.
   */
  forgetUnclaimedPaused(): number {
    const n = this.recoveredPaused.size;
    if (this.commit !== undefined) for (const key of this.recoveredPaused) this.commit.del(pausedSubscriptionKey(key));
    this.recoveredPaused.clear();
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

  /** Number of durable subscriptions, online or hibernating (as many as `eachDurableSubscription` yields), O(1). */
  get durableSubscriptionCount(): number {
    return this.durableCount;
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
      if (this.schemaResolver === undefined || this.core.closed) return undefined;
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

  /** Messages published and delivered since start (read as they are: stats() also re-samples the per-second rates). */
  get messagesPassed(): number {
    return this.totals.totalPublishedMessages + this.totals.totalDeliveredMessages;
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
    return subscriptionStatesOf(this.require(name), this.core.trie);
  }

  /** Bytes held for (and in flight to) every subscription, as counted against their `maxBytes` (O(subscriptions)). */
  queuedBytes(): number {
    let n = 0;
    for (const s of this.subs.values()) n += s.held.bytes + s.inFlight.bytes;
    return n;
  }

  /** `subscriptionStates` with each subscription's byte depth and cap (SubscriptionQueueDTO). */
  subscriptionQueues(name: string): SubscriptionQueueDTO[] {
    return subscriptionStatesOf(this.require(name), this.core.trie, true) as SubscriptionQueueDTO[];
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
    let out = NONE;
    if (this.commit !== undefined && d.persistent) {
      this.commit.del(pausedDestinationKey(name), d.timings);
      out = STORED;
    }
    if (d.isQueue) {
      this.queues.dispatch(d);
    } else {
      const held = d.held;
      d.held = [];
      const now = this.now();
      for (const msg of held) {
        out |= this.writes.unpersistPausedHeld(d, msg);
        if (msg.expiresAt !== 0 && msg.expiresAt <= now) {
          d.counters.expired++;
          this.totals.totalExpiredMessages++;
        } else {
          out |= this.fanout.route(d, msg);
        }
      }
    }
    // every delete and copy above joined the batch being gathered now (write-behind copies settle on their own)
    return (out & STORED) !== 0 ? this.writes.batch() : RESOLVED;
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
      n = this.queues.purge(d);
    } else {
      for (const m of d.held) {
        this.writes.unpersistPausedHeld(d, m);
        n++;
      }
      d.held = [];
      n += this.delivery.dropCopiesOf(d);
    }
    d.counters.dropped += n;
    this.totals.totalDroppedMessages += n;
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
    if (sub.queue !== undefined) this.queues.dispatch(sub.queue);
    else if (sub.sink?.kind === 'push') this.delivery.drain(sub);
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
    let out = NONE;
    d.deleted = true; // stops dispatch while consumers are released
    for (const c of [...d.consumers]) this.unsubscribe(c, 'destination deleted');
    this.dests.delete(name);
    if (d.owner !== undefined) {
      const names = this.owned.get(d.owner);
      names?.delete(name);
      if (names?.size === 0) this.owned.delete(d.owner);
    }
    if (d.queue !== undefined) out |= this.queues.clear(d);
    if (d.retained !== undefined) out |= this.retain.drop(d);
    if (this.commit !== undefined && d.persistent && d.paused) {
      this.commit.del(pausedDestinationKey(name), d.timings);
      out |= STORED;
    }
    for (const m of d.held) out |= this.writes.unpersistPausedHeld(d, m);
    d.held = [];
    // nothing more is delivered from it: copies waiting in subscription buffers go too (those in flight complete)
    this.delivery.dropCopiesOf(d);
    d.routes = [];
    this.events.onDestinationDeleted(name, d.type);
    return (out & STORED) !== 0 ? this.writes.batch() : RESOLVED;
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
    if (idleMs <= 0 || this.core.closed) return removed;
    for (const d of this.dests.values()) {
      if (d.isQueue || d.declared || !d.persistent || d.name.startsWith('$')) continue;
      if (d.retained !== undefined || d.pendingCopies > 0 || d.held.length > 0 || d.paused || this.core.routesOf(d).length > 0) {
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
      if (d.queue !== undefined) {
        n += this.queues.sweepExpired(d, now);
        continue;
      }
      if (d.retained !== undefined && this.retain.expireIfDue(d, now)) n++;
      if (d.held.length > 0) {
        const keep = d.held.filter((m) => !isExpired(m));
        const gone = d.held.length - keep.length;
        if (gone > 0) for (const m of d.held) if (isExpired(m)) this.writes.unpersistPausedHeld(d, m);
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
        this.delivery.expireHeld(s, d, m);
      });
      if (s.full) this.flow.noteRoom(s);
      if (s.queue !== undefined) this.queues.dispatch(s.queue);
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
      retain: (d, msg) => this.retain.restore(d, msg),
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
      this.queues.dispatch(d);
      this.queues.checkHighWater(d);
    }
    for (const sub of this.subs.values()) if (sub.durable) this.adoptRecovered(sub);
    return result;
  }

  /**
   * Messages held for a durable subscription that another broker of the cluster held (src/cluster/sessions.ts): kept
   * like recovered ones until the subscription `storeKey` is made (taken at once when it exists), and written to this
   * broker's store now.
   */
  adoptHeld(storeKey: string, list: Array<[destination: string, msg: Message]>): Promise<void> {
    const held = this.recoveredHeld.get(storeKey);
    if (held === undefined) this.recoveredHeld.set(storeKey, [...list]);
    else held.push(...list);
    for (const [, msg] of list) this.ids.observe(msg.id);
    const sub = this.subs.get(storeKey);
    if (sub !== undefined && sub.durable && !sub.closed) this.adoptRecovered(sub); // made already: it takes them now
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
    this.core.closed = true;
    this.writes.close(); // write-behind copies still unsettled go to the store now
    await this.flush();
  }

  get isClosed(): boolean {
    return this.core.closed;
  }
}
