/**
 * The endpoint lifecycle: one `endpoint:<name>` actor per configured endpoint under the `endpoints` supervisor,
 * commanded through the command helper, and endpoint configuration changes (kept in the store's `config` sublevel
 * so they survive a restart). The MQTT broker the listeners carry is owned by mqtt-broker.service.ts; the read-only
 * views the interface and connection routes serve are in endpoint-views.ts.
 */
import { createHash } from 'node:crypto';
import { fromCallback, fromPromise, type ActorRefFrom } from 'xstate';
import { endpointMachine, endpointStateName, runListener, type EndpointEvent, type ListenerLike } from '../../actors/endpoints/endpoint.machine.js';
import { EndPointServerConfigSchema, parseEndpointUrl, type EndPointServerConfig, type MqttConfig, MqttConfigSchema } from '../config/schema.js';
import { BrokerError, ConflictError, NotFoundError, ServiceUnavailableError, ValidationError } from '../errors.js';
import { MqttBroker } from '../protocol/mqtt/broker.js';
import { EndpointStats, type EndpointContext, type MqttConnection } from '../protocol/mqtt/connection.js';
import { CloseReason, Reason } from '../protocol/mqtt/reason.js';
import { bindListener } from '../transport/listener.js';
import { bindSerialEndpoint } from '../transport/serial.js';
import { isSerialEndpoint } from '../transport/serial-config.js';
import { defineActorKind } from '../runtime/actor-kind.js';
import { findByName } from '../runtime/registry.js';
import { EndpointViews, type EndpointEntry, type EndpointState } from './endpoint-views.js';
import type { MqttBrokerService } from '../protocol/mqtt/mqtt-broker.service.js';

export type { EndpointEntry, EndpointState };
import type { Runtime, Service } from '../runtime/runtime.js';

const CONFIG_PREFIX = 'NetworkManager/endpoint/';

class RateSampler {
  private last = { t: Date.now(), v: [0, 0, 0, 0] };
  private rates = [0, 0, 0, 0];
  sample(values: number[]): number[] {
    const now = Date.now();
    const dt = (now - this.last.t) / 1000;
    if (dt >= 1) {
      this.rates = values.map((v, i) => Math.round(((v - this.last.v[i]!) / dt) * 100) / 100);
      this.last = { t: now, v: values };
    }
    return this.rates;
  }
}



