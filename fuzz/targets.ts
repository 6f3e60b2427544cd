/**
 * Fuzz targets for the MQTT decoders (src/protocol/mqtt/codec.ts, parser.ts), run by jsfuzz through
 * scripts/fuzz.mjs (`npm run fuzz`) and replayed over the kept corpus by test/conformance/fuzz-regressions.test.ts.
 *
 * Each target takes the fuzzer's bytes, shapes them into what the decoder is given on a connection, and throws only
 * for a finding: an exception that is not MqttProtocolError (the class a connection turns into a DISCONNECT or a
 * closed socket; anything else is an internal error there), or an oracle that fails (a decoded packet that does not
 * survive our own re-encoding, a framing that depends on how the bytes were split). A hang is caught by jsfuzz's
 * per-input timeout.
 */
import { isDeepStrictEqual } from 'node:util';
import mqttPacket from 'mqtt-packet';
import { decodeAck, decodePublish, encodeAck, encodePublish, Framer, PacketType, type FrameSink } from '../src/protocol/mqtt/codec.js';
import { PacketParser, type ParserSettings, type ParseTarget } from '../src/protocol/mqtt/parser.js';
import { MqttProtocolError } from '../src/protocol/mqtt/reason.js';
import { MqttPacketScanner } from '../src/links/mqtt-guard.js';

export class FuzzFinding extends Error {
  override name = 'FuzzFinding';
}

/** Runs `fn`; a MqttProtocolError is the expected answer to bad bytes, anything else propagates (a finding). */
function expectProtocolErrors<T>(fn: () => T): T | undefined {
  try {
    return fn();
  } catch (err) {
    if (err instanceof MqttProtocolError) return undefined;
    throw err;
  }
}

function varInt(n: number): Buffer {
  const out: number[] = [];
  do {
    let b = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) b |= 0x80;
    out.push(b);
  } while (n > 0);
  return Buffer.from(out);
}

/** A whole packet: fixed header byte, remaining length, body. */
function frameOf(first: number, body: Buffer): { frame: Buffer; bodyOffset: number } {
  const len = varInt(body.length);
  return { frame: Buffer.concat([Buffer.from([first]), len, body]), bodyOffset: 1 + len.length };
}

/** A plain object of the same own properties (mqtt-packet builds some without a prototype). */
const plain = (o: object | undefined): object | undefined => (o === undefined ? undefined : { ...o });

/** What mqtt-packet's own parser makes of a frame (undefined when it refuses it): the reference for the fast path. */
function referenceParse(frame: Buffer, version: 4 | 5): Record<string, any> | undefined {
  const parser = mqttPacket.parser({ protocolVersion: version });
  let packet: Record<string, any> | undefined;
  let failed = false;
  parser.on('packet', (p) => (packet = p as Record<string, any>));
  parser.on('error', () => (failed = true));
  try {
    parser.parse(frame);
  } catch {
    return undefined;
  }
  return failed ? undefined : packet;
}

/**
 * PUBLISH fast path (`decodePublish`). Byte 0: bit 0 MQTT 5, bits 1-4 the fixed header flags (DUP, QoS, RETAIN);
 * the rest is the body. Oracles: an accepted PUBLISH re-encoded by `encodePublish` decodes to the same packet; where
 * mqtt-packet's parser (which the fast path replaced) accepts it too, both read the same fields. They may disagree on
 * acceptance: the fast path adds checks mqtt-packet leaves out (UTF-8, repeated properties, a client's subscription
 * identifier).
 */
