/**
 * MQTT session state (MQTT 5 §4.1): what outlives a network connection when the session is persistent. The
 * subscriptions themselves live in the engine (durable subscriptions hold messages while the session is offline);
 * the session keeps the subscription options, the packet ids in flight and the QoS 2 exchanges.
 */
import type { Engine, PublishOptions, Subscription } from '../../engine/index.js';

export interface StoredSubscription {
  filter: string;
  qos: 0 | 1 | 2;
  nl: boolean;
  rap: boolean;
  rh: 0 | 1 | 2;
  id?: number;
}

/** What the store keeps of a persistent session (sublevel `mqttSessions`, key `mqtt:<clientId>`). */
export interface SessionRecord {
  clientId: string;
  protocolVersion: number;
  expiry: number;
  subscriptions: StoredSubscription[];
  /**
   * Read from records written by older versions only: packet-id state now lives in the engine store's `s!` records
   * (see `MqttSession` below), written in the same batch as the messages they refer to.
   */
  pubrel?: number[];
  inbound?: number[];
  disconnectedAt?: number;
  username?: string;
  /** A delayed will not yet published (MQTT 5 will delay): published at `dueAt` unless the client returns. */
  pendingWill?: StoredWill;
}

/** A pending will as stored: Buffers as Base64. */
export interface StoredWill {
  topic: string;
  payload: string;
  qos: 0 | 1 | 2;
  retain: boolean;
  delay: number;
  origin: string;
  dueAt: number;
  properties?: Omit<NonNullable<WillMessage['properties']>, 'correlationData'> & { correlationData?: string };
}

export function storeWill(w: { will: WillMessage; origin: string; dueAt: number }): StoredWill {
  const { correlationData, ...props } = w.will.properties ?? {};
  return {
    topic: w.will.topic,
    payload: w.will.payload.toString('base64'),
    qos: w.will.qos,
    retain: w.will.retain,
    delay: w.will.delay,
    origin: w.origin,
    dueAt: w.dueAt,
    properties: w.will.properties ? { ...props, ...(correlationData ? { correlationData: correlationData.toString('base64') } : {}) } : undefined,
  };
}

export function loadWill(w: StoredWill): { will: WillMessage; origin: string; dueAt: number } {
  const { correlationData, ...props } = w.properties ?? {};
  return {
    will: {
      topic: w.topic,
      payload: Buffer.from(w.payload, 'base64'),
      qos: w.qos,
      retain: w.retain,
      delay: w.delay,
      properties: w.properties ? { ...props, ...(correlationData ? { correlationData: Buffer.from(correlationData, 'base64') } : {}) } : undefined,
    },
    origin: w.origin,
    dueAt: w.dueAt,
  };
}

export interface Outbound {
  /** Undefined for PUBREL-stage entries restored from the store. */
  sub: Subscription | undefined;
  msgId: number;
  qos: 1 | 2;
  /** 1: PUBLISH sent, waiting for PUBACK / PUBREC; 2: PUBREL sent, waiting for PUBCOMP. */
  stage: 1 | 2;
}

export interface WillMessage {
  topic: string;
  payload: Buffer;
  qos: 0 | 1 | 2;
  retain: boolean;
  delay: number;
  properties?: {
    payloadFormatIndicator?: number;
    messageExpiryInterval?: number;
    contentType?: string;
    responseTopic?: string;
    correlationData?: Buffer;
    userProperties?: Record<string, string | string[]>;
  };
}

/** What a session knows of the connection it is attached to (the connection is `MqttConnection`, types.ts `MqttConn`). */
export interface SessionConnection {
  readonly id: number;
  close(why: string, reasonCode?: number, reasonString?: string): void;
}

