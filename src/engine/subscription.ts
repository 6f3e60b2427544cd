/**
 * Subscriptions and sinks.
 *
 * A subscription is one session's interest in a filter (possibly `$share/<group>/<filter>`), or a consumer of a
 * queue. It holds messages it cannot hand over yet (no credit, pull sink, session offline) and messages in flight
 * (sent, waiting for an acknowledgement or a commit), together up to `maxDepth` messages and `maxBytes` bytes.
 *
 * Two kinds of sink:
 * - push (MQTT, SSE): the engine calls `deliver(sub, msg, destinationName)` synchronously; returning false means
 *   "no credit now": the message stays held and the sink calls `sub.resume()` when credit is back (e.g. after a
 *   PUBACK frees a receive-maximum slot). With an effective QoS ≥ 1 a delivered message is in flight until
 *   `sub.ack(msg.id)`.
 * - pull (REST): messages are buffered; `sub.take(n)` hands out up to n. Transactional subscriptions keep taken
 *   messages in flight until `sub.commit(ids)` or `sub.abort(ids)`.
 *
 * The delivery logic lives in the engine; the methods here delegate to it.
 */
import type { Destination as DestinationRecord } from './destination.js';
import { durablePrefix } from './engine-store.js';
import type { Message, QoS } from './message.js';

/**
 * A compiled message selector. `release`, when present, gives back what the selector holds (the models its model
 * functions use): the engine calls it once when the subscription ends or its selector is replaced.
 */
export type Selector = ((msg: Message & { destinationName: string }) => boolean) & { release?: () => void };

/**
 * May this subscription receive a message published to `destinationName`? Set by the protocol or REST layer
 * (the security check per delivered topic, with its own cache); the engine asks it before a message is offered,
 * held or handed out, so a wildcard or shared filter never delivers a topic its owner may not read.
 */
export type Authorizer = (destinationName: string) => boolean;

export interface PushSink {
  readonly kind: 'push';
  /** Hand a message over. Return false when there is no credit: the message stays queued until `sub.resume()`. */
  deliver(sub: Subscription, msg: Message, destinationName: string): boolean;
  /** Called when the engine ends the subscription (unsubscribe, destination deleted). */
  closed?(sub: Subscription, reason: string): void;
}

export interface PullSink {
  readonly kind: 'pull';
  /** Called when the buffer goes from empty to non-empty (wake a long poll). */
  notify?(sub: Subscription): void;
  closed?(sub: Subscription, reason: string): void;
}

export type Sink = PushSink | PullSink;

