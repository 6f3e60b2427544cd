/**
 * The MQTT bridge transport (`mqtt://`, `mqtts://`, `ws://`, `wss://`): a link to any MQTT 3.1.1/5 broker through
 * mqtt.js, one client per connection attempt (the link actor does the reconnecting, with its backoff).
 *
 * - Persistent remote session: `clean: false` and, in MQTT 5, a Session Expiry Interval (default 7 days), with a
 *   fixed client id (`sy-<server id>-<link name>`, or `protocolConfigs[type=mqtt].clientId`), so QoS >= 1 messages
 *   published on the remote side while the link is down are delivered when it reconnects.
 * - `send()` resolves on PUBACK (QoS 1) / PUBCOMP (QoS 2), after the write for QoS 0; a negative MQTT 5 reason code
 *   or a lost connection rejects it (the link keeps the message in its outbox).
 * - `receive()` subscribes (MQTT 5: with a subscription identifier, No Local, Retain As Published) and acknowledges
 *   a message only after the handler resolved (mqtt.js `handleMessage`: PUBACK / PUBCOMP follow its callback, and the
 *   client reads nothing else meanwhile). A handler that rejects closes the connection without acknowledging, so the
 *   remote broker delivers the message again after the reconnect.
 * - The will comes from the link's `willConfig`. Origin server and hop count travel as MQTT 5 user properties
 *   (`sy-origin`, `sy-hops`), the priority as `sy-priority`; MQTT 3.1.1 carries none of them.
 *
 * - Inbound limits (mqtt-guard.ts): a packet larger than the link's `maxMessageSize` (also sent as Maximum Packet Size
 *   in an MQTT 5 CONNECT), a malformed length or a PINGRESP flood closes the connection with the reason (a WARN, the
 *   link's `lastError`); reading goes in bounded turns with back-pressure.
 *
 * Protocol options (`protocolConfigs: [{ type: mqtt, ... }]`): `protocolVersion` 4 (3.1.1) or 5 (default),
 * `keepAlive` s (30), `sessionExpiryInterval` s (604800), `clientId`, `rejectUnauthorized` (true), `caFile`.
 */
import { readFileSync } from 'node:fs';
import type { Duplex } from 'node:stream';
import mqtt, { type IClientOptions, type IClientPublishOptions, type IPublishPacket, type MqttClient } from 'mqtt';
import { topicMatchesFilter } from '../engine/index.js';
import type { LinkConfig } from './link-config.js';
import { MqttInboundGuard } from './mqtt-guard.js';
import type { DescribedTransport, LinkMessage, ReceiveHandler, ReceiveOptions, TransportContext, TransportDescription, TransportEvent } from './transport.js';

export const ORIGIN_PROPERTY = 'sy-origin';
export const HOPS_PROPERTY = 'sy-hops';
export const PRIORITY_PROPERTY = 'sy-priority';
/** How long a message the persistent session delivers before any receive() matches it may wait for one. */
const HANDLER_WAIT_MS = 10000;

interface MqttOptions {
  protocolVersion: 4 | 5;
  keepAlive: number;
  sessionExpiryInterval: number;
  clientId: string;
  rejectUnauthorized: boolean;
  caFile?: string;
}

function optionsOf(link: LinkConfig, serverId: string): MqttOptions {
  const p = (link.protocolConfigs.find((c) => c.type.toLowerCase() === 'mqtt') ?? {}) as Record<string, unknown>;
  const num = (k: string, d: number, min: number, max: number) => {
    const v = p[k];
    if (v === undefined) return d;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) throw new Error(`protocolConfigs mqtt.${k} must be an integer between ${min} and ${max}`);
    return v;
  };
  const version = num('protocolVersion', 5, 3, 5);
  if (version !== 4 && version !== 5) throw new Error('protocolConfigs mqtt.protocolVersion must be 4 (MQTT 3.1.1) or 5');
  const fixed = `sy-${serverId}-${link.name}`.replace(/[^A-Za-z0-9_.-]/g, '_').slice(0, 128);
  return {
    protocolVersion: version,
    keepAlive: num('keepAlive', 30, 0, 65535),
    sessionExpiryInterval: num('sessionExpiryInterval', 604800, 0, 4294967295),
    clientId: typeof p.clientId === 'string' && p.clientId ? p.clientId : fixed,
    rejectUnauthorized: p.rejectUnauthorized !== false,
    caFile: typeof p.caFile === 'string' ? p.caFile : undefined,
  };
}

