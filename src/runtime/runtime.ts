import { EventEmitter } from 'node:events';
import { createActor, fromPromise, type Actor, type ActorRefFrom, type AnyActorRef } from 'xstate';
import { serverMachine, type FailedSubtree } from '../../actors/server/server.machine.js';
import { shardPath, supervisorMachine, type ChildSpec } from '../../actors/supervisor/supervisor.machine.js';
import type { RuntimeEventName, RuntimeEvents, RuntimeListener } from './events.js';
import { ActorInspector } from './inspector.js';
import { parseSystemId, systemIdOf, type ActorKind, type ActorKinds } from './registry.js';
import type { VirtualActorKind } from './virtual-actors.js';
import { orderServices } from './service-order.js';
import { loadConfig, type LoadOptions } from '../config/load.js';
import type { Config } from '../config/schema.js';
import { createLogs, type Logs } from '../log.js';
import { Store, type InstanceRecord } from '../store/store.js';
import { ServiceUnavailableError } from '../errors.js';

/** The supervisors under the root, in start order (DESIGN.md, actor tree). */
export const SUPERVISORS = ['destinations', 'subscriptions', 'endpoints', 'integrations', 'devices', 'lora', 'lockouts'] as const;
export type SupervisorName = (typeof SUPERVISORS)[number];

/**
 * Supervisors of dynamic sets that can grow large are sharded (see supervisor.machine.ts). Destinations and
 * subscriptions are virtual, but up to MessageDaemon.virtualActors.maxActive (default 1000, at most 1 000 000) of
 * each are activated, and XState copies a parent's children on every spawn and stop: measured with 1 000 activated
 * (2026-11-27, 2-core machine under load), 1 000 more activations at the cap (each passivating one) took 3 030 ms
 * unsharded and 97 ms under 32 x 32 shards, passivating 1 000 took 1 153 ms vs 36 ms (250: 53 vs 10 ms unsharded).
 */
export const SHARDS: Partial<Record<SupervisorName, number[]>> = { destinations: [32, 32], subscriptions: [32, 32], lockouts: [16] };

/** XState's clock (setTimeout/clearTimeout) plus `now()`; XState's SimulatedClock is one. */
export interface RuntimeClock {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  setTimeout(fn: (...args: any[]) => void, timeout: number): unknown;
  clearTimeout(id: unknown): void;
  now(): number;
}

export interface RuntimeOptions extends LoadOptions {
  /** Readable log lines on stdout (default true). */
  stdoutLogs?: boolean;
  /** Extra children per supervisor, started at every boot (tests use it to inject failing actors). */
  extraChildren?: Partial<Record<SupervisorName, ChildSpec[]>>;
  /** The clock of every actor delay and of `rt.now()` (tests pass XState's SimulatedClock to run timelines fast). */
  clock?: RuntimeClock;
}

/** Broker-wide counters that are not the engine's (connections and bytes). */
export interface NetworkCounters {
  packetsSent: number;
  packetsReceived: number;
  totalReadBytes: number;
  totalWriteBytes: number;
  totalConnections: number;
  totalDisconnections: number;
  currentConnections: number;
  peakConnections: number;
}

/**
 * Server totals as the engine counts them (MAPS ServerStatisticsDTO names); the engine's stats() (EngineStats,
 * src/engine/views.ts) extends this declaration.
 */
export interface EngineTotals {
  totalPublishedMessages: number;
  totalDeliveredMessages: number;
  totalSubscribedMessages: number;
  totalNoInterestMessages: number;
  totalRetrievedMessages: number;
  totalExpiredMessages: number;
  totalDroppedMessages: number;
  /** QoS >= 1 publishes refused by flow control (a subscription they would reach was full). */
  totalRefusedMessages: number;
  publishedPerSecond: number;
  subscribedPerSecond: number;
  noInterestPerSecond: number;
  deliveredPerSecond: number;
  retrievedPerSecond: number;
}