export function publish(buf: Buffer): void {
  if (buf.length < 1) return;
  const v5 = (buf[0]! & 1) === 1;
  const flags = (buf[0]! >> 1) & 0x0f;
  const { frame, bodyOffset } = frameOf(0x30 | flags, buf.subarray(1));
  const p = expectProtocolErrors(() => decodePublish(frame, flags, bodyOffset, v5));
  if (p === undefined) return;
  const again = encodePublish(p.topic, p.payload, p.qos, p.retain, p.dup, p.packetId, v5, p.properties);
  const first = again.bytes[0]!;
  let off = 1;
  while (again.bytes[off]! & 0x80) off++;
  const q = decodePublish(again.bytes, first & 0x0f, off + 1, v5);
  if (!isDeepStrictEqual(p, q)) throw new FuzzFinding(`PUBLISH does not survive re-encoding: ${JSON.stringify(p)} != ${JSON.stringify(q)}`);
  const ref = referenceParse(frame, v5 ? 5 : 4);
  if (ref === undefined) return;
  const rp = (ref.properties ?? {}) as Record<string, any>;
  const ours = {
    topic: p.topic,
    payload: p.payload.toString('hex'),
    qos: p.qos,
    dup: p.dup,
    retain: p.retain,
    packetId: p.qos > 0 ? p.packetId : undefined,
    payloadFormatIndicator: p.properties?.payloadFormatIndicator === undefined ? undefined : p.properties.payloadFormatIndicator === 1,
    messageExpiryInterval: p.properties?.messageExpiryInterval,
    topicAlias: p.properties?.topicAlias,
    responseTopic: p.properties?.responseTopic,
    correlationData: p.properties?.correlationData?.toString('hex'),
    contentType: p.properties?.contentType,
    userProperties: plain(p.properties?.userProperties),
  };
  const theirs = {
    topic: ref.topic,
    payload: Buffer.from(ref.payload).toString('hex'),
    qos: ref.qos,
    dup: ref.dup,
    retain: ref.retain,
    packetId: ref.qos > 0 ? ref.messageId : undefined,
    payloadFormatIndicator: rp.payloadFormatIndicator,
    messageExpiryInterval: rp.messageExpiryInterval,
    topicAlias: rp.topicAlias,
    responseTopic: rp.responseTopic,
    correlationData: rp.correlationData === undefined ? undefined : Buffer.from(rp.correlationData).toString('hex'),
    contentType: rp.contentType,
    userProperties: plain(rp.userProperties),
  };
  if (!isDeepStrictEqual(ours, theirs)) throw new FuzzFinding(`PUBLISH read differently from mqtt-packet: ${JSON.stringify(ours)} != ${JSON.stringify(theirs)}`);
}

/**
 * `decodeAck`. Byte 0: bits 0-1 the type (PUBACK..PUBCOMP), bit 2 MQTT 5, bits 4-7 the fixed header flags; the rest is
 * the body. Oracles: an accepted acknowledgement re-encoded by `encodeAck` decodes to the same identifier and reason;
 * mqtt-packet, where it accepts the frame too, reads the same identifier and reason.
 */
export function ack(buf: Buffer): void {
  if (buf.length < 1) return;
  const type = PacketType.PUBACK + (buf[0]! & 3);
  const v5 = (buf[0]! & 4) !== 0;
  const flags = buf[0]! >> 4;
  const { frame, bodyOffset } = frameOf((type << 4) | flags, buf.subarray(1));
  const a = expectProtocolErrors(() => decodeAck(type, flags, frame, bodyOffset, v5));
  if (a === undefined) return;
  if (a.messageId < 1 || a.messageId > 0xffff) throw new FuzzFinding(`${a.cmd} accepted with packet identifier ${a.messageId}`);
  const again = encodeAck(type, a.messageId, a.reasonCode, v5);
  const b = decodeAck(type, again[0]! & 0x0f, again, 2, v5);
  if (!isDeepStrictEqual(a, b)) throw new FuzzFinding(`${a.cmd} does not survive re-encoding: ${JSON.stringify(a)} != ${JSON.stringify(b)}`);
  // where mqtt-packet (which decodeAck replaced for these packets) accepts the frame too, both read the same fields
  const ref = referenceParse(frame, v5 ? 5 : 4);
  if (ref !== undefined && (ref.cmd !== a.cmd || ref.messageId !== a.messageId || (ref.reasonCode ?? 0) !== a.reasonCode)) {
    throw new FuzzFinding(`${a.cmd} read differently from mqtt-packet: ${JSON.stringify(a)} != ${JSON.stringify({ cmd: ref.cmd, messageId: ref.messageId, reasonCode: ref.reasonCode })}`);
  }
}

class Target implements ParseTarget {
  readonly parsingType = 'packet';
  packets: Record<string, unknown>[] = [];
  constructor(public parserSettings: ParserSettings | undefined) {}
  onPacket(p: Record<string, unknown>): void {
    this.packets.push(p);
  }
}

const utf8 = (s: string): Buffer => {
  const b = Buffer.from(s);
  return Buffer.concat([Buffer.from([b.length >> 8, b.length & 0xff]), b]);
};

/**
 * MQTT 5 properties. Byte 0 picks the packet that carries them; the rest is the property block (its Property Length
 * first, as the fuzzer writes it), placed where that packet has it, with valid fields around it. CONNECT, the Will
 * Properties, SUBSCRIBE, UNSUBSCRIBE, DISCONNECT and AUTH go through the mqtt-packet parser with our checks
 * (`newParser`, via the shared `PacketParser`); PUBLISH and PUBACK through our own decoders.
 */
