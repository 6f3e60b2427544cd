/**
 * Destinations: topics and queues (and their temporary variants), with the per-destination state the engine
 * keeps: counters, the retained message (topics), the priority queue and competing consumers (queues), and the
 * messages held while the destination is paused.
 *
 * The record is generic in what its route cache and consumer list hold (subscription.ts's `Route` and
 * `Subscription`), so this module imports nothing from subscription.ts: subscription.ts binds the two and exports
 * the bound type as `Destination`, which is the one the rest of the engine uses (no import cycle between them).
 */
import { DestinationCounters, StoreTimings } from './counters.js';
import type { Message } from './message.js';
import { MAX_PRIORITY } from './message.js';
import { splitTopic } from './topic-trie.js';

export const DestinationType = {
  Topic: 'Topic',
  Queue: 'Queue',
  TemporaryTopic: 'TemporaryTopic',
  TemporaryQueue: 'TemporaryQueue',
} as const;
export type DestinationType = (typeof DestinationType)[keyof typeof DestinationType];

export function isDestinationType(s: unknown): s is DestinationType {
  return s === 'Topic' || s === 'Queue' || s === 'TemporaryTopic' || s === 'TemporaryQueue';
}

/** The default naming convention: `queue/...` and `/queue/...` are queues, everything else is a topic. */
export function isQueueName(name: string): boolean {
  return name.startsWith('queue/') || name.startsWith('/queue/');
}

export function isQueueType(type: DestinationType): boolean {
  return type === 'Queue' || type === 'TemporaryQueue';
}

export function isTemporaryType(type: DestinationType): boolean {
  return type === 'TemporaryTopic' || type === 'TemporaryQueue';
}

/** An array-backed FIFO with a moving head; compacts when the dead prefix dominates. */
export class Fifo<T> {
  private items: T[] = [];
  private head = 0;

  get size(): number {
    return this.items.length - this.head;
  }

  push(v: T): void {
    this.items.push(v);
  }

  peek(): T | undefined {
    return this.head < this.items.length ? this.items[this.head] : undefined;
  }

  shift(): T | undefined {
    if (this.head >= this.items.length) return undefined;
    const v = this.items[this.head]!;
    (this.items as Array<T | undefined>)[this.head] = undefined;
    this.head++;
    if (this.head === this.items.length) {
      this.items.length = 0;
      this.head = 0;
    } else if (this.head >= 1024 && this.head * 2 >= this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return v;
  }

  unshift(v: T): void {
    if (this.head > 0) {
      this.head--;
      this.items[this.head] = v;
    } else {
      this.items.unshift(v);
    }
  }

  /** Insert keeping ascending order by `key` (used to put a returned message back where it was). */
  insertSorted(v: T, key: (v: T) => number): void {
    const k = key(v);
    let lo = this.head;
    let hi = this.items.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (key(this.items[mid]!) < k) lo = mid + 1;
      else hi = mid;
    }
    if (lo === this.head && this.head > 0) {
      this.head--;
      this.items[this.head] = v;
    } else {
      this.items.splice(lo, 0, v);
    }
  }

  /** Remove every item for which `pred` is true, calling `removed` for each; keeps order. */
  removeWhere(pred: (v: T) => boolean, removed: (v: T) => void): number {
    let w = this.head;
    let n = 0;
    for (let r = this.head; r < this.items.length; r++) {
      const v = this.items[r]!;
      if (pred(v)) {
        removed(v);
        n++;
      } else {
        this.items[w++] = v;
      }
    }
    this.items.length = w;
    return n;
  }

  *[Symbol.iterator](): IterableIterator<T> {
    for (let i = this.head; i < this.items.length; i++) yield this.items[i]!;
  }

  clear(): T[] {
    const out = this.items.slice(this.head);
    this.items = [];
    this.head = 0;
    return out;
  }
}

function messageId(m: Message): number {
  return m.id;
}

/** Queue storage: one FIFO per priority; delivery order is priority (high first), then arrival (id). */
export class PriorityQueue {
  private readonly buckets: Array<Fifo<Message>> = [];
  private count = 0;

  constructor() {
    for (let p = 0; p <= MAX_PRIORITY; p++) this.buckets.push(new Fifo<Message>());
  }

  get size(): number {
    return this.count;
  }

  push(msg: Message): void {
    this.buckets[msg.priority]!.push(msg);
    this.count++;
  }