export class MqttSession {
  readonly sessionId: string;
  /** Session Expiry Interval in seconds; 0 = the session ends with the connection. */
  expiry = 0;
  protocolVersion = 4;
  // The maps and sets below are made on first use (getters): an idle client with no subscription and nothing in
  // flight keeps none of them (an empty Map or Set is about 150-180 bytes of heap; seven of them per session).
  private subsMap: Map<string, { opts: StoredSubscription; sub: Subscription }> | undefined;
  private outboundMap: Map<number, Outbound> | undefined;
  private redeliverMap: Map<string, number> | undefined;
  private reservedSet: Set<number> | undefined;
  private inboundSet: Set<number> | undefined;
  private releasedSet: Set<number> | undefined;
  private blockedSet: Set<Subscription> | undefined;
  get subs(): Map<string, { opts: StoredSubscription; sub: Subscription }> {
    return (this.subsMap ??= new Map());
  }
  get outbound(): Map<number, Outbound> {
    return (this.outboundMap ??= new Map());
  }
  /**
   * `${sub.id}:${msg.id}` → packet id of a PUBLISH sent and not acknowledged (resent with DUP and the same id). Kept
   * for persistent sessions only (MqttConnection.deliver): a PUBLISH is sent again only when its session outlived the
   * connection it was sent on, and a session that is not persistent ends with its connection.
   */
  get redeliver(): Map<string, number> {
    return (this.redeliverMap ??= new Map());
  }
  /** Whether `redeliver` has entries (without making the map). */
  get hasRedeliveries(): boolean {
    return this.redeliverMap !== undefined && this.redeliverMap.size > 0;
  }
  /**
   * A PUBLISH of message `msgId` to subscription `subId` was acknowledged (or dropped): its packet id is no longer
   * one to resend it with. The key is made only when there are entries (it turns a 16-digit message id into text).
   */
  forgetRedelivery(subId: number, msgId: number): void {
    if (this.redeliverMap !== undefined && this.redeliverMap.size > 0) this.redeliverMap.delete(`${subId}:${msgId}`);
  }
  /**
   * Packet ids of unacknowledged outbound PUBLISHes whose connection went away (or restored from the store): kept
   * out of `allocatePid` so the message is resent with DUP and this same id [MQTT-4.4.0-1].
   */
  get reserved(): Set<number> {
    return (this.reservedSet ??= new Set());
  }
  /** Inbound QoS 2 packet ids accepted (PUBREC sent or pending) and waiting for PUBREL: a resent PUBLISH is not delivered again. */
  get inbound(): Set<number> {
    return (this.inboundSet ??= new Set());
  }
  /**
   * Inbound QoS 2 packet ids released (PUBREL received; PUBCOMP sent or pending), oldest first, at most
   * `RELEASED_KEPT`: a PUBREL repeated after a reconnect or a broker restart is answered PUBCOMP 0, not 0x92.
   * An id leaves this set when the client uses it for a new PUBLISH.
   */
  get released(): Set<number> {
    return (this.releasedSet ??= new Set());
  }
  /** Subscriptions that were refused a delivery (no credit); resumed when credit is back. */
  get blocked(): Set<Subscription> {
    return (this.blockedSet ??= new Set());
  }
  private pubOpts: PublishOptions | undefined;
  /** What this session's publishes tell the engine (one object for all of them, not one per message). */
  get publishOptions(): PublishOptions {
    return (this.pubOpts ??= { origin: this.sessionId });
  }
  /** Whether any subscription waits in `blocked` (without making the set). */
  get hasBlocked(): boolean {
    return this.blockedSet !== undefined && this.blockedSet.size > 0;
  }
  /** PUBLISHes in flight to the client (without making the map). */
  get outboundSize(): number {
    return this.outboundMap === undefined ? 0 : this.outboundMap.size;
  }
  /** Promise of the batch holding this session's latest state record (a repeated acknowledgement waits for it). */
  lastStateWrite: Promise<void> | undefined;
  /** `s!` records of this session may be in the store (deleted when the session ends). */
  stateStored = false;
  conn: SessionConnection | undefined;
  username: string | undefined;
  disconnectedAt: number | undefined;
  expiryTimer: NodeJS.Timeout | undefined;
  willTimer: NodeJS.Timeout | undefined;
  pendingWill: { will: WillMessage; origin: string; dueAt: number } | undefined;
  /** Loaded from the store after a restart (not yet reconnected). */
  restored = false;
  private nextPid = 1;

  constructor(readonly clientId: string) {
    this.sessionId = `mqtt:${clientId}`;
  }

  get persistent(): boolean {
    return this.expiry > 0;
  }

  /** A free packet identifier (1..65535) for a server-sent QoS > 0 PUBLISH [MQTT-2.2.1-2]; 0 when all are in use. */
  allocatePid(): number {
    if (this.outbound.size + this.reserved.size >= 65535) return 0;
    let pid = this.nextPid;
    while (this.outbound.has(pid) || this.reserved.has(pid)) pid = pid === 65535 ? 1 : pid + 1;
    this.nextPid = pid === 65535 ? 1 : pid + 1;
    return pid;
  }

  /** Resume every subscription that was refused a delivery. */
  resumeBlocked(): void {
    if (!this.hasBlocked) return;
    const list = [...this.blocked];
    this.blocked.clear();
    for (const s of list) if (!s.closed) s.resume();
  }