function firstString(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

export class MqttTransport implements DescribedTransport {
  private client?: MqttClient;
  private readonly opts: MqttOptions;
  private readonly listeners: Array<(e: TransportEvent) => void> = [];
  private readonly handlers = new Map<number, { filter: string; handler: ReceiveHandler }>();
  private nextSubId = 1;
  private readonly pending = new Set<(err: Error) => void>();
  private closing = false;
  private lost = false;
  /** Incoming messages waiting for the receive() that takes them (see handleIncoming). */
  private readonly waiters = new Set<() => void>();
  /** Why the peer was disconnected for breaking an inbound limit (mqtt-guard.ts). */
  private violation?: string;

  constructor(
    private readonly link: LinkConfig,
    private readonly ctx: TransportContext,
  ) {
    this.opts = optionsOf(link, ctx.serverId);
  }

  describe(): TransportDescription {
    return {
      protocolName: 'MQTT',
      protocolVersion: this.opts.protocolVersion === 5 ? '5' : '3.1.1',
      clientId: this.opts.clientId,
      remoteAddress: this.link.url,
    };
  }

  private emit(e: TransportEvent): void {
    for (const l of this.listeners) l(e);
  }

  onEvent(listener: (e: TransportEvent) => void): void {
    this.listeners.push(listener);
  }

  connect(): Promise<void> {
    const { link, opts } = this;
    const auth = link.authConfig;
    const will = link.willConfig;
    const v5 = opts.protocolVersion === 5;
    const maxPacketSize = this.ctx.maxMessageSize ?? 10 * 1024 * 1024;
    const options: IClientOptions = {
      manualConnect: true, // the stream is wrapped in the inbound guard first
      clientId: opts.clientId,
      clean: false,
      protocolVersion: opts.protocolVersion,
      keepalive: opts.keepAlive,
      reconnectPeriod: 0, // the link actor reconnects, with its backoff and its states
      connectTimeout: this.ctx.connectTimeout ?? 10000,
      resubscribe: false,
      rejectUnauthorized: opts.rejectUnauthorized,
      ...(opts.caFile ? { ca: readFileSync(opts.caFile) } : {}),
      ...(auth?.username !== undefined ? { username: auth.username } : {}),
      ...(auth?.password !== undefined ? { password: auth.password } : {}),
      // [MQTT-3.1.2-24] the server must not send a packet larger than Maximum Packet Size
      ...(v5 ? { properties: { sessionExpiryInterval: opts.sessionExpiryInterval, maximumPacketSize: maxPacketSize } } : {}),
      ...(will
        ? {
            will: {
              topic: will.topic,
              payload: Buffer.from(will.payload, will.payloadEncoding === 'base64' ? 'base64' : 'utf8'),
              qos: will.qos as 0 | 1 | 2,
              retain: will.retain,
              ...(v5
                ? {
                    properties: {
                      ...(will.delayInterval ? { willDelayInterval: will.delayInterval } : {}),
                      ...(will.messageExpiryInterval ? { messageExpiryInterval: will.messageExpiryInterval } : {}),
                      ...(will.contentType ? { contentType: will.contentType } : {}),
                      ...(will.payloadFormatIndicator ? { payloadFormatIndicator: true } : {}),
                    },
                  }
                : {}),
            },
          }
        : {}),
    };
    return new Promise<void>((resolve, reject) => {
      let settled = false;
      let client: MqttClient;
      try {
        client = mqtt.connect(link.url, options);
      } catch (err) {
        reject(err instanceof Error ? err : new Error(String(err)));
        return;
      }
      this.client = client;
      const internals = client as unknown as { streamBuilder: (c: MqttClient) => Duplex };
      const build = internals.streamBuilder;
      const violated = (reason: string): void => {
        if (this.violation !== undefined) return;
        this.violation = reason;
        if (this.closing) return;
        this.ctx.log.warn({ url: link.url, reason }, `MQTT peer ${link.url} broke a limit of the link; disconnected: ${reason}`);
        this.emit({ type: 'error', reason, misbehaving: true });
      };
      internals.streamBuilder = (c) => new MqttInboundGuard(build(c), { maxPacketSize, onViolation: violated });
      // receive() subscribes one filter per SUBSCRIBE, so its SUBACK carries exactly one reason code [MQTT-3.9.3-1].
      // mqtt-packet parses a SUBACK without any; mqtt.js then refuses it and closes the connection, and the close
      // would reach the link first as a bare "connection closed": the reason is recorded here, before mqtt.js acts.
      client.on('packetreceive', (packet) => {
        if (packet.cmd !== 'suback') return;
        const n = packet.granted?.length ?? 0;
        if (n !== 1) violated(`SUBACK ${packet.messageId ?? '?'} carries ${n} reason codes for 1 topic filter [MQTT-3.9.3-1]`);
      });
      client.handleMessage = (packet, done) => this.handleIncoming(packet, done);
      const fail = (why: string) => {
        if (!settled) {
          settled = true;
          client.end(true);
          reject(new Error(`${link.url}: ${this.violation ?? why}`));
        }
      };
      client.once('connect', () => {
        if (settled) return;
        settled = true;
        resolve();
      });
      client.on('error', (err) => {
        if (!settled) fail(err.message);
        else this.emit({ type: 'error', reason: err.message });
      });
      client.on('close', () => {
        if (!settled) return fail('connection closed before CONNACK');
        this.connectionLost('connection closed');
      });
      client.connect();
    });
  }

  /** Why the peer was disconnected for breaking an inbound limit, if it was. */
  get limitViolation(): string | undefined {
    return this.violation;
  }

  private connectionLost(reason: string): void {
    for (const rej of [...this.pending]) rej(new Error(`${this.link.url}: ${reason}`));
    this.pending.clear();
    if (this.closing || this.lost) return;
    this.lost = true;
    this.emit({ type: 'disconnected', reason: this.violation ?? reason });
  }

  /** mqtt.js calls this for every incoming PUBLISH (QoS 2: on PUBREL) and acknowledges once `done` is called. */
  private handlerFor(packet: IPublishPacket): { filter: string; handler: ReceiveHandler } | undefined {
    const subIds = packet.properties?.subscriptionIdentifier;
    const ids = subIds === undefined ? [] : Array.isArray(subIds) ? subIds : [subIds];
    let entry = ids.map((id) => this.handlers.get(id)).find((h) => h !== undefined && topicMatchesFilter(h.filter, packet.topic));
    if (!entry) for (const h of this.handlers.values()) if (topicMatchesFilter(h.filter, packet.topic)) entry = h;
    return entry;
  }

  private handleIncoming(packet: IPublishPacket, done: (err?: Error) => void): void {
    const entry = this.handlerFor(packet);
    if (entry) return this.deliverIncoming(entry, packet, done);
    // A persistent session delivers what it queued right after CONNACK, before the link has subscribed again:
    // wait (mqtt.js reads nothing else meanwhile) for the receive() that takes it. What no receive() takes within
    // HANDLER_WAIT_MS belongs to no linkConfig any more (an earlier configuration): acknowledged and dropped.
    const deadline = Date.now() + HANDLER_WAIT_MS;
    const retry = () => {
      const h = this.handlerFor(packet);
      if (h) return this.deliverIncoming(h, packet, done);
      if (this.closing || this.lost) return; // not acknowledged: delivered again on the next connection
      if (Date.now() >= deadline) return done();
      const timer = setTimeout(() => {
        this.waiters.delete(wake);
        retry();
      }, Math.max(1, deadline - Date.now()));
      const wake = () => {
        clearTimeout(timer);
        this.waiters.delete(wake);
        retry();
      };
      this.waiters.add(wake);
    };
    retry();
  }

  private deliverIncoming(entry: { filter: string; handler: ReceiveHandler }, packet: IPublishPacket, done: (err?: Error) => void): void {
    const props = packet.properties ?? {};
    const user = { ...(props.userProperties ?? {}) } as Record<string, string | string[]>;
    const origin = firstString(user[ORIGIN_PROPERTY]) ?? '';
    const hops = Number(firstString(user[HOPS_PROPERTY]) ?? 0) || 0;
    const priority = firstString(user[PRIORITY_PROPERTY]);
    delete user[ORIGIN_PROPERTY];
    delete user[HOPS_PROPERTY];
    delete user[PRIORITY_PROPERTY];
    const msg: LinkMessage = {
      topic: packet.topic,
      payload: Buffer.isBuffer(packet.payload) ? packet.payload : Buffer.from(packet.payload),
      qos: packet.qos,
      retain: packet.retain,
      originServer: origin,
      hops,
      ...(props.contentType ? { contentType: props.contentType } : {}),
      ...(props.correlationData ? { correlationData: Buffer.from(props.correlationData) } : {}),
      ...(Object.keys(user).length ? { userProperties: user } : {}),
      ...(props.responseTopic ? { responseTopic: props.responseTopic } : {}),
      ...(priority !== undefined && /^\d+$/.test(priority) ? { priority: Number(priority) } : {}),
      ...(props.messageExpiryInterval ? { expiresAt: Date.now() + props.messageExpiryInterval * 1000 } : {}),
    };
    entry.handler(msg).then(
      () => done(),
      (err: Error) => {
        // not stored locally: no acknowledgement; drop the connection so the remote broker delivers it again
        this.emit({ type: 'error', reason: `message on ${packet.topic} not taken: ${err.message}` });
        this.connectionLost(`a received message could not be stored: ${err.message}`);
        this.client?.end(true);
      },
    );
  }

  send(msg: LinkMessage): Promise<void> {
    const client = this.client;
    if (!client || !client.connected || this.lost) return Promise.reject(new Error(`${this.link.url}: not connected`));
    const v5 = this.opts.protocolVersion === 5;
    const opts: IClientPublishOptions = { qos: msg.qos, retain: msg.retain };
    if (v5) {
      const user: Record<string, string | string[]> = { ...(msg.userProperties ?? {}), [ORIGIN_PROPERTY]: msg.originServer, [HOPS_PROPERTY]: String(msg.hops) };
      if (msg.priority !== undefined) user[PRIORITY_PROPERTY] = String(msg.priority);
      opts.properties = {
        userProperties: user,
        ...(msg.contentType ? { contentType: msg.contentType } : {}),
        ...(msg.correlationData ? { correlationData: msg.correlationData } : {}),
        ...(msg.responseTopic ? { responseTopic: msg.responseTopic } : {}),
        ...(msg.expiresAt ? { messageExpiryInterval: Math.max(1, Math.ceil((msg.expiresAt - Date.now()) / 1000)) } : {}),
      };
    }
    return new Promise<void>((resolve, reject) => {
      const rej = (err: Error) => {
        this.pending.delete(rej);
        reject(err);
      };
      this.pending.add(rej);
      client.publish(msg.topic, msg.payload, opts, (err) => {
        if (!this.pending.delete(rej)) return; // already rejected by a lost connection
        if (err) reject(err);
        else resolve();
      });
    });
  }

  receive(opts: ReceiveOptions, handler: ReceiveHandler): Promise<void> {
    const client = this.client;
    if (!client || !client.connected) return Promise.reject(new Error(`${this.link.url}: not connected`));
    const id = this.nextSubId++;
    this.handlers.set(id, { filter: opts.filter, handler });
    queueMicrotask(() => {
      for (const w of [...this.waiters]) w();
    });
    const v5 = this.opts.protocolVersion === 5;
    const filter = opts.shareGroup ? `$share/${opts.shareGroup}/${opts.filter}` : opts.filter;
    return new Promise<void>((resolve, reject) => {
      client.subscribe(
        filter,
        { qos: opts.qos, ...(v5 ? { nl: true, rap: true, properties: { subscriptionIdentifier: id } } : {}) },
        (err, granted) => {
          if (err) return reject(err);
          if (granted?.length !== 1) return reject(new Error(`${this.link.url}: SUBACK for ${filter} carries ${granted?.length ?? 0} reason codes, not 1 [MQTT-3.9.3-1]`));
          const code = granted[0]!.qos;
          if (code >= 0x80) return reject(new Error(`${this.link.url}: subscription to ${filter} refused (reason code 0x${code.toString(16)})`));
          resolve();
          for (const w of [...this.waiters]) w();
        },
      );
    });
  }

  async close(): Promise<void> {
    this.closing = true;
    const client = this.client;
    this.client = undefined;
    for (const rej of [...this.pending]) rej(new Error(`${this.link.url}: link closed`));
    this.pending.clear();
    if (!client) return;
    // a clean DISCONNECT (the will is not published, the session is kept); forced after 1 s
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => client.end(true, () => resolve()), 1000);
      client.end(false, {}, () => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}

export function createMqttTransport(link: LinkConfig, ctx: TransportContext): MqttTransport {
  return new MqttTransport(link, ctx);
}