/**
 * The messaging engine as the kernel sees it: `requireEngine()` only asks whether it is closed. The messaging service,
 * which installs `rt.engine`, widens this interface to the engine's class by declaration merging
 * (src/messaging/messaging.service.ts), so the services see the whole engine and the kernel imports none of it.
 */
export interface RuntimeEngine {
  readonly isClosed: boolean;
}

/**
 * Authentication and authorisation as the kernel sees it: a slot it never calls. src/security/types.ts widens this
 * interface to its SecurityService by declaration merging; the composition root installs the open one and the
 * security service the real one at boot.
 */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface RuntimeSecurity {}

/** What the runtime needs to know of the messaging engine for its views. */
export interface EngineView {
  totals(): EngineTotals;
  destinationCount(): number;
  /** Messages published and delivered since start, without the rates totals() computes. */
  messagesPassed(): number;
}

const NO_TOTALS: EngineTotals = {
  totalPublishedMessages: 0,
  totalDeliveredMessages: 0,
  totalSubscribedMessages: 0,
  totalNoInterestMessages: 0,
  totalRetrievedMessages: 0,
  totalExpiredMessages: 0,
  totalDroppedMessages: 0,
  totalRefusedMessages: 0,
  publishedPerSecond: 0,
  subscribedPerSecond: 0,
  noInterestPerSecond: 0,
  deliveredPerSecond: 0,
  retrievedPerSecond: 0,
};

/**
 * A service booted with the server tree and stopped with it (engine, endpoints, ...). It names the services it
 * needs in `dependsOn`; the runtime starts services in an order where every service comes after what it depends
 * on (registration order among the rest) and stops them in the reverse order (src/runtime/service-order.ts).
 * A service other code looks up (`rt.service('endpoints')`) also declares itself in `RuntimeServices`.
 */
export interface Service {
  name: string;
  /** Names of the services that must be started before this one (and stopped after it). */
  dependsOn?: readonly string[];
  /** During boot, before the supervisors exist: open resources (engine, stores). */
  start(runtime: Runtime): Promise<void>;
  /** Once the supervisor tree is running (after every boot): spawn actors under the supervisors here. */
  running?(runtime: Runtime): Promise<void> | void;
  stop(runtime: Runtime, restart: boolean): Promise<void>;
}

/**
 * Services other code looks up by name, typed: each service file adds itself by declaration merging,
 *   declare module './runtime.js' { interface RuntimeServices { endpoints: EndpointsService } }
 */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface RuntimeServices {}

/**
 * The only place that calls `createActor`. Owns config, logs, store and the root actor; builds the supervisor
 * tree at every boot; gives typed look-ups to the API.
 */
export class Runtime {
  readonly config: Config;
  readonly configDir: string;
  readonly logs: Logs;
  readonly store: Store;
  readonly instance: InstanceRecord;
  readonly startedAt = Date.now();
  bootDurationNs = 0;
  readonly network: NetworkCounters = {
    packetsSent: 0,
    packetsReceived: 0,
    totalReadBytes: 0,
    totalWriteBytes: 0,
    totalConnections: 0,
    totalDisconnections: 0,
    currentConnections: 0,
    peakConnections: 0,
  };
  /** Counters for `/api/v1/updates`. */
  readonly updates = { schemaUpdate: 0, destinationUpdate: 0, interfaceUpdate: 0 };
  private installedSecurity?: RuntimeSecurity;
  /**
   * Authentication and authorisation for every protocol: the open one installed by the composition root
   * (src/compose.ts) until the security service replaces it at boot. A runtime composed without either answers
   * ServiceUnavailableError (503) rather than letting everything through.
   */
  get security(): RuntimeSecurity {
    if (this.installedSecurity === undefined) throw new ServiceUnavailableError('The security service is not running (the server is starting); try again');
    return this.installedSecurity;
  }
  set security(security: RuntimeSecurity) {
    this.installedSecurity = security;
  }
  /** Set by the messaging service while the server runs. */
  engineView?: EngineView;
  /** The messaging engine, while the server runs (between boot and stop); typed by the messaging service. */
  engine?: RuntimeEngine;
  private root?: Actor<typeof serverMachine>;
  private readonly services: Service[] = [];
  private readonly bus = new EventEmitter();
  /** Live transitions and per-actor history of every registered actor (src/runtime/inspector.ts). */
  readonly inspector: ActorInspector;
  private readonly extraChildren: Partial<Record<SupervisorName, ChildSpec[]>>;
  private readonly clock?: RuntimeClock;
  /** False when the runtime was created with `stdoutLogs: false` (tests): nothing is printed to stdout. */
  readonly stdoutEnabled: boolean;

