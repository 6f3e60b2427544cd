/**
 * MQTT session state (MQTT 5 §4.1): what outlives a network connection when the session is persistent. The
 * subscriptions themselves live in the engine (durable subscriptions hold messages while the session is offline);
 * the session keeps the subscription options, the packet ids in flight and the QoS 2 exchanges.
 */
import type { Subscription } from '../../engine/index.js';
import type { MqttConnection } from './connection.js';

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
  /** Outbound QoS 2 packet ids that got PUBREC and wait for PUBCOMP. */
  pubrel: number[];
  /** Inbound QoS 2 packet ids published and waiting for PUBREL. */
  inbound: number[];
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

export class MqttSession {
  readonly sessionId: string;
  /** Session Expiry Interval in seconds; 0 = the session ends with the connection. */
  expiry = 0;
  protocolVersion = 4;
  readonly subs = new Map<string, { opts: StoredSubscription; sub: Subscription }>();
  readonly outbound = new Map<number, Outbound>();
  /** `${sub.id}:${msg.id}` → packet id of a PUBLISH sent and not acknowledged (resent with DUP and the same id). */
  readonly redeliver = new Map<string, number>();
  readonly inbound = new Set<number>();
  /** Subscriptions that were refused a delivery (no credit); resumed when credit is back. */
  readonly blocked = new Set<Subscription>();
  conn: MqttConnection | undefined;
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
    if (this.outbound.size >= 65535) return 0;
    let pid = this.nextPid;
    while (this.outbound.has(pid)) pid = pid === 65535 ? 1 : pid + 1;
    this.nextPid = pid === 65535 ? 1 : pid + 1;
    return pid;
  }

  /** Resume every subscription that was refused a delivery. */
  resumeBlocked(): void {
    if (this.blocked.size === 0) return;
    const list = [...this.blocked];
    this.blocked.clear();
    for (const s of list) if (!s.closed) s.resume();
  }

  record(): SessionRecord {
    const pubrel: number[] = [];
    for (const [pid, o] of this.outbound) if (o.stage === 2) pubrel.push(pid);
    return {
      clientId: this.clientId,
      protocolVersion: this.protocolVersion,
      expiry: this.expiry,
      subscriptions: [...this.subs.values()].map((s) => s.opts),
      pubrel,
      inbound: [...this.inbound],
      disconnectedAt: this.disconnectedAt,
      username: this.username,
      pendingWill: this.pendingWill ? storeWill(this.pendingWill) : undefined,
    };
  }
}
