import { connect, type NatsConnection, type Subscription } from '@nats-io/transport-node';
import { z } from 'zod';
import type { Advertisement } from './records.js';
import type { DiscoveredTable } from './table.js';

/**
 * Discovery over NATS, for brokers federated through NATS that share no multicast link. Our own connection
 * (not the integration link's) publishes on `DiscoveryManager.nats.subject`:
 * - `{"kind":"announce", "ttl": s, "server": {...DiscoveredServersDTO without via}}` at start and every
 *   `nats.interval` ms; a peer keeps it for `ttl` seconds after it last heard it;
 * - `{"kind":"query"}` at start, so the peers announce at once (each answers at most once a second);
 * - `{"kind":"goodbye", "serverName": ...}` on stop: the peers drop the entry at once.
 * Messages larger than 64 KiB or not matching the shape are ignored.
 */

export const MAX_MESSAGE = 65536;

const ServiceSchema = z.object({
  protocol: z.string().max(255),
  port: z.number().int().min(0).max(65535),
  transport: z.string().max(255),
  addresses: z.array(z.string().max(255)).max(64),
  properties: z.record(z.string().max(255), z.string().max(1024)),
});
const ServerSchema = z.object({
  serverName: z.string().min(1).max(255),
  systemTopicPrefix: z.string().max(255).optional(),
  schemaSupport: z.boolean().optional(),
  schemaPrefix: z.string().max(255).optional(),
  version: z.string().max(255).optional(),
  buildDate: z.string().max(255).optional(),
  services: z.record(z.string().max(255), ServiceSchema),
});
const MessageSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('announce'), ttl: z.number().int().min(1).max(86400), server: ServerSchema }),
  z.object({ kind: z.literal('goodbye'), serverName: z.string().min(1).max(255) }),
  z.object({ kind: z.literal('query'), serverName: z.string().max(255).optional() }),
]);

export interface NatsTarget {
  url: string;
  user?: string;
  pass?: string;
}

export interface NatsAnnouncerOptions {
  target: NatsTarget;
  subject: string;
  interval: number;
  ttl: number;
  ownName: string;
  table: DiscoveredTable;
  log: { warn(obj: object, msg: string): void; debug(obj: object, msg: string): void };
}

export class NatsAnnouncer {
  private nc: NatsConnection | undefined;
  private sub: Subscription | undefined;
  private timer: NodeJS.Timeout | undefined;
  private lastAnswer = 0;
  private errorCb: (err: Error) => void = () => {};
  private closing: Promise<void> | undefined;
  private ad: Advertisement | undefined;

  constructor(private readonly opts: NatsAnnouncerOptions) {}

  onError(cb: (err: Error) => void): void {
    this.errorCb = cb;
  }

  async open(ad: Advertisement): Promise<void> {
    this.ad = ad;
    const { target } = this.opts;
    const servers = target.url.replace(/^tls:\/\//, 'nats://');
    this.nc = await connect({
      servers,
      ...(target.user !== undefined ? { user: target.user } : {}),
      ...(target.pass !== undefined ? { pass: target.pass } : {}),
      ...(target.url.startsWith('tls://') ? { tls: {} } : {}),
      name: `switchyard-discovery ${this.opts.ownName}`,
      timeout: 5000,
      reconnect: true,
      maxReconnectAttempts: -1,
    });
    const nc = this.nc;
    void nc.closed().then((err) => {
      if (!this.closing) this.errorCb(err instanceof Error ? err : new Error('NATS connection closed'));
    });
    this.sub = nc.subscribe(this.opts.subject, { callback: (err, msg) => (err ? undefined : this.receive(msg.data)) });
    this.send({ kind: 'query', serverName: this.opts.ownName });
    this.announce();
    this.timer = setInterval(() => this.announce(), this.opts.interval);
    this.timer.unref();
    await nc.flush();
  }

  private send(m: unknown): void {
    try {
      this.nc?.publish(this.opts.subject, JSON.stringify(m));
    } catch (err) {
      this.opts.log.debug({ err: (err as Error).message }, 'discovery: NATS publish failed');
    }
  }

  private announce(): void {
    if (!this.ad) return;
    const a = this.ad;
    const services: Record<string, unknown> = {};
    for (const s of a.services) services[s.key] = { protocol: s.protocol, port: s.port, transport: s.transport, addresses: a.addresses, properties: s.txt };
    this.send({ kind: 'announce', ttl: this.opts.ttl, server: { ...a.facts, services } });
  }

  private receive(data: Uint8Array): void {
    if (data.byteLength > MAX_MESSAGE) return;
    let parsed;
    try {
      parsed = MessageSchema.safeParse(JSON.parse(Buffer.from(data).toString('utf8')));
    } catch {
      return;
    }
    if (!parsed.success) return;
    const m = parsed.data;
    const t = this.opts.table;
    if (m.kind === 'query') {
      if (m.serverName === this.opts.ownName) return;
      const now = Date.now();
      if (now - this.lastAnswer < 1000) return;
      this.lastAnswer = now;
      this.announce();
      return;
    }
    if (m.kind === 'goodbye') {
      if (m.serverName !== this.opts.ownName) t.removeServer(m.serverName, 'nats');
      return;
    }
    const s = m.server;
    if (s.serverName === this.opts.ownName) return;
    const facts = { serverName: s.serverName, systemTopicPrefix: s.systemTopicPrefix, schemaSupport: s.schemaSupport, schemaPrefix: s.schemaPrefix, version: s.version, buildDate: s.buildDate };
    // a service the announcement no longer names goes at once
    t.removeServer(s.serverName, 'nats');
    for (const [key, svc] of Object.entries(s.services)) t.upsert(facts, key, svc, 'nats', m.ttl);
  }

  /** Sends the goodbye and closes the connection. Idempotent. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      clearInterval(this.timer);
      const nc = this.nc;
      if (!nc || nc.isClosed()) return;
      this.send({ kind: 'goodbye', serverName: this.opts.ownName });
      try {
        await Promise.race([nc.flush(), new Promise((r) => setTimeout(r, 1000))]);
        this.sub?.unsubscribe();
        await nc.close();
      } catch {
        /* already gone */
      }
    })();
    return this.closing;
  }
}