  private constructor(parts: { config: Config; configDir: string; logs: Logs; store: Store; instance: InstanceRecord }, options: RuntimeOptions) {
    this.bus.setMaxListeners(0);
    this.config = parts.config;
    this.configDir = parts.configDir;
    this.logs = parts.logs;
    this.store = parts.store;
    this.instance = parts.instance;
    this.extraChildren = options.extraChildren ?? {};
    this.clock = options.clock;
    this.stdoutEnabled = options.stdoutLogs ?? true;
    this.inspector = new ActorInspector(() => this.now(), (t) => this.emit('actor.transition', t));
  }

  // ------------------------------------------------------------------------------------------------------------
  // The typed event bus (src/runtime/events.ts)

  on<K extends RuntimeEventName>(event: K, listener: RuntimeListener<K>): this {
    this.bus.on(event, listener as (...args: unknown[]) => void);
    return this;
  }
  once<K extends RuntimeEventName>(event: K, listener: RuntimeListener<K>): this {
    this.bus.once(event, listener as (...args: unknown[]) => void);
    return this;
  }
  off<K extends RuntimeEventName>(event: K, listener: RuntimeListener<K>): this {
    this.bus.off(event, listener as (...args: unknown[]) => void);
    return this;
  }
  /** Calls every listener synchronously; one that throws is logged and the others still run. */
  emit<K extends RuntimeEventName>(event: K, ...args: RuntimeEvents[K]): boolean {
    if (this.bus.listenerCount(event) === 0) return false;
    const listeners = this.bus.listeners(event) as Array<(...a: unknown[]) => void>;
    for (const fn of listeners) {
      try {
        fn(...args);
      } catch (err) {
        this.log.error({ err, event }, 'runtime event listener failed');
      }
    }
    return listeners.length > 0;
  }
  listenerCount(event: RuntimeEventName): number {
    return this.bus.listenerCount(event);
  }

  /** Epoch ms from the runtime's clock (the injected one in tests). */
  now(): number {
    return this.clock ? this.clock.now() : Date.now();
  }

  /** Loads config (throws ConfigError), opens logs and the store (throws StoreLockedError). Does not boot. */
  static async create(options: RuntimeOptions = {}): Promise<Runtime> {
    const { config, configDir } = loadConfig(options);
    const md = config.MessageDaemon;
    const logs = createLogs({
      dataDir: md.dataDirectory,
      level: md.logLevel,
      entriesInMemory: md.logEntriesInMemory,
      historyDays: md.logHistoryDays,
      maxSize: md.logMaxSize,
      stdout: options.stdoutLogs,
    });
    let store: Store;
    try {
      store = await Store.open(md.dataDirectory);
    } catch (err) {
      await logs.close();
      throw err;
    }
    const instance = await store.instance(md.serverName);
    return new Runtime({ config, configDir, logs, store, instance }, options);
  }

  get log() {
    return this.logs.log;
  }
  get serverName(): string {
    return this.instance.serverName;
  }

  /** Registers a service booted with the tree. Call before `start()`. */
  use(service: Service): void {
    if (this.services.some((s) => s.name === service.name)) throw new Error(`service "${service.name}" is registered twice`);
    this.services.push(service);
  }

  /** The services in start order (dependencies first); throws on a missing dependency or a cycle. */
  serviceOrder(): Service[] {
    return orderServices(this.services);
  }

  /** A registered service by name (typed through `RuntimeServices`), or undefined. */
  service<K extends keyof RuntimeServices>(name: K): RuntimeServices[K] | undefined {
    return this.services.find((s) => s.name === name) as RuntimeServices[K] | undefined;
  }

