/**
 * Helpers for the Paho-interoperability-style conformance tests (conformance-v311.test.ts, conformance-v5.test.ts):
 * one in-process broker configured as the external suite would meet it (authentication on, anonymous access on, so
 * the default ACL refuses `test/nosubscribe`), mqtt.js clients with an inbox, and the Paho topic names.
 * Our own code, written against the MQTT 3.1.1 / 5.0 standards; no Paho code is copied.
 */
import mqtt, { type IClientOptions, type IPublishPacket, type MqttClient } from 'mqtt';
import { startServer, type TestServer } from '../helpers.js';
import { RawClient, mqttPort } from './helpers.js';

/** The topic names and filters the Paho interoperability suites use. */
export const TOPICS = ['TopicA', 'TopicA/B', 'Topic/C', 'TopicA/C', '/TopicA'] as const;
export const WILDTOPICS = ['TopicA/+', '+/C', '#', '/#', '/+', '+/+', 'TopicA/#'] as const;
export const NOSUBSCRIBE = 'test/nosubscribe';

export interface Received {
  topic: string;
  payload: string;
  packet: IPublishPacket;
}

/** Every PUBLISH a client receives, in order, with waits on arrival (no fixed sleeps). */
export class Inbox {
  readonly messages: Received[] = [];
  private waiters: Array<() => void> = [];
  constructor(readonly client: MqttClient) {
    client.on('message', (topic, payload, packet) => {
      this.messages.push({ topic, payload: payload.toString(), packet });
      const w = this.waiters;
      this.waiters = [];
      for (const f of w) f();
    });
  }

  /** Resolves once `n` messages have arrived in total (throws after `ms`). */
  async count(n: number, ms = 5000): Promise<Received[]> {
    const end = Date.now() + ms;
    while (this.messages.length < n) {
      const left = end - Date.now();
      if (left <= 0) throw new Error(`expected ${n} messages within ${ms} ms, got ${this.messages.length}: ${JSON.stringify(this.messages.map((m) => [m.topic, m.payload]))}`);
      await new Promise<void>((res) => {
        const t = setTimeout(res, left);
        this.waiters.push(() => {
          clearTimeout(t);
          res();
        });
      });
    }
    return this.messages.slice(0, n);
  }

  /**
   * Waits for a message with this payload; returns everything received before it (the probe pattern). mqtt.js emits
   * a QoS 2 message on PUBREL, so publish probes at QoS 2 to keep them behind the QoS 2 messages sent before them.
   */
  async until(payload: string, ms = 5000): Promise<Received[]> {
    const end = Date.now() + ms;
    for (;;) {
      const i = this.messages.findIndex((m) => m.payload === payload);
      if (i >= 0) return this.messages.slice(0, i);
      const left = end - Date.now();
      if (left <= 0) throw new Error(`no message "${payload}" within ${ms} ms`);
      await this.count(this.messages.length + 1, left).catch(() => undefined);
    }
  }

  clear(): void {
    this.messages.length = 0;
  }
}

/** One broker per test file, and the clients the tests open (closed at the end). */
export class PahoBench {
  s!: TestServer;
  port = 0;
  private readonly clients: MqttClient[] = [];
  private readonly raws: RawClient[] = [];
  private readonly inboxes = new WeakMap<MqttClient, Inbox>();

  async start(): Promise<void> {
    // authentication on, anonymous access on: the Paho clients connect without credentials as `anonymous`, whom the
    // default ACL refuses `subscribe` on test/nosubscribe (src/security/defaults.ts)
    this.s = await startServer({ overrides: { AuthManager: { allowAnonymous: true } } });
    this.port = await mqttPort(this.s);
  }

  async stop(): Promise<void> {
    for (const c of this.clients) c.end(true);
    for (const r of this.raws) r.destroy();
    await this.s.close();
  }

  async client(opts: IClientOptions = {}): Promise<MqttClient> {
    return (await this.clientAck(opts)).c;
  }

  /** The inbox of a client of this bench: every message since it connected (it may arrive with the CONNACK). */
  inbox(c: MqttClient): Inbox {
    return this.inboxes.get(c)!;
  }

  /** Connect and hand back the CONNACK packet too. */
  async clientAck(opts: IClientOptions = {}): Promise<{ c: MqttClient; connack: Record<string, any> }> {
    const c = mqtt.connect(`mqtt://127.0.0.1:${this.port}`, { reconnectPeriod: 0, connectTimeout: 5000, ...opts });
    this.clients.push(c);
    this.inboxes.set(c, new Inbox(c));
    const connack = await new Promise<Record<string, any>>((res, rej) => {
      c.once('connect', (p) => res(p as never));
      c.once('error', rej);
    });
    return { c, connack };
  }

  async raw(version = 4): Promise<RawClient> {
    const r = await RawClient.open(this.port, version);
    this.raws.push(r);
    return r;
  }

  /** Remove the retained messages the tests leave on the Paho topics (their cleanRetained). */
  async clearRetained(): Promise<void> {
    const c = await this.client({ protocolVersion: 5 });
    for (const t of [...TOPICS, '$TopicA/B']) await c.publishAsync(t, '', { qos: 1, retain: true });
    await c.endAsync();
  }
}

/** SUBACK codes of one SUBSCRIBE (mqtt.js reports a refused filter as an error that still carries the packet). */
export function subAck(c: MqttClient, subs: Record<string, mqtt.IClientSubscribeOptions>, opts: mqtt.IClientSubscribeProperties = {}): Promise<number[]> {
  return new Promise((resolve) => {
    c.subscribe(subs, opts as never, (err, granted) => {
      const packet = (err as { packet?: { granted?: number[] } } | null)?.packet;
      resolve(packet?.granted ?? (granted ?? []).map((g) => g.qos));
    });
  });
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
