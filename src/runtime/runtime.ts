import { EventEmitter } from 'node:events';
import { createActor, fromPromise, type Actor, type AnyActorRef } from 'xstate';
import { serverMachine } from '../../actors/server/server.machine.js';
import { shardPath, supervisorMachine, type ChildSpec } from '../../actors/supervisor/supervisor.machine.js';
import { loadConfig, type LoadOptions } from '../config/load.js';
import type { Config } from '../config/schema.js';
import { createLogs, type Logs } from '../log.js';
import { Store, type InstanceRecord } from '../store/store.js';
import { openSecurity, type SecurityService } from '../security/types.js';
import type { Engine, EngineStats } from '../engine/index.js';

/** The supervisors under the root, in start order (DESIGN.md, actor tree). */
export const SUPERVISORS = ['destinations', 'subscriptions', 'endpoints', 'integrations', 'devices', 'lora', 'lockouts'] as const;
export type SupervisorName = (typeof SUPERVISORS)[number];

/** Supervisors of dynamic sets that can grow large are sharded (see supervisor.machine.ts). */
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

/** Server totals as the engine counts them (MAPS ServerStatisticsDTO names). */
export type EngineTotals = Pick<
  EngineStats,
  | 'totalPublishedMessages'
  | 'totalDeliveredMessages'
  | 'totalSubscribedMessages'
  | 'totalNoInterestMessages'
  | 'totalRetrievedMessages'
  | 'totalExpiredMessages'
  | 'totalDroppedMessages'
  | 'totalRefusedMessages'
  | 'publishedPerSecond'
  | 'subscribedPerSecond'
  | 'noInterestPerSecond'
  | 'deliveredPerSecond'
  | 'retrievedPerSecond'
>;

/** What the runtime needs to know of the messaging engine for its views. */
export interface EngineView {
  totals(): EngineTotals;
  destinationCount(): number;
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

/** A service booted with the server tree and stopped with it (engine, endpoints, ...). Runs in registration order; stops in reverse. */
export interface Service {
  name: string;
  /** During boot, before the supervisors exist: open resources (engine, stores). */
  start(runtime: Runtime): Promise<void>;
  /** Once the supervisor tree is running (after every boot): spawn actors under the supervisors here. */
  running?(runtime: Runtime): Promise<void> | void;
  stop(runtime: Runtime, restart: boolean): Promise<void>;
}

/**
 * The only place that calls `createActor`. Owns config, logs, store and the root actor; builds the supervisor
 * tree at every boot; gives typed look-ups to the API.
 */
export class Runtime extends EventEmitter {
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
  /** Authentication and authorisation for every protocol; open until the security service replaces it. */
  security: SecurityService = openSecurity;
  /** Set by the messaging service while the server runs. */
  engineView?: EngineView;
  /** The messaging engine, while the server runs (between boot and stop). */
  engine?: Engine;
  /** InterfaceStatusDTOs of endpoints and integration links, when the MQTT side provides them (for `$SYS/server/interface/status`). */
  interfaceStatuses?: () => unknown[];
  private root?: Actor<typeof serverMachine>;
  private readonly services: Service[] = [];
  private readonly extraChildren: Partial<Record<SupervisorName, ChildSpec[]>>;
  private readonly clock?: RuntimeClock;
  /** False when the runtime was created with `stdoutLogs: false` (tests): nothing is printed to stdout. */
  readonly stdoutEnabled: boolean;

  private constructor(parts: { config: Config; configDir: string; logs: Logs; store: Store; instance: InstanceRecord }, options: RuntimeOptions) {
    super();
    this.config = parts.config;
    this.configDir = parts.configDir;
    this.logs = parts.logs;
    this.store = parts.store;
    this.instance = parts.instance;
    this.extraChildren = options.extraChildren ?? {};
    this.clock = options.clock;
    this.stdoutEnabled = options.stdoutLogs ?? true;
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
    this.services.push(service);
  }

  private supervisorSpecs(): ChildSpec[] {
    const s = this.config.MessageDaemon.supervisor;
    return SUPERVISORS.map((name) => ({
      id: name,
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
    const logic = serverMachine.provide({
      actors: {
        boot: fromPromise(async () => {
          const t0 = process.hrtime.bigint();
          for (const svc of this.services) await svc.start(this);
          this.bootDurationNs = Number(process.hrtime.bigint() - t0);
        }),
        shutdown: fromPromise(async ({ input }: { input: { restart: boolean } }) => {
          for (const svc of [...this.services].reverse()) {
            try {
              await svc.stop(this, input.restart);
            } catch (err) {
              this.log.error({ err, service: svc.name }, 'service failed to stop');
            }
          }
        }),
      },
    });
    this.root = createActor(logic, { input: { children: () => this.supervisorSpecs() }, ...(this.clock ? { clock: this.clock } : {}) });
    this.root.subscribe({ error: (err) => this.log.error({ err }, 'server actor failed') });
    this.root.start();
    await this.waitFor((v) => v !== 'booting');
    const snap = this.root.getSnapshot();
    if (snap.value === 'failed') throw new Error(`boot failed: ${snap.context.error}`);
    await this.servicesRunning();
    this.log.info({ serverName: this.serverName }, 'server running');
  }

  private async servicesRunning(): Promise<void> {
    for (const svc of this.services) {
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

  /** Stops actors child-first, flushes services, then boots a fresh tree in this process. */
  async restart(): Promise<void> {
    if (!this.root || this.state !== 'running') return;
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
    if (this.root && this.state === 'running') {
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

  engineStats(): EngineTotals {
    return this.engineView?.totals() ?? NO_TOTALS;
  }
  destinationCount(): number {
    return this.engineView?.destinationCount() ?? 0;
  }

  /** The root actor (for inspection). */
  get rootActor(): AnyActorRef | undefined {
    return this.root;
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
