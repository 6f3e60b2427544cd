/**
 * The network endpoints: one `endpoint:<name>` actor per configured endpoint under the `endpoints` supervisor,
 * the shared MQTT broker (sessions, connections), endpoint configuration changes (kept in the store's `config`
 * sublevel so they survive a restart) and the pure data views the interface and connection routes serve.
 */
import { createHash } from 'node:crypto';
import { fromPromise, type AnyActorRef } from 'xstate';
import { endpointMachine, endpointStateName, type ListenerLike } from '../../actors/endpoints/endpoint.machine.js';
import { EndPointServerConfigSchema, parseEndpointUrl, type EndPointServerConfig, type MqttConfig, MqttConfigSchema } from '../config/schema.js';
import { ConflictError, NotFoundError, ValidationError } from '../errors.js';
import { MqttBroker } from '../protocol/mqtt/broker.js';
import { EndpointStats, type EndpointContext, type MqttConnection } from '../protocol/mqtt/connection.js';
import { CloseReason, Reason } from '../protocol/mqtt/reason.js';
import { USER_DELETED, type UserDeletion } from '../security/types.js';
import { bindListener } from '../transport/listener.js';
import type { Runtime, Service } from './runtime.js';

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

export interface EndpointEntry {
  name: string;
  uniqueId: string;
  config: EndPointServerConfig;
  ctx: EndpointContext;
  stats: EndpointStats;
  handle: ListenerLike | undefined;
  rates: RateSampler;
}

export type EndpointState = 'Started' | 'Stopped' | 'Paused' | 'Failed' | 'Starting' | 'Stopping';

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

const services = new WeakMap<Runtime, EndpointsService>();

/** The endpoints service of a runtime (while it runs). */
export function endpointsOf(rt: Runtime): EndpointsService {
  const s = services.get(rt);
  if (!s || !s.broker) throw new ConflictError('The network endpoints are not running');
  return s;
}

export class EndpointsService implements Service {
  readonly name = 'endpoints';
  broker: MqttBroker | undefined;
  readonly entries = new Map<string, EndpointEntry>();
  private rt!: Runtime;

  /** A user was deleted: its MQTT connections and sessions end (counted into the audit line). */
  private readonly onUserDeleted = (d: UserDeletion): void => {
    const n = this.broker?.endUser(d.uniqueId, d.username);
    if (n) {
      d.ended.mqttConnections = n.connections;
      d.ended.mqttSessions = n.sessions;
    }
  };

