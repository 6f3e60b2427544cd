/**
 * The pure MQTT codec: framing of the byte stream into packets, a fast PUBLISH decoder and encoder (the hot path),
 * decoders of CONNECT and the acknowledgements, and every other packet through `mqtt-packet`. Knows nothing of
 * sockets.
 */
import { isUtf8 } from 'node:buffer';
import mqttPacket from 'mqtt-packet';
import { MqttProtocolError, Reason } from './reason.js';

// mqtt-packet otherwise fills a cache of 65 536 two-byte Buffers (one per 16-bit number) on its first write: about
// 6 MiB of heap kept for good, for the packets it encodes here (CONNACK, SUBACK, ...; PUBLISH has its own encoder)
mqttPacket.writeToStream.cacheNumbers = false;

export const PacketType = {
  CONNECT: 1,
  CONNACK: 2,
  PUBLISH: 3,
  PUBACK: 4,
  PUBREC: 5,
  PUBREL: 6,
  PUBCOMP: 7,
  SUBSCRIBE: 8,
  SUBACK: 9,
  UNSUBSCRIBE: 10,
  UNSUBACK: 11,
  PINGREQ: 12,
  PINGRESP: 13,
  DISCONNECT: 14,
  AUTH: 15,
} as const;

/** Largest remaining length MQTT can express (4 bytes of variable byte integer) [MQTT-1.5.5]. */
export const MAX_REMAINING_LENGTH = 268_435_455;

export interface FrameSink {
  /** A complete packet: `type` from the fixed header, `frame` the whole packet bytes (header included). */
  frame(type: number, flags: number, frame: Buffer, bodyOffset: number): void;
  /** Stop reading (the connection is closing). */
  readonly stopped: boolean;
}

/**
 * Splits a byte stream into MQTT packets. The remaining length is checked against `maxPacketSize` before the
 * packet is buffered, so an oversize length closes the connection at once (MQTT 5 0x95, [MQTT-3.2.2-15]).
 *
 * Packets inside one read are handed on as views of that read. Only a packet split across reads is copied, and
 * only its own bytes: the pieces are kept as a list until the packet is complete (no re-copying of a growing
 * buffer for a large packet, no copy of the rest of the read).
 */
/** The parts of no packet: shared by every framer not holding a split packet (frozen: a split starts its own list). */
const NO_PARTS = Object.freeze([]) as unknown as Buffer[];

export class Framer {
  /** Bytes of an incomplete packet, in arrival order (`NO_PARTS` while there is none: most reads hold whole packets). */
  private parts: Buffer[] = NO_PARTS;
  private partBytes = 0;
  /** Total size of the incomplete packet once its fixed header is known; 0 while it is not. */
  private partTotal = 0;
  constructor(
    private readonly sink: FrameSink,
    public maxPacketSize: number,
  ) {}

  push(chunk: Buffer): void {
    let off = 0;
    if (this.partBytes > 0) {
      off = this.completePart(chunk);
      if (off < 0) return; // still incomplete (or stopped)
    }
    const buf = chunk;
    const len = buf.length;
    while (off < len && !this.sink.stopped) {
      const total = this.frameLength(buf, off, len);
      if (total < 0 || off + total > len) break;
      const first = buf[off]!;
      this.sink.frame(first >> 4, first & 0x0f, buf.subarray(off, off + total), this.bodyOffset);
      off += total;
    }
    if (off < len && !this.sink.stopped) {
      // keep a copy of the tail, not a view: a view would hold the whole read in memory
      const tail = Buffer.from(buf.subarray(off));
      this.parts = [tail];
      this.partBytes = tail.length;
      this.partTotal = Math.max(0, this.frameLength(tail, 0, tail.length));
    }
  }

  private bodyOffset = 0;

  /**
   * Size of the packet at `off` (fixed header included), setting `bodyOffset`; -1 when the bytes end inside the
   * fixed header. Throws on a malformed or oversize remaining length.
   */
  private frameLength(buf: Buffer, off: number, len: number): number {
    if (len - off < 2) return -1;
    // variable byte integer, at most 4 bytes [MQTT-1.5.5-1]
    let remaining = 0;
    let mul = 1;
    let i = off + 1;
    for (let n = 0; n < 4; n++, i++) {
      if (i >= len) return -1;
      const b = buf[i]!;
      remaining += (b & 0x7f) * mul;
      mul *= 128;
      if ((b & 0x80) === 0) {
        i++;
        const total = i - off + remaining;
        if (total > this.maxPacketSize) {
          throw new MqttProtocolError(Reason.PacketTooLarge, `packet of ${total} bytes exceeds the maximum packet size ${this.maxPacketSize} [MQTT-3.2.2-15]`);
        }
        this.bodyOffset = i - off;
        return total;
      }
      if (n === 3) throw new MqttProtocolError(Reason.MalformedPacket, 'remaining length is longer than 4 bytes [MQTT-1.5.5-1]');
    }
    return -1;
  }

  /** Adds the start of `chunk` to the incomplete packet; returns where the rest of `chunk` begins, or -1. */
  private completePart(chunk: Buffer): number {
    if (this.partTotal === 0) {
      // the fixed header itself was split: at most 5 bytes are needed to read it
      const head = Buffer.concat([...this.parts, chunk.subarray(0, 5)]);
      const total = this.frameLength(head, 0, head.length);
      if (total < 0) {
        this.parts = [Buffer.concat([...this.parts, chunk])];
        this.partBytes = this.parts[0]!.length;
        return -1;
      }
      this.partTotal = total;
    }
    const need = this.partTotal - this.partBytes;
    if (chunk.length < need) {
      this.parts.push(chunk); // all of it belongs to this packet: a view costs nothing extra
      this.partBytes += chunk.length;
      return -1;
    }
    this.parts.push(chunk.subarray(0, need));
    const frame = Buffer.concat(this.parts, this.partTotal);
    this.parts = NO_PARTS;
    this.partBytes = 0;
    this.partTotal = 0;
    const total = this.frameLength(frame, 0, frame.length); // sets bodyOffset
    const first = frame[0]!;
    this.sink.frame(first >> 4, first & 0x0f, frame.subarray(0, total), this.bodyOffset);
    return this.sink.stopped ? -1 : need;
  }