export interface SubscribeOptions {
  sessionId: string;
  /** Topic filter, may be `$share/<group>/<filter>`; or the exact name of a queue. */
  filter: string;
  /** Precompiled by the caller. */
  selector?: Selector;
  /**
   * A cheap predicate on the message itself (no selector view is built), asked before `selector`; false and the
   * message is not offered (counted as ignored). Plain subscriptions only (not shared groups or queue consumers).
   */
  accept?: (msg: Message, destinationName: string) => boolean;
  /** Per delivered topic: false and the message is not offered (counted as ignored). Absent: every topic. */
  authorize?: Authorizer;
  /**
   * Bytes held for this subscription (held + in flight, counted by `messageBytes`) at which the overflow policy
   * applies, as at `maxDepth` messages. Default: the engine's `defaultMaxBytes` (8 MiB).
   */
  maxBytes?: number;
  /**
   * Messages held for this subscription (held + in flight) before the overflow policy applies. Default 1000.
   * Without `refuseWhenFull` NEW messages are dropped (counted), as MAPS does for REST subscriptions.
   */
  maxDepth?: number;
  /**
   * REST subscriptions (MAPS `RestApi.maxEventsPerDestination`): at most this many messages held per destination;
   * a topic message arriving when its destination's share is full replaces the oldest held one of that destination
   * (dropped, counted). A queue consumer is simply handed no more than this many at a time (nothing is dropped).
   * 0 or absent: no per-destination cap (only `maxDepth`).
   */
  maxPerDestination?: number;
  /**
   * Flow control (MQTT subscriptions): while this subscription is full, `Engine.publish` refuses a message it would
   * get with an effective QoS >= 1 (it returns `QUOTA_EXCEEDED`, nobody gets the message) instead of accepting it
   * and dropping the copy; a copy at effective QoS 0 replaces the oldest held QoS 0 copy (drop-oldest, counted).
   */
  refuseWhenFull?: boolean;
  /** Pull only: taken messages stay in flight until commit/abort. */
  transactional?: boolean;
  /** Maximum QoS granted; the effective QoS of a delivery is min(message, subscription). Default 0. */
  qos?: QoS;
  /** Do not deliver messages whose `origin` is this session [MQTT-3.8.3-3]. */
  noLocal?: boolean;
  /** 0 = send retained messages on subscribe, 1 = only if the subscription is new, 2 = never. Default 0. */
  retainHandling?: 0 | 1 | 2;
  /** Keep the retain flag on live deliveries (otherwise it is cleared) [MQTT-3.3.1-12], [MQTT-3.3.1-13]. */
  retainAsPublished?: boolean;
  /** Messages held for this subscription (also while offline) are persisted and recovered after a restart. */
  durable?: boolean;
  /**
   * Durable push subscriptions whose sink acknowledges only once the message is safe elsewhere (an integration
   * link's outbox: the ack comes after the remote side stored it): a copy handed to (or queued for) the attached
   * sink is written to the store only if it is still unacknowledged after this many ms, so a link that keeps up
   * costs no store write; the publish resolves when the copy is acknowledged or written, whichever is first. While
   * the subscription hibernates copies are written at once. 0 or absent: written when kept or delivered, as any
   * durable subscription.
   */
  writeBehindMs?: number;
  /** MQTT 5 subscription identifier, carried for the protocol layer. */
  subscriptionId?: number;
  /**
   * MQTT overlapping subscriptions: when several subscriptions of this session with this flag match a message, the
   * session gets one copy, through the one with the highest QoS, with all their identifiers in
   * `Message.subscriptionIds` [MQTT-3.3.4-2, MQTT-3.3.4-4]. Fixed when the subscription is made.
   */
  oneCopyPerSession?: boolean;
  sink: Sink;
}

/** One message handed out by `take`. `eventId` is the message id; pass it to commit/abort. */
export interface Delivery {
  eventId: number;
  destinationName: string;
  message: Message;
}

/** MAPS SubscriptionStateDTO. */
export interface SubscriptionStateDTO {
  destinationName: string;
  sessionId: string;
  hibernating: boolean;
  size: number;
  pending: number;
  sync: boolean;
  hasMessagesInFlight: boolean;
  hasAtRestMessages: boolean;
  isPaused: boolean;
  messagesIgnored: number;
  messagesRegistered: number;
  messagesSent: number;
  messagesAcked: number;
  messagesRolledBack: number;
  messagesExpired: number;
  /** Switchyard: the subscription's cap (held + in flight), see docs/messaging.md "Flow control and limits". */
  maxQueuedMessages: number;
  /** Switchyard: copies dropped by the overflow policy (QoS 0 drop-oldest, or drop-newest without refusal). */
  messagesDropped: number;
  /** Switchyard: QoS >= 1 publishes refused to their publisher because this subscription was full. */
  messagesRefused: number;
}

/** SubscriptionStateDTO with the byte depth (the views of Switchyard's own: destination detail, connection detail). */
export interface SubscriptionQueueDTO extends SubscriptionStateDTO {
  /** Bytes held + in flight, as counted against the cap (`messageBytes`: payload and properties + 512 per message). */
  queuedBytes: number;
  /** The subscription's cap in those bytes (DestinationManager.maxQueuedBytes). */
  maxQueuedBytes: number;
}

