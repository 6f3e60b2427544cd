import type { NatsConnection, Subscription } from '@nats-io/transport-node';
import { connectGuarded } from '../links/nats-guard.js';
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
 *
 * A live peer's entry is kept across its announcements: each one refreshes the TTL of the services it names, and only
 * a service it no longer names is removed. A server is gone when its TTL lapsed or it said goodbye, never in between
 * (no "gone" / "found" pair per interval).
 */

export const MAX_MESSAGE = 65536;
/** Servers whose last announced service keys are remembered (to remove a service an announcement stops naming). */
const MAX_REMEMBERED = 1024;

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
  /** server name -> the service keys its last announcement named (insertion order: oldest first; capped). */
  private readonly announced = new Map<string, Set<string>>();

  constructor(private readonly opts: NatsAnnouncerOptions) {}

  onError(cb: (err: Error) => void): void {
    this.errorCb = cb;
  }

  async open(ad: Advertisement): Promise<void> {
    this.ad = ad;
    const { target } = this.opts;
    const servers = target.url.replace(/^tls:\/\//, 'nats://');
    // the inbound limits of links (src/links/nats-guard.ts): nothing larger than 1 MiB (or the server's max_payload)
    // is buffered, reading goes in bounded turns
    this.nc = await connectGuarded(
      {
        servers,
        ...(target.user !== undefined ? { user: target.user } : {}),
        ...(target.pass !== undefined ? { pass: target.pass } : {}),
        ...(target.url.startsWith('tls://') ? { tls: {} } : {}),
        name: `switchyard-discovery ${this.opts.ownName}`,
        timeout: 5000,
        reconnect: true,
        maxReconnectAttempts: -1,
      },
      { maxMessageSize: 1024 * 1024, onViolation: (reason) => this.opts.log.warn({ reason }, `discovery: the NATS server broke a limit; reconnecting: ${reason}`) },
    );
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
      if (m.serverName !== this.opts.ownName) {
        this.announced.delete(m.serverName);
        t.removeServer(m.serverName, 'nats');
      }
      return;
    }
    const s = m.server;
    if (s.serverName === this.opts.ownName) return;
    const facts = { serverName: s.serverName, systemTopicPrefix: s.systemTopicPrefix, schemaSupport: s.schemaSupport, schemaPrefix: s.schemaPrefix, version: s.version, buildDate: s.buildDate };
    // refresh in place (the entry stays: no removal and re-add per announcement), then drop only the services this
    // announcement no longer names
    const keys = new Set(Object.keys(s.services));
    let taken = false;
    for (const [key, svc] of Object.entries(s.services)) taken = t.upsert(facts, key, svc, 'nats', m.ttl) || taken;
    const before = this.announced.get(s.serverName);
    if (before) for (const key of before) if (!keys.has(key)) t.removeService(s.serverName, key, 'nats');
    this.announced.delete(s.serverName);
    if (!taken) return; // refused (table full) or nothing announced: nothing to remember
    this.announced.set(s.serverName, keys);
    if (this.announced.size > MAX_REMEMBERED) this.announced.delete(this.announced.keys().next().value!);
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