  private supervisorSpecs(): ChildSpec[] {
    const s = this.config.MessageDaemon.supervisor;
    return SUPERVISORS.map((name) => ({
      id: name,
      systemId: systemIdOf('supervisor', name),
      logic: supervisorMachine,
      input: {
        name,
        intensity: s.intensity,
        period: s.period,
        backoffInitial: s.backoffInitial,
        backoffMax: s.backoffMax,
        children: this.extraChildren[name] ?? [],
        shards: SHARDS[name],
      },
    }));
  }

  /** Boots the tree; resolves when the server is running (rejects if boot failed). */
  async start(): Promise<void> {
    const order = this.serviceOrder(); // throws before anything starts when the declarations are inconsistent
    const logic = serverMachine.provide({
      actions: {
        reportEscalation: (_args, params: { subtree: string; failed?: FailedSubtree }) => this.reportEscalation(params.subtree, params.failed),
      },
      actors: {
        boot: fromPromise(async () => {
          const t0 = process.hrtime.bigint();
          for (const svc of order) await svc.start(this);
          this.bootDurationNs = Number(process.hrtime.bigint() - t0);
        }),
        shutdown: fromPromise(async ({ input }: { input: { restart: boolean } }) => {
          for (const svc of [...order].reverse()) {
            try {
              await svc.stop(this, input.restart);
            } catch (err) {
              this.log.error({ err, service: svc.name }, 'service failed to stop');
            }
          }
        }),
      },
    });
    const s = this.config.MessageDaemon.supervisor;
    this.root = createActor(logic, {
      systemId: 'server',
      input: { children: () => this.supervisorSpecs(), escalation: s.escalation, now: () => this.now() },
      inspect: this.inspector.observer,
      ...(this.clock ? { clock: this.clock } : {}),
    });
    this.root.subscribe({ error: (err) => this.log.error({ err }, 'server actor failed') });
    this.root.start();
    await this.waitFor((v) => v !== 'booting');
    const snap = this.root.getSnapshot();
    if (snap.value === 'failed') throw new Error(`boot failed: ${snap.context.error}`);
    await this.servicesRunning();
    this.log.info({ serverName: this.serverName }, 'server running');
  }

  private async servicesRunning(): Promise<void> {
    for (const svc of this.serviceOrder()) {
      try {
        await svc.running?.(this);
      } catch (err) {
        this.log.error({ err, service: svc.name }, 'service failed to start its actors');
      }
    }
  }

  private waitFor(pred: (value: string) => boolean): Promise<void> {
    return new Promise((resolve) => {
      const root = this.root!;
      if (pred(String(root.getSnapshot().value))) return resolve();
      const sub = root.subscribe((s) => {
        if (pred(String(s.value))) {
          sub.unsubscribe();
          resolve();
        }
      });
    });
  }

  get state(): string {
    return this.root ? String(this.root.getSnapshot().value) : 'created';
  }

  /**
   * The operator's restart. Running: stops actors child-first, flushes services, then boots a fresh tree in this
   * process. Degraded (a subtree the server gave up on): resets the failed subtrees in place.
   */
  async restart(): Promise<void> {
    if (!this.root) return;
    if (this.state === 'degraded') {
      this.log.info({ subtrees: this.failedSubtrees().map((f) => f.subtree) }, 'restart requested while degraded: resetting the failed subtrees');
      this.root.send({ type: 'server.restart' });
      return;
    }
    if (this.state !== 'running') return;
    this.log.info('server restart requested');
    this.root.send({ type: 'server.restart' });
    await this.waitFor((v) => v === 'stopping');
    await this.waitFor((v) => v !== 'stopping' && v !== 'booting');
    if (this.state === 'running') await this.servicesRunning();
    this.log.info('server restarted');
  }

  /** Asks the process owner (main.ts) to shut down; it closes the listener then calls `stop()`. */
  requestShutdown(): void {
    this.emit('shutdown-requested');
  }

