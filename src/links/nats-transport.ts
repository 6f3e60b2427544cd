/**
 * The NATS transport of an integration link (`url: nats://host:port` or `tls://host:port`): one NATS connection per
 * connection attempt (the link actor owns reconnecting and backoff, so the client's own reconnect is off and a lost
 * connection is reported as `disconnected`).
 *
 * Subjects: a topic (already in the remote namespace) becomes a subject as nats-server maps MQTT topics
 * (subject-mapping.ts); a topic with none is refused (`NatsRefusedError`, counted in `counters().refused`).
 *
 * QoS 0 is a core NATS publish. QoS >= 1 is a JetStream publish: send() resolves only after the PubAck (a retried
 * send with the same `LinkMessage.id` is stored once: `Nats-Msg-Id`, the stream's duplicate window is 2 min).
 * Streams: one per first level of the subject space, created when absent, named `SY_<level>` (characters other than
 * letters, digits, `_` and `-` become `_`, followed by a short hash of the level when any was replaced), subjects
 * `<level>` and `<level>.>`, file storage, limits retention: at most `maxAgeSeconds` (default 86 400) old and
 * `maxBytes` (default 1 GiB) in all, the oldest discarded first. Both brokers of a federation derive the same name
 * for the same level; a stream created beforehand by an operator that captures the subjects is used as it is.
 * A JetStream stream stores every message published on its subjects, core publishes included, so a QoS >= 1 pull
 * also receives QoS 0 pushes (delivered with their own QoS, carried in a header).
 *
 * receive(): QoS 0 is a core subscription (a queue subscription for a shared group); QoS >= 1 a durable pull
 * consumer (`durableName`, or `SY_share_<group>_<hash of filter>` for a shared group, one for all brokers, removed by
 * NATS after a day without any member), explicit
 * acks, each message acknowledged only after the handler resolved (a rejection naks it for redelivery in 1 s). The
 * handler is called in stream order; the consumer pulls batches of 2 x `maxInflight` (default 256, at most 1 024)
 * and at most max(4 x `maxInflight`, 1 024) messages are unacknowledged (its max_ack_pending), which bounds those in
 * the handler. A
 * message whose id was handed over already (a redelivery, or a resend stored twice) is acked and dropped: the last
 * 65 536 ids per durable consumer are remembered by the link manager across reconnects and restarts
 * (`ReceiveOptions.seen`, received-ids.ts). The acks of one event-loop turn are sent together, once the ids of their
 * messages are stored.
 *
 * Retained messages: a retained send is also stored in the stream `SY_RETAINED` (subjects `$SY.retained.>`,
 * `max_msgs_per_subject` 1, so it keeps the last value of every subject; at most 1 GiB). When receive() starts it
 * first hands the handler the retained set under its filter (retain = true; an empty payload clears), then live
 * messages.
 *
 * Headers (nats.js MsgHdrs): `Content-Type`, `Sy-Correlation-Data` (base64), `Sy-User-Properties` (JSON object),
 * `Sy-Priority`, `Sy-Expires-At` (epoch ms), `Sy-Response-Topic`, `Sy-Origin` (server id), `Sy-Hops`, `Sy-Qos`,
 * `Sy-Retain` (`1`), `Sy-Payload-Format` (`1`: UTF-8 text), and `Nats-Msg-Id` for JetStream. A message from a plain NATS client has none of them: QoS 0 (1
 * through JetStream), no origin, 0 hops.
 *
 * protocolConfigs: an entry `{ type: nats, ... }` may set `maxAgeSeconds`, `maxBytes`, `ackWaitSeconds` (10),
 * `maxInflight` (256), `stream` (one stream name for every subject of this link, created with `subjects` or the
 * derived ones), `replicas` (1..5, default 1: JetStream replicas of the streams it creates). `url` may list several
 * servers separated by commas (one connection, to the first that answers).
 *
 * `qos0Subjects: { from, to }` (two literal subject prefixes; the cluster's message plane sets it): a QoS 0 message whose
 * subject is under `from` is published under `to` instead (`from.a.b` -> `to.a.b`), a subject space no stream needs to
 * capture, and a receive whose filter is under `from` also subscribes (core NATS) to the same filter under `to`, handing
 * those messages over with their subject under `from` again. So QoS 0 stays out of JetStream: at most once, nothing
 * stored or acknowledged, a receiver that is not connected misses it. A receiver that is behind drops them instead of
 * holding the connection's reading (which makes the server cut a slow consumer off, QoS >= 1 consumers included): a
 * message arriving while more than QOS0_MAX_UNREAD bytes of the connection's input wait unread (nats-guard.ts) or while
 * QOS0_MAX_IN_HANDLERS of them are in the handler is dropped, counted in `counters().qos0Dropped` and reported through
 * `ReceiveOptions.dropped`. The retained copy of a QoS 0 message keeps its `from` subject in SY_RETAINED.
 */
import { createHash } from 'node:crypto';
import { createInbox, headers as natsHeaders, nanos, type MsgHdrs, type NatsConnection, type Subscription, type Msg } from '@nats-io/transport-node';
import {
  AckPolicy,
  DeliverPolicy,
  DiscardPolicy,
  RetentionPolicy,
  StorageType,
  jetstream,
  jetstreamManager,
  type ConsumerMessages,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
} from '@nats-io/jetstream';
import { connectGuarded, HIGH_WATER, unreadBytes } from './nats-guard.js';
import { IdRing, type ReceivedIds } from './received-ids.js';
import { filterToSubject, SubjectMappingError, subjectToTopic, topicToSubject } from './subject-mapping.js';
import { HANDED, type LinkMessage, type LinkTransport, type ReceiveHandler, type ReceiveOptions, type TransportEvent } from './transport.js';

/** A LinkMessage with the optional outbox id (`LinkMessage.id` in newer transport.ts; kept local so either fits). */
export type NatsLinkMessage = LinkMessage & { id?: string };

/** The part of a link's configuration this transport reads (any NetworkConnectionManager entry fits). */
export interface NatsLinkConfig {
  name: string;
  url: string;
  authConfig?: { username?: string; password?: string; tokenConfig?: Record<string, unknown> };
  protocolConfigs?: Array<{ type: string; [key: string]: unknown }>;
}

export interface NatsTransportContext {
  serverId: string;
  log: { info(obj: unknown, msg?: string): void; warn(obj: unknown, msg?: string): void; debug?(obj: unknown, msg?: string): void };
  connectTimeout?: number;
  /** Largest message taken from the server, bytes (lowered to its max_payload); default 10 MiB. */
  maxMessageSize?: number;
}

/** The link's maxMessageSize when the context does not say (NetworkConnectionManager.globalConfig's default). */
export const DEFAULT_MAX_MESSAGE_SIZE = 10 * 1024 * 1024;

/**
 * send() rejects with this when a message can never be taken (no subject form): drop and count, do not retry.
 * `code` 0x90 (MQTT 5 "Topic Name invalid") so the link treats it as a refusal by the remote side.
 */
