/**
 * The discovery manager: one singleton actor (`discovery`, actors/discovery/discovery.machine.ts) that advertises
 * this broker over mDNS / DNS-SD and, when a NATS URL is known, on a NATS subject, and keeps the table of the other
 * servers it hears about (`GET /api/v1/server/discovery`). Off unless `DiscoveryManager.enabled` (docs/discovery.md).
 *
 * The actor sits under the `endpoints` supervisor (it advertises the endpoints; the supervisor restarts it if it
 * crashes); the registry finds it as `rt.actor('discovery', '')` wherever it sits.
 */
import { networkInterfaces } from 'node:os';
import { fromCallback, fromPromise, type ActorRefFrom } from 'xstate';
import { z } from 'zod';
import { discoveryMachine, discoveryStateName, type DiscoveryAgentLike, type DiscoveryEvent } from '../../actors/discovery/discovery.machine.js';
import { parseEndpointUrl } from '../config/schema.js';
import { parseFilterParam } from '../engine/selector/selector.js';
import { NotFoundError, ValidationError } from '../errors.js';
import { defineActorKind } from '../runtime/actor-kind.js';
import { BUILD_DATE, VERSION } from '../runtime/monitor.js';
import type { EndpointsService } from '../endpoints/endpoints.service.js';
import type { Runtime, Service } from '../runtime/runtime.js';
import { SCHEMA_TOPIC_PREFIX } from '../schemas/registry.js';
import type { DiscoveryManagerConfig } from './config.js';
import { resolveInterfaces } from './interfaces.js';
import type { MdnsAgent } from './mdns.js';
import type { NatsAnnouncer, NatsTarget } from './nats.js';
import { ENDPOINT_TYPES, factsTxt, instanceName, REST_SERVICE_KEY, REST_TYPE, type Advertisement, type AdvertisedService } from './records.js';
import { DiscoveredTable, type DiscoveredServerDTO } from './table.js';

declare module '../runtime/runtime.js' {
  interface RuntimeServices {
    discovery: DiscoveryService;
  }
}

declare module '../runtime/registry.js' {
  interface ActorKinds {
    discovery: typeof discoveryMachine;
  }
}

export type DiscoveryState = ReturnType<typeof discoveryStateName>;

const stateOf = (snap: { value: unknown; status: string }): DiscoveryState => (snap.status !== 'active' ? 'Failed' : discoveryStateName(snap.value));

/**
 * The discovery kind (src/runtime/actor-kind.ts): the singleton `discovery` under the `endpoints` supervisor (it
 * advertises the endpoints), commanded with started or stopped; opening the mDNS sockets can take a while (15 s).
 */
export const discoveryKind = defineActorKind({
  kind: 'discovery',
  machine: discoveryMachine,
  supervisor: 'endpoints',
  noun: 'Discovery manager',
  singletonLabel: 'The discovery manager',
  stateName: (snap) => stateOf(snap),
  requests: {
    started: { event: { type: 'discovery.start' } satisfies DiscoveryEvent, target: 'Started' },
    stopped: { event: { type: 'discovery.stop' } satisfies DiscoveryEvent, target: 'Stopped' },
  },
  settled: (s) => s !== 'Starting' && s !== 'Stopping',
  timeoutMs: 15000,
  routes: ['PATCH /api/v1/server/discovery'],
});

/** The parts of a NetworkConnectionManager link the announcer needs, read tolerantly (absent section: none). */
const LinkUrlSchema = z.object({
  url: z.string(),
  autoStart: z.boolean().optional(),
  authConfig: z.object({ username: z.string().optional(), password: z.string().optional() }).partial().optional(),
});