  async start(rt: Runtime): Promise<void> {
    this.rt = rt;
    services.set(rt, this);
    rt.on(USER_DELETED, this.onUserDeleted);
    this.broker = new MqttBroker({
      engine: () => rt.engine,
      security: () => rt.security,
      get serverName() {
        return rt.serverName;
      },
      network: rt.network,
      log: rt.log.child({ name: 'mqtt' }),
      sessions: rt.store.sublevel('mqttSessions'), // not 'sessions': REST login sessions live there
      maxQueuedMessages: rt.config.DestinationManager.maxQueuedMessages,
    });
    const restored = await this.broker.restore();
    if (restored) rt.log.info({ sessions: restored }, 'persistent MQTT sessions restored');
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
      this.entries.set(cfg.name, {
        name: cfg.name,
        uniqueId: uuidFrom(`${rt.instance.uniqueId}/${cfg.name}`),
        config: cfg,
        stats,
        ctx: { name: cfg.name, mqtt: mqttOf(cfg), connectTimeout: cfg.endPointConfig.connectionTimeout, stats },
        handle: undefined,
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
            handle = await bindListener({ config: entry.config, broker: this.broker, endpoint: entry.ctx });
          } catch (err) {
            entry.stats.errors++;
            this.rt.log.warn({ endpoint: entry.name, url: entry.config.url, err: (err as Error).message }, 'endpoint could not bind; retrying with backoff');
            throw err;
          }
          if (signal.aborted) {
            await handle.close();
            throw new Error('start cancelled');
          }
          entry.handle = handle;
          this.rt.log.info({ endpoint: entry.name, transport: handle.transport, host: handle.host, port: handle.port }, `endpoint ${entry.name} listening on ${handle.transport}://${handle.host}:${handle.port}`);
          return handle;
        }),
      },
    });
  }

  private spawn(entry: EndpointEntry, autoStart: boolean): void {
    const nm = this.rt.config.NetworkManager;
    this.rt.supervisor('endpoints')?.send({
      type: 'child.start',
      spec: {
        id: `endpoint:${entry.name}`,
        logic: this.logic(),
        input: { name: entry.name, autoStart, retryInitial: nm.retryInitial, retryMax: nm.retryMax },
      },
    });
  }

  async running(): Promise<void> {
    for (const entry of this.entries.values()) this.spawn(entry, entry.config.autoStart);
    await Promise.all([...this.entries.values()].map((e) => this.settled(e)));
  }

  async stop(): Promise<void> {
    this.rt.off(USER_DELETED, this.onUserDeleted);
    // the actors were stopped with the tree (their listeners close); wait for the sockets, then save sessions
    await Promise.all([...this.entries.values()].map((e) => e.handle?.close()));
    for (const e of this.entries.values()) e.handle = undefined;
    await this.broker?.close();
    this.broker = undefined;
  }

  // ------------------------------------------------------------------------------------------------------------
  // Look-ups and control

  actor(entry: EndpointEntry): AnyActorRef | undefined {
    const sup = this.rt.supervisor('endpoints');
    return (sup?.getSnapshot().children as Record<string, AnyActorRef | undefined> | undefined)?.[`endpoint:${entry.name}`];
  }

  state(entry: EndpointEntry): EndpointState {
    const a = this.actor(entry);
    if (!a) return 'Stopped';
    const snap = a.getSnapshot() as { value: unknown; status: string };
    if (snap.status !== 'active') return 'Failed';
    return endpointStateName(snap.value);
  }

  /** By name (case-sensitive first, then case-insensitive) or uniqueId. */
  find(key: string): EndpointEntry {
    const k = key.trim();
    if (!k) throw new ValidationError('Invalid endpoint id: it is empty');
    const byName = this.entries.get(k);
    if (byName) return byName;
    for (const e of this.entries.values()) if (e.uniqueId === k.toLowerCase() || e.name.toLowerCase() === k.toLowerCase()) return e;
    throw new NotFoundError(`Endpoint not found: no endpoint is named or has the uniqueId "${k}"`);
  }

  /** Wait until the actor is in a resting state (not starting / stopping), up to `ms`. */
  private async settled(entry: EndpointEntry, ms = 5000): Promise<void> {
    const end = Date.now() + ms;
    while (Date.now() < end) {
      const s = this.state(entry);
      if (s !== 'Starting' && s !== 'Stopping') return;
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  /** started | stopped | paused | resumed on one endpoint; a request that makes no sense now is a ConflictError. */
  async control(entry: EndpointEntry, requested: string): Promise<EndpointState> {
    const action = requested.trim().toLowerCase();
    const state = this.state(entry);
    const actor = this.actor(entry);
    const conflict = (what: string) => new ConflictError(`Endpoint "${entry.name}" is ${state}; it cannot be ${what}`);
    switch (action) {
      case 'started':
        if (state !== 'Stopped' && state !== 'Failed') throw conflict('started (it is not stopped)');
        if (!actor) this.spawn(entry, true);
        else actor.send({ type: 'endpoint.start' });
        break;
      case 'stopped':
        if (state === 'Stopped') throw conflict('stopped (it is already stopped)');
        actor?.send({ type: 'endpoint.stop' });
        break;
      case 'paused':
        if (state !== 'Started') throw conflict('paused (only a started endpoint can be paused)');
        actor!.send({ type: 'endpoint.pause' });
        break;
      case 'resumed':
        if (state !== 'Paused') throw conflict('resumed (only a paused endpoint can be resumed)');
        actor!.send({ type: 'endpoint.resume' });
        break;
      default:
        throw new ValidationError(`Unknown state "${requested}"; expected started, stopped, paused or resumed`);
    }
    await this.settled(entry);
    this.rt.updates.interfaceUpdate++;
    return this.state(entry);
  }

  /** The same request on every endpoint it applies to (MAPS startAll / stopAll / pauseAll / resumeAll). */
  async controlAll(requested: string): Promise<void> {
    const action = requested.trim().toLowerCase();
    const applies: Record<string, EndpointState[]> = { started: ['Stopped', 'Failed'], stopped: ['Started', 'Paused', 'Failed', 'Starting'], paused: ['Started'], resumed: ['Paused'] };
    const from = applies[action];
    if (!from) throw new ValidationError(`Unknown action "${requested}"; expected started, stopped, paused or resumed`);
    await Promise.all([...this.entries.values()].filter((e) => from.includes(this.state(e))).map((e) => this.control(e, action).catch(() => undefined)));
  }

  /** Apply a new configuration: persist it, then restart that endpoint's actor with it. */
  async update(entry: EndpointEntry, cfg: EndPointServerConfig): Promise<void> {
    if (cfg.name !== entry.name) {
      throw new ValidationError(`body field 'name': "${cfg.name}" does not match the endpoint "${entry.name}"; an endpoint cannot be renamed`);
    }
    const wasRunning = this.state(entry) !== 'Stopped';
    await this.rt.store.putJson('config', CONFIG_PREFIX + entry.name, cfg);
    const actor = this.actor(entry);
    if (actor && this.state(entry) !== 'Stopped') {
      actor.send({ type: 'endpoint.stop' });
      await this.settled(entry);
    }
    await entry.handle?.close();
    entry.handle = undefined;
    entry.config = cfg;
    entry.ctx = { name: cfg.name, mqtt: mqttOf(cfg), connectTimeout: cfg.endPointConfig.connectionTimeout, stats: entry.stats };
    this.spawn(entry, wasRunning);
    await new Promise((r) => setTimeout(r, 0));
    await this.settled(entry);
    this.rt.updates.interfaceUpdate++;
  }

  // ------------------------------------------------------------------------------------------------------------
  // Views (pure functions of live state)

  interfaceInfo(entry: EndpointEntry) {
    const addr = parseEndpointUrl(entry.config.url);
    const state = this.state(entry);
    const live = state === 'Started' || state === 'Paused';
    return {
      schemaLoadingVersion: 0,
      uniqueId: entry.uniqueId,
      name: entry.name,
      port: live && entry.handle ? entry.handle.port : addr.port,
      host: `${addr.scheme}://${addr.host}`,
      state,
      config: entry.config as unknown as Record<string, unknown>,
    };
  }

  interfaceStatus(entry: EndpointEntry) {
    const s = entry.stats;
    const [bo, bi, mo, mi] = entry.rates.sample([s.bytesOut, s.bytesIn, s.messagesOut, s.messagesIn]);
    const rec = (name: string, unitName: string, current: number) => ({ name, unitName, timeSpan: 1000, current, stats: {} as Record<string, number> });
    return {
      interfaceName: entry.name,
      totalBytesSent: s.bytesOut,
      totalBytesReceived: s.bytesIn,
      totalMessagesSent: s.messagesOut,
      totalMessagesReceived: s.messagesIn,
      bytesSent: bo!,
      bytesReceived: bi!,
      messagesSent: mo!,
      messagesReceived: mi!,
      connections: s.connections.size,
      errors: s.errors,
      statistics: {
        'Bytes Sent': rec('Bytes Sent', 'Bytes/s', bo!),
        'Bytes Received': rec('Bytes Received', 'Bytes/s', bi!),
        'Messages Sent': rec('Messages Sent', 'Messages/s', mo!),
        'Messages Received': rec('Messages Received', 'Messages/s', mi!),
      },
    };
  }

  connectionSummary(c: MqttConnection) {
    const secs = Math.max(1, (Date.now() - c.connectedAt) / 1000);
    return {
      id: c.id,
      adapter: c.wire.transport,
      name: `${c.wire.transport}_/${c.wire.remoteAddress}:${c.wire.remotePort}`,
      user: c.principal && !c.principal.anonymous ? c.principal.username : 'anonymous',
      protocolName: c.state === 'new' ? 'Not Detected' : 'MQTT',
      protocolVersion: c.state === 'new' ? 'N/A' : c.v5 ? '5.0' : c.protocolVersion === 4 ? '3.1.1' : '3.1',
      proxyAddress: '',
      connectedTimeMs: c.connectedAt,
      lastRead: c.lastRead,
      lastWrite: c.lastWrite,
      totalBytesRead: c.bytesRead,
      totalBytesWritten: c.bytesWritten,
      totalOverflow: c.overflow,
      totalUnderflow: 0,
      bytesRead: Math.round(c.bytesRead / secs),
      bytesWritten: Math.round(c.bytesWritten / secs),
      overFlow: c.overflow,
      underFlow: 0,
      endpoint: c.endpoint.name,
      clientId: c.clientId,
    };
  }

  connections(entry?: EndpointEntry): MqttConnection[] {
    const all = entry ? [...entry.stats.connections] : [...(this.broker?.connections.values() ?? [])];
    return all.sort((a, b) => a.id - b.id);
  }

  connection(id: number): MqttConnection {
    const c = this.broker?.connections.get(id);
    if (!c) throw new NotFoundError(`Connection not found: no connection has id ${id}`);
    return c;
  }

  connectionDetails(c: MqttConnection) {
    const s = c.session;
    const subs = s ? [...s.subs.values()] : [];
    return {
      endPointSummary: this.connectionSummary(c),
      protocolInformation: {
        type: c.v5 ? 'mqttV5' : 'mqtt',
        sessionId: c.clientId,
        timeout: c.keepAlive * 1500,
        keepAlive: c.keepAlive,
        messageTransformationName: '',
        selectorMapping: {},
        destinationTransformationMapping: {},
        sessionInfo: {
          sessionInfo: {
            id: c.clientId,
            uniqueId: s?.sessionId ?? '',
            hasWill: c.will !== undefined,
            expiry: s?.expiry ?? 0,
            authorized: c.principal !== undefined,
            receiveMaximum: c.sendQuota,
            isRestored: false,
            resetState: false,
            persistentSession: s?.persistent ?? false,
          },
          subscriptionInfo: {
            hibernated: false,
            persistent: s?.persistent ?? false,
            sessionId: s?.sessionId ?? '',
            uniqueId: s?.sessionId ?? '',
            subscriptionContextList: subs.map(({ opts, sub }) => ({
              maxAtRest: sub.maxDepth,
              receiveMaximum: c.sendQuota,
              subscriptionId: opts.id ?? 0,
              destinationName: sub.topicFilter,
              sharedName: sub.shareGroup ?? '',
              selector: '',
              alias: opts.filter,
              acknowledgementController: opts.qos === 0 ? 'AutoAck' : 'ClientAck',
              retainHandler: ['SEND_ALWAYS', 'SEND_IF_NEW', 'DO_NOT_SEND'][opts.rh],
              qualityOfService: opts.qos,
              creditHandler: 'Client',
              destinationMode: 'NORMAL',
              noLocalMessages: opts.nl,
              retainAsPublish: opts.rap,
              allowOverlap: true,
              browser: false,
              sync: false,
            })),
            subscriptionStateList: subs.map(({ sub }) => sub.state()),
          },
        },
      },
    };
  }

  /** DELETE a connection: a v5 client gets DISCONNECT 0x98 (administrative action) first. */
  closeConnection(c: MqttConnection): void {
    c.close(CloseReason.AdminClose, Reason.AdministrativeAction, 'closed by an administrator');
  }
}

export function endpointsService(): EndpointsService {
  return new EndpointsService();
}