  record(): SessionRecord {
    return {
      clientId: this.clientId,
      protocolVersion: this.protocolVersion,
      expiry: this.expiry,
      subscriptions: [...this.subs.values()].map((s) => s.opts),
      disconnectedAt: this.disconnectedAt,
      username: this.username,
      pendingWill: this.pendingWill ? storeWill(this.pendingWill) : undefined,
    };
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Packet-id state in the engine store (`s!` records, Engine.putState), for persistent sessions:
//
//   s!<url-encoded session id>!i!<pid, 5 digits>   inbound QoS 2: [1] accepted, waiting for PUBREL; [2] released
//   s!<url-encoded session id>!o!<pid, 5 digits>   outbound QoS 1/2: JSON { s: stage, q: qos, f: filter, m: message id }
//
// Each record is written in the same group-commit batch as the message change it goes with (the inbound message,
// the deletion of the held copy on PUBREC/PUBACK), and the acknowledgement that depends on it is sent only once
// that batch is written.

/** Released inbound ids kept per session (a repeated PUBREL for one of them gets PUBCOMP 0). */
export const RELEASED_KEPT = 1024;

function pidKey(s: MqttSession, kind: 'i' | 'o', pid: number): string {
  return `${encodeURIComponent(s.sessionId)}!${kind}!${String(pid).padStart(5, '0')}`;
}

/** Prefix of every state record of a session (without the engine's `s!`). */
export function statePrefix(sessionId: string): string {
  return `${encodeURIComponent(sessionId)}!`;
}

/** Parse a state key (without `s!`); null when it is not one of ours. */
export function parseStateKey(key: string): { sessionId: string; kind: 'i' | 'o'; pid: number } | null {
  const m = /^([^!]*)!([io])!(\d{5})$/.exec(key);
  if (m === null) return null;
  let sessionId: string;
  try {
    sessionId = decodeURIComponent(m[1]!);
  } catch {
    return null;
  }
  const pid = Number(m[3]);
  return pid >= 1 && pid <= 65535 ? { sessionId, kind: m[2] as 'i' | 'o', pid } : null;
}

export interface OutboundRecord {
  s: 1 | 2;
  q: 1 | 2;
  f?: string;
  m?: number;
}

const INBOUND_ACCEPTED = Buffer.from([1]);
const INBOUND_RELEASED = Buffer.from([2]);

/** The engine to write this session's state records to: only for a persistent session (or one with records), with a store. */
export function stateEngine(engine: Engine | undefined, s: MqttSession): Engine | undefined {
  return engine !== undefined && engine.hasStore && (s.persistent || s.stateStored) ? engine : undefined;
}

/** Write the inbound state of `pid` (1 accepted, 2 released, 0 gone); returns the batch promise. */
export function storeInbound(engine: Engine, s: MqttSession, pid: number, state: 0 | 1 | 2): Promise<void> {
  s.stateStored = true;
  const key = pidKey(s, 'i', pid);
  const p = state === 0 ? engine.delState(key) : engine.putState(key, state === 1 ? INBOUND_ACCEPTED : INBOUND_RELEASED);
  s.lastStateWrite = p;
  return p;
}

/** Write (or with `rec` undefined delete) the outbound record of `pid`; returns the batch promise. */
export function storeOutbound(engine: Engine, s: MqttSession, pid: number, rec: OutboundRecord | undefined): Promise<void> {
  s.stateStored = true;
  const key = pidKey(s, 'o', pid);
  const p = rec === undefined ? engine.delState(key) : engine.putState(key, Buffer.from(JSON.stringify(rec)));
  s.lastStateWrite = p;
  return p;
}

/** Mark `pid` released (PUBREL received), dropping the oldest released id beyond RELEASED_KEPT; returns the batch promise. */
export function releaseInbound(engine: Engine | undefined, s: MqttSession, pid: number): Promise<void> | undefined {
  s.inbound.delete(pid);
  s.released.delete(pid);
  s.released.add(pid);
  let evict: number | undefined;
  if (s.released.size > RELEASED_KEPT) {
    evict = s.released.values().next().value!;
    s.released.delete(evict);
  }
  if (stateEngine(engine, s) === undefined) return undefined;
  if (evict !== undefined) storeInbound(engine!, s, evict, 0);
  return storeInbound(engine!, s, pid, 2);
}

/** Delete every state record of a session that ends (its ids as known in memory). */
export function dropSessionState(engine: Engine | undefined, s: MqttSession): void {
  if (engine === undefined || engine.isClosed || !engine.hasStore || !s.stateStored) return;
  for (const pid of s.inbound) storeInbound(engine, s, pid, 0);
  for (const pid of s.released) storeInbound(engine, s, pid, 0);
  for (const pid of s.outbound.keys()) storeOutbound(engine, s, pid, undefined);
  for (const pid of s.reserved) storeOutbound(engine, s, pid, undefined);
  s.stateStored = false;
}
