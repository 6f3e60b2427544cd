/**
 * The discovered-servers table: what mDNS and NATS told us about other brokers, one entry per server name, each
 * service with the time it expires (its record's TTL after it was last heard). Bounded:
 * - at most `maxServers` servers: when full, a new server is ignored (counted in `refused`) until an entry expires
 *   or says goodbye — the servers already known stay stable under a flood of new names;
 * - at most `maxServicesPerServer` services per server (further ones ignored);
 * - every string is cut to 255 characters and at most 32 TXT properties are kept per service.
 */

export type DiscoverySource = 'mdns' | 'nats';

export interface DiscoveredService {
  protocol: string;
  port: number;
  transport: string;
  addresses: string[];
  properties: Record<string, string>;
}

/** DiscoveredServersDTO (maps-rest-api §4.7) plus `via` (Switchyard: how it was heard). */
export interface DiscoveredServerDTO {
  serverName: string;
  systemTopicPrefix?: string;
  schemaSupport: boolean;
  schemaPrefix?: string;
  version?: string;
  buildDate?: string;
  services: Record<string, DiscoveredService>;
  via: DiscoverySource[];
}

/** What one announcement says about a server (mDNS: one record of it; NATS: all of it). */
export interface ServerFacts {
  serverName: string;
  systemTopicPrefix?: string;
  schemaSupport?: boolean;
  schemaPrefix?: string;
  version?: string;
  buildDate?: string;
}

interface ServiceSlot {
  service: DiscoveredService;
  source: DiscoverySource;
  expiresAt: number;
}

interface Entry {
  facts: ServerFacts;
  services: Map<string, ServiceSlot>;
}

const MAX_STRING = 255;
const MAX_PROPERTIES = 32;
const MAX_ADDRESSES = 16;

const cut = (s: string) => (s.length > MAX_STRING ? s.slice(0, MAX_STRING) : s);

function clean(service: DiscoveredService): DiscoveredService {
  const properties: Record<string, string> = {};
  for (const [k, v] of Object.entries(service.properties).slice(0, MAX_PROPERTIES)) properties[cut(k)] = cut(String(v));
  return {
    protocol: cut(service.protocol),
    port: Number.isInteger(service.port) && service.port >= 0 && service.port <= 65535 ? service.port : 0,
    transport: cut(service.transport),
    addresses: [...new Set(service.addresses.map(cut))].slice(0, MAX_ADDRESSES),
    properties,
  };
}

export class DiscoveredTable {
  private readonly entries = new Map<string, Entry>();
  /** New servers ignored because the table was full. */
  refused = 0;

  constructor(
    private readonly maxServers: number,
    private readonly maxServicesPerServer: number,
    private readonly now: () => number = Date.now,
    private readonly onChange: (serverName: string, what: 'added' | 'removed') => void = () => {},
  ) {}

  get size(): number {
    return this.entries.size;
  }

  /** Records (or refreshes) one service of a server, heard from `source`, valid for `ttlSeconds`. */
  upsert(facts: ServerFacts, key: string, service: DiscoveredService, source: DiscoverySource, ttlSeconds: number): boolean {
    const name = cut(facts.serverName);
    if (!name) return false;
    let entry = this.entries.get(name);
    if (!entry) {
      if (this.entries.size >= this.maxServers) {
        this.refused++;
        return false;
      }
      entry = { facts: { serverName: name }, services: new Map() };
      this.entries.set(name, entry);
      this.onChange(name, 'added');
    }
    for (const f of ['systemTopicPrefix', 'schemaPrefix', 'version', 'buildDate'] as const) {
      const v = facts[f];
      if (v !== undefined) entry.facts[f] = cut(v);
    }
    if (facts.schemaSupport !== undefined) entry.facts.schemaSupport = facts.schemaSupport;
    const slotKey = `${source}\u0000${cut(key)}`;
    if (!entry.services.has(slotKey) && entry.services.size >= this.maxServicesPerServer) return true;
    entry.services.set(slotKey, { service: clean(service), source, expiresAt: this.now() + ttlSeconds * 1000 });
    return true;
  }

  /** A goodbye for one service (mDNS TTL 0). */
  removeService(serverName: string, key: string, source: DiscoverySource): void {
    const entry = this.entries.get(serverName);
    if (!entry) return;
    entry.services.delete(`${source}\u0000${key}`);
    if (entry.services.size === 0) this.drop(serverName);
  }

  /** A goodbye for everything a server said through `source` (NATS goodbye). */
  removeServer(serverName: string, source: DiscoverySource): void {
    const entry = this.entries.get(serverName);
    if (!entry) return;
    for (const [k, slot] of entry.services) if (slot.source === source) entry.services.delete(k);
    if (entry.services.size === 0) this.drop(serverName);
  }

  /** Drops every service heard from `source` (that source was stopped). */
  clearSource(source: DiscoverySource): void {
    for (const name of [...this.entries.keys()]) this.removeServer(name, source);
  }

  clear(): void {
    for (const name of [...this.entries.keys()]) this.drop(name);
  }

  /** Drops the services whose TTL has passed (and servers left with none). */
  expire(): void {
    const now = this.now();
    for (const [name, entry] of this.entries) {
      for (const [k, slot] of entry.services) if (slot.expiresAt <= now) entry.services.delete(k);
      if (entry.services.size === 0) this.drop(name);
    }
  }

  list(): DiscoveredServerDTO[] {
    this.expire();
    return [...this.entries.values()]
      .map((e) => {
        const services: Record<string, DiscoveredService> = {};
        const via = new Set<DiscoverySource>();
        for (const [k, slot] of e.services) {
          via.add(slot.source);
          const key = k.slice(k.indexOf('\u0000') + 1);
          const have = services[key];
          // the same service heard both ways: one entry, the addresses of both
          services[key] = have ? { ...have, addresses: [...new Set([...have.addresses, ...slot.service.addresses])] } : slot.service;
        }
        return {
          serverName: e.facts.serverName,
          ...(e.facts.systemTopicPrefix !== undefined ? { systemTopicPrefix: e.facts.systemTopicPrefix } : {}),
          schemaSupport: e.facts.schemaSupport ?? false,
          ...(e.facts.schemaPrefix !== undefined ? { schemaPrefix: e.facts.schemaPrefix } : {}),
          ...(e.facts.version !== undefined ? { version: e.facts.version } : {}),
          ...(e.facts.buildDate !== undefined ? { buildDate: e.facts.buildDate } : {}),
          services,
          via: [...via].sort(),
        };
      })
      .sort((a, b) => a.serverName.localeCompare(b.serverName));
  }

  private drop(name: string): void {
    if (this.entries.delete(name)) this.onChange(name, 'removed');
  }
}