  /** Put a message back in its place (by id) within its priority, e.g. after a consumer went away. */
  requeue(msg: Message): void {
    this.buckets[msg.priority]!.insertSorted(msg, messageId);
    this.count++;
  }

  /** Put the message just taken with `shift` back at the front. */
  unshift(msg: Message): void {
    this.buckets[msg.priority]!.unshift(msg);
    this.count++;
  }

  peek(): Message | undefined {
    if (this.count === 0) return undefined;
    for (let p = MAX_PRIORITY; p >= 0; p--) {
      const m = this.buckets[p]!.peek();
      if (m !== undefined) return m;
    }
    return undefined;
  }

  shift(): Message | undefined {
    if (this.count === 0) return undefined;
    for (let p = MAX_PRIORITY; p >= 0; p--) {
      const b = this.buckets[p]!;
      if (b.size > 0) {
        this.count--;
        return b.shift();
      }
    }
    return undefined;
  }

  removeWhere(pred: (m: Message) => boolean, removed: (m: Message) => void): number {
    if (this.count === 0) return 0;
    let n = 0;
    for (const b of this.buckets) n += b.removeWhere(pred, removed);
    this.count -= n;
    return n;
  }

  /** Messages in delivery order (for browsing). */
  *[Symbol.iterator](): IterableIterator<Message> {
    for (let p = MAX_PRIORITY; p >= 0; p--) yield* this.buckets[p]!;
  }

  clear(): Message[] {
    const out: Message[] = [];
    for (let p = MAX_PRIORITY; p >= 0; p--) out.push(...this.buckets[p]!.clear());
    this.count = 0;
    return out;
  }
}

/**
 * The payload schema bound to a destination (set by the schema registry, src/schemas/). `check` never throws and
 * returns the first problem of a payload, or undefined when it conforms; it is compiled once per schema version.
 */
export interface PayloadSchema {
  readonly schemaId: string;
  /** off: not checked; warn: counted and logged, delivered; reject: counted and refused. */
  readonly enforcement: 'off' | 'warn' | 'reject';
  check(payload: Buffer): string | undefined;
  /** A payload did not conform (already counted); the implementation rate-limits its logging. */
  violated?(destination: string, problem: string): void;
}

/** Payload checks of one destination against its schema. */
export class SchemaCounters {
  /** Payloads that conformed. */
  valid = 0;
  /** Payloads that did not conform (warned or refused). */
  invalid = 0;
  /** Non-conforming payloads refused (REST 400, MQTT 5 0x99, dropped for QoS 0 and 3.1.1). */
  rejected = 0;
}

/** `R`: what the trie's match gives for this topic (a route); `C`: a queue consumer. */
export class Destination<R = unknown, C = unknown> {
  readonly levels: string[];
  readonly isQueue: boolean;
  /** Temporary destinations are never written to the store. */
  readonly persistent: boolean;
  readonly counters = new DestinationCounters();
  readonly timings = new StoreTimings();
  paused = false;
  deleted = false;
  /** Session that created a temporary destination. */
  owner: string | undefined;
  /** Created with `createDestination` (configuration, REST): never removed for being idle. */
  declared = false;
  /** Epoch ms of the last publish (or of the last idle sweep that found it in use). */
  lastUsed: number;
  schemaId = '';
  /** The bound payload schema; undefined for the (usual) destination without one, which costs no check. */
  schema: PayloadSchema | undefined = undefined;
  readonly schemaCounters = new SchemaCounters();

  // -- topics
  retained: Message | undefined = undefined;
  /** Cached trie match for this topic, valid while `routeGen` equals the engine's trie generation. */
  routes: R[] = [];
  routeGen = -1;
  /** `routes` holds two or more one-copy-per-session subscriptions of one session (see Engine.routeOnce). */
  overlaps = false;
  /** Topic copies waiting in subscription buffers. */
  pendingCopies = 0;
  /** Topic messages published while paused, routed on resume. */
  held: Message[] = [];

  // -- queues
  readonly queue: PriorityQueue | undefined;
  readonly consumers: C[] = [];
  rr = 0;
  /** Queue messages handed to a consumer and not yet consumed. */
  outstanding = 0;
  dispatching = false;
  highWater = false;

  constructor(
    readonly name: string,
    readonly type: DestinationType,
    readonly createdAt: number,
  ) {
    this.levels = splitTopic(name);
    this.isQueue = isQueueType(type);
    this.persistent = !isTemporaryType(type);
    this.queue = this.isQueue ? new PriorityQueue() : undefined;
    this.lastUsed = createdAt;
  }
}