function uuidFrom(text: string): string {
  const h = createHash('sha1').update(text).digest();
  h[6] = (h[6]! & 0x0f) | 0x50; // version 5 (name-based, SHA-1)
  h[8] = (h[8]! & 0x3f) | 0x80;
  const x = h.subarray(0, 16).toString('hex');
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20, 32)}`;
}

function mqttOf(cfg: EndPointServerConfig): MqttConfig {
  return (cfg.protocolConfigs.find((p) => p.type === 'mqtt') as MqttConfig | undefined) ?? MqttConfigSchema.parse({ type: 'mqtt' });
}

declare module '../runtime/runtime.js' {
  interface RuntimeServices {
    endpoints: EndpointsService;
  }
}

/** The endpoints service of a runtime (while it runs; 503 otherwise). */
export function endpointsOf(rt: Runtime): EndpointsService {
  const s = rt.service('endpoints');
  if (!s || !s.broker) throw new ServiceUnavailableError('The network endpoints are not running (the server is starting, restarting or stopping); try again');
  return s;
}

function snapshotState(snap: { value: unknown; status: string }): EndpointState {
  return snap.status !== 'active' ? 'Failed' : endpointStateName(snap.value);
}

/**
 * The endpoint kind (src/runtime/actor-kind.ts): `endpoint:<name>` under the `endpoints` supervisor, commanded with
 * the MAPS words started, stopped, paused, resumed; asking for the state it is in is "No change".
 */
export const endpointKind = defineActorKind({
  kind: 'endpoint',
  machine: endpointMachine,
  supervisor: 'endpoints',
  noun: 'Endpoint',
  stateName: (snap) => snapshotState(snap),
  requests: {
    started: { event: { type: 'endpoint.start' }, target: 'Started' },
    stopped: { event: { type: 'endpoint.stop' }, target: 'Stopped' },
    paused: { event: { type: 'endpoint.pause' }, target: 'Paused' },
    resumed: { event: { type: 'endpoint.resume' }, target: 'Started' },
  },
  settled: (st) => st !== 'Starting' && st !== 'Stopping',
  routes: ['PATCH /api/v1/server/interfaces', 'PATCH /api/v1/server/interface/{endpoint}', 'PUT /api/v1/server/interface/{endpoint}'],
});

/** What the endpoints service is given (src/compose.ts): the listeners carry MQTT, whose broker another service owns. */
export interface EndpointsDeps {
  mqttBroker: MqttBrokerService;
}

export class EndpointsService implements Service {
  readonly name = 'endpoints';
  /** Started after (stopped before) what it is given. */
  readonly dependsOn: readonly string[];

  constructor(private readonly deps: EndpointsDeps) {
    this.dependsOn = Object.keys(deps);
  }

  readonly entries = new Map<string, EndpointEntry>();
  private rt!: Runtime;
  /** Listener closes under way (the actors close their listeners on exit; `stop` waits for the sockets). */
  private readonly closing = new Set<Promise<void>>();

  /** The shared MQTT broker (src/protocol/mqtt/mqtt-broker.service.ts), while the server runs. */
  get broker(): MqttBroker | undefined {
    return this.deps.mqttBroker.broker;
  }

  async start(rt: Runtime): Promise<void> {
    this.rt = rt;
    const overrides = new Map<string, EndPointServerConfig>();
    for await (const [key, value] of rt.store.entriesJson<unknown>('config')) {
      if (!key.startsWith(CONFIG_PREFIX)) continue;
      const parsed = EndPointServerConfigSchema.safeParse(value);
      if (parsed.success) overrides.set(parsed.data.name, parsed.data);
      else rt.log.warn({ key }, 'stored endpoint configuration is not valid; using the configured one');
    }
    this.entries.clear();
    for (const base of rt.config.NetworkManager.data) {
      const cfg = overrides.get(base.name) ?? base;
      const stats = new EndpointStats();
      const name = cfg.name;
      this.entries.set(name, {
        name,
        uniqueId: uuidFrom(`${rt.instance.uniqueId}/${name}`),
        config: cfg,
        stats,
        ctx: { name, mqtt: mqttOf(cfg), connectTimeout: cfg.endPointConfig.connectionTimeout, stats },
        get handle() {
          return endpointKind.lookup(rt, name)?.getSnapshot().context.handle;
        },
        rates: new RateSampler(),
      });
    }
  }

  /** The actor logic with real I/O. */
  private logic() {
    return endpointMachine.provide({
      actors: {
        bindListener: fromPromise<ListenerLike, { name: string }>(async ({ input, signal }) => {
          const entry = this.entries.get(input.name);
          if (!entry || !this.broker) throw new Error(`endpoint "${input.name}" is not configured`);
          let handle;
          try {
            const bindOpts = { config: entry.config, broker: this.broker, endpoint: entry.ctx };
            // serial:// opens a device (src/transport/serial.ts); the actor runs it as it runs a socket listener
            handle = isSerialEndpoint(entry.config) ? await bindSerialEndpoint({ ...bindOpts, log: this.rt.log }) : await bindListener(bindOpts);
          } catch (err) {
            entry.stats.errors++;
            this.rt.log.warn({ endpoint: entry.name, url: entry.config.url, err: (err as Error).message }, 'endpoint could not bind; retrying with backoff');
            throw err;
          }
          if (signal.aborted) {
            await handle.close();
            throw new Error('start cancelled');
          }
          const where = handle.transport === 'serial' ? `serial://${handle.host}` : `${handle.transport}://${handle.host}:${handle.port}`;
          this.rt.log.info({ endpoint: entry.name, transport: handle.transport, host: handle.host, port: handle.port }, `endpoint ${entry.name} listening on ${where}`);
          return handle;
        }),
        // the machine's listener, plus: the close it starts on exit is waited for by `stop` (the sockets are gone
        // before the broker saves its sessions)
        listener: fromCallback<EndpointEvent, { handle: ListenerLike; paused: boolean }>((args) => {
          const close = runListener(args);
          return () => {
            const p = close().catch(() => {});
            this.closing.add(p);
            void p.finally(() => this.closing.delete(p));
          };
        }),
      },
    });
  }

  private spawn(entry: EndpointEntry, autoStart: boolean): void {
    const nm = this.rt.config.NetworkManager;
    endpointKind.spawn(this.rt, entry.name, { logic: this.logic(), input: { name: entry.name, autoStart, retryInitial: nm.retryInitial, retryMax: nm.retryMax } });
  }

  async running(): Promise<void> {
    for (const entry of this.entries.values()) this.spawn(entry, entry.config.autoStart);
    await Promise.all([...this.entries.values()].map((e) => this.settled(e)));
  }

  async stop(): Promise<void> {
    // the actors were stopped with the tree and closed their listeners on exit; wait for the sockets. The broker
    // service stops after this one (it is a dependency) and saves the sessions then.
    await Promise.all([...this.closing]);
  }

  // ------------------------------------------------------------------------------------------------------------
  // Look-ups and control

  actor(entry: EndpointEntry): ActorRefFrom<typeof endpointMachine> | undefined {
    return endpointKind.lookup(this.rt, entry.name);
  }

  state(entry: EndpointEntry): EndpointState {
    return endpointKind.state(this.rt, entry.name, 'Stopped');
  }

  /** By name (case-sensitive first, then case-insensitive) or uniqueId. */
  find(key: string): EndpointEntry {
    const k = key.trim();
    if (!k) throw new ValidationError('Invalid endpoint id: it is empty');
    const found = findByName(this.entries, k, (e, lower) => e.uniqueId === lower);
    if (found) return found;
    throw new NotFoundError(`Endpoint not found: no endpoint is named or has the uniqueId "${k}"`);
  }

  /** Wait (bounded, XState `waitFor`, no polling) until the actor is in a resting state (not starting / stopping). */
  private async settled(entry: EndpointEntry, ms = 5000): Promise<void> {
    await endpointKind.settle(this.rt, entry.name, ms);
  }

  /**
   * started | stopped | paused | resumed on one endpoint, through the command helper (src/runtime/command.ts):
   * the state it is already in → `changed: false` ("No change"); a request its state cannot take → 409 naming the
   * state and what it accepts; otherwise the event is sent and the endpoint's settled state awaited (503 if slow).
   */
  async control(entry: EndpointEntry, requested: string): Promise<{ changed: boolean; state: EndpointState }> {
    const action = endpointKind.parse(requested);
    if (!this.actor(entry)) {
      // no actor (never spawned): only a start makes sense; it spawns one and waits for it to settle
      if (action === 'stopped') return { changed: false, state: 'Stopped' };
      if (action !== 'started') throw new ConflictError(`Endpoint "${entry.name}" is Stopped; it cannot be ${action} now (it accepts: started)`);
      this.spawn(entry, true);
      await this.settled(entry);
      this.rt.updates.interfaceUpdate++;
      return { changed: true, state: this.state(entry) };
    }
    const result = await endpointKind.command(this.rt, entry.name, action);
    if (result.changed) this.rt.updates.interfaceUpdate++;
    return { changed: result.changed, state: this.state(entry) };
  }

  /** The same request on every endpoint (MAPS startAll / stopAll / pauseAll / resumeAll): each through the command helper; endpoints whose state cannot take it are left as they are. */
  async controlAll(requested: string): Promise<void> {
    const action = endpointKind.parse(requested);
    await Promise.all(
      [...this.entries.values()].map((e) =>
        this.control(e, action).catch((err) => {
          if (!(err instanceof BrokerError) || err.statusCode !== 409) throw err;
        }),
      ),
    );
  }

  /** Apply a new configuration: persist it, stop the endpoint through the command helper, then start its actor with it. */
  async update(entry: EndpointEntry, cfg: EndPointServerConfig): Promise<void> {
    if (cfg.name !== entry.name) {
      throw new ValidationError(`body field 'name': "${cfg.name}" does not match the endpoint "${entry.name}"; an endpoint cannot be renamed`);
    }
    const wasRunning = this.state(entry) !== 'Stopped';
    await this.rt.store.putJson('config', CONFIG_PREFIX + entry.name, cfg);
    // stopping closes the listener (the actor owns it); a failed or backing-off endpoint holds none
    if (this.actor(entry) && this.state(entry) !== 'Stopped') await this.control(entry, 'stopped');
    await Promise.all([...this.closing]);
    entry.config = cfg;
    entry.ctx = { name: cfg.name, mqtt: mqttOf(cfg), connectTimeout: cfg.endPointConfig.connectionTimeout, stats: entry.stats };
    this.spawn(entry, wasRunning);
    await this.settled(entry);
    this.rt.updates.interfaceUpdate++;
  }

  // ------------------------------------------------------------------------------------------------------------
  // Read-only views: src/endpoints/endpoint-views.ts (these delegate, for the routes and tests that call them here)

  readonly views = new EndpointViews({ entries: () => this.entries.values(), state: (e) => this.state(e), broker: () => this.broker });
  interfaceInfo(entry: EndpointEntry) {
    return this.views.interfaceInfo(entry);
  }
  interfaceStatus(entry: EndpointEntry) {
    return this.views.interfaceStatus(entry);
  }
  connectionSummary(c: MqttConnection) {
    return this.views.connectionSummary(c);
  }
  connections(entry?: EndpointEntry): MqttConnection[] {
    return this.views.connections(entry);
  }
  connection(id: number): MqttConnection {
    return this.views.connection(id);
  }
  connectionDetails(c: MqttConnection) {
    return this.views.connectionDetails(c);
  }
  closeConnection(c: MqttConnection): void {
    this.views.closeConnection(c);
  }
}

export function endpointsService(deps: EndpointsDeps): EndpointsService {
  return new EndpointsService(deps);
}