export class NatsRefusedError extends Error {
  readonly permanent = true;
  readonly code = 0x90;
  constructor(message: string) {
    super(message);
    this.name = 'NatsRefusedError';
  }
}

export const RETAINED_STREAM = 'SY_RETAINED';
export const RETAINED_PREFIX = '$SY.retained.';
const GiB = 1024 * 1024 * 1024;
const DEDUP_IDS = 65536;
const MAX_STREAMS = 100;
/** How long a JetStream publish waits for its PubAck (ms). */
const PUBACK_TIMEOUT = 5000;
/**
 * A JetStream publish is handed to nats.js at once while fewer PubAcks than this are outstanding (a link that keeps
 * up: at 2 000 msg/s one or two); above it, publishes wait for the end of the event-loop turn and leave in one write.
 */
export const PUBLISH_NOW_BELOW = 8;
/** The `streams` key of the one stream named by protocolConfigs `stream`. */
const ANY_STREAM = '\u0000';
/** What send() answers for a QoS 0 publish, handed to nats.js at once (nothing to wait for). */
const SENT: Promise<void> = Promise.resolve();
/**
 * A `qos0Subjects` message is dropped while more than this many bytes received from the server wait unread: three
 * quarters of the guard's HIGH_WATER (where it pauses the socket, which only a burst larger than the rest can reach),
 * about 5 000 small messages. A quarter of it dropped far more in bench/cluster on a loaded machine (a node descheduled
 * for a few ms finds that much waiting): 24 569 and 21 739 msg/s received on B, 529 203 and 514 298 dropped, against
 * 60 351 and 41 766 received, 132 698 and 152 624 dropped at three quarters.
 */
export const QOS0_MAX_UNREAD = (HIGH_WATER * 3) / 4;
/** A `qos0Subjects` message is dropped while this many of them are in the receive handler (their engine write pending). */
export const QOS0_MAX_IN_HANDLERS = 1024;
/**
 * ms a shared group's pull request waits on the server before it is renewed (nats.js's default is 30 s). On
 * nats-server 2.9 the first pull of a consumer just created by another broker can be lost without an answer (the
 * consumer's leader is not ready for it yet); its receiver then got nothing until the renewal 30 s later, so a group's
 * messages went to the one or two brokers whose pull had arrived (test/cluster/messages: 10 000 on one node of three
 * in most runs). Renewed every 5 s, every member's broker is pulling within seconds, and JetStream hands a pull
 * consumer's messages to its waiting pulls in turn. An idle receiver sends one pull per 5 s.
 */
export const SHARE_PULL_EXPIRES_MS = 5000;

export const H = {
  contentType: 'Content-Type',
  correlation: 'Sy-Correlation-Data',
  userProps: 'Sy-User-Properties',
  priority: 'Sy-Priority',
  expiresAt: 'Sy-Expires-At',
  responseTopic: 'Sy-Response-Topic',
  origin: 'Sy-Origin',
  hops: 'Sy-Hops',
  qos: 'Sy-Qos',
  retain: 'Sy-Retain',
  /** `1`: the payload is UTF-8 text (MQTT 5 payload format indicator); absent: unspecified bytes. */
  payloadFormat: 'Sy-Payload-Format',
  msgId: 'Nats-Msg-Id',
} as const;

function shortHash(s: string): string {
  return createHash('sha256').update(s).digest('hex').slice(0, 8);
}

/** A name usable as a JetStream stream or consumer name. */
export function jsName(prefix: string, raw: string): string {
  const clean = raw.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 100);
  return clean === raw ? `${prefix}${clean}` : `${prefix}${clean}_${shortHash(raw)}`;
}

/** The stream name derived for a first subject token (`fed` -> `SY_fed`). */
export function streamNameFor(token: string): string {
  return jsName('SY_', token);
}

function firstToken(subject: string): string {
  const i = subject.indexOf('.');
  return i < 0 ? subject : subject.slice(0, i);
}

/** Is every subject `sub` matches also matched by `filter`? (NATS wildcards `*`, `>`.) */
export function subjectSubsetOf(sub: string, filter: string): boolean {
  const a = sub.split('.');
  const b = filter.split('.');
  for (let i = 0; i < b.length; i++) {
    if (b[i] === '>') return i < a.length;
    if (i >= a.length) return false;
    if (b[i] === '*') {
      if (a[i] === '>') return false;
      continue;
    }
    if (a[i] !== b[i]) return false;
  }
  return a.length === b.length;
}

export function buildHeaders(msg: LinkMessage): MsgHdrs {
  const h = natsHeaders();
  if (msg.contentType) h.set(H.contentType, headerValue(msg.contentType));
  if (msg.correlationData && msg.correlationData.length > 0) h.set(H.correlation, msg.correlationData.toString('base64'));
  if (msg.userProperties && Object.keys(msg.userProperties).length > 0) h.set(H.userProps, JSON.stringify(msg.userProperties));
  if (msg.priority !== undefined) h.set(H.priority, String(msg.priority));
  if (msg.expiresAt) h.set(H.expiresAt, String(msg.expiresAt));
  if (msg.responseTopic) h.set(H.responseTopic, headerValue(msg.responseTopic));
  h.set(H.origin, headerValue(msg.originServer));
  h.set(H.hops, String(msg.hops));
  h.set(H.qos, String(msg.qos));
  if (msg.retain) h.set(H.retain, '1');
  if (msg.payloadFormat === 1) h.set(H.payloadFormat, '1');
  return h;
}

/** A header value as nats.js would send it (trimmed), with CR/LF (which cannot cross in a header) as spaces. */
function headerValue(v: string): string {
  if (v.indexOf('\r') < 0 && v.indexOf('\n') < 0) {
    // the common case, without a regex or a new string: nothing to replace, nothing to trim
    return v.length > 0 && v.charCodeAt(0) > 32 && v.charCodeAt(v.length - 1) > 32 ? v : v.trim();
  }
  return v.replace(/[\r\n]/g, ' ').trim();
}

/**
 * The header block of a link message in the NATS wire form (`NATS/1.0\r\nKey: value\r\n...\r\n`), built directly:
 * nats.js MsgHdrs validates and re-encodes on every set, about 7 % of a pushing broker's CPU (bench/federation).
 * Same keys and values as buildHeaders(); `msgId` adds `Nats-Msg-Id`.
 */
