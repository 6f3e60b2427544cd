/**
 * The engine's message: what is routed, held for subscriptions and written to the store.
 *
 * `createMessage` normalises publisher input (defaults, priority clamping), `MessageIdGenerator` hands out
 * monotonic ids that stay unique across restarts, and `encodeMessage`/`decodeMessage` are the compact binary
 * form kept in the store.
 */
import { ValidationError } from '../errors.js';

export type QoS = 0 | 1 | 2;

export interface Message {
  /** Server event id: unique, increasing, survives restarts. */
  id: number;
  payload: Buffer;
  contentType?: string;
  correlationData?: Buffer;
  /** Epoch ms after which the message is dropped; 0 = never. */
  expiresAt: number;
  /** 0..10, higher is delivered first on queues; default 4. */
  priority: number;
  qos: QoS;
  /** Epoch ms. */
  creation: number;
  dataMap: Record<string, unknown>;
  metaData: Record<string, string>;
  retain: boolean;
  userProperties?: Record<string, string | string[]>;
  responseTopic?: string;
  payloadFormat?: 0 | 1;
  /** Publishing session / connection id, for noLocal and loop prevention. */
  origin?: string;
  /**
   * Set only on the one copy a session gets for several overlapping subscriptions: the subscription identifiers of
   * all of them (MQTT 5 [MQTT-3.3.4-4]). Not stored: a copy recovered after a restart carries its subscription's own.
   */
  subscriptionIds?: number[];
}

/** What a publisher hands to `Engine.publish`: only `payload` is required, everything else has a default. */
export interface MessageInit {
  payload: Buffer | Uint8Array | string;
  contentType?: string;
  correlationData?: Buffer | Uint8Array;
  expiresAt?: number;
  priority?: number;
  qos?: number;
  creation?: number;
  dataMap?: Record<string, unknown>;
  metaData?: Record<string, string>;
  retain?: boolean;
  userProperties?: Record<string, string | string[]>;
  responseTopic?: string;
  payloadFormat?: 0 | 1;
  origin?: string;
}

export const DEFAULT_PRIORITY = 4;
export const MAX_PRIORITY = 10;

/** Priority as MAPS does it: missing → 4, below 0 → 0, above 10 → 10, fractions truncated. */
export function clampPriority(priority: number | undefined): number {
  if (priority === undefined || Number.isNaN(priority)) return DEFAULT_PRIORITY;
  if (priority <= 0) return 0;
  if (priority >= MAX_PRIORITY) return MAX_PRIORITY;
  return Math.trunc(priority);
}

function toBuffer(b: Buffer | Uint8Array | string): Buffer {
  if (Buffer.isBuffer(b)) return b;
  if (typeof b === 'string') return Buffer.from(b, 'utf8');
  return Buffer.from(b.buffer, b.byteOffset, b.byteLength);
}

const EMPTY_OBJECT: Record<string, never> = Object.freeze({}) as Record<string, never>;

/**
 * Build an engine message from publisher input. Every field is set (also the optional ones, to `undefined`) so
 * all messages share one object shape.
 */
export function createMessage(init: MessageInit, id: number, now: number): Message {
  const qos = init.qos ?? 0;
  if (qos !== 0 && qos !== 1 && qos !== 2) {
    throw new ValidationError(`qualityOfService must be 0, 1 or 2, got ${String(init.qos)}`);
  }
  if (init.payload === undefined || init.payload === null) throw new ValidationError('message payload is required');
  const expiresAt = init.expiresAt ?? 0;
  return {
    id,
    payload: toBuffer(init.payload),
    contentType: init.contentType,
    correlationData: init.correlationData === undefined ? undefined : toBuffer(init.correlationData),
    expiresAt: expiresAt > 0 ? expiresAt : 0,
    priority: clampPriority(init.priority),
    qos,
    creation: init.creation ?? now,
    dataMap: init.dataMap ?? (EMPTY_OBJECT as Record<string, unknown>),
    metaData: init.metaData ?? (EMPTY_OBJECT as Record<string, string>),
    retain: init.retain === true,
    userProperties: init.userProperties,
    responseTopic: init.responseTopic,
    payloadFormat: init.payloadFormat,
    origin: init.origin,
  };
}

/**
 * Monotonic message ids. Seeded with `max(highestStoredId + 1, Date.now() * 1000)` so ids stay unique across
 * restarts as long as the broker averages fewer than 1000 messages per millisecond over its lifetime (and the
 * stored maximum covers the rest). `Date.now() * 1000` is about 1.8e15, well inside Number.MAX_SAFE_INTEGER.
 */
export class MessageIdGenerator {
  private last: number;

  constructor(highestStoredId = 0, clockMs = Date.now()) {
    this.last = Math.max(highestStoredId, clockMs * 1000 - 1);
  }

  next(): number {
    return ++this.last;
  }

  /** Make sure future ids are above `id` (called while recovering stored messages). */
  observe(id: number): void {
    if (id > this.last) this.last = id;
  }