  private stopped = false;
  /** Graceful stop: actors child-first, services in reverse order, then the store and the logs. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    if (this.root && (this.state === 'running' || this.state === 'degraded')) {
      this.root.send({ type: 'server.shutdown' });
      await this.waitFor((v) => v === 'stopped');
    } else if (this.root && this.state !== 'stopped') {
      this.root.send({ type: 'server.shutdown' });
    }
    this.root?.stop();
    this.log.info('server stopped');
    await this.store.close();
    await this.logs.close();
  }

  /**
   * The messaging engine, or the one answer for "not running" (ServiceUnavailableError, 503): between boot and stop
   * it is there; during a restart or shutdown a request that needs it is asked to come back.
   */
  requireEngine(): RuntimeEngine {
    if (this.engine === undefined || this.engine.isClosed) throw new ServiceUnavailableError('The messaging engine is not running (the server is starting, restarting or stopping); try again');
    return this.engine;
  }

  /** A registered service that is running, or ServiceUnavailableError (503) naming it: the locators use this. */
  requireService<K extends keyof RuntimeServices>(name: K, what: string, running: (s: RuntimeServices[K]) => boolean = () => true): RuntimeServices[K] {
    const s = this.service(name);
    if (!s || !running(s)) throw new ServiceUnavailableError(`${what} is not running (the server is starting, restarting or stopping); try again`);
    return s;
  }

  engineStats(): EngineTotals {
    return this.engineView?.totals() ?? NO_TOTALS;
  }
  destinationCount(): number {
    return this.engineView?.destinationCount() ?? 0;
  }
  messagesPassed(): number {
    return this.engineView?.messagesPassed() ?? 0;
  }

  /** The root actor (for inspection). */
  get rootActor(): AnyActorRef | undefined {
    return this.root;
  }

  /**
   * The typed actor registry: the live actor registered as `<kind>:<name>` (`rt.actor('endpoint', 'MQTT
   * Interface')`), or undefined. Shard supervisors are not registered, so where an actor sits in a sharded
   * supervisor does not matter here.
   */
  actor<K extends ActorKind>(kind: K, name: string): ActorRefFrom<ActorKinds[K]> | undefined {
    return this.actorById(systemIdOf(kind, name)) as ActorRefFrom<ActorKinds[K]> | undefined;
  }

  /**
   * A registered actor by its systemId (`server`, `supervisor:endpoints`, `destination:a/b`, ...). A virtual actor
   * (destination, subscription) that exists but is passive is activated here (src/runtime/virtual-actors.ts): a
   * lookup is how a command or an inspection reaches it.
   */
  actorById(systemId: string): AnyActorRef | undefined {
    const live = this.root?.system.get(systemId) as AnyActorRef | undefined;
    const { kind, name } = parseSystemId(systemId);
    const v = this.virtualKinds.get(kind);
    if (live !== undefined) {
      v?.touch(name); // a use: the least recently used are passivated first at the cap
      return live;
    }
    return v !== undefined && v.has(name) ? v.activate(name) : undefined;
  }

  // ------------------------------------------------------------------------------------------------------------
  // Virtual actor kinds (src/runtime/virtual-actors.ts)

  private readonly virtualKinds = new Map<string, VirtualActorKind>();

  /** Declares a virtual kind (its service does, while it runs). */
  registerVirtualKind(k: VirtualActorKind): void {
    this.virtualKinds.set(k.kind, k);
  }
  unregisterVirtualKind(kind: string): void {
    this.virtualKinds.delete(kind);
  }
  /** The virtual kind by its kind name (`destination`), or undefined. */
  virtualKind(kind: string): VirtualActorKind | undefined {
    return this.virtualKinds.get(kind);
  }
  /** The virtual kind whose activated instances run under a supervisor, or undefined. */
  virtualKindOf(supervisor: string): VirtualActorKind | undefined {
    for (const k of this.virtualKinds.values()) if (k.supervisor === supervisor) return k;
    return undefined;
  }
  /** Passivates every activated virtual actor at rest and idle for at least `idleMs` (0: now); returns how many. */
  passivateIdle(idleMs = 0): number {
    let n = 0;
    for (const k of this.virtualKinds.values()) n += k.passivateIdle(idleMs);
    return n;
  }