/** The engine side of a subscription (a private object of the Engine, so these are not Engine methods). */
export interface SubscriptionHost {
  take(sub: Subscription, n: number): Delivery[];
  settle(sub: Subscription, ids: readonly number[], commit: boolean): number;
  resume(sub: Subscription): void;
  hibernate(sub: Subscription): void;
  attach(sub: Subscription, sink: Sink): void;
  unsubscribe(sub: Subscription): boolean;
}

/**
 * Fixed bytes a message held for a subscription is counted for beyond its own bytes (the message object, its ring
 * slots, its in-flight entry): see `messageBytes`.
 */
export const MESSAGE_OVERHEAD_BYTES = 512;

/**
 * Bytes a message held for (or in flight to) a subscription counts toward its `maxBytes`: payload, correlation data,
 * content type, response topic and user properties, plus `MESSAGE_OVERHEAD_BYTES`. A pure function of the message,
 * so what is added when it enters a buffer is exactly what is taken off when it leaves.
 */
export function messageBytes(msg: Message): number {
  let n = msg.payload.length + MESSAGE_OVERHEAD_BYTES;
  if (msg.correlationData !== undefined) n += msg.correlationData.length;
  if (msg.contentType !== undefined) n += msg.contentType.length;
  if (msg.responseTopic !== undefined) n += msg.responseTopic.length;
  const up = msg.userProperties;
  if (up !== undefined) {
    for (const k in up) {
      const v = up[k]!;
      n += k.length;
      if (typeof v === 'string') n += v.length;
      else for (let i = 0; i < v.length; i++) n += v[i]!.length;
    }
  }
  return n;
}

/** Messages held for a subscription, with the destination each came from (parallel ring, no per-entry object). */
export class HeldBuffer {
  /** `messageBytes` of the entries held. */
  bytes = 0;
  private msgs: Array<Message | undefined> = [];
  private dests: Array<Destination | undefined> = [];
  private head = 0;
  /** Entries per destination, kept only once `countOf` was asked (subscriptions with `maxPerDestination`). */
  private counts: Map<Destination, number> | undefined = undefined;

  get size(): number {
    return this.msgs.length - this.head;
  }

  push(msg: Message, dest: Destination): void {
    this.bytes += messageBytes(msg);
    this.msgs.push(msg);
    this.dests.push(dest);
    if (this.counts !== undefined) this.counted(dest, 1);
  }

  /** Entries held from `dest` (starts keeping a count per destination: O(size) the first time, O(1) after). */
  countOf(dest: Destination): number {
    if (this.counts === undefined) {
      this.counts = new Map();
      for (let i = this.head; i < this.dests.length; i++) this.counted(this.dests[i]!, 1);
    }
    return this.counts.get(dest) ?? 0;
  }

  private counted(dest: Destination, by: number): void {
    const c = this.counts!;
    const n = (c.get(dest) ?? 0) + by;
    if (n <= 0) c.delete(dest);
    else c.set(dest, n);
  }

  /** Remove the oldest entry from `dest` (order of the others kept); returns its message. */
  removeOldestOf(dest: Destination): Message | undefined {
    for (let i = this.head; i < this.dests.length; i++) {
      if (this.dests[i] !== dest) continue;
      const msg = this.msgs[i]!;
      if (i === this.head) {
        this.drop();
        return msg;
      }
      this.bytes -= messageBytes(msg);
      this.msgs.splice(i, 1);
      this.dests.splice(i, 1);
      if (this.counts !== undefined) this.counted(dest, -1);
      return msg;
    }
    return undefined;
  }

  /** Add at the front (returned messages are delivered before newer ones). */
  unshift(msg: Message, dest: Destination): void {
    this.bytes += messageBytes(msg);
    if (this.counts !== undefined) this.counted(dest, 1);
    if (this.head > 0) {
      this.head--;
      this.msgs[this.head] = msg;
      this.dests[this.head] = dest;
    } else {
      this.msgs.unshift(msg);
      this.dests.unshift(dest);
    }
  }