/** The NATS server to announce on: DiscoveryManager.nats.url, else the first NATS link in NetworkConnectionManager. */
export function natsTargetOf(config: unknown, dm: DiscoveryManagerConfig): NatsTarget | undefined {
  if (!dm.nats.enabled) return undefined;
  if (dm.nats.url) return { url: dm.nats.url };
  const section = (config as Record<string, unknown>)['NetworkConnectionManager'] as { data?: unknown } | undefined;
  const links = Array.isArray(section?.data) ? section.data : [];
  for (const raw of links) {
    const p = LinkUrlSchema.safeParse(raw);
    if (!p.success || !/^(nats|tls):\/\//i.test(p.data.url)) continue;
    const a = p.data.authConfig;
    return { url: p.data.url, ...(a?.username !== undefined ? { user: a.username } : {}), ...(a?.password !== undefined ? { pass: a.password } : {}) };
  }
  return undefined;
}

class Agent implements DiscoveryAgentLike {
  private cb: ((err: Error) => void) | undefined;
  private pending: Error | undefined;
  private closing: Promise<void> | undefined;
  constructor(
    readonly mdns: MdnsAgent | undefined,
    readonly nats: NatsAnnouncer | undefined,
    private readonly table: DiscoveredTable,
  ) {
    const fail = (err: Error) => {
      if (this.cb) this.cb(err);
      else this.pending ??= err; // broke between opening and running: reported as soon as the actor listens
    };
    mdns?.onError(fail);
    nats?.onError(fail);
  }
  onError(cb: (err: Error) => void): void {
    this.cb = cb;
    if (this.pending) cb(this.pending);
  }
  close(): Promise<void> {
    this.closing ??= (async () => {
      await Promise.all([this.mdns?.close(), this.nats?.close()]);
      this.table.clear(); // a stopped manager lists nothing: what it heard is no longer kept up to date
    })();
    return this.closing;
  }
}

/** What the discovery service is given (src/compose.ts): it advertises the endpoints' bound ports. */
export interface DiscoveryDeps {
  endpoints: EndpointsService;
}

export class DiscoveryService implements Service {
  readonly name = 'discovery';
  /** Started after (stopped before) what it is given. */
  readonly dependsOn: readonly string[];

  constructor(private readonly deps: DiscoveryDeps) {
    this.dependsOn = Object.keys(deps);
  }

  private rt!: Runtime;
  table!: DiscoveredTable;
  /**
   * Agent closes under way (goodbye records). The `discovery` actor is the agent's only owner: its `agent` callback
   * closes it on exit; `stop` waits for these.
   */
  private readonly closing = new Set<Promise<void>>();
  private restPort: number | undefined;
  private restWaiters: Array<() => void> = [];

  get config(): DiscoveryManagerConfig {
    return this.rt.config.DiscoveryManager;
  }

  get enabled(): boolean {
    return this.rt?.config.DiscoveryManager.enabled === true;
  }

  async start(rt: Runtime): Promise<void> {
    this.rt = rt;
    const c = rt.config.DiscoveryManager;
    this.table ??= new DiscoveredTable(c.maxServers, c.maxServicesPerServer, () => rt.now(), (name, what) =>
      rt.log.info({ server: name }, what === 'added' ? `discovery: found server ${name}` : `discovery: server ${name} is gone`),
    );
    const rest = rt.config.RestApi;
    if (!rest.enabled) this.restPort = undefined;
    else if (rest.port !== 0) this.restPort = rest.port;
  }

  async running(): Promise<void> {
    if (!this.enabled) return; // shipped default: no actor, no socket, no multicast
    const c = this.config;
    discoveryKind.spawn(this.rt, '', { logic: this.logic(), input: { autoStart: true, retryInitial: c.retryInitial, retryMax: c.retryMax } });
  }

  async stop(): Promise<void> {
    // the actor was stopped with the tree (its agent closes: goodbye records); wait for the goodbyes to go out
    await Promise.all([...this.closing]);
  }

  /** The REST API listens (src/api/routes/discovery): its port goes into the `_maps._tcp` record. */
  setRestPort(port: number): void {
    this.restPort = port;
    for (const w of this.restWaiters.splice(0)) w();
  }

  private async restPortKnown(): Promise<void> {
    if (this.restPort !== undefined || !this.rt.config.RestApi.enabled) return;
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, 10000); // advertise without the REST record rather than never
      this.restWaiters.push(() => {
        clearTimeout(t);
        resolve();
      });
    });
  }

  /** What this broker advertises now. */
  advertisement(): Advertisement {
    const rt = this.rt;
    const facts = {
      serverName: rt.serverName,
      systemTopicPrefix: '$SYS',
      schemaSupport: true,
      schemaPrefix: SCHEMA_TOPIC_PREFIX,
      version: VERSION,
      buildDate: BUILD_DATE,
    };
    const base = factsTxt(facts);
    const services: AdvertisedService[] = [];
    if (this.restPort !== undefined && this.restPort > 0) {
      services.push({
        key: REST_SERVICE_KEY,
        type: REST_TYPE,
        instance: instanceName(rt.serverName),
        port: this.restPort,
        protocol: 'http',
        transport: 'tcp',
        txt: { ...base, restApi: 'true', protocol: 'http' },
      });
    }
    for (const e of this.deps.endpoints.entries.values()) {
      if (!e.config.endPointConfig.discoverable) continue;
      let addr;
      try {
        addr = parseEndpointUrl(e.config.url);
      } catch {
        continue;
      }
      const type = ENDPOINT_TYPES[addr.scheme];
      if (!type) continue; // serial, udp, ...: nothing a peer can dial over TCP
      const port = e.handle?.port ?? addr.port;
      if (!Number.isInteger(port) || port <= 0) continue;
      const txt: Record<string, string> = { ...base, endpoint: e.name, protocol: 'mqtt', transport: addr.scheme };
      if (addr.scheme === 'ws' || addr.scheme === 'wss') txt.path = addr.path;
      services.push({ key: e.name, type, instance: instanceName(`${rt.serverName} ${e.name}`), port, protocol: 'mqtt', transport: addr.scheme, txt });
    }
    return { facts, services, addresses: this.ownAddresses() };
  }

  private ownAddresses(): string[] {
    let only: string[] | undefined;
    try {
      only = resolveInterfaces(this.config.hostnames);
    } catch {
      only = undefined;
    }
    if (only) return only;
    const out: string[] = [];
    for (const list of Object.values(networkInterfaces())) for (const a of list ?? []) if (a.family === 'IPv4' && !a.internal) out.push(a.address);
    return out.length ? out.slice(0, 16) : ['127.0.0.1'];
  }

  private logic() {
    return discoveryMachine.provide({
      actors: {
        openAgent: fromPromise<DiscoveryAgentLike>(async ({ signal }) => {
          const c = this.config;
          await this.restPortKnown();
          const ad = this.advertisement();
          const log = this.rt.log.child({ name: 'discovery' });
          const target = natsTargetOf(this.rt.config, c);
          // bonjour-service and the NATS client load on first use: a broker with discovery off never loads them
          const mdns = c.mdns ? new (await import('./mdns.js')).MdnsAgent({ hostnames: c.hostnames, ttl: c.ttl, ownName: this.rt.serverName, table: this.table, log }) : undefined;
          const nats = target
            ? new (await import('./nats.js')).NatsAnnouncer({ target, subject: c.nats.subject, interval: Math.min(c.nats.interval, Math.floor((c.ttl * 1000) / 3)), ttl: c.ttl, ownName: this.rt.serverName, table: this.table, log })
            : undefined;
          const agent = new Agent(mdns, nats, this.table);
          try {
            await mdns?.open(ad);
            await nats?.open(ad);
          } catch (err) {
            await agent.close();
            log.warn({ err: (err as Error).message }, 'discovery could not start; retrying with backoff');
            throw err;
          }
          if (signal.aborted) {
            await agent.close();
            throw new Error('start cancelled');
          }
          log.info(
            { mdns: !!mdns, nats: target ? target.url.replace(/\/\/[^@/]*@/, '//') : undefined, services: ad.services.map((s) => `_${s.type}._tcp ${s.port}`) },
            'discovery running',
          );
          return agent;
        }),
        // the machine's agent session, plus: `stop` waits for the close it starts on exit
        agent: fromCallback<DiscoveryEvent, { handle: DiscoveryAgentLike }>(({ input, sendBack }) => {
          input.handle.onError((err) => sendBack({ type: 'agent.failed', error: err.message }));
          return () => {
            const p = input.handle.close().catch(() => {});
            this.closing.add(p);
            void p.finally(() => this.closing.delete(p));
          };
        }),
      },
    });
  }

  // ------------------------------------------------------------------------------------------------------------

  actor(): ActorRefFrom<typeof discoveryMachine> | undefined {
    return this.rt ? discoveryKind.lookup(this.rt, '') : undefined;
  }

  state(): DiscoveryState {
    const a = this.actor();
    return a ? stateOf(a.getSnapshot()) : 'Stopped';
  }

  /**
   * The discovery manager's line in GET /api/v1/server/status (MAPS: OK, WARN "No bound networks" or DISABLED);
   * src/runtime/monitor.ts adds it to the subsystem list.
   */
  subsystemStatus(): { name: string; comment: string; status: 'OK' | 'WARN' | 'STOPPED' | 'DISABLED' } {
    const name = 'Discovery Manager';
    if (!this.enabled) return { name, comment: 'disabled (DiscoveryManager.enabled is false)', status: 'DISABLED' };
    const state = this.state();
    const ctx = this.actor()?.getSnapshot().context;
    if (state === 'Started') return { name, comment: `${this.table.size} servers discovered`, status: 'OK' };
    if (state === 'Failed') return { name, comment: `No bound networks: ${ctx?.lastError ?? 'failed'}; retrying`, status: 'WARN' };
    if (state === 'Stopped') return { name, comment: 'stopped', status: 'STOPPED' };
    return { name, comment: state, status: 'WARN' };
  }

  /** DiscoveredServersDTO list, optionally filtered by a selector (400 "Invalid filter"). */
  list(filter: string | undefined): DiscoveredServerDTO[] {
    let f;
    try {
      f = parseFilterParam(filter);
    } catch (err) {
      throw new ValidationError(`Invalid filter: ${(err as Error).message}`);
    }
    const all = this.table?.list() ?? [];
    return f ? all.filter((s) => f.matches(s as unknown as Record<string, unknown>)) : all;
  }

  /** PATCH /api/v1/server/discovery: started | stopped (case-insensitive), through the command helper. */
  async control(requested: string): Promise<{ changed: boolean; state: DiscoveryState }> {
    if (!this.enabled) throw new NotFoundError('Discovery manager is not configured (DiscoveryManager.enabled is false; docs/discovery.md)');
    const action = discoveryKind.parse(requested);
    const result = await discoveryKind.command(this.rt, '', action);
    return { changed: result.changed, state: this.state() };
  }

  /** Waits (bounded) until the actor has settled. */
  async settled(ms = 15000): Promise<void> {
    await discoveryKind.settle(this.rt, '', ms);
  }
}

export function discoveryService(deps: DiscoveryDeps): DiscoveryService {
  return new DiscoveryService(deps);
}

/** The discovery service of a runtime (registered in every runtime built by registerServices). */
export function discoveryOf(rt: Runtime): DiscoveryService {
  const s = rt.service('discovery');
  if (!s) throw new NotFoundError('Discovery manager is not configured');
  return s;
}