  /**
   * The failed subtrees (supervisors that spent their restart budget), with what the server does about each:
   * `restarting` (a reset is scheduled after a backoff) or `failed` (the server's own budget is spent; it is
   * degraded until an operator restart). Empty when everything is supervised normally. For `/health`, the status
   * views and readiness probes.
   */
  failedSubtrees(): Array<{ subtree: string; state: 'restarting' | 'failed'; error: string; attempt: number; since: number }> {
    const ctx = this.root?.getSnapshot().context;
    if (!ctx) return [];
    const out = Object.entries(ctx.subtrees).map(([subtree, f]) => ({ subtree, state: f.state, error: f.error, attempt: f.attempt, since: f.since }));
    // a supervisor can be failed without the server knowing yet (its message is in the mailbox): count it too
    for (const name of SUPERVISORS) {
      if (ctx.subtrees[name]) continue;
      const snap = this.supervisor(name)?.getSnapshot() as { hasTag?(t: string): boolean; context?: { lastError?: string } } | undefined;
      if (snap?.hasTag?.('failed')) out.push({ subtree: name, state: 'restarting', error: snap.context?.lastError ?? 'failed', attempt: 0, since: this.now() });
    }
    return out;
  }

  private reportEscalation(subtree: string, failed: FailedSubtree | undefined): void {
    const action = failed?.state === 'failed' ? 'give-up' : 'restart';
    const error = failed?.error ?? 'failed';
    const fields = { subtree, error, action, attempt: failed?.attempt, delayMs: failed?.delayMs };
    if (action === 'restart') this.log.error(fields, `supervisor ${subtree} spent its restart budget; the server restarts it in ${failed?.delayMs} ms (attempt ${failed?.attempt})`);
    else this.log.error(fields, `supervisor ${subtree} spent its restart budget and the server's own budget is spent: the server is degraded until an operator restart`);
    // the security service writes the audit line from this event (src/security/service.ts)
    this.emit('supervisor.escalated', { subtree, error, action, ...(failed?.delayMs !== undefined ? { delayMs: failed.delayMs } : {}), ...(failed?.attempt !== undefined ? { attempt: failed.attempt } : {}) });
  }

  /** Starts (or replaces) a child under a supervisor; a sharded supervisor routes it to its shard. */
  startChild(name: SupervisorName, spec: ChildSpec): void {
    this.supervisor(name)?.send({ type: 'child.start', spec });
  }

  /** Stops a child of a supervisor (and forgets its spec). */
  stopChild(name: SupervisorName, id: string): void {
    this.supervisor(name)?.send({ type: 'child.stop', id });
  }

  /** A child actor of a supervisor by id (looking in the right shard), while the server runs. */
  childActor(name: SupervisorName, id: string): AnyActorRef | undefined {
    let sup = this.supervisor(name);
    for (const shard of shardPath(name, id, SHARDS[name] ?? [])) sup = (sup?.getSnapshot().children as Record<string, AnyActorRef | undefined> | undefined)?.[shard];
    return (sup?.getSnapshot().children as Record<string, AnyActorRef | undefined> | undefined)?.[id];
  }

  /** Every child of a supervisor (across its shards). */
  childActors(name: SupervisorName): Array<[string, AnyActorRef]> {
    const out: Array<[string, AnyActorRef]> = [];
    const walk = (ref: AnyActorRef | undefined, levels: number) => {
      for (const [id, child] of Object.entries((ref?.getSnapshot().children ?? {}) as Record<string, AnyActorRef | undefined>)) {
        if (!child) continue;
        if (levels > 0) walk(child, levels - 1);
        else out.push([id, child]);
      }
    };
    walk(this.supervisor(name), SHARDS[name]?.length ?? 0);
    return out;
  }

  /** A supervisor by name, while the server is running. */
  supervisor(name: SupervisorName): AnyActorRef | undefined {
    return this.root?.getSnapshot().children[name as never] as AnyActorRef | undefined;
  }
}