  peekMsg(): Message | undefined {
    return this.msgs[this.head];
  }

  peekDest(): Destination | undefined {
    return this.dests[this.head];
  }

  /** Drop the front entry (read it first with peekMsg/peekDest). */
  drop(): void {
    if (this.head >= this.msgs.length) return;
    this.bytes -= messageBytes(this.msgs[this.head]!);
    if (this.counts !== undefined) this.counted(this.dests[this.head]!, -1);
    this.msgs[this.head] = undefined;
    this.dests[this.head] = undefined;
    this.head++;
    if (this.head === this.msgs.length) {
      this.msgs.length = 0;
      this.dests.length = 0;
      this.head = 0;
    } else if (this.head >= 1024 && this.head * 2 >= this.msgs.length) {
      this.msgs = this.msgs.slice(this.head);
      this.dests = this.dests.slice(this.head);
      this.head = 0;
    }
  }

  /** Remove entries matching `pred`, calling `removed` for each; keeps order. */
  removeWhere(pred: (m: Message, d: Destination) => boolean, removed: (m: Message, d: Destination) => void): number {
    let w = this.head;
    let n = 0;
    for (let r = this.head; r < this.msgs.length; r++) {
      const m = this.msgs[r]!;
      const d = this.dests[r]!;
      if (pred(m, d)) {
        this.bytes -= messageBytes(m);
        if (this.counts !== undefined) this.counted(d, -1);
        removed(m, d);
        n++;
      } else {
        this.msgs[w] = m;
        this.dests[w] = d;
        w++;
      }
    }
    this.msgs.length = w;
    this.dests.length = w;
    return n;
  }

  /** Empty the buffer, returning its entries in order. */
  drain(): Array<[Message, Destination]> {
    const out: Array<[Message, Destination]> = [];
    for (let i = this.head; i < this.msgs.length; i++) out.push([this.msgs[i]!, this.dests[i]!]);
    this.msgs = [];
    this.dests = [];
    this.head = 0;
    this.bytes = 0;
    this.counts?.clear();
    return out;
  }
}

/** A message sent and not yet acknowledged / committed. */
export interface InFlight {
  msg: Message;
  dest: Destination;
}

/** In-flight messages by id, keeping the sum of their `messageBytes` as entries are set, deleted and cleared. */
export class InFlightMap extends Map<number, InFlight> {
  /** `messageBytes` of the entries in flight. */
  bytes = 0;

  override set(id: number, f: InFlight): this {
    const old = super.get(id);
    if (old !== undefined) this.bytes -= messageBytes(old.msg);
    this.bytes += messageBytes(f.msg);
    return super.set(id, f);
  }

  override delete(id: number): boolean {
    const old = super.get(id);
    if (old === undefined) return false;
    this.bytes -= messageBytes(old.msg);
    return super.delete(id);
  }

  override clear(): void {
    this.bytes = 0;
    super.clear();
  }
}

/** Members of one `$share/<group>/<filter>`; each message goes to one member, round-robin. */
export class SharedGroup {
  readonly isGroup = true as const;
  readonly members: Subscription[] = [];
  rr = 0;
  /** Fed by an integration link only, not by local routing (Engine.setExternalShares). */
  external = false;

  constructor(
    readonly group: string,
    readonly filter: string,
  ) {}
}

/** A write-behind message (see `SubscribeOptions.writeBehindMs`): settled by its ack or by its write. */
export interface UnwrittenEntry {
  readonly sub: Subscription;
  readonly dest: Destination;
  readonly msg: Message;
  /** Write it if still unsettled at this time (ms). */
  readonly due: number;
  /** Settled: acknowledged, dropped or written. */
  done: boolean;
  /** Resolves when settled (the publish that made it waits for this); rejects when its write fails. */
  readonly settled: Promise<void>;
  resolve(): void;
  reject(err: unknown): void;
}