  get buffered(): number {
    return this.partBytes;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// PUBLISH (decode)

export interface PublishProperties {
  payloadFormatIndicator?: number;
  messageExpiryInterval?: number;
  topicAlias?: number;
  responseTopic?: string;
  correlationData?: Buffer;
  userProperties?: Record<string, string | string[]>;
  subscriptionIdentifier?: number[];
  contentType?: string;
}

export interface InboundPublish {
  topic: string;
  qos: 0 | 1 | 2;
  dup: boolean;
  retain: boolean;
  packetId: number;
  payload: Buffer;
  properties: PublishProperties | undefined;
}

function readVarInt(buf: Buffer, off: number, end: number): [number, number] {
  let value = 0;
  let mul = 1;
  for (let n = 0; n < 4; n++) {
    if (off >= end) throw new MqttProtocolError(Reason.MalformedPacket, 'truncated variable byte integer');
    const b = buf[off++]!;
    value += (b & 0x7f) * mul;
    if ((b & 0x80) === 0) return [value, off];
    mul *= 128;
  }
  throw new MqttProtocolError(Reason.MalformedPacket, 'variable byte integer longer than 4 bytes [MQTT-1.5.5-1]');
}

function readUtf8(buf: Buffer, off: number, end: number, what: string): [string, number] {
  if (off + 2 > end) throw new MqttProtocolError(Reason.MalformedPacket, `truncated ${what}`);
  const n = buf.readUInt16BE(off);
  off += 2;
  if (off + n > end) throw new MqttProtocolError(Reason.MalformedPacket, `truncated ${what}`);
  const raw = buf.subarray(off, off + n);
  if (!isUtf8(raw)) throw new MqttProtocolError(Reason.MalformedPacket, `${what} is not well-formed UTF-8 [MQTT-1.5.4-1]`);
  const s = raw.toString('utf8');
  if (s.includes('\u0000')) throw new MqttProtocolError(Reason.MalformedPacket, `${what} contains U+0000 [MQTT-1.5.4-2]`);
  return [s, off + n];
}

function readBinary(buf: Buffer, off: number, end: number, what: string): [Buffer, number] {
  if (off + 2 > end) throw new MqttProtocolError(Reason.MalformedPacket, `truncated ${what}`);
  const n = buf.readUInt16BE(off);
  off += 2;
  if (off + n > end) throw new MqttProtocolError(Reason.MalformedPacket, `truncated ${what}`);
  return [Buffer.from(buf.subarray(off, off + n)), off + n];
}

function once(props: PublishProperties, key: keyof PublishProperties): void {
  if (props[key] !== undefined) throw new MqttProtocolError(Reason.ProtocolError, `property ${key} appears twice [MQTT-2.2.2-2]`);
}

/** Decode a PUBLISH frame (fixed-header flags already split off). Throws MqttProtocolError. */
/**
 * `memo`: the last topic name this connection published to ('' for none). When the topic bytes are that name's
 * (ASCII), the same string is returned instead of a new one: no decoding, and the engine's look-ups by name reuse
 * the string's cached hash (a publisher usually sends to the same topic again and again).
 */
export function decodePublish(frame: Buffer, flags: number, bodyOffset: number, v5: boolean, memo = ''): InboundPublish {
  const qos = (flags >> 1) & 3;
  if (qos === 3) throw new MqttProtocolError(Reason.MalformedPacket, 'PUBLISH with both QoS bits set [MQTT-3.3.1-4]');
  const dup = (flags & 8) !== 0;
  if (qos === 0 && dup) throw new MqttProtocolError(Reason.MalformedPacket, 'PUBLISH QoS 0 with DUP set [MQTT-3.3.1-2]');
  const end = frame.length;
  let off = bodyOffset;
  // Topic name: an ASCII fast path (one pass, no tuple), the full UTF-8 checks otherwise [MQTT-1.5.4-1, -2].
  if (off + 2 > end) throw new MqttProtocolError(Reason.MalformedPacket, 'truncated topic name');
  const tlen = frame.readUInt16BE(off);
  if (off + 2 + tlen > end) throw new MqttProtocolError(Reason.MalformedPacket, 'truncated topic name');
  let ascii = true;
  let same = tlen > 0 && memo.length === tlen;
  for (let i = off + 2, e = off + 2 + tlen, m = 0; i < e; i++, m++) {
    const b = frame[i]!;
    if (b === 0 || b >= 0x80) {
      ascii = false;
      same = false;
      break;
    }
    if (same && b !== memo.charCodeAt(m)) same = false;
  }
  let topic: string;
  if (same) {
    topic = memo;
    off += 2 + tlen;
  } else if (ascii) {
    topic = frame.toString('latin1', off + 2, off + 2 + tlen);
    off += 2 + tlen;
  } else [topic, off] = readUtf8(frame, off, end, 'topic name');
  let packetId = 0;
  if (qos > 0) {
    if (off + 2 > end) throw new MqttProtocolError(Reason.MalformedPacket, 'truncated packet identifier');
    packetId = frame.readUInt16BE(off);
    off += 2;
    if (packetId === 0) throw new MqttProtocolError(Reason.MalformedPacket, 'packet identifier 0 [MQTT-2.2.1-3]');
  }
  let properties: PublishProperties | undefined;
  if (v5) {
    let plen: number;
    [plen, off] = readVarInt(frame, off, end);
    const pend = off + plen;
    if (pend > end) throw new MqttProtocolError(Reason.MalformedPacket, 'properties run past the packet');
    if (plen > 0) {
      const p: PublishProperties = {};
      while (off < pend) {
        let id: number;
        [id, off] = readVarInt(frame, off, pend);
        switch (id) {
          case 0x01:
            once(p, 'payloadFormatIndicator');
            if (off >= pend) throw new MqttProtocolError(Reason.MalformedPacket, 'truncated property');
            p.payloadFormatIndicator = frame[off++]!;
            if (p.payloadFormatIndicator > 1) throw new MqttProtocolError(Reason.ProtocolError, 'payload format indicator must be 0 or 1');
            break;
          case 0x02:
            once(p, 'messageExpiryInterval');
            if (off + 4 > pend) throw new MqttProtocolError(Reason.MalformedPacket, 'truncated property');
            p.messageExpiryInterval = frame.readUInt32BE(off);
            off += 4;
            break;
          case 0x23:
            once(p, 'topicAlias');
            if (off + 2 > pend) throw new MqttProtocolError(Reason.MalformedPacket, 'truncated property');
            p.topicAlias = frame.readUInt16BE(off);
            off += 2;
            break;
          case 0x08:
            once(p, 'responseTopic');
            [p.responseTopic, off] = readUtf8(frame, off, pend, 'response topic');
            break;
          case 0x09:
            once(p, 'correlationData');
            [p.correlationData, off] = readBinary(frame, off, pend, 'correlation data');
            break;
          case 0x03:
            once(p, 'contentType');
            [p.contentType, off] = readUtf8(frame, off, pend, 'content type');
            break;
          case 0x26: {
            let k: string;
            let v: string;
            [k, off] = readUtf8(frame, off, pend, 'user property name');
            [v, off] = readUtf8(frame, off, pend, 'user property value');
            const up = (p.userProperties ??= {});
            const prev = up[k];
            up[k] = prev === undefined ? v : Array.isArray(prev) ? [...prev, v] : [prev, v];
            break;
          }
          case 0x0b: {
            // a client must not send a subscription identifier [MQTT-3.3.4-6]
            throw new MqttProtocolError(Reason.ProtocolError, 'PUBLISH from a client carries a subscription identifier [MQTT-3.3.4-6]');
          }
          default:
            throw new MqttProtocolError(Reason.MalformedPacket, `property 0x${id.toString(16)} is not allowed in PUBLISH`);
        }
      }
      properties = p;
    }
  }
  const payload = Buffer.allocUnsafe(end - off);
  frame.copy(payload, 0, off, end);
  return { topic, qos: qos as 0 | 1 | 2, dup, retain: (flags & 1) !== 0, packetId, payload, properties };
}

// ---------------------------------------------------------------------------------------------------------------
// PUBLISH (encode)

export interface OutboundProperties {
  payloadFormatIndicator?: number;
  messageExpiryInterval?: number;
  responseTopic?: string;
  correlationData?: Buffer;
  userProperties?: Record<string, string | string[]>;
  /** One, or several when one copy serves overlapping subscriptions [MQTT-3.3.4-4]. */
  subscriptionIdentifier?: number | number[];
  contentType?: string;
  /** Server-to-client topic alias (connection.ts) [MQTT-3.3.2-11]. */
  topicAlias?: number;
}

function varIntLength(n: number): number {
  return n < 128 ? 1 : n < 16384 ? 2 : n < 2097152 ? 3 : 4;
}
function writeVarInt(buf: Buffer, off: number, n: number): number {
  do {
    let b = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) b |= 0x80;
    buf[off++] = b;
  } while (n > 0);
  return off;
}
function writeStr(buf: Buffer, off: number, s: string, byteLen: number): number {
  buf.writeUInt16BE(byteLen, off);
  buf.write(s, off + 2, 'utf8');
  return off + 2 + byteLen;
}

function propertiesLength(p: OutboundProperties): number {
  let n = 0;
  if (p.payloadFormatIndicator !== undefined) n += 2;
  if (p.messageExpiryInterval !== undefined) n += 5;
  if (p.contentType !== undefined) n += 3 + Buffer.byteLength(p.contentType);
  if (p.responseTopic !== undefined) n += 3 + Buffer.byteLength(p.responseTopic);
  if (p.correlationData !== undefined) n += 3 + p.correlationData.length;
  const sid = p.subscriptionIdentifier;
  if (sid !== undefined) {
    if (typeof sid === 'number') n += 1 + varIntLength(sid);
    else for (const id of sid) n += 1 + varIntLength(id);
  }
  if (p.topicAlias !== undefined) n += 3;
  if (p.userProperties !== undefined) {
    for (const [k, v] of Object.entries(p.userProperties)) {
      const kl = Buffer.byteLength(k);
      if (Array.isArray(v)) for (const x of v) n += 5 + kl + Buffer.byteLength(x);
      else n += 5 + kl + Buffer.byteLength(String(v));
    }
  }
  return n;
}

function writeProperties(buf: Buffer, off: number, p: OutboundProperties): number {
  if (p.payloadFormatIndicator !== undefined) {
    buf[off++] = 0x01;
    buf[off++] = p.payloadFormatIndicator;
  }
  if (p.messageExpiryInterval !== undefined) {
    buf[off++] = 0x02;
    buf.writeUInt32BE(p.messageExpiryInterval, off);
    off += 4;
  }
  if (p.contentType !== undefined) {
    buf[off++] = 0x03;
    off = writeStr(buf, off, p.contentType, Buffer.byteLength(p.contentType));
  }
  if (p.responseTopic !== undefined) {
    buf[off++] = 0x08;
    off = writeStr(buf, off, p.responseTopic, Buffer.byteLength(p.responseTopic));
  }
  if (p.correlationData !== undefined) {
    buf[off++] = 0x09;
    buf.writeUInt16BE(p.correlationData.length, off);
    off += 2;
    off += p.correlationData.copy(buf, off);
  }
  const sid = p.subscriptionIdentifier;
  if (sid !== undefined) {
    if (typeof sid === 'number') {
      buf[off++] = 0x0b;
      off = writeVarInt(buf, off, sid);
    } else {
      for (const id of sid) {
        buf[off++] = 0x0b;
        off = writeVarInt(buf, off, id);
      }
    }
  }
  if (p.topicAlias !== undefined) {
    buf[off++] = 0x23;
    buf.writeUInt16BE(p.topicAlias, off);
    off += 2;
  }
  if (p.userProperties !== undefined) {
    for (const [k, v] of Object.entries(p.userProperties)) {
      for (const x of Array.isArray(v) ? v : [String(v)]) {
        buf[off++] = 0x26;
        off = writeStr(buf, off, k, Buffer.byteLength(k));
        off = writeStr(buf, off, x, Buffer.byteLength(x));
      }
    }
  }
  return off;
}

/** Offset of the packet identifier in an encoded PUBLISH (0 when QoS 0). */
export interface EncodedPublish {
  bytes: Buffer;
  pidOffset: number;
}

/** Encode a PUBLISH. With QoS > 0 the packet id is written at `pidOffset` (callers may patch a copy). */
export function encodePublish(
  topic: string,
  payload: Buffer,
  qos: number,
  retain: boolean,
  dup: boolean,
  packetId: number,
  v5: boolean,
  props: OutboundProperties | undefined,
): EncodedPublish {
  const topicLen = Buffer.byteLength(topic);
  const plen = v5 && props !== undefined ? propertiesLength(props) : 0;
  const remaining = 2 + topicLen + (qos > 0 ? 2 : 0) + (v5 ? varIntLength(plen) + plen : 0) + payload.length;
  const total = 1 + varIntLength(remaining) + remaining;
  const buf = Buffer.allocUnsafe(total);
  buf[0] = 0x30 | (dup ? 8 : 0) | (qos << 1) | (retain ? 1 : 0);
  let off = writeVarInt(buf, 1, remaining);
  off = writeStr(buf, off, topic, topicLen);
  let pidOffset = 0;
  if (qos > 0) {
    pidOffset = off;
    buf.writeUInt16BE(packetId, off);
    off += 2;
  }
  if (v5) {
    off = writeVarInt(buf, off, plen);
    if (plen > 0) off = writeProperties(buf, off, props!);
  }
  payload.copy(buf, off);
  return { bytes: buf, pidOffset };
}

// ---------------------------------------------------------------------------------------------------------------
// Small fixed packets and everything else

/** PUBACK / PUBREC / PUBREL / PUBCOMP: 4 bytes, or with a reason code (v5, when not success). */
export function encodeAck(type: number, packetId: number, reason: number, v5: boolean): Buffer {
  const flags = type === PacketType.PUBREL ? 0x02 : 0;
  if (v5 && reason !== 0) {
    const b = Buffer.allocUnsafe(6);
    b[0] = (type << 4) | flags;
    b[1] = 4;
    b.writeUInt16BE(packetId, 2);
    b[4] = reason;
    b[5] = 0; // no properties
    return b;
  }
  const b = Buffer.allocUnsafe(4);
  b[0] = (type << 4) | flags;
  b[1] = 2;
  b.writeUInt16BE(packetId, 2);
  return b;
}

export const PINGRESP = Buffer.from([0xd0, 0x00]);

// ---------------------------------------------------------------------------------------------------------------
// PUBACK / PUBREC / PUBREL / PUBCOMP (decode): checked here rather than by mqtt-packet, which reads past the end of
// a short packet (RangeError) and accepts a v5 acknowledgement without a packet identifier.

export interface InboundAck {
  cmd: 'puback' | 'pubrec' | 'pubrel' | 'pubcomp';
  messageId: number;
  reasonCode: number;
}

const ACK_CMD = ['', '', '', '', 'puback', 'pubrec', 'pubrel', 'pubcomp'] as const;
const ACK_NAME = ['', '', '', '', 'PUBACK', 'PUBREC', 'PUBREL', 'PUBCOMP'] as const;
/** Reason codes a PUBACK / PUBREC may carry (5 §3.4.2.1, §3.5.2.1); PUBREL / PUBCOMP: 0x00 and 0x92 (§3.6.2.1, §3.7.2.1). */
const PUB_ACK_REASONS = new Set([0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99]);
const REL_COMP_REASONS = new Set([0x00, 0x92]);

/**
 * Decode an acknowledgement (type 4..7). Malformed (MqttProtocolError 0x81, the connection closes): wrong fixed
 * header flags (PUBREL 0b0010, the others 0) [MQTT-3.6.1-1, MQTT-2.1.3-1]; no packet identifier or identifier 0
 * [MQTT-2.2.1-3]; in 3.1.1 a remaining length other than 2 (§3.4.1 .. §3.7.1); in v5 a reason code not defined for
 * the packet, a property length that does not end exactly at the end of the packet, a truncated or ill-formed
 * property, or a property other than Reason String and User Property. A v5 remaining length of 2 means reason 0
 * and no properties, 3 a reason and no properties (5 §3.4.2.1). A repeated Reason String is a Protocol Error.
 */
export function decodeAck(type: number, flags: number, frame: Buffer, bodyOffset: number, v5: boolean): InboundAck {
  const name = ACK_NAME[type]!;
  const want = type === PacketType.PUBREL ? 2 : 0;
  if (flags !== want) throw new MqttProtocolError(Reason.MalformedPacket, `${name} with fixed header flags ${flags} (must be ${want}) [MQTT-2.1.3-1]`);
  const end = frame.length;
  const len = end - bodyOffset;
  if (len < 2) throw new MqttProtocolError(Reason.MalformedPacket, `${name} of remaining length ${len}: no packet identifier`);
  if (!v5 && len !== 2) throw new MqttProtocolError(Reason.MalformedPacket, `${name} of remaining length ${len} (MQTT 3.1.1: exactly 2)`);
  const messageId = frame.readUInt16BE(bodyOffset);
  if (messageId === 0) throw new MqttProtocolError(Reason.MalformedPacket, `${name} with packet identifier 0 [MQTT-2.2.1-3]`);
  let reasonCode = 0;
  if (len >= 3) {
    reasonCode = frame[bodyOffset + 2]!;
    const allowed = type === PacketType.PUBACK || type === PacketType.PUBREC ? PUB_ACK_REASONS : REL_COMP_REASONS;
    if (!allowed.has(reasonCode)) throw new MqttProtocolError(Reason.MalformedPacket, `${name} with reason code 0x${reasonCode.toString(16)}, not defined for it`);
  }
  if (len >= 4) {
    let off = bodyOffset + 3;
    let plen: number;
    [plen, off] = readVarInt(frame, off, end);
    if (off + plen !== end) throw new MqttProtocolError(Reason.MalformedPacket, `${name} property length ${plen} does not end at the end of the packet`);
    let reasonString = false;
    while (off < end) {
      let id: number;
      [id, off] = readVarInt(frame, off, end);
      if (id === 0x1f) {
        if (reasonString) throw new MqttProtocolError(Reason.ProtocolError, `${name} with two Reason Strings (5 §2.2.2.2)`);
        reasonString = true;
        [, off] = readUtf8(frame, off, end, `${name} reason string`);
      } else if (id === 0x26) {
        [, off] = readUtf8(frame, off, end, `${name} user property name`);
        [, off] = readUtf8(frame, off, end, `${name} user property value`);
      } else throw new MqttProtocolError(Reason.MalformedPacket, `property 0x${id.toString(16)} is not allowed in ${name}`);
    }
  }
  return { cmd: ACK_CMD[type] as InboundAck['cmd'], messageId, reasonCode };
}

// ---------------------------------------------------------------------------------------------------------------
// CONNECT (decode): read here rather than by mqtt-packet, whose parser builds several KB of garbage per CONNECT (its
// debug() calls make their argument arrays even with debugging off), a third of what a connect burst leaves behind.
// Every check the mqtt-packet path made is kept (the same Malformed / Protocol Error outcomes, see `newParser`).

/** CONNECT Properties (5 §3.1.2.11) under mqtt-packet's names; the one-byte flags as booleans, as it gives them. */
export interface ConnectProperties {
  sessionExpiryInterval?: number;
  receiveMaximum?: number;
  maximumPacketSize?: number;
  topicAliasMaximum?: number;
  requestResponseInformation?: boolean;
  requestProblemInformation?: boolean;
  userProperties?: Record<string, string | string[]>;
  authenticationMethod?: string;
  authenticationData?: Buffer;
}

/** Will Properties (5 §3.1.3.2) under mqtt-packet's names (a type, so it is a `Record<string, unknown>` too). */
export type WillProperties = {
  willDelayInterval?: number;
  payloadFormatIndicator?: boolean;
  messageExpiryInterval?: number;
  contentType?: string;
  responseTopic?: string;
  correlationData?: Buffer;
  userProperties?: Record<string, string | string[]>;
};

export interface InboundConnect {
  cmd: 'connect';
  protocolId: string;
  protocolVersion: number;
  /** Bit 7 of the protocol level set (a 3.1.1 bridge, as Mosquitto's): subscription options are read as v5's. */
  bridgeMode: boolean;
  clean: boolean;
  keepalive: number;
  clientId: string;
  username?: string;
  /** A view of the frame (the frame is a view of one socket read, never reused). */
  password?: Buffer;
  will?: { topic: string; payload: Buffer; qos: 0 | 1 | 2; retain: boolean; properties?: WillProperties };
  properties?: ConnectProperties;
}

/** Names of the CONNECT and Will properties by identifier; how each value is read: 1/2/4 bytes, flag, string, binary, pair. */
const CONNECT_PROPERTY: Readonly<Record<number, readonly [string, 'b' | 2 | 4 | 's' | 'x' | 'p']>> = {
  0x01: ['payloadFormatIndicator', 'b'],
  0x02: ['messageExpiryInterval', 4],
  0x03: ['contentType', 's'],
  0x08: ['responseTopic', 's'],
  0x09: ['correlationData', 'x'],
  0x11: ['sessionExpiryInterval', 4],
  0x15: ['authenticationMethod', 's'],
  0x16: ['authenticationData', 'x'],
  0x17: ['requestProblemInformation', 'b'],
  0x18: ['willDelayInterval', 4],
  0x19: ['requestResponseInformation', 'b'],
  0x21: ['receiveMaximum', 2],
  0x22: ['topicAliasMaximum', 2],
  0x26: ['userProperties', 'p'],
  0x27: ['maximumPacketSize', 4],
};

/**
 * Offset just after the field the last `readConnectString` / `readConnectBinary` read: one cursor instead of a
 * [value, offset] tuple per field (a CONNECT is read once per connection; the tuples were most of its garbage).
 */
let connectAt = 0;

/** A UTF-8 string field of CONNECT; ASCII without U+0000 (nearly every client id) without the UTF-8 decoder. */
function readConnectString(buf: Buffer, off: number, end: number, what: string): string {
  if (off + 2 > end) throw new MqttProtocolError(Reason.MalformedPacket, `malformed CONNECT: cannot parse ${what}`);
  const start = off + 2;
  const stop = start + buf.readUInt16BE(off);
  if (stop > end) throw new MqttProtocolError(Reason.MalformedPacket, `malformed CONNECT: cannot parse ${what}`);
  connectAt = stop;
  for (let i = start; i < stop; i++) {
    const b = buf[i]!;
    // anything else gets the full checks: well-formed UTF-8 [MQTT-1.5.4-1], no U+0000 [MQTT-1.5.4-2]
    if (b === 0 || b >= 0x80) return readUtf8(buf, off, end, what)[0];
  }
  return buf.toString('latin1', start, stop);
}

/** A Binary Data field of CONNECT (password, will payload, binary properties): a view of the frame. */
function readConnectBinary(buf: Buffer, off: number, end: number, what: string): Buffer {
  if (off + 2 > end) throw new MqttProtocolError(Reason.MalformedPacket, `malformed CONNECT: cannot parse ${what}`);
  const stop = off + 2 + buf.readUInt16BE(off);
  if (stop > end) throw new MqttProtocolError(Reason.MalformedPacket, `malformed CONNECT: cannot parse ${what}`);
  connectAt = stop;
  return buf.subarray(off + 2, stop);
}

/**
 * A CONNECT or Will property block at `off` (Property Length first). Malformed: a truncated length or value, an
 * identifier unknown or not allowed in the block (5 §2.2.2.2), a value running past the Property Length; Protocol
 * Error: a property other than User Property twice (5 §2.2.2.2), a one-byte flag other than 0 or 1 (5 §3.1.2.11.6,
 * §3.1.2.11.7, §3.1.3.2.3). Returns the properties (undefined when the block is empty) and the offset after it.
 */
function readConnectProperties(buf: Buffer, off: number, end: number, kind: 'connect' | 'will'): [Record<string, unknown> | undefined, number] {
  let plen: number;
  [plen, off] = readVarInt(buf, off, end);
  const pend = off + plen;
  if (pend > end) throw new MqttProtocolError(Reason.MalformedPacket, `malformed CONNECT: the ${kind === 'will' ? 'Will ' : ''}Property Length runs past the packet`);
  if (plen === 0) return [undefined, off];
  const allowed = ALLOWED_PROPERTIES[kind]!;
  const what = kind === 'will' ? 'the Will Properties' : 'CONNECT';
  const props: Record<string, unknown> = {};
  while (off < pend) {
    let id: number;
    [id, off] = readVarInt(buf, off, pend);
    const known = CONNECT_PROPERTY[id];
    if (known === undefined || !allowed.has(id)) {
      throw new MqttProtocolError(Reason.MalformedPacket, `property 0x${id.toString(16).padStart(2, '0')} is not allowed in ${what} (5 §2.2.2.2)`);
    }
    const [name, type] = known;
    if (type !== 'p' && props[name] !== undefined) throw new MqttProtocolError(Reason.ProtocolError, `property 0x${id.toString(16)} appears more than once (5 §2.2.2.2)`);
    const short = (n: number) => {
      if (off + n > pend) throw new MqttProtocolError(Reason.MalformedPacket, `a ${kind.toUpperCase()} property runs past the Property Length (5 §2.2.2.1)`);
    };
    switch (type) {
      case 'b': {
        short(1);
        const b = buf[off++]!;
        if (b > 1) throw new MqttProtocolError(Reason.ProtocolError, `property 0x${id.toString(16)} must be 0 or 1, not ${b}`);
        props[name] = b === 1;
        break;
      }
      case 2:
        short(2);
        props[name] = buf.readUInt16BE(off);
        off += 2;
        break;
      case 4:
        short(4);
        props[name] = buf.readUInt32BE(off);
        off += 4;
        break;
      case 's':
        props[name] = readConnectString(buf, off, pend, name);
        off = connectAt;
        break;
      case 'x':
        props[name] = readConnectBinary(buf, off, pend, name);
        off = connectAt;
        break;
      case 'p': {
        const k = readConnectString(buf, off, pend, 'user property name');
        const v = readConnectString(buf, connectAt, pend, 'user property value');
        off = connectAt;
        // as mqtt-packet: a repeated name collects its values in an array (order kept)
        const up = (props.userProperties ??= Object.create(null)) as Record<string, string | string[]>;
        const had = up[k];
        up[k] = had === undefined ? v : Array.isArray(had) ? [...had, v] : [had, v];
        break;
      }
    }
  }
  return [props, off];
}

/**
 * Decode a CONNECT frame (3.1 §3.1, 3.1.1 §3.1, 5 §3.1). Throws MqttProtocolError (the connection closes; a v5
 * client first gets CONNACK with the reason, handlers/connect.ts `refuseBrokenConnect`). Malformed Packet: fixed
 * header flags other than 0 [MQTT-2.1.3-1]; a protocol name other than MQTT / MQIsdp [MQTT-3.1.2-1]; a level other
 * than 3, 4, 5 (bit 7, bridge mode, aside); the reserved flag set [MQTT-3.1.2-3]; Will QoS or Will Retain without
 * the Will Flag [MQTT-3.1.2-11, MQTT-3.1.2-13, MQTT-3.1.2-15]; a field cut short; a string that is not well-formed
 * UTF-8 or holds U+0000 [MQTT-1.5.4-1, MQTT-1.5.4-2]; bytes after the fields the flags announce [MQTT-3.1.4-1,
 * MQTT-3.1.2-16, MQTT-3.1.2-18]; Will QoS 3 [MQTT-3.1.2-14]; property errors as `readConnectProperties`. The protocol
 * name against the level and a password without user name (3.1.1) are checked by `handleConnect`.
 */
export function decodeConnect(frame: Buffer, flags: number, bodyOffset: number): InboundConnect {
  if (flags !== 0) throw new MqttProtocolError(Reason.MalformedPacket, `malformed CONNECT: fixed header flags ${flags} (must be 0) [MQTT-2.1.3-1]`);
  const end = frame.length;
  let off = bodyOffset;
  const protocolId = readConnectString(frame, off, end, 'protocol name');
  off = connectAt;
  if (protocolId !== 'MQTT' && protocolId !== 'MQIsdp') throw new MqttProtocolError(Reason.MalformedPacket, `malformed CONNECT: protocol name ${JSON.stringify(protocolId)} [MQTT-3.1.2-1]`);
  if (off + 4 > end) throw new MqttProtocolError(Reason.MalformedPacket, 'malformed CONNECT: packet too short');
  let level = frame[off++]!;
  const bridgeMode = level >= 128;
  if (bridgeMode) level -= 128;
  if (level !== 3 && level !== 4 && level !== 5) throw new MqttProtocolError(Reason.MalformedPacket, `malformed CONNECT: protocol level ${level}`);
  const cf = frame[off++]!;
  if ((cf & 0x01) !== 0) throw new MqttProtocolError(Reason.MalformedPacket, 'malformed CONNECT: reserved flag set [MQTT-3.1.2-3]');
  const willFlag = (cf & 0x04) !== 0;
  const willQos = (cf >> 3) & 3;
  const willRetain = (cf & 0x20) !== 0;
  if (!willFlag && willRetain) throw new MqttProtocolError(Reason.MalformedPacket, 'malformed CONNECT: Will Retain without the Will Flag [MQTT-3.1.2-15]');
  if (!willFlag && willQos !== 0) throw new MqttProtocolError(Reason.MalformedPacket, 'malformed CONNECT: Will QoS without the Will Flag [MQTT-3.1.2-13]');
  if (willQos === 3) throw new MqttProtocolError(Reason.MalformedPacket, 'Will QoS 3 [MQTT-3.1.2-14]');
  const keepalive = frame.readUInt16BE(off);
  off += 2;
  const v5 = level === 5;
  let properties: Record<string, unknown> | undefined;
  if (v5) [properties, off] = readConnectProperties(frame, off, end, 'connect');
  const clientId = readConnectString(frame, off, end, 'client identifier');
  off = connectAt;
  const p: InboundConnect = { cmd: 'connect', protocolId, protocolVersion: level, bridgeMode, clean: (cf & 0x02) !== 0, keepalive, clientId };
  if (properties !== undefined) p.properties = properties as ConnectProperties;
  if (willFlag) {
    let wprops: Record<string, unknown> | undefined;
    if (v5) [wprops, off] = readConnectProperties(frame, off, end, 'will');
    const topic = readConnectString(frame, off, end, 'will topic');
    const payload = readConnectBinary(frame, connectAt, end, 'will payload');
    off = connectAt;
    p.will = { topic, payload, qos: willQos as 0 | 1 | 2, retain: willRetain };
    if (wprops !== undefined) p.will.properties = wprops as WillProperties;
  }
  if ((cf & 0x80) !== 0) {
    p.username = readConnectString(frame, off, end, 'user name');
    off = connectAt;
  }
  if ((cf & 0x40) !== 0) {
    p.password = readConnectBinary(frame, off, end, 'password');
    off = connectAt;
  }
  if (off !== end) {
    throw new MqttProtocolError(Reason.MalformedPacket, `CONNECT has ${end - off} bytes after the fields its flags announce (a user name or password without its flag?) [MQTT-3.1.4-1, MQTT-3.1.2-16, MQTT-3.1.2-18]`);
  }
  return p;
}

/**
 * The 3.1 / 3.1.1 CONNACKs (§3.2) by session present flag and return code 0..5, made once and shared by every
 * connection (as PINGRESP): nothing writes into a queued packet (a batch of several is copied into a new buffer).
 */
const CONNACK_V3: readonly Buffer[] = Array.from({ length: 12 }, (_, i) => {
  const b = Buffer.alloc(4); // not from the pool: a constant must not keep an 8 KiB pool slab alive
  b[0] = 0x20;
  b[1] = 0x02;
  b[2] = i >= 6 ? 1 : 0;
  b[3] = i % 6;
  return b;
});

/** A 3.1 / 3.1.1 CONNACK: session present flag and return code; byte for byte what mqtt-packet writes. */
export function encodeConnackV3(sessionPresent: boolean, returnCode: number): Buffer {
  return CONNACK_V3[(sessionPresent ? 6 : 0) + returnCode] ?? Buffer.from([0x20, 0x02, sessionPresent ? 1 : 0, returnCode]);
}

/** Encode any packet with mqtt-packet (CONNACK, SUBACK, UNSUBACK, DISCONNECT, AUTH). */
export function encodePacket(packet: Record<string, unknown>, protocolVersion: number): Buffer {
  return mqttPacket.generate(packet as never, { protocolVersion } as never);
}

/**
 * The `mqtt-packet` parser for every packet but PUBLISH, with two checks it leaves out:
 * - each UTF-8 Encoded String (client id, will topic, user name, topic filters, string properties) must be
 *   well-formed UTF-8 without U+0000, or the packet is malformed [MQTT-1.5.4-1, MQTT-1.5.4-2];
 * - a property other than User Property must not appear twice: a Protocol Error (5 §2.2.2.2, e.g. §3.1.2.11.2).
 * - a property must be one its packet may carry (`ALLOWED_PROPERTIES`, 5 §2.2.2.2: otherwise Malformed), and a
 *   property block must end exactly at its Property Length;
 * - the packet must end where its fields end: bytes its flags do not announce (a user name or password without its
 *   flag, [MQTT-3.1.2-16], [MQTT-3.1.2-18]) or any other trailing bytes make it malformed [MQTT-3.1.4-1]
 *   (mqtt-packet stops reading where the flags say and ignores the rest).
 * All throw MqttProtocolError out of `parse` (the connection closes, connection.ts). A DISCONNECT that ends
 * before its Property Length (Remaining Length 0 or 1) has no properties (5 §3.14.2.2.1) and is not checked; an
 * AUTH of Remaining Length 0 is reason 0x00 Success without properties (5 §3.15.2.1).
 */
export function newParser(): ReturnType<typeof mqttPacket.parser> {
  const parser = mqttPacket.parser({ protocolVersion: 4 } as never);
  const raw = parser as unknown as {
    _pos: number;
    _list: { length: number; slice(start: number, end: number): Buffer };
    _parseString(): string | null;
    _parseProperties(): Record<string, unknown> | false;
    _parsePayload(): boolean;
    _parseAuth(): boolean;
    settings: { protocolVersion?: number };
    error: Error | null;
    packet: { cmd?: string; length?: number; clientId?: string; reasonCode?: number };
  };
  const parseString = raw._parseString;
  raw._parseString = function (this: typeof raw): string | null {
    const at = this._pos;
    const s = parseString.call(this);
    if (s !== null) {
      const bytes = this._list.slice(at + 2, this._pos);
      if (!isUtf8(bytes)) throw new MqttProtocolError(Reason.MalformedPacket, 'a UTF-8 string is not well-formed UTF-8 [MQTT-1.5.4-1]');
      if (bytes.includes(0)) throw new MqttProtocolError(Reason.MalformedPacket, 'a UTF-8 string contains U+0000 [MQTT-1.5.4-2]');
    }
    return s;
  };
  const parseProperties = raw._parseProperties;
  raw._parseProperties = function (this: typeof raw): Record<string, unknown> | false {
    const at = this._pos;
    // A DISCONNECT may end before its Property Length: with a Remaining Length below 2 it is 0 (5 §3.14.2.2.1), so
    // `E0 00` and `E0 01 00` are normal disconnections (5 §3.14.2.1), not a truncated property block [MQTT-3.14.4-3].
    if (this.packet.cmd === 'disconnect' && at >= (this.packet.length ?? this._list.length)) return {};
    const result = parseProperties.call(this);
    if (result !== false) {
      const cmd = this.packet.cmd ?? '';
      // CONNECT has two property blocks: its own, then (after the client id) the Will Properties
      const kind = cmd === 'connect' && this.packet.clientId !== undefined ? 'will' : cmd;
      checkProperties(this._list.slice(at, this._pos), kind);
    }
    return result;
  };
  const parseAuth = raw._parseAuth;
  raw._parseAuth = function (this: typeof raw): boolean {
    // "The Reason Code and Property Length can be omitted if the Reason Code is 0x00 (Success) and there are no
    // Properties. In this case the AUTH has a Remaining Length of 0" (5 §3.15.2.1); mqtt-packet reads past the end
    if (this.packet.length === 0 && this.settings.protocolVersion === 5) {
      this.packet.reasonCode = 0;
      return true;
    }
    return parseAuth.call(this);
  };
  const parsePayload = raw._parsePayload;
  raw._parsePayload = function (this: typeof raw): boolean {
    const done = parsePayload.call(this);
    const length = this.packet.length ?? 0;
    if (done && this.error === null && this._pos !== length && this._list.length >= length) {
      const name = (this.packet.cmd ?? 'packet').toUpperCase();
      const why =
        this.packet.cmd === 'connect'
          ? `CONNECT has ${length - this._pos} bytes after the fields its flags announce (a user name or password without its flag?) [MQTT-3.1.4-1, MQTT-3.1.2-16, MQTT-3.1.2-18]`
          : `${name} has ${length - this._pos} bytes after its last field`;
      throw new MqttProtocolError(Reason.MalformedPacket, why);
    }
    return done;
  };
  return parser;
}

const CONNECT_PROPS = [0x11, 0x15, 0x16, 0x17, 0x19, 0x21, 0x22, 0x26, 0x27];
const CONNACK_PROPS = [0x11, 0x12, 0x13, 0x15, 0x16, 0x1a, 0x1c, 0x1f, 0x21, 0x22, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a];
const PUBLISH_PROPS = [0x01, 0x02, 0x03, 0x08, 0x09, 0x0b, 0x23, 0x26];
const WILL_PROPS = [0x01, 0x02, 0x03, 0x08, 0x09, 0x18, 0x26];
const ACK_PROPS = [0x1f, 0x26];

/**
 * The properties each packet may carry (MQTT 5 §2.2.2.2, Table 2-4); `will` is the Will Properties of CONNECT
 * (5 §3.1.3.2). Any other identifier makes the packet malformed: "A Control Packet which contains an Identifier which
 * is not valid for its packet type ... is a Malformed Packet" (5 §2.2.2.2). PUBLISH and the acknowledgements are
 * decoded by `decodePublish` and `decodeAck`, which hold the same sets; the rest are checked in `newParser`.
 */
export const ALLOWED_PROPERTIES: Readonly<Record<string, ReadonlySet<number>>> = {
  connect: new Set(CONNECT_PROPS),
  will: new Set(WILL_PROPS),
  connack: new Set(CONNACK_PROPS),
  publish: new Set(PUBLISH_PROPS),
  puback: new Set(ACK_PROPS),
  pubrec: new Set(ACK_PROPS),
  pubrel: new Set(ACK_PROPS),
  pubcomp: new Set(ACK_PROPS),
  subscribe: new Set([0x0b, 0x26]),
  suback: new Set(ACK_PROPS),
  unsubscribe: new Set([0x26]),
  unsuback: new Set(ACK_PROPS),
  disconnect: new Set([0x11, 0x1c, 0x1f, 0x26]),
  auth: new Set([0x15, 0x16, 0x1f, 0x26]),
};

/** Value sizes of the MQTT 5 properties by identifier (5 §2.2.2.2): bytes, or 's' string/binary, 'p' pair, 'v' varint. */
const PROPERTY_SIZE: Record<number, number | 's' | 'p' | 'v'> = {
  0x01: 1, 0x02: 4, 0x03: 's', 0x08: 's', 0x09: 's', 0x0b: 'v', 0x11: 4, 0x12: 's', 0x13: 2, 0x15: 's', 0x16: 's',
  0x17: 1, 0x18: 4, 0x19: 1, 0x1a: 's', 0x1c: 's', 0x1f: 's', 0x21: 2, 0x22: 2, 0x23: 2, 0x24: 1, 0x25: 1,
  0x26: 'p', 0x27: 4, 0x28: 1, 0x29: 1, 0x2a: 1,
};

/**
 * `props`: a property block as parsed (length first) of a packet of kind `kind` (an `ALLOWED_PROPERTIES` key).
 * Throws Malformed Packet on a property the packet may not carry or a property that runs past the Property Length,
 * Protocol Error on a repeated property other than User Property. A block that runs past the packet is left to the
 * parser (which reports it as malformed): this scan never reads outside `props` (found by test/mqtt/fuzz.test.ts: a
 * RangeError there was an internal error).
 */
function checkProperties(props: Buffer, kind: string): void {
  let [len, off] = readVarInt(props, 0, props.length);
  if (off + len < props.length) throw new MqttProtocolError(Reason.MalformedPacket, `a ${kind.toUpperCase()} property runs past the Property Length (5 §2.2.2.1)`);
  const end = Math.min(props.length, off + len);
  const allowed = ALLOWED_PROPERTIES[kind];
  const seen = new Set<number>();
  const skipString = (): boolean => {
    if (off + 2 > end) return false;
    off += 2 + props.readUInt16BE(off);
    return off <= end;
  };
  while (off < end) {
    const id = props[off++]!;
    const size = PROPERTY_SIZE[id];
    if (size === undefined) return; // the parser has reported it already
    if (allowed !== undefined && !allowed.has(id)) {
      const what = kind === 'will' ? 'the Will Properties' : kind.toUpperCase();
      throw new MqttProtocolError(Reason.MalformedPacket, `property 0x${id.toString(16).padStart(2, '0')} is not allowed in ${what} (5 §2.2.2.2)`);
    }
    if (id !== 0x26) {
      if (seen.has(id)) throw new MqttProtocolError(Reason.ProtocolError, `property 0x${id.toString(16)} appears more than once (5 §2.2.2.2)`);
      seen.add(id);
    }
    if (size === 'v') [len, off] = readVarInt(props, off, end);
    else if (size === 's') {
      if (!skipString()) return;
    } else if (size === 'p') {
      if (!skipString() || !skipString()) return;
    } else off += size;
  }
}