export function encodeHeaders(msg: LinkMessage, msgId?: string): Uint8Array {
  let s = 'NATS/1.0\r\n';
  if (msg.contentType) s += `${H.contentType}: ${headerValue(msg.contentType)}\r\n`;
  if (msg.correlationData && msg.correlationData.length > 0) s += `${H.correlation}: ${msg.correlationData.toString('base64')}\r\n`;
  if (msg.userProperties && Object.keys(msg.userProperties).length > 0) s += `${H.userProps}: ${headerValue(JSON.stringify(msg.userProperties))}\r\n`;
  if (msg.priority !== undefined) s += `${H.priority}: ${msg.priority}\r\n`;
  if (msg.expiresAt) s += `${H.expiresAt}: ${msg.expiresAt}\r\n`;
  if (msg.responseTopic) s += `${H.responseTopic}: ${headerValue(msg.responseTopic)}\r\n`;
  s += `${H.origin}: ${headerValue(msg.originServer)}\r\n${H.hops}: ${msg.hops}\r\n${H.qos}: ${msg.qos}\r\n`;
  if (msg.retain) s += `${H.retain}: 1\r\n`;
  if (msg.payloadFormat === 1) s += `${H.payloadFormat}: 1\r\n`;
  if (msgId !== undefined) s += `${H.msgId}: ${headerValue(msgId)}\r\n`;
  return Buffer.from(s + '\r\n', 'utf8');
}

/**
 * What nats.js publish() needs of its `headers` option: the encoded block. A class, not `{ encode: () => bytes }`:
 * the bundle keeps function names (esbuild keepNames), which turned that arrow into a named-function definition per
 * message (`__name`, 3.2 % of a publishing broker's CPU in bench/federation).
 */
class PreEncodedHeaders {
  constructor(private readonly bytes: Uint8Array) {}
  encode(): Uint8Array {
    return this.bytes;
  }
}

function preEncoded(bytes: Uint8Array): MsgHdrs {
  return new PreEncodedHeaders(bytes) as unknown as MsgHdrs;
}

/** Looks up one header of a received message (first value; an empty one is absent). */
export type HeaderLookup = (key: string) => string | undefined;

/**
 * A lookup over a header block in the wire form (what parseHeaderBlock and nats.js decode accept alike): the first
 * value of a key, trimmed; an empty one is absent. Read from the bytes: the block is scanned once for the offsets of its
 * lines, and a value is decoded only when it is looked up, so a received message costs no string of its whole block,
 * no Map and no string per header name (they were an eighth of what a receiving broker allocated per message, heap
 * sampling in bench/federation, and so of its young-generation collections).
 */
export function parseHeaderBlock(block: Uint8Array): HeaderLookup {
  const b = Buffer.from(block.buffer, block.byteOffset, block.byteLength);
  const n = b.length;
  // per header line: start of the name, the colon, the end of the line
  const lines: number[] = [];
  let at = crlf(b, 0);
  while (at >= 0 && at + 2 < n) {
    const start = at + 2;
    const end = crlf(b, start);
    const stop = end < 0 ? n : end;
    const colon = b.indexOf(0x3a, start);
    if (colon > start && colon < stop) lines.push(start, colon, stop);
    at = end;
  }
  return (k) => {
    for (let i = 0; i < lines.length; i += 3) {
      const start = lines[i]!;
      const colon = lines[i + 1]!;
      if (!nameIs(b, start, colon, k)) continue;
      const v = b.toString('utf8', colon + 1, lines[i + 2]).trim();
      return v === '' ? undefined : v;
    }
    return undefined;
  };
}

/** The offset of the next CR LF in `b` from `from`, or -1. */
function crlf(b: Buffer, from: number): number {
  for (let i = b.indexOf(0x0d, from); i >= 0; i = b.indexOf(0x0d, i + 1)) if (b[i + 1] === 0x0a) return i;
  return -1;
}

/** Whether the bytes `b[start, end)` are the UTF-8 form of `name`. */
function nameIs(b: Buffer, start: number, end: number, name: string): boolean {
  const len = end - start;
  let j = 0;
  for (; j < name.length; j++) {
    const c = name.charCodeAt(j);
    if (c > 0x7f) break;
    if (j >= len || b[start + j] !== c) return false;
  }
  if (j === name.length) return len === name.length;
  // a name with characters outside ASCII (no link header has one): compared as text
  return b.toString('utf8', start, end) === name;
}

/**
 * The headers of a received message as a lookup. Reads the raw header block that nats.js keeps on the message
 * (`_msg.hdr`, `_rdata`) when it is there, so nats.js does not build its MsgHdrs (its decode is about 7 % of a
 * pulling broker's CPU); any other shape goes through `m.headers`.
 */
export function headersOf(m: Msg | JsMsg): HeaderLookup | undefined {
  const impl = ((m as { msg?: unknown }).msg ?? m) as { _msg?: { hdr?: unknown }; _rdata?: unknown };
  const hdr = impl._msg?.hdr;
  if (typeof hdr === 'number' && impl._rdata instanceof Uint8Array) {
    if (hdr < 0) return undefined;
    return parseHeaderBlock(impl._rdata.subarray(0, hdr));
  }
  const h = m.headers;
  if (!h) return undefined;
  return (k) => {
    const v = h.get(k);
    return v === '' ? undefined : v;
  };
}

/** A received NATS message as a LinkMessage (throws SubjectMappingError when the subject is no MQTT topic name). */
export function decodeMessage(subject: string, data: Uint8Array, get: HeaderLookup | undefined, viaJetStream: boolean): NatsLinkMessage {
  const topic = subjectToTopic(subject);
  if (!get) get = () => undefined;
  const qosH = get(H.qos);
  const qos = qosH === '0' || qosH === '1' || qosH === '2' ? (Number(qosH) as 0 | 1 | 2) : viaJetStream ? 1 : 0;
  const msg: NatsLinkMessage = {
    topic,
    payload: Buffer.from(data.buffer, data.byteOffset, data.byteLength),
    qos,
    retain: get(H.retain) === '1',
    originServer: get(H.origin) ?? '',
    hops: Number(get(H.hops) ?? 0) || 0,
  };
  const ct = get(H.contentType);
  if (ct) msg.contentType = ct;
  const cd = get(H.correlation);
  if (cd) msg.correlationData = Buffer.from(cd, 'base64');
  const up = get(H.userProps);
  if (up) {
    try {
      const parsed = JSON.parse(up) as unknown;
      if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) msg.userProperties = parsed as Record<string, string | string[]>;
    } catch {
      /* a foreign header that is not JSON: ignored */
    }
  }
  const pr = get(H.priority);
  if (pr !== undefined && /^\d+$/.test(pr)) msg.priority = Math.min(10, Number(pr));
  const ex = get(H.expiresAt);
  if (ex !== undefined && /^\d+$/.test(ex)) msg.expiresAt = Number(ex);
  const rt = get(H.responseTopic);
  if (rt) msg.responseTopic = rt;
  if (get(H.payloadFormat) === '1') msg.payloadFormat = 1;
  const id = get(H.msgId);
  if (id) msg.id = id;
  return msg;
}

function noop(): void {}

/** What sendAcks needs of nats.js's protocol handler (internal: `NatsConnectionImpl.protocol`). */
interface ProtocolWriter {
  sendCommand(cmd: Uint8Array): void;
}