/** What the trie holds: a plain subscription or a shared group. */
export type Route = Subscription | SharedGroup;

/** A destination as the engine holds it: its route cache holds routes, its consumers are subscriptions. */
export type Destination = DestinationRecord<Route, Subscription>;

export class Subscription {
  readonly isGroup = false as const;
  /** Filter as subscribed, e.g. `$share/g/a/+`. */
  readonly filter: string;
  /** Filter without the `$share/<group>/` prefix (for a queue consumer: the queue name). */
  readonly topicFilter: string;
  readonly shareGroup: string | undefined;
  /** Stable identity of (session, filter), also used in store keys. */
  readonly key: string;
  /** Store key prefix of messages held for this subscription when durable: `d!<key>!`. */
  readonly storePrefix: string;
  readonly durable: boolean;
  readonly transactional: boolean;
  readonly refuseWhenFull: boolean;

  selector: Selector | undefined;
  /** See `SubscribeOptions.accept`. */
  accept: ((msg: Message, destinationName: string) => boolean) | undefined;
  authorize: Authorizer | undefined;
  maxDepth: number;
  /** Bytes held + in flight (`messageBytes`) at which it is full, as at `maxDepth` messages. */
  maxBytes: number;
  /** See `SubscribeOptions.maxPerDestination`; 0: none. */
  maxPerDestination: number;
  qos: QoS;
  noLocal: boolean;
  retainHandling: 0 | 1 | 2;
  retainAsPublished: boolean;
  subscriptionId: number | undefined;
  readonly oneCopyPerSession: boolean;
  sink: Sink | undefined;
  /** See `SubscribeOptions.writeBehindMs`. */
  readonly writeBehindMs: number;
  /** Write-behind: messages in flight not written to the store yet, by id (the engine's). */
  unwritten: Map<number, UnwrittenEntry> | undefined = undefined;

  /** Session offline: messages are held, nothing is delivered. */
  hibernating = false;
  /** Push sink said "no credit"; cleared by `resume()`. */
  blocked = false;
  /** Commanded pause (Engine.pauseSubscription): copies are kept within the caps, nothing is handed out. */
  paused = false;
  /** A durable subscription reported full through `onSubscriptionFull` and not yet reported with room again. */
  full = false;
  closed = false;
  draining = false;
  /** Set for a queue consumer. */
  queue: Destination | undefined = undefined;
  group: SharedGroup | undefined = undefined;

  readonly held = new HeldBuffer();
  readonly inFlight = new InFlightMap();

  messagesIgnored = 0;
  messagesRegistered = 0;
  messagesSent = 0;
  messagesAcked = 0;
  messagesRolledBack = 0;
  messagesExpired = 0;
  messagesDropped = 0;
  messagesRefused = 0;
  /** A slow-consumer notice was sent and the buffer has not drained since. */
  slow = false;

  constructor(
    private readonly host: SubscriptionHost,
    readonly id: number,
    readonly sessionId: string,
    opts: SubscribeOptions,
    topicFilter: string,
    shareGroup: string | undefined,
    maxDepth: number,
    maxBytes: number,
  ) {
    this.filter = opts.filter;
    this.topicFilter = topicFilter;
    this.shareGroup = shareGroup;
    this.key = subscriptionKey(sessionId, opts.filter);
    this.storePrefix = durablePrefix(this.key);
    this.durable = opts.durable === true;
    this.transactional = opts.transactional === true;
    this.refuseWhenFull = opts.refuseWhenFull === true;
    this.selector = opts.selector;
    this.accept = opts.accept;
    this.authorize = opts.authorize;
    this.maxDepth = maxDepth;
    this.maxBytes = maxBytes;
    this.maxPerDestination = opts.maxPerDestination ?? 0;
    this.qos = opts.qos ?? 0;
    this.noLocal = opts.noLocal === true;
    this.retainHandling = opts.retainHandling ?? 0;
    this.retainAsPublished = opts.retainAsPublished === true;
    this.subscriptionId = opts.subscriptionId;
    this.oneCopyPerSession = opts.oneCopyPerSession === true;
    this.sink = opts.sink;
    this.writeBehindMs = opts.durable === true && opts.writeBehindMs !== undefined && opts.writeBehindMs > 0 ? opts.writeBehindMs : 0;
  }
  /**
   * Holds its maximum (queued + in flight): `maxDepth` messages or `maxBytes` bytes reached. A message is taken
   * while neither is reached, so the bytes held exceed `maxBytes` by less than one message at most.
   */
  isFull(): boolean {
    return this.held.size + this.inFlight.size >= this.maxDepth || this.held.bytes + this.inFlight.bytes >= this.maxBytes;
  }