export function properties(buf: Buffer): void {
  if (buf.length < 1) return;
  const props = buf.subarray(1);
  const which = buf[0]! % 8;
  const parser = new PacketParser();
  const v5: ParserSettings = { protocolVersion: 5 };
  const head = Buffer.concat([utf8('MQTT'), Buffer.from([5])]);
  switch (which) {
    case 0: {
      // CONNECT: its own properties
      const body = Buffer.concat([head, Buffer.from([0x02, 0, 30]), props, utf8('c')]);
      expectProtocolErrors(() => parser.parse(new Target(undefined), frameOf(0x10, body).frame));
      return;
    }
    case 1: {
      // CONNECT: the Will Properties (will flag, QoS 1)
      const body = Buffer.concat([head, Buffer.from([0x0e, 0, 30, 0]), utf8('c'), props, utf8('w/t'), utf8('bye')]);
      expectProtocolErrors(() => parser.parse(new Target(undefined), frameOf(0x10, body).frame));
      return;
    }
    case 2: {
      const body = Buffer.concat([Buffer.from([0, 7]), props, utf8('a/#'), Buffer.from([1])]);
      expectProtocolErrors(() => parser.parse(new Target(v5), frameOf(0x82, body).frame));
      return;
    }
    case 3: {
      const body = Buffer.concat([Buffer.from([0, 7]), props, utf8('a/#')]);
      expectProtocolErrors(() => parser.parse(new Target(v5), frameOf(0xa2, body).frame));
      return;
    }
    case 4: {
      const body = Buffer.concat([Buffer.from([0x04]), props]);
      expectProtocolErrors(() => parser.parse(new Target(v5), frameOf(0xe0, body).frame));
      return;
    }
    case 5: {
      const body = Buffer.concat([Buffer.from([0x18]), props]);
      expectProtocolErrors(() => parser.parse(new Target(v5), frameOf(0xf0, body).frame));
      return;
    }
    case 6: {
      const body = Buffer.concat([utf8('t/x'), Buffer.from([0, 9]), props, Buffer.from('payload')]);
      const { frame, bodyOffset } = frameOf(0x32, body);
      expectProtocolErrors(() => decodePublish(frame, 2, bodyOffset, true));
      return;
    }
    default: {
      const body = Buffer.concat([Buffer.from([0, 9, 0x10]), props]);
      const { frame, bodyOffset } = frameOf(0x40, body);
      expectProtocolErrors(() => decodeAck(PacketType.PUBACK, 0, frame, bodyOffset, true));
    }
  }
}

/** Maximum packet sizes the framer target tries: the default of its corpus first, then small ones (the oversize check). */
const MAX_SIZES = [4096, 2, 5, 16, 64, 128, 300, 1024] as const;

class Collect implements FrameSink {
  frames: Buffer[] = [];
  stopped = false;
  constructor(private readonly parse: (type: number, flags: number, frame: Buffer, bodyOffset: number) => void) {}
  frame(type: number, flags: number, frame: Buffer, bodyOffset: number): void {
    this.frames.push(Buffer.from(frame));
    this.parse(type, flags, frame, bodyOffset);
  }
}

/**
 * The framer and everything behind it. Byte 0: bit 0 MQTT 5, bits 1-4 where to split the rest into reads
 * (a stride of 1..16 bytes), bits 5-7 the maximum packet size (MAX_SIZES). Each frame goes to the decoder a connection would use (PUBLISH, the
 * acknowledgements, the mqtt-packet parser for the rest; a decoder's MqttProtocolError ends that stream as it ends
 * the connection). Oracles: the same frames, packets and outcome whether the bytes come in one read, in reads of
 * the stride, or one byte at a time; each frame's length is what its fixed header says; and the broker's parser,
 * shared by all connections (parser.ts), gives this stream the same packets when another connection's packets (of the
 * other protocol version, a CONNECT among them) are parsed between its frames.
 */
