import { hostname } from 'node:os';
import { Bonjour, type Browser, type Service } from 'bonjour-service';
import { BROWSE_TYPES, readTxt, type Advertisement } from './records.js';
import { resolveInterfaces } from './interfaces.js';
import type { DiscoveredTable } from './table.js';

/**
 * mDNS / DNS-SD through bonjour-service (on multicast-dns): publishes the advertisement (probe, announce, answers
 * to queries, goodbye records with TTL 0 on close) and browses for the other servers' records. One bonjour
 * instance per configured interface address (`DiscoveryManager.hostnames`), or one for every interface.
 *
 * bonjour-service publishes PTR records with an 8-hour TTL and the host's name without a domain; we publish every
 * record with `DiscoveryManager.ttl` (default 120 s), the host as `<hostname>.local` and, when interfaces are
 * configured, A records for those addresses only. Its browser never refreshes a service it already knows, so this
 * agent asks again every 40 % of the shortest TTL in play (ours or a known peer's, at least every 2 s apart) and
 * counts any answer as "heard again" (RFC 6762 §5.2 refreshes at 80 %).
 */

/** Services one browser keeps (bonjour-service's own list); beyond it the one heard longest ago is forgotten. */
export const MAX_BROWSED = 4096;

interface Known {
  svc: Service;
  ttl: number;
  type: string;
  instance: string;
  port: number;
  addresses: string[];
  txt: Record<string, unknown> | undefined;
}

interface MdnsLike {
  on(event: string, cb: (...args: any[]) => void): void;
  once(event: string, cb: (...args: any[]) => void): void;
  removeListener(event: string, cb: (...args: any[]) => void): void;
}

export interface MdnsAgentOptions {
  hostnames: string;
  ttl: number;
  ownName: string;
  table: DiscoveredTable;
  log: { warn(obj: object, msg: string): void; debug(obj: object, msg: string): void };
}

export class MdnsAgent {
  private readonly instances: Array<{ bonjour: Bonjour; mdns: MdnsLike; browsers: Browser[]; published: Service[] }> = [];
  private readonly known = new Map<string, Known>();
  private errorCb: (err: Error) => void = () => {};
  private pendingError: Error | undefined;
  private refresh: NodeJS.Timeout | undefined;
  private closing: Promise<void> | undefined;
  private addresses: string[] | undefined;

  constructor(private readonly opts: MdnsAgentOptions) {}

  onError(cb: (err: Error) => void): void {
    this.errorCb = cb;
    if (this.pendingError) cb(this.pendingError);
  }

  private fail(err: Error): void {
    if (this.closing) return;
    this.pendingError ??= err;
    this.errorCb(err);
  }

  /** Opens the sockets (rejects when one cannot bind), publishes the advertisement and starts browsing. */
  async open(ad: Advertisement): Promise<void> {
    this.addresses = resolveInterfaces(this.opts.hostnames);
    const targets: Array<string | undefined> = this.addresses ?? [undefined];
    for (const address of targets) {
      const bonjour = new Bonjour((address ? { interface: address, bind: '0.0.0.0' } : {}) as ConstructorParameters<typeof Bonjour>[0], (err: Error) => this.fail(err)); // multicast-dns options
      const mdns = (bonjour as unknown as { server: { mdns: MdnsLike } }).server.mdns;
      const inst = { bonjour, mdns, browsers: [] as Browser[], published: [] as Service[] };
      this.instances.push(inst);
      await new Promise<void>((resolve, reject) => {
        const onReady = () => {
          mdns.removeListener('error', onOpenError);
          mdns.on('error', (err: Error) => this.fail(err));
          resolve();
        };
        const onOpenError = (err: Error) => {
          mdns.removeListener('ready', onReady);
          reject(new Error(`mDNS socket${address ? ` on ${address}` : ''}: ${err.message}`));
        };
        mdns.once('ready', onReady);
        mdns.once('error', onOpenError);
      });
      mdns.on('response', (packet: { answers?: Array<{ type: string; name: string; ttl: number; data: unknown }> }) => this.heard(packet));
    }
    this.publish(ad);
    for (const inst of this.instances) for (const type of BROWSE_TYPES) inst.browsers.push(this.browse(inst.bonjour, type));
    this.schedule();
  }

  /** The next query: 40 % of the shortest TTL in play, at least 2 s apart. */
  private schedule(): void {
    let ttl = this.opts.ttl;
    for (const k of this.known.values()) ttl = Math.min(ttl, k.ttl);
    this.refresh = setTimeout(() => {
      if (this.closing) return;
      for (const inst of this.instances) {
        for (const b of inst.browsers) {
          b.expire(); // bonjour-service's own list, by the lastSeen this agent keeps current (its 'down' drops table entries)
          b.update();
        }
      }
      this.opts.table.expire();
      this.schedule();
    }, Math.max(2000, ttl * 400));
    this.refresh.unref();
  }