  /** Bytes held + in flight, as counted against `maxBytes` (`messageBytes`). */
  queuedBytes(): number {
    return this.held.bytes + this.inFlight.bytes;
  }


  get isPull(): boolean {
    return this.sink !== undefined && this.sink.kind === 'pull';
  }

  /** Pull: take up to `n` held messages (in flight afterwards when transactional, consumed otherwise). */
  take(n: number): Delivery[] {
    return this.host.take(this, n);
  }

  /** Acknowledge / commit every listed event id. Returns how many were in flight. */
  commit(ids: readonly number[]): number {
    return this.host.settle(this, ids, true);
  }

  /** Roll back every listed event id: the messages become deliverable again. Returns how many were in flight. */
  abort(ids: readonly number[]): number {
    return this.host.settle(this, ids, false);
  }

  /** Push, QoS ≥ 1: the client acknowledged `msgId` (PUBACK / PUBCOMP). */
  ack(msgId: number): boolean {
    return this.host.settle(this, [msgId], true) === 1;
  }

  /** Push: credit is back, deliver what is held. */
  resume(): void {
    this.host.resume(this);
  }

  /** Session went offline: keep the subscription and hold messages (in-flight ones are delivered again later). */
  hibernate(): void {
    this.host.hibernate(this);
  }

  /** Session is back: deliver through `sink`. */
  attach(sink: Sink): void {
    this.host.attach(this, sink);
  }

  unsubscribe(): boolean {
    return this.host.unsubscribe(this);
  }

  /** Messages held and not yet handed out. */
  depth(): number {
    return this.held.size;
  }

  /** `state()` and the byte depth. */
  queueState(): SubscriptionQueueDTO {
    const s = this.state() as SubscriptionQueueDTO;
    s.queuedBytes = this.held.bytes + this.inFlight.bytes;
    s.maxQueuedBytes = this.maxBytes;
    return s;
  }

  state(): SubscriptionStateDTO {
    const inFlight = this.inFlight.size;
    const atRest = this.held.size;
    return {
      destinationName: this.filter,
      sessionId: this.sessionId,
      hibernating: this.hibernating,
      size: atRest + inFlight,
      pending: inFlight,
      sync: this.isPull,
      hasMessagesInFlight: inFlight > 0,
      hasAtRestMessages: atRest > 0,
      isPaused: this.paused || this.blocked || (this.queue !== undefined && this.queue.paused),
      messagesIgnored: this.messagesIgnored,
      messagesRegistered: this.messagesRegistered,
      messagesSent: this.messagesSent,
      messagesAcked: this.messagesAcked,
      messagesRolledBack: this.messagesRolledBack,
      messagesExpired: this.messagesExpired,
      maxQueuedMessages: this.maxDepth,
      messagesDropped: this.messagesDropped,
      messagesRefused: this.messagesRefused,
    };
  }
}

/** `<url-encoded session id>|<filter>`: unambiguous, readable in store keys. */
export function subscriptionKey(sessionId: string, filter: string): string {
  return `${encodeURIComponent(sessionId)}|${filter}`;
}