/**
 * Acknowledges JetStream messages: their `PUB <reply> 4` lines with `+ACK` handed to nats.js's protocol handler as one
 * buffer, which it writes with whatever else leaves in this microtask turn. JsMsg.ack() per message made a publish
 * with its options object, a subject check, a protocol line and its encoding each (about a tenth of what a receiving
 * broker allocated per message in bench/federation's QoS 1 latency scenario). Where nats.js has no such handler (a
 * version without it), or a message has no reply subject, ack() is used. A closed connection takes nothing: JetStream
 * redelivers after ack_wait, and the id is remembered.
 */
function sendAcks(nc: NatsConnection, list: JsMsg[]): void {
  const protocol = (nc as unknown as { protocol?: Partial<ProtocolWriter> }).protocol;
  let lines = '';
  for (const x of list) {
    // the implementation's reply subject (JsMsgImpl.reply; the JsMsg interface does not declare it)
    const reply = (x as JsMsg & { readonly reply?: string }).reply;
    if (protocol?.sendCommand !== undefined && reply && reply.indexOf(' ') < 0 && reply.indexOf('\r') < 0 && reply.indexOf('\n') < 0) {
      lines += `PUB ${reply} 4\r\n+ACK\r\n`;
      continue;
    }
    try {
      x.ack();
    } catch {
      // the connection is gone: JetStream redelivers after ack_wait, and the id is remembered
    }
  }
  if (lines === '' || nc.isClosed()) return;
  try {
    (protocol as ProtocolWriter).sendCommand(Buffer.from(lines, 'latin1'));
  } catch {
    // the connection is gone: as above
  }
}

/** A QoS 0 hand-over: its failure is the message's loss (at most once); nothing is chained when it was taken at once. */
function atMostOnce(p: Promise<void>): void {
  if (p !== HANDED) p.catch(noop);
}

function num(v: unknown, dflt: number, min: number, max: number): number {
  return typeof v === 'number' && Number.isFinite(v) ? Math.min(max, Math.max(min, v)) : dflt;
}

/** The `nats` entry of protocolConfigs, with defaults. */
export function natsOptions(link: NatsLinkConfig) {
  const pc = (link.protocolConfigs ?? []).find((p) => p.type.toLowerCase() === 'nats') ?? { type: 'nats' };
  return {
    maxAgeSeconds: num(pc.maxAgeSeconds, 86400, 1, 365 * 86400),
    maxBytes: num(pc.maxBytes, GiB, 1024 * 1024, 1024 * GiB),
    ackWaitSeconds: num(pc.ackWaitSeconds, 10, 1, 3600),
    maxInflight: num(pc.maxInflight, 256, 1, 65535),
    stream: typeof pc.stream === 'string' && pc.stream.length > 0 ? jsName('', pc.stream) : undefined,
    subjects: Array.isArray(pc.subjects) ? pc.subjects.filter((s): s is string => typeof s === 'string') : undefined,
    // JetStream replicas of the streams this transport creates (the cluster's message plane asks for Cluster.replicas)
    replicas: num(pc.replicas, 1, 1, 5),
    qos0Subjects: qos0SubjectsOf(pc.qos0Subjects),
  };
}

/** A subject prefix of literal tokens (no wildcards, no empty token). */
const LITERAL_PREFIX = /^[^\s.*>]+(\.[^\s.*>]+)*$/;

/**
 * `qos0Subjects`: `{ from, to }`, two literal subject prefixes, neither under the other; anything else is ignored
 * (QoS 0 then goes on the subject of the message, as without the key).
 */
export function qos0SubjectsOf(v: unknown): { from: string; to: string } | undefined {
  if (typeof v !== 'object' || v === null) return undefined;
  const { from, to } = v as { from?: unknown; to?: unknown };
  if (typeof from !== 'string' || typeof to !== 'string' || !LITERAL_PREFIX.test(from) || !LITERAL_PREFIX.test(to)) return undefined;
  if (from === to || from.startsWith(`${to}.`) || to.startsWith(`${from}.`)) return undefined;
  return { from, to };
}

/** A readable reason from a nats.js error. */
function reasonOf(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause = (err as { cause?: unknown }).cause;
  const base = err.message || err.name;
  if (cause instanceof Error && cause.message && !base.includes(cause.message)) return `${base}: ${cause.message}`;
  if (/CONNECTION_REFUSED|ECONNREFUSED/i.test(base)) return 'connection refused';
  return base;
}

interface ActiveReceive {
  stop(): Promise<void>;
}

export class NatsTransport implements LinkTransport {
  private nc?: NatsConnection;
  private js?: JetStreamClient;
  private jsm?: JetStreamManager;
  private closing = false;
  private lostReported = false;
  private readonly listeners: Array<(e: TransportEvent) => void> = [];
  private readonly receives: ActiveReceive[] = [];
  /** first subject token -> stream name (ensured on this connection). */
  private readonly streams = new Map<string, Promise<string>>();
  /** The keys of `streams` whose stream is ensured: send() publishes to them without waiting a promise. */
  private readonly readyStreams = new Set<string>();
  private retainedStream?: Promise<string>;
  private readonly opts: ReturnType<typeof natsOptions>;
  private readonly stats = { refused: 0, duplicatesDropped: 0, qos0Dropped: 0 };
  /** `qos0Subjects` messages in the receive handler (see QOS0_MAX_IN_HANDLERS). */
  private qos0InHandlers = 0;
  private readonly clientName: string;
  private warnedNoRetained = false;
  /** Pipelined JetStream publishes awaiting their PubAck (see jsPublish). */
  private pubInbox?: string;
  private pubSeq = 0;
  private readonly pubPending = new Map<string, { resolve(): void; reject(err: Error): void; deadline: number; subject: string }>();
  private pubSweep?: NodeJS.Timeout;
  /** JetStream publishes waiting for the end of this turn: connection, subject, payload, headers, reply (flat). */
  private pubQueue: unknown[] = [];
  private pubScheduled = false;
  /** Why the server was disconnected for breaking an inbound limit (nats-guard.ts). */
  private violation?: string;
  /** Received messages in the link's handler; reading from the server waits above `maxInHandlers`. */
  private inHandlers = 0;
  private readonly maxInHandlers: number;

  constructor(
    private readonly link: NatsLinkConfig,
    private readonly ctx: NatsTransportContext,
  ) {
    this.opts = natsOptions(link);
    this.clientName = `switchyard:${ctx.serverId}:${link.name}`;
    this.maxInHandlers = 2 * Math.max(this.opts.maxInflight * 4, 1024);
  }

  /**
   * Calls the link's handler, counted in `inHandlers` (which holds reading from the server when too many) and, for a
   * `qos0Subjects` message (`qos0`), in `qos0InHandlers`.
   */
  private handOver(handler: ReceiveHandler, lm: LinkMessage, qos0 = false): Promise<void> {
    this.inHandlers++;
    if (qos0) this.qos0InHandlers++;
    let p: Promise<void>;
    try {
      p = handler(lm);
    } catch (err) {
      p = Promise.reject(err as Error);
    }
    if (p === HANDED) {
      // taken at once: counted out now, no promise chained per message
      this.handedOver(qos0);
      return p;
    }
    return p.finally(() => this.handedOver(qos0));
  }