export function framer(buf: Buffer): void {
  if (buf.length < 1) return;
  const v5 = (buf[0]! & 1) === 1;
  const stride = ((buf[0]! >> 1) & 0x0f) + 1;
  const maxPacketSize = MAX_SIZES[buf[0]! >> 5]!;
  const bytes = buf.subarray(1);
  const otherVersion = v5 ? 4 : 5;
  const others = [
    mqttPacket.generate({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: otherVersion, clean: true, clientId: 'other', keepalive: 10 } as never, { protocolVersion: otherVersion } as never),
    mqttPacket.generate({ cmd: 'subscribe', messageId: 3, subscriptions: [{ topic: 'o/#', qos: 1 }] } as never, { protocolVersion: otherVersion } as never),
    mqttPacket.generate({ cmd: 'unsubscribe', messageId: 4, unsubscriptions: ['o/#'] } as never, { protocolVersion: otherVersion } as never),
  ];
  const run = (reads: Buffer[], interleave: boolean): { frames: Buffer[]; packets: string; error: string | undefined } => {
    const parser = new PacketParser();
    const other = new Target(undefined);
    let turn = 0;
    const target = new Target(v5 ? { protocolVersion: 5 } : { protocolVersion: 4 });
    const sink = new Collect((type, flags, frame, bodyOffset) => {
      if (type === PacketType.PUBLISH) decodePublish(frame, flags, bodyOffset, v5);
      else if (type >= PacketType.PUBACK && type <= PacketType.PUBCOMP) decodeAck(type, flags, frame, bodyOffset, v5);
      else {
        if (interleave) parser.parse(other, others[Math.min(turn++, others.length - 1)]!);
        parser.parse(target, frame);
      }
    });
    const f = new Framer(sink, maxPacketSize);
    let error: string | undefined;
    try {
      for (const r of reads) f.push(r);
    } catch (err) {
      if (!(err instanceof MqttProtocolError)) throw err;
      error = err.message;
    }
    return { frames: sink.frames, packets: JSON.stringify(target.packets), error };
  };
  const whole = run([bytes], true);
  for (const fr of whole.frames) {
    let off = 1;
    let len = 0;
    let mul = 1;
    for (;;) {
      const b = fr[off++]!;
      len += (b & 0x7f) * mul;
      mul *= 128;
      if ((b & 0x80) === 0) break;
    }
    if (off + len !== fr.length) throw new FuzzFinding(`frame of ${fr.length} bytes announces ${off + len}`);
  }
  const strided: Buffer[] = [];
  for (let i = 0; i < bytes.length; i += stride) strided.push(bytes.subarray(i, i + stride));
  const singles: Buffer[] = [];
  for (let i = 0; i < bytes.length; i++) singles.push(bytes.subarray(i, i + 1));
  for (const [name, reads] of [['stride', strided], ['byte by byte', singles]] as const) {
    const other = run(reads, false);
    if (!isDeepStrictEqual(whole, other)) throw new FuzzFinding(`framing read ${name} differs from one read: ${JSON.stringify({ whole, other })}`);
  }
}

/** What a limit verdict says: none, a malformed length, or a packet of N bytes over the limit. */
function verdict(reason: string | undefined): string {
  if (reason === undefined) return 'ok';
  if (/malformed|longer than 4 bytes/.test(reason)) return 'malformed length';
  const m = /packet of (\d+) bytes/.exec(reason);
  return m ? `too large: ${m[1]}` : `other: ${reason}`;
}

/**
 * The bridge's inbound scanner (`MqttPacketScanner`, src/links/mqtt-guard.ts), which follows the fixed headers of what
 * a remote broker sends where we are the client. Byte 0: bits 0-3 a stride of 1..16 bytes, bits 4-6 the maximum
 * packet size (MAX_SIZES). Oracles: the same verdict whatever the reads; and the same verdict as the server's
 * `Framer` on the same bytes (both follow MQTT fixed headers with the same limit), with the packets the scanner counted
 * (it counts a packet at its header) at most one ahead of the frames the framer completed.
 */
export function scanner(buf: Buffer): void {
  if (buf.length < 1) return;
  const stride = (buf[0]! & 0x0f) + 1;
  const maxPacketSize = MAX_SIZES[(buf[0]! >> 4) & 7]!;
  const bytes = buf.subarray(1);
  const scan = (reads: Buffer[]): { verdict: string; packets: number } => {
    const sc = new MqttPacketScanner({ maxPacketSize, maxPings: Number.MAX_SAFE_INTEGER });
    for (const r of reads) {
      const why = sc.scan(r);
      if (why !== undefined) return { verdict: verdict(why), packets: sc.packets };
    }
    return { verdict: 'ok', packets: sc.packets };
  };
  const whole = scan([bytes]);
  const reads: Buffer[] = [];
  for (let i = 0; i < bytes.length; i += stride) reads.push(bytes.subarray(i, i + stride));
  const split = scan(reads);
  if (!isDeepStrictEqual(whole, split)) throw new FuzzFinding(`scanner: one read ${JSON.stringify(whole)}, reads of ${stride} ${JSON.stringify(split)}`);
  const sink = new Collect(() => undefined);
  let framed = 'ok';
  try {
    new Framer(sink, maxPacketSize).push(bytes);
  } catch (err) {
    if (!(err instanceof MqttProtocolError)) throw err;
    framed = verdict(err.message);
  }
  if (framed !== whole.verdict) throw new FuzzFinding(`scanner says ${whole.verdict}, the server's framer ${framed}`);
  const n = sink.frames.length;
  if (whole.packets < n || whole.packets > n + 1) throw new FuzzFinding(`scanner counted ${whole.packets} packets, the framer completed ${n}`);
}

export const TARGETS = { publish, ack, properties, framer, scanner } as const;
export type TargetName = keyof typeof TARGETS;