  private publish(ad: Advertisement): void {
    const host = `${hostname().split('.')[0] || 'switchyard'}.local`;
    for (const inst of this.instances) {
      const first = inst === this.instances[0];
      for (const s of ad.services) {
        // probe (RFC 6762 §8.1) once: the other interfaces' instances would hear the first one's answer as a conflict
        const svc = inst.bonjour.publish({ name: s.instance, type: s.type, port: s.port, host, txt: s.txt, protocol: 'tcp', probe: first });
        const records = svc.records.bind(svc);
        const ttl = this.opts.ttl;
        const only = this.addresses;
        svc.records = () => {
          const out = records()
            .filter((r) => (r.type !== 'A' && r.type !== 'AAAA') || !only || only.includes(String(r.data)))
            .map((r) => ({ ...r, ttl: Math.min(r.ttl, ttl) }));
          // a configured interface is advertised even when bonjour-service skips it (loopback is "internal")
          for (const a of only ?? []) if (!out.some((r) => r.type === 'A' && r.data === a)) out.push({ name: host, type: 'A', ttl, data: a });
          return out;
        };
        inst.published.push(svc);
      }
    }
  }

  private browse(bonjour: Bonjour, type: string): Browser {
    const b = bonjour.find({ type, protocol: 'tcp' });
    const up = (s: Service) => {
      this.seen(type, s);
      const list = b.services;
      if (list.length > MAX_BROWSED) {
        const oldest = list.reduce((o, x) => ((x.lastSeen ?? 0) < (o.lastSeen ?? 0) ? x : o));
        (b as unknown as { removeService(fqdn: string): void }).removeService(oldest.fqdn);
      }
    };
    b.on('up', up);
    b.on('txt-update', up);
    b.on('srv-update', up);
    b.on('down', (s: Service) => {
      const k = this.known.get(s.fqdn.toLowerCase());
      this.known.delete(s.fqdn.toLowerCase());
      const read = readTxt(type, s.name, s.port, [], (k?.txt ?? s.txt) as Record<string, unknown> | undefined);
      if (read) this.opts.table.removeService(read.facts.serverName, read.key, 'mdns');
    });
    return b;
  }

  private seen(type: string, s: Service, ttl?: number): void {
    const addresses = [...(s.addresses ?? [])];
    if (addresses.length === 0 && s.referer?.address) addresses.push(s.referer.address);
    this.known.set(s.fqdn.toLowerCase(), { svc: s, ttl: ttl ?? s.ttl ?? this.opts.ttl, type, instance: s.name, port: s.port, addresses, txt: s.txt as Record<string, unknown> | undefined });
    if (this.known.size > MAX_BROWSED * BROWSE_TYPES.length) this.known.delete(this.known.keys().next().value!); // bounded like the browsers' lists
    this.record(type, s.name, s.port, addresses, s.txt as Record<string, unknown> | undefined, ttl ?? s.ttl ?? this.opts.ttl);
  }

  private record(type: string, instance: string, port: number, addresses: string[], txt: Record<string, unknown> | undefined, ttl: number): void {
    const read = readTxt(type, instance, port, addresses, txt);
    if (!read || read.facts.serverName === this.opts.ownName) return;
    this.opts.table.upsert(read.facts, read.key, read.service, 'mdns', ttl);
  }

  /** Any answer naming a service we know refreshes it for the TTL it carries. */
  private heard(packet: { answers?: Array<{ type: string; name: string; ttl: number; data: unknown }> }): void {
    for (const rr of packet.answers ?? []) {
      if (rr.type !== 'PTR' || rr.ttl <= 0 || typeof rr.data !== 'string') continue;
      const k = this.known.get(rr.data.toLowerCase());
      if (!k) continue;
      k.ttl = rr.ttl;
      k.svc.lastSeen = Date.now(); // bonjour-service never refreshes a known service itself
      k.svc.ttl = rr.ttl;
      this.record(k.type, k.instance, k.port, k.addresses, k.txt, rr.ttl);
    }
  }

  /** Sends the goodbye records (TTL 0) and closes the sockets. Idempotent. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      clearTimeout(this.refresh);
      for (const inst of this.instances) {
        for (const b of inst.browsers) b.stop();
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, 2000);
          inst.bonjour.unpublishAll(() => {
            clearTimeout(t);
            resolve();
          });
        });
        await new Promise<void>((resolve) => {
          try {
            inst.bonjour.destroy(() => resolve());
          } catch {
            resolve();
          }
        });
      }
      this.instances.length = 0;
      this.known.clear();
    })();
    return this.closing;
  }
}