  /** A message left the receive handler: counted out; reading resumes if it waited for room. */
  private handedOver(qos0: boolean): void {
    this.inHandlers--;
    if (qos0) this.qos0InHandlers--;
    const w = this.roomWaiter;
    if (w !== undefined && this.inHandlers < this.maxInHandlers) {
      this.roomWaiter = undefined;
      w.resolve();
    }
  }

  /** Waiting for `inHandlers` to drop below `maxInHandlers` (the guarded transport's read loop), if it is. */
  private roomWaiter: { promise: Promise<void>; resolve: () => void } | undefined;

  private whenRoom(): Promise<void> {
    if (this.inHandlers < this.maxInHandlers) return Promise.resolve();
    if (this.roomWaiter === undefined) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      this.roomWaiter = { promise, resolve };
    }
    return this.roomWaiter.promise;
  }

  async connect(): Promise<void> {
    if (this.nc) return;
    const url = this.link.url;
    const auth = this.link.authConfig ?? {};
    const token =
      typeof auth.tokenConfig?.token === 'string' ? auth.tokenConfig.token : !auth.username && auth.password ? auth.password : undefined;
    try {
      this.nc = await connectGuarded(
        {
          // a comma-separated list (the cluster's message plane: Cluster.servers): one is picked, the others tried
          servers: url.includes(',') ? url.split(',') : url,
          name: this.clientName,
          reconnect: false,
          timeout: this.ctx.connectTimeout ?? 10000,
          pingInterval: 10000,
          maxPingOut: 2,
          ...(auth.username ? { user: auth.username, pass: auth.password ?? '' } : {}),
          ...(token ? { token } : {}),
          ...(/^tls:/i.test(url) ? { tls: {} } : {}),
        },
        {
          maxMessageSize: this.ctx.maxMessageSize ?? DEFAULT_MAX_MESSAGE_SIZE,
          onViolation: (reason) => {
            if (this.violation !== undefined) return;
            this.violation = reason;
            if (!this.closing) {
              this.ctx.log.warn({ url, reason }, `NATS server ${url} broke a limit of the link; disconnected: ${reason}`);
              this.emit({ type: 'error', reason, misbehaving: true });
            }
          },
          busy: () => this.inHandlers >= this.maxInHandlers,
          notBusy: () => this.whenRoom(),
        },
      );
    } catch (err) {
      throw new Error(`NATS ${url}: ${this.violation ?? reasonOf(err)}`);
    }
    if (this.closing) {
      await this.nc.close().catch(() => undefined);
      throw new Error(`NATS ${url}: closed while connecting`);
    }
    this.js = jetstream(this.nc, { timeout: 5000 });
    this.watch(this.nc);
  }

  private watch(nc: NatsConnection): void {
    void (async () => {
      try {
        for await (const s of nc.status()) {
          if (s.type === 'disconnect') this.reportLost('disconnected from the NATS server');
          else if (s.type === 'error') this.emit({ type: 'error', reason: reasonOf(s.error) });
        }
      } catch {
        /* status iterator ends with the connection */
      }
    })();
    void nc.closed().then((err) => this.reportLost(err ? reasonOf(err) : 'connection closed'));
  }

  private reportLost(reason: string): void {
    if (this.closing || this.lostReported) return;
    this.lostReported = true;
    this.emit({ type: 'disconnected', reason: this.violation ?? reason });
  }

  /** Why the server was disconnected for breaking an inbound limit, if it was. */
  get limitViolation(): string | undefined {
    return this.violation;
  }

  private emit(e: TransportEvent): void {
    for (const l of this.listeners) {
      try {
        l(e);
      } catch (err) {
        this.ctx.log.warn({ err }, 'link transport event listener threw');
      }
    }
  }

  onEvent(listener: (e: TransportEvent) => void): void {
    this.listeners.push(listener);
  }

  counters(): { refused: number; duplicatesDropped: number; qos0Dropped: number } {
    return { ...this.stats };
  }

  describe(): { protocolName: string; protocolVersion: string; clientId: string; remoteAddress?: string } {
    return {
      protocolName: 'NATS',
      protocolVersion: this.nc?.info?.version ?? '',
      clientId: this.clientName,
      remoteAddress: this.nc && !this.nc.isClosed() ? this.nc.getServer() : undefined,
    };
  }

  private conn(): NatsConnection {
    if (!this.nc || this.nc.isClosed() || this.closing) throw new Error('NATS connection is closed');
    return this.nc;
  }

  private async manager(): Promise<JetStreamManager> {
    this.conn();
    if (!this.jsm) {
      try {
        this.jsm = await jetstreamManager(this.nc!, { timeout: 5000 });
      } catch (err) {
        throw new Error(`JetStream is not available on ${this.link.url} (start nats-server with -js): ${reasonOf(err)}`);
      }
    }
    return this.jsm;
  }

  private async ensureStream(name: string, subjects: string[], extra: Record<string, unknown> = {}): Promise<string> {
    const jsm = await this.manager();
    try {
      await jsm.streams.info(name);
      return name;
    } catch (err) {
      if (!/not found/i.test(reasonOf(err))) throw err;
    }
    try {
      await jsm.streams.add({
        name,
        subjects,
        storage: StorageType.File,
        retention: RetentionPolicy.Limits,
        discard: DiscardPolicy.Old,
        max_age: nanos(this.opts.maxAgeSeconds * 1000),
        max_bytes: this.opts.maxBytes,
        duplicate_window: nanos(120_000),
        num_replicas: this.opts.replicas,
        ...extra,
      });
      this.ctx.log.info({ stream: name, subjects }, 'created JetStream stream');
      return name;
    } catch (err) {
      // created meanwhile by the other broker, or an operator's stream already captures these subjects
      try {
        await jsm.streams.info(name);
        return name;
      } catch {
        /* fall through */
      }
      try {
        return await jsm.streams.find(subjects[subjects.length - 1]);
      } catch {
        throw new Error(`cannot create JetStream stream ${name} for ${subjects.join(', ')}: ${reasonOf(err)}`);
      }
    }
  }

  /** The stream that holds `subject` (a literal subject or a filter with a literal first token). */
  private streamFor(subject: string): Promise<string> {
    if (this.opts.stream) {
      let p = this.streams.get(ANY_STREAM);
      if (!p) {
        p = this.ensureStream(this.opts.stream, this.opts.subjects ?? ['>']);
        this.streams.set(ANY_STREAM, p);
        p.then(
          () => this.readyStreams.add(ANY_STREAM),
          () => this.streams.delete(ANY_STREAM),
        );
      }
      return p;
    }
    const token = firstToken(subject);
    if (token === '*' || token === '>') {
      return Promise.reject(
        new Error(`QoS >= 1 over NATS needs a literal first level in the remote namespace (got subject ${subject}); or set protocolConfigs stream/subjects`),
      );
    }
    let p = this.streams.get(token);
    if (!p) {
      if (this.streams.size >= MAX_STREAMS) return Promise.reject(new NatsRefusedError(`more than ${MAX_STREAMS} JetStream streams for one link`));
      p = this.ensureStream(streamNameFor(token), [token, `${token}.>`]);
      this.streams.set(token, p);
      p.then(
        () => this.readyStreams.add(token),
        () => this.streams.delete(token),
      );
    }
    return p;
  }

  /** Where a QoS 0 message on `subject` is published: under `qos0Subjects.to` when under its `from`. */
  private qos0Subject(subject: string): string {
    const q = this.opts.qos0Subjects;
    if (q === undefined || !subject.startsWith(q.from) || subject.charCodeAt(q.from.length) !== 46 /* . */) return subject;
    return q.to + subject.slice(q.from.length);
  }

  private retained(): Promise<string> {
    if (!this.retainedStream) {
      this.retainedStream = this.ensureStream(RETAINED_STREAM, [`${RETAINED_PREFIX}>`], { max_msgs_per_subject: 1, max_age: 0 });
      this.retainedStream.catch(() => (this.retainedStream = undefined));
    }
    return this.retainedStream;
  }

  send(message: LinkMessage): Promise<void> {
    try {
      return this.sendNow(message as NatsLinkMessage);
    } catch (err) {
      return Promise.reject(err as Error);
    }
  }

  /**
   * send() without an async function: a message whose stream is known goes straight to jsPublish (no promise of its
   * own, no await per message: they were a tenth of what a publishing broker allocated per forwarded message in
   * bench/federation's QoS 1 latency scenario). Throws what send() rejects with.
   */
  private sendNow(msg: NatsLinkMessage): Promise<void> {
    let subject: string;
    try {
      subject = topicToSubject(msg.topic);
    } catch (err) {
      this.stats.refused++;
      throw new NatsRefusedError((err as Error).message);
    }
    const nc = this.conn();
    const hdrs = encodeHeaders(msg, msg.qos === 0 ? undefined : msg.id);
    // the server's max_payload covers headers and payload: a larger message would be refused at every retry
    const maxPayload = nc.info?.max_payload ?? 0;
    if (maxPayload > 0 && hdrs.length + msg.payload.length > maxPayload) {
      this.stats.refused++;
      throw new NatsRefusedError(`a message of ${hdrs.length + msg.payload.length} bytes exceeds the NATS server's max_payload (${maxPayload})`);
    }
    if (msg.retain) return this.sendRetained(nc, subject, msg, hdrs);
    if (msg.qos === 0) {
      nc.publish(this.qos0Subject(subject), msg.payload, { headers: preEncoded(hdrs) });
      return SENT;
    }
    if (this.readyStreams.has(this.opts.stream ? ANY_STREAM : firstToken(subject))) return this.jsPublish(nc, subject, msg.payload, preEncoded(hdrs));
    return this.streamFor(subject).then(() => this.jsPublish(nc, subject, msg.payload, preEncoded(hdrs)));
  }

  /** A retained message: its copy in SY_RETAINED first, then the message itself. */
  private async sendRetained(nc: NatsConnection, subject: string, msg: NatsLinkMessage, hdrs: Uint8Array): Promise<void> {
    await this.storeRetained(subject, msg, buildHeaders(msg));
    if (msg.qos === 0) {
      nc.publish(this.qos0Subject(subject), msg.payload, { headers: preEncoded(hdrs) });
      return;
    }
    await this.streamFor(subject);
    await this.jsPublish(nc, subject, msg.payload, preEncoded(hdrs));
  }

  /**
   * A JetStream publish: a core publish with a reply subject under one inbox subscription of this connection,
   * resolved by the PubAck (`{"stream":..,"seq":..}`), rejected by an error reply (`{"error":..}`), a 503 (no stream
   * captures the subject), after PUBACK_TIMEOUT, or when the connection closes. What nats.js `js.publish()` does, less
   * its per-call request/timer machinery, which cost ~4x the CPU per message (bench/federation). At most
   * `inFlight` of the link are pending (the link manager's window), so the map is bounded by it.
   */
  private jsPublish(nc: NatsConnection, subject: string, payload: Uint8Array, h: MsgHdrs): Promise<void> {
    if (!this.pubInbox) {
      const inbox = createInbox();
      this.pubInbox = inbox + '.';
      nc.subscribe(`${inbox}.*`, {
        callback: (err, m: Msg) => {
          if (err) return;
          const p = this.pubPending.get(m.subject);
          if (!p) return; // late (timed out) reply
          this.pubPending.delete(m.subject);
          if (m.headers?.hasError || m.data.length === 0) {
            const code = m.headers?.code ?? 0;
            p.reject(new Error(code === 503 ? `no JetStream stream captures ${p.subject}` : `JetStream publish ${p.subject}: ${m.headers?.description || code}`));
            return;
          }
          // a PubAck is `{"stream":"..","seq":..}` (+ `"duplicate":true`); only an error reply is parsed in full
          const text = Buffer.from(m.data.buffer, m.data.byteOffset, m.data.byteLength).toString('utf8');
          if (!text.includes('"error"')) {
            if (text.includes('"stream"')) p.resolve();
            else p.reject(new Error(`JetStream did not store ${p.subject}`));
            return;
          }
          let ack: { error?: { description?: string } };
          try {
            ack = JSON.parse(text) as typeof ack;
          } catch {
            p.reject(new Error(`JetStream publish ${p.subject}: unreadable PubAck`));
            return;
          }
          p.reject(new Error(`JetStream publish ${p.subject}: ${ack.error?.description ?? 'error'}`));
        },
      });
      this.pubSweep = setInterval(() => {
        const now = Date.now();
        for (const [k, p] of this.pubPending) {
          if (p.deadline > now) break; // insertion order = deadline order
          this.pubPending.delete(k);
          p.reject(new Error(`JetStream publish ${p.subject}: no PubAck within ${PUBACK_TIMEOUT / 1000} s`));
        }
      }, 250);
      this.pubSweep.unref();
      void nc.closed().then(() => this.failPending('NATS connection closed'));
    }
    const reply = this.pubInbox + (this.pubSeq++).toString(36);
    // idle (no publish waiting for this turn's end, few PubAcks outstanding): handed to nats.js now, which writes it
    // at the end of this microtask turn. Under load the publishes wait for the end of the event-loop turn and leave
    // together, one socket write for all of them (nats.js writes once per microtask turn, i.e. once per MQTT read)
    const now = !this.pubScheduled && this.pubPending.size < PUBLISH_NOW_BELOW;
    return new Promise<void>((resolve, reject) => {
      this.pubPending.set(reply, { resolve, reject, deadline: Date.now() + PUBACK_TIMEOUT, subject });
      if (now) {
        try {
          nc.publish(subject, payload, { headers: h, reply });
        } catch (err) {
          this.pubPending.delete(reply);
          reject(err as Error);
        }
        return;
      }
      this.pubQueue.push(nc, subject, payload, h, reply);
      if (!this.pubScheduled) {
        this.pubScheduled = true;
        setImmediate(this.publishQueued);
      }
    });
  }

  /** The JetStream publishes of this turn (see jsPublish); one that nats.js refuses fails its send. */
  private readonly publishQueued = (): void => {
    this.pubScheduled = false;
    const q = this.pubQueue;
    this.pubQueue = [];
    for (let i = 0; i < q.length; i += 5) {
      const reply = q[i + 4] as string;
      try {
        (q[i] as NatsConnection).publish(q[i + 1] as string, q[i + 2] as Uint8Array, { headers: q[i + 3] as MsgHdrs, reply });
      } catch (err) {
        const p = this.pubPending.get(reply);
        this.pubPending.delete(reply);
        p?.reject(err as Error);
      }
    }
  };

  private failPending(reason: string): void {
    if (this.pubSweep) clearInterval(this.pubSweep);
    this.pubSweep = undefined;
    const pending = [...this.pubPending.values()];
    this.pubPending.clear();
    for (const p of pending) p.reject(new Error(`JetStream publish ${p.subject}: ${reason}`));
  }

  /**
   * The retained copy in SY_RETAINED. Without JetStream on the server (a QoS 0 federation on a plain nats-server)
   * retained messages still cross live, but are not kept for brokers that join later (warned once). Another failure
   * fails a QoS >= 1 send (retried from the outbox); a QoS 0 one goes on without its retained copy.
   */
  private async storeRetained(subject: string, msg: NatsLinkMessage, h: MsgHdrs): Promise<void> {
    try {
      await this.retained();
    } catch (err) {
      if (!this.warnedNoRetained) {
        this.warnedNoRetained = true;
        this.ctx.log.warn({ err: reasonOf(err) }, 'retained messages are not kept on NATS (no JetStream): they cross live only');
      }
      if (/JetStream is not available/.test(reasonOf(err)) || msg.qos === 0) return;
      throw err;
    }
    try {
      await this.js!.publish(RETAINED_PREFIX + subject, msg.payload, { headers: h, timeout: 5000, ...(msg.id ? { msgID: `r:${msg.id}` } : {}) });
    } catch (err) {
      if (msg.qos !== 0) throw err;
    }
  }

  async receive(opts: ReceiveOptions, handler: ReceiveHandler): Promise<void> {
    await this.receiveWithHandle(opts, handler);
  }

  /**
   * receive() that also returns a way to stop this one receiver (shared-group receivers come and go with their
   * local groups: nats-shares.ts). A shared-group receiver gets no retained set (MQTT 5 §4.8.2).
   */
  async receiveWithHandle(opts: ReceiveOptions, handler: ReceiveHandler): Promise<{ stop(): Promise<void> }> {
    let filter: string;
    try {
      filter = filterToSubject(opts.filter);
    } catch (err) {
      this.stats.refused++;
      throw new NatsRefusedError(`pull filter ${JSON.stringify(opts.filter)}: ${(err as Error).message}`);
    }
    this.conn();
    if (!opts.shareGroup) {
      // the retained set first (when JetStream is there); a failure here does not stop live traffic
      try {
        await this.pullRetained(filter, handler);
      } catch (err) {
        this.ctx.log.warn({ err: reasonOf(err), filter }, 'could not read the retained messages from NATS');
      }
    }
    let active = opts.qos === 0 ? this.receiveCore(filter, opts, handler) : await this.receiveJetStream(filter, opts, handler);
    const q = this.opts.qos0Subjects;
    if (q !== undefined && subjectSubsetOf(filter, `${q.from}.>`)) {
      // the QoS 0 messages under this filter travel under `to` (see the header of this file)
      const main = active;
      const qos0 = await this.receiveQos0(filter, q, opts, handler);
      active = { stop: async () => void (await Promise.all([main.stop(), qos0.stop()])) };
    }
    this.receives.push(active);
    return {
      stop: async () => {
        const i = this.receives.indexOf(active);
        if (i < 0) return;
        this.receives.splice(i, 1);
        await active.stop();
      },
    };
  }

  private receiveCore(filter: string, opts: ReceiveOptions, handler: ReceiveHandler): ActiveReceive {
    const nc = this.conn();
    const queue = opts.shareGroup ? jsName('SY_share_', opts.shareGroup) : undefined;
    const sub: Subscription = nc.subscribe(filter, {
      ...(queue ? { queue } : {}),
      callback: (err, m: Msg) => {
        if (err) return;
        if (m.subject.startsWith(RETAINED_PREFIX)) return;
        let lm: LinkMessage;
        try {
          lm = decodeMessage(m.subject, m.data, headersOf(m), false);
        } catch (e) {
          if (e instanceof SubjectMappingError) this.stats.refused++;
          return;
        }
        atMostOnce(this.handOver(handler, lm)); // QoS 0: at most once
      },
    });
    return { stop: async () => sub.unsubscribe() };
  }

  /**
   * The core subscription to `filter` moved under `q.to` (a queue subscription for a shared group, one queue per group
   * and filter as its JetStream consumer): each message is handed over with its subject moved back under `q.from`, or
   * dropped while this receiver is behind (QOS0_MAX_UNREAD, QOS0_MAX_IN_HANDLERS), counted and reported.
   */
  private async receiveQos0(filter: string, q: { from: string; to: string }, opts: ReceiveOptions, handler: ReceiveHandler): Promise<ActiveReceive> {
    const nc = this.conn();
    const queue = opts.shareGroup ? jsName('SY_share_', `${opts.shareGroup}_${shortHash(filter)}`) : undefined;
    const toLength = q.to.length;
    const sub: Subscription = nc.subscribe(q.to + filter.slice(q.from.length), {
      ...(queue ? { queue } : {}),
      callback: (err, m: Msg) => {
        if (err || this.closing) return;
        // core NATS echoes this node's own messages back: those are handed over even while behind (the link drops
        // them at once as its own, counted in loopsDropped), so qos0Dropped counts only what another node published
        if ((this.qos0InHandlers >= QOS0_MAX_IN_HANDLERS || unreadBytes(nc) > QOS0_MAX_UNREAD) && headersOf(m)?.(H.origin) !== this.ctx.serverId) {
          this.stats.qos0Dropped++;
          opts.dropped?.();
          return;
        }
        let lm: LinkMessage;
        try {
          lm = decodeMessage(q.from + m.subject.slice(toLength), m.data, headersOf(m), false);
        } catch (e) {
          if (e instanceof SubjectMappingError) this.stats.refused++;
          return;
        }
        atMostOnce(this.handOver(handler, lm, true)); // QoS 0: at most once
      },
    });
    // the server has the subscription once it answered a PING sent after it: from then on no QoS 0 message published
    // anywhere in the NATS cluster is missed (a core publish that reaches the server before the SUB goes nowhere)
    await nc.flush();
    return { stop: async () => sub.unsubscribe() };
  }

  private async receiveJetStream(filter: string, opts: ReceiveOptions, handler: ReceiveHandler): Promise<ActiveReceive> {
    const stream = await this.streamFor(filter);
    const jsm = await this.manager();
    const durable = opts.shareGroup ? jsName('SY_share_', `${opts.shareGroup}_${shortHash(filter)}`) : jsName('', opts.durableName);
    // a stream that captures more than the filter: the filter; one set by an operator that captures less: its own
    const info = await jsm.streams.info(stream);
    const within = info.config.subjects?.some((s) => subjectSubsetOf(filter, s)) ?? false;
    const consumerFilter = within ? filter : undefined;
    try {
      await jsm.consumers.info(stream, durable);
    } catch (err) {
      if (!/not found/i.test(reasonOf(err))) throw err;
      await jsm.consumers.add(stream, {
        durable_name: durable,
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.New,
        ack_wait: nanos(this.opts.ackWaitSeconds * 1000),
        max_ack_pending: Math.max(this.opts.maxInflight * 4, 1024),
        max_deliver: -1,
        // a group's consumer outlives its members on any one broker; NATS removes it after a day without any
        ...(opts.shareGroup ? { inactive_threshold: nanos(86_400_000) } : {}),
        ...(consumerFilter ? { filter_subject: consumerFilter } : {}),
      });
      this.ctx.log.info({ stream, durable, filter: consumerFilter }, 'created JetStream durable consumer');
    }
    const consumer = await this.js!.consumers.get(stream, durable);
    const nc = this.conn();
    // the ids handed over lately (the last 65 536, kept per durable consumer by the link manager across reconnects
    // and restarts: received-ids.ts): a message whose id is among them is a duplicate (a redelivery after its ack was
    // lost, or a resend JetStream stored twice) and is acked and dropped
    const seen: ReceivedIds = opts.seen ?? new IdRing(DEDUP_IDS);
    // acks of one event-loop turn leave in one socket write (nats.js flushes per microtask turn; one write per ack was
    // a fifth of a pulling broker's CPU), after the ids of their messages are durable: bounded by the messages
    // completed in that turn
    let acks: JsMsg[] = [];
    let ackScheduled = false;
    let acking: Promise<void> = Promise.resolve();
    const flushAcks = (): Promise<void> => {
      ackScheduled = false;
      const list = acks;
      acks = [];
      if (list.length === 0) return acking;
      acking = seen.persist().then(() => sendAcks(nc, list));
      return acking;
    };
    const ack = (x: JsMsg) => {
      acks.push(x);
      if (!ackScheduled) {
        ackScheduled = true;
        setImmediate(flushAcks);
      }
    };
    const handle = (m: JsMsg) => {
      let lm: NatsLinkMessage;
      try {
        lm = decodeMessage(m.subject, m.data, headersOf(m), true);
      } catch (e) {
        if (e instanceof SubjectMappingError) this.stats.refused++;
        m.term('no MQTT topic form');
        return;
      }
      if (lm.id && seen.has(lm.id)) {
        this.stats.duplicatesDropped++;
        ack(m);
        return;
      }
      const handed = this.handOver(handler, lm);
      if (handed === HANDED) {
        // taken at once (delivered to connected clients): acknowledged with this turn's others, no promise per message
        if (lm.id) seen.remember(lm.id);
        ack(m);
        return;
      }
      handed.then(
        () => {
          if (lm.id) seen.remember(lm.id);
          ack(m);
        },
        () => {
          try {
            m.nak(1000);
          } catch {
            // the connection is gone: JetStream redelivers after ack_wait
          }
        },
      );
    };
    // the callback form (no async iterator, no promise per message); the messages in the handler are bounded by the
    // consumer's max_ack_pending, since each is acknowledged only once its handler resolved
    const messages: ConsumerMessages = await consumer.consume({
      max_messages: Math.min(1024, this.opts.maxInflight * 2),
      // a consumer or stream deleted on the server ends the consume (and the link reconnects, re-creating it) instead of
      // waiting, Established and idle, for someone to restore it
      abort_on_missing_resource: true,
      ...(opts.shareGroup ? { expires: SHARE_PULL_EXPIRES_MS } : {}),
      callback: (m) => {
        if (!this.closing) handle(m);
      },
    });
    // a consumer that ends on its own (deleted, its stream gone, a fatal error) would leave the link Established and
    // receiving nothing: the connection is reported lost, so the link reconnects (and says why in lastError)
    let stopping = false;
    const endedOnItsOwn = (err: unknown) => {
      if (this.closing || stopping) return;
      const reason = `JetStream consumer ${durable} ended${err ? `: ${reasonOf(err)}` : ''}`;
      this.emit({ type: 'error', reason });
      this.reportLost(reason);
    };
    const ended = messages.closed().then(endedOnItsOwn, endedOnItsOwn);
    return {
      stop: async () => {
        stopping = true;
        await flushAcks();
        messages.stop();
        await ended;
      },
    };
  }

  /** Hands the handler the last retained message of every subject under `filter` (retain = true). */
  private async pullRetained(filter: string, handler: ReceiveHandler): Promise<void> {
    const stream = await this.retained();
    const jsm = await this.manager();
    const ci = await jsm.consumers.add(stream, {
      ack_policy: AckPolicy.None,
      deliver_policy: DeliverPolicy.LastPerSubject,
      filter_subject: RETAINED_PREFIX + filter,
      inactive_threshold: nanos(30_000),
      mem_storage: true,
    });
    try {
      let remaining = ci.num_pending;
      if (remaining === 0) return;
      const consumer = await this.js!.consumers.get(stream, ci.name);
      const now = Date.now();
      while (remaining > 0 && !this.closing) {
        const batch = await consumer.fetch({ max_messages: Math.min(remaining, 512), expires: 2000 });
        let got = 0;
        for await (const m of batch) {
          got++;
          remaining--;
          let lm: LinkMessage;
          try {
            lm = decodeMessage(m.subject.slice(RETAINED_PREFIX.length), m.data, headersOf(m), true);
          } catch {
            this.stats.refused++;
            continue;
          }
          if (lm.expiresAt && lm.expiresAt <= now) continue;
          lm.retain = true;
          await handler(lm).catch((err: unknown) => this.ctx.log.warn({ err: reasonOf(err), topic: lm.topic }, 'retained message from NATS not stored'));
        }
        if (got === 0) break;
      }
    } finally {
      await jsm.consumers.delete(stream, ci.name).catch(() => undefined);
    }
  }

  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    const receives = this.receives.splice(0);
    await Promise.all(receives.map((r) => r.stop().catch(() => undefined)));
    if (this.nc && !this.nc.isClosed()) {
      // acknowledgements already given go out before the connection closes (at most 1 s)
      await Promise.race([this.nc.flush().catch(() => undefined), new Promise((r) => setTimeout(r, 1000))]);
      await this.nc.close().catch(() => undefined);
    }
    this.failPending('transport closed');
  }
}

/** The transport factory of `nats://` and `tls://` links (see the header of this file). */
export function createNatsTransport(link: NatsLinkConfig, ctx: NatsTransportContext): NatsTransport {
  return new NatsTransport(link, ctx);
}
