/**
 * What the engine needs from storage, the key layout it writes, and two adapters: classic-level for the real
 * broker and an in-memory map for unit tests.
 *
 * Key layout (all keys are strings; numbers are zero-padded so the byte order is the delivery order):
 *
 *   q!<destination>!<10 - priority, 2 digits>!<message id, 16 digits>   queue message
 *   r!<topic>                                                          retained message of a topic
 *   d!<subscription key>!<message id, 16 digits>                       message held for a durable subscription
 *   s!<owner>!<record>                                                 protocol session state (e.g. MQTT packet ids
 *                                                                      in flight), written in the same group commit
 *                                                                      as the messages it refers to (`Engine.putState`)
 *   pd!<destination>                                                   a paused destination (value: its type), so a
 *                                                                      restart keeps it paused
 *   h!<destination>!<message id, 16 digits>                            a QoS >= 1 message a paused topic holds for
 *                                                                      delivery on resume
 *   ps!<subscription key>                                              a paused durable subscription (empty value)
 *
 * A destination name or subscription key may itself contain '!': keys are parsed from the right, where the
 * fixed-width fields are. Values are `encodeMessage` output; `d!` values carry the destination name in front
 * (see `encodeHeld`).
 */
import type { ClassicLevel } from 'classic-level';
import type { Message } from './message.js';
import { decodeMessage, encodeMessage } from './message.js';

export type StoreOp = { type: 'put'; key: string; value: Buffer } | { type: 'del'; key: string };

export interface EngineStore {
  /** Apply all operations atomically, in order. */
  batch(ops: StoreOp[]): Promise<void>;
  /** Every entry whose key starts with `prefix`, in key order. */
  iterate(prefix: string): AsyncIterable<[string, Buffer]>;
}

export const QUEUE_PREFIX = 'q!';
export const RETAINED_PREFIX = 'r!';
export const DURABLE_PREFIX = 'd!';
export const STATE_PREFIX = 's!';
export const PAUSED_DESTINATION_PREFIX = 'pd!';
export const PAUSED_HELD_PREFIX = 'h!';
export const PAUSED_SUBSCRIPTION_PREFIX = 'ps!';

const ID_WIDTH = 16;

export function padId(id: number): string {
  return String(id).padStart(ID_WIDTH, '0');
}

export function queueKey(destination: string, msg: Message): string {
  const inverted = 10 - msg.priority;
  return `${QUEUE_PREFIX}${destination}!${inverted < 10 ? '0' : ''}${inverted}!${padId(msg.id)}`;
}

export function retainedKey(topic: string): string {
  return RETAINED_PREFIX + topic;
}

export function pausedDestinationKey(destination: string): string {
  return PAUSED_DESTINATION_PREFIX + destination;
}

export function pausedHeldKey(destination: string, msg: Message): string {
  return `${PAUSED_HELD_PREFIX}${destination}!${padId(msg.id)}`;
}

export function pausedSubscriptionKey(subscriptionKey: string): string {
  return PAUSED_SUBSCRIPTION_PREFIX + subscriptionKey;
}

/** Parse `h!<destination>!<id>`; null when malformed. */
export function parsePausedHeldKey(key: string): { destination: string; id: number } | null {
  const idSep = key.lastIndexOf('!');
  if (!key.startsWith(PAUSED_HELD_PREFIX) || idSep <= PAUSED_HELD_PREFIX.length) return null;
  return { destination: key.slice(PAUSED_HELD_PREFIX.length, idSep), id: Number(key.slice(idSep + 1)) };
}

/** `storeKey` is the subscription's stable key (session id and filter). */
export function durablePrefix(storeKey: string): string {
  return `${DURABLE_PREFIX}${storeKey}!`;
}

/** Parse `q!<destination>!<pp>!<id>`; null when malformed. */
export function parseQueueKey(key: string): { destination: string; id: number } | null {
  const idSep = key.lastIndexOf('!');
  const prioSep = key.lastIndexOf('!', idSep - 1);
  if (!key.startsWith(QUEUE_PREFIX) || prioSep <= QUEUE_PREFIX.length) return null;
  return { destination: key.slice(QUEUE_PREFIX.length, prioSep), id: Number(key.slice(idSep + 1)) };
}

/** Parse `d!<subscription key>!<id>`; null when malformed. */
export function parseDurableKey(key: string): { storeKey: string; id: number } | null {
  const idSep = key.lastIndexOf('!');
  if (!key.startsWith(DURABLE_PREFIX) || idSep <= DURABLE_PREFIX.length) return null;
  return { storeKey: key.slice(DURABLE_PREFIX.length, idSep), id: Number(key.slice(idSep + 1)) };
}

/** `d!` value: uint16 LE length of the destination name, the name (UTF-8), then `encodeMessage(msg)`. */
export function encodeHeld(destination: string, msg: Message): Buffer {
  const name = Buffer.from(destination, 'utf8');
  const body = encodeMessage(msg);
  const out = Buffer.allocUnsafe(2 + name.length + body.length);
  out.writeUInt16LE(name.length, 0);
  name.copy(out, 2);
  body.copy(out, 2 + name.length);
  return out;
}

export function decodeHeld(buf: Buffer): { destination: string; msg: Message } {
  const len = buf.readUInt16LE(0);
  return { destination: buf.toString('utf8', 2, 2 + len), msg: decodeMessage(buf.subarray(2 + len)) };
}

/** Smallest string above every string that starts with `prefix` (prefixes here end with an ASCII char). */
function prefixEnd(prefix: string): string {
  return prefix.slice(0, -1) + String.fromCharCode(prefix.charCodeAt(prefix.length - 1) + 1);
}

/** Adapter over an open (or opening) `new ClassicLevel<string, Buffer>(dir, { valueEncoding: 'buffer' })`. */
export function levelEngineStore(db: ClassicLevel<string, Buffer>): EngineStore {
  return {
    batch(ops) {
      return db.batch(ops);
    },
    async *iterate(prefix) {
      for await (const [key, value] of db.iterator({ gte: prefix, lt: prefixEnd(prefix) })) {
        yield [key, value];
      }
    },
  };
}

/** In-memory store for tests: `data` is inspectable, `batchCalls` counts `batch` calls, `failNext` injects a failure. */
export interface MemoryEngineStore extends EngineStore {
  readonly data: Map<string, Buffer>;
  batchCalls: number;
  opsWritten: number;
  /** When set, the next `batch` call rejects with this error (and applies nothing). */
  failNext: Error | undefined;
}

export function memoryEngineStore(): MemoryEngineStore {
  const data = new Map<string, Buffer>();
  const store: MemoryEngineStore = {
    data,
    batchCalls: 0,
    opsWritten: 0,
    failNext: undefined,
    async batch(ops) {
      store.batchCalls++;
      await Promise.resolve();
      const err = store.failNext;
      if (err !== undefined) {
        store.failNext = undefined;
        throw err;
      }
      for (const op of ops) {
        if (op.type === 'put') data.set(op.key, op.value);
        else data.delete(op.key);
      }
      store.opsWritten += ops.length;
    },
    async *iterate(prefix) {
      const keys = [...data.keys()].filter((k) => k.startsWith(prefix)).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
      for (const k of keys) {
        const v = data.get(k);
        if (v !== undefined) yield [k, v];
      }
    },
  };
  return store;
}