  get current(): number {
    return this.last;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Store encoding
//
//   offset  size  field
//   0       1     format version (1)
//   1       1     flags: bit0 retain, bit1 correlationData present, bit2 payloadFormat present
//   2       1     qos
//   3       1     priority
//   4       1     payloadFormat
//   5       3     reserved (0)
//   8       8     id          (float64 LE; integers up to 2^53 are exact)
//   16      8     expiresAt   (float64 LE)
//   24      8     creation    (float64 LE)
//   32      4     ext length  (uint32 LE) then ext: UTF-8 JSON of the optional string/object fields, 0 bytes if none
//   ..      4     correlation length (uint32 LE) then the bytes
//   ..      rest  payload, verbatim
//
// dataMap goes through JSON: values must be JSON-representable (strings, numbers, booleans, null, arrays, objects).
// ---------------------------------------------------------------------------------------------------------------

const FORMAT_VERSION = 1;
const HEADER = 32;
const F_RETAIN = 1;
const F_CORRELATION = 2;
const F_PAYLOAD_FORMAT = 4;

interface Ext {
  c?: string;
  d?: Record<string, unknown>;
  m?: Record<string, string>;
  u?: Record<string, string | string[]>;
  r?: string;
  o?: string;
}

function hasKeys(o: object | undefined): boolean {
  if (o === undefined) return false;
  for (const _ in o) return true;
  return false;
}

export function encodeMessage(msg: Message): Buffer {
  let ext: Ext | undefined;
  if (msg.contentType !== undefined) (ext ??= {}).c = msg.contentType;
  if (hasKeys(msg.dataMap)) (ext ??= {}).d = msg.dataMap;
  if (hasKeys(msg.metaData)) (ext ??= {}).m = msg.metaData;
  if (msg.userProperties !== undefined) (ext ??= {}).u = msg.userProperties;
  if (msg.responseTopic !== undefined) (ext ??= {}).r = msg.responseTopic;
  if (msg.origin !== undefined) (ext ??= {}).o = msg.origin;
  const extJson = ext === undefined ? '' : JSON.stringify(ext);
  const extLen = extJson.length === 0 ? 0 : Buffer.byteLength(extJson);
  const corr = msg.correlationData;
  const corrLen = corr === undefined ? 0 : corr.length;
  const buf = Buffer.allocUnsafe(HEADER + 4 + extLen + 4 + corrLen + msg.payload.length);
  let flags = 0;
  if (msg.retain) flags |= F_RETAIN;
  if (corr !== undefined) flags |= F_CORRELATION;
  if (msg.payloadFormat !== undefined) flags |= F_PAYLOAD_FORMAT;
  buf[0] = FORMAT_VERSION;
  buf[1] = flags;
  buf[2] = msg.qos;
  buf[3] = msg.priority;
  buf[4] = msg.payloadFormat ?? 0;
  buf[5] = 0;
  buf[6] = 0;
  buf[7] = 0;
  buf.writeDoubleLE(msg.id, 8);
  buf.writeDoubleLE(msg.expiresAt, 16);
  buf.writeDoubleLE(msg.creation, 24);
  let off = HEADER;
  buf.writeUInt32LE(extLen, off);
  off += 4;
  if (extLen > 0) off += buf.write(extJson, off, 'utf8');
  buf.writeUInt32LE(corrLen, off);
  off += 4;
  if (corr !== undefined) off += corr.copy(buf, off);
  msg.payload.copy(buf, off);
  return buf;
}

export function decodeMessage(buf: Buffer): Message {
  if (buf.length < HEADER + 8 || buf[0] !== FORMAT_VERSION) {
    throw new Error(`stored message has an unknown format (version ${buf[0]}, ${buf.length} bytes)`);
  }
  const flags = buf[1]!;
  let off = HEADER;
  const extLen = buf.readUInt32LE(off);
  off += 4;
  const ext: Ext = extLen > 0 ? (JSON.parse(buf.toString('utf8', off, off + extLen)) as Ext) : {};
  off += extLen;
  const corrLen = buf.readUInt32LE(off);
  off += 4;
  const correlationData = flags & F_CORRELATION ? Buffer.from(buf.subarray(off, off + corrLen)) : undefined;
  off += corrLen;
  return {
    id: buf.readDoubleLE(8),
    payload: Buffer.from(buf.subarray(off)),
    contentType: ext.c,
    correlationData,
    expiresAt: buf.readDoubleLE(16),
    priority: buf[3]!,
    qos: buf[2]! as QoS,
    creation: buf.readDoubleLE(24),
    dataMap: ext.d ?? {},
    metaData: ext.m ?? {},
    retain: (flags & F_RETAIN) !== 0,
    userProperties: ext.u,
    responseTopic: ext.r,
    payloadFormat: flags & F_PAYLOAD_FORMAT ? (buf[4]! as 0 | 1) : undefined,
    origin: ext.o,
  };
}
