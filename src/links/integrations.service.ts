/**
 * The integrations service: one `integration:<name>` actor per configured link (NetworkConnectionManager.data)
 * under the `integrations` supervisor, commanded through the command helper (src/runtime/command.ts), and the
 * read-only views the integration routes, `/metrics` and `$SYS` serve. The link work itself (transports, outboxes,
 * counters) is the link manager's (link-manager.ts).
 */
import type { ActorRefFrom } from 'xstate';
import {
  integrationConnectionState,
  integrationMachine,
  integrationRunState,
  type IntegrationConnectionState,
  type IntegrationRunState,
} from '../../actors/integrations/integration.machine.js';
import { BrokerError, ConflictError, NotFoundError, ServiceUnavailableError, ValidationError } from '../errors.js';
import { defineActorKind } from '../runtime/actor-kind.js';
import type { MessagingService } from '../messaging/messaging.service.js';
import type { Runtime, Service } from '../runtime/runtime.js';
import type { LinkConfig } from './link-config.js';
import { LinkManager, type LinkEntry } from './link-manager.js';

declare module '../runtime/registry.js' {
  interface ActorKinds {
    integration: typeof integrationMachine;
  }
}

declare module '../runtime/runtime.js' {
  interface RuntimeServices {
    integrations: IntegrationsService;
  }
}

/**
 * The integration kind (src/runtime/actor-kind.ts): `integration:<name>` under the `integrations` supervisor,
 * commanded with the MAPS words; the run state changes at once (the connection state follows on its own).
 */
export const integrationKind = defineActorKind({
  kind: 'integration',
  machine: integrationMachine,
  supervisor: 'integrations',
  noun: 'Integration',
  stateName: (snap): IntegrationRunState => integrationRunState(snap.value),
  requests: {
    started: { event: { type: 'integration.start' }, target: 'Started' },
    stopped: { event: { type: 'integration.stop' }, target: 'Stopped' },
    paused: { event: { type: 'integration.pause' }, target: 'Paused' },
    resumed: { event: { type: 'integration.resume' }, target: 'Started' },
  },
  routes: ['PATCH /api/v1/server/integrations', 'PATCH /api/v1/server/integration/{name}'],
});

type IntegrationRef = ActorRefFrom<typeof integrationMachine>;

/** The configuration as shown over REST: the password masked. */
export function maskedConfig(cfg: LinkConfig): Record<string, unknown> {
  const out = JSON.parse(JSON.stringify(cfg)) as Record<string, unknown> & { authConfig?: Record<string, unknown> };
  if (out.authConfig?.password !== undefined) out.authConfig.password = '********';
  return out;
}

/** The integrations service of a runtime (while it runs). */
export function integrationsOf(rt: Runtime): IntegrationsService {
  const s = rt.service('integrations');
  if (!s || !s.manager) throw new ServiceUnavailableError('The integrations are not running (the server is starting, restarting or stopping); try again');
  return s;
}

/** What the integrations service is given (src/compose.ts): the outboxes are engine subscriptions. */
export interface IntegrationsDeps {
  messaging: MessagingService;
}

export class IntegrationsService implements Service {
  readonly name = 'integrations';
  readonly dependsOn: readonly string[];
  manager?: LinkManager;
  private rt!: Runtime;

  constructor(private readonly deps: IntegrationsDeps) {
    this.dependsOn = Object.keys(deps);
  }

  async start(rt: Runtime): Promise<void> {
    this.rt = rt;
    const manager = new LinkManager(rt, rt.config.NetworkConnectionManager);
    manager.openOutboxes(this.deps.messaging.requireEngine());
    this.manager = manager;
  }

  running(rt: Runtime): void {
    const m = this.manager;
    if (!m) return;
    for (const entry of m.entries.values()) this.spawn(rt, m, entry);
  }

  private spawn(rt: Runtime, m: LinkManager, entry: LinkEntry): void {
    const b = entry.config.backoff ?? rt.config.NetworkConnectionManager.globalConfig.backoff;
    integrationKind.spawn(rt, entry.name, {
      logic: m.logic(),
      input: { name: entry.name, autoStart: entry.config.autoStart, backoffInitial: b.initial, backoffMax: Math.max(b.max, b.initial), jitter: b.jitter },
    });
  }

  async stop(): Promise<void> {
    const m = this.manager;
    if (!m) return;
    await m.closeAll();
    m.closeOutboxes();
  }

  // ------------------------------------------------------------------------------------------------------------
  // Look-ups and control

  entries(): LinkEntry[] {
    return [...(this.manager?.entries.values() ?? [])];
  }

  /** By name, case-insensitively (MAPS). */
  find(name: string): LinkEntry {
    const k = name.trim();
    if (!k) throw new ValidationError('Name is required');
    const e = this.manager?.find(k);
    if (!e) throw new NotFoundError(`Integration not found: no integration is named "${k}"`);
    return e;
  }

  actor(entry: LinkEntry): IntegrationRef | undefined {
    return integrationKind.lookup(this.rt, entry.name);
  }

  runState(entry: LinkEntry): IntegrationRunState {
    const a = this.actor(entry);
    return a ? integrationRunState(a.getSnapshot().value) : 'Stopped';
  }

  connectionState(entry: LinkEntry): IntegrationConnectionState {
    const a = this.actor(entry);
    return a ? integrationConnectionState(a.getSnapshot().value) : 'Shutdown';
  }

  /** Started for longer than the backoff cap without being established (the machine's `degraded` tag). */
  stalled(entry: LinkEntry): boolean {
    return this.actor(entry)?.getSnapshot().hasTag('degraded') ?? false;
  }

  /** Names of the links that are stalled (for the /health header). */
  stalledNames(): string[] {
    return this.entries()
      .filter((e) => this.stalled(e))
      .map((e) => e.name);
  }

  /** started | stopped | paused | resumed (trimmed, case-insensitive) on one link, through the command helper. */
  async control(entry: LinkEntry, requested: string): Promise<{ changed: boolean; state: IntegrationRunState }> {
    const action = integrationKind.parse(requested);
    if (!this.actor(entry)) {
      if (action === 'stopped') return { changed: false, state: 'Stopped' };
      if (action !== 'started') throw new ConflictError(`Integration "${entry.name}" is Stopped; it cannot be ${action} now (it accepts: started)`);
      this.spawn(this.rt, this.manager!, entry);
      return { changed: true, state: this.runState(entry) };
    }
    const result = await integrationKind.command(this.rt, entry.name, action);
    return { changed: result.changed, state: this.runState(entry) };
  }

  /** The same request on every link (MAPS stop / start / pause / resume); links whose state cannot take it are left as they are. */
  async controlAll(requested: string): Promise<void> {
    const action = integrationKind.parse(requested);
    await Promise.all(
      this.entries().map((e) =>
        this.control(e, action).catch((err) => {
          if (!(err instanceof BrokerError) || err.statusCode !== 409) throw err;
        }),
      ),
    );
  }

  // ------------------------------------------------------------------------------------------------------------
  // Configuration reload (src/runtime/reload.ts)

  /**
   * Applies a link's configuration from a reload. Added: its entry, outboxes and actor (started when `autoStart`).
   * Changed: replaced in place when its outboxes stay the same (LinkManager.replaceableInPlace); a Started link is
   * stopped and started again through the command helper so it connects with the new configuration, a Paused or
   * Stopped one keeps its run state and uses it at its next start. Answers false (nothing changed) for what needs a
   * restart of the process: a removed link, or one whose outboxes (push namespaces, QoS, selectors, maxOutbox) change
   * — they hold acknowledged messages.
   */
  async reconfigure(name: string, next: LinkConfig | undefined): Promise<boolean> {
    const m = this.manager;
    if (!m || !next) return false;
    const entry = m.entries.get(name);
    if (!entry) {
      this.spawn(this.rt, m, m.add(next));
      return true;
    }
    if (!LinkManager.replaceableInPlace(entry.config, next)) return false;
    const wasStarted = this.actor(entry) !== undefined && this.runState(entry) === 'Started';
    if (wasStarted) await this.control(entry, 'stopped');
    m.replaceConfig(entry, next);
    if (wasStarted) await this.control(entry, 'started');
    return true;
  }

  // ------------------------------------------------------------------------------------------------------------
  // Views (pure functions of live state)

  /** IntegrationInfoDTO. */
  info(entry: LinkEntry) {
    return { config: maskedConfig(entry.config), state: this.runState(entry) };
  }

  /** IntegrationStatusDTO, plus Switchyard's run state, outbox depth, loop drops, refusals (pushed and received) and last error. */
  status(entry: LinkEntry) {
    const m = this.manager!;
    m.sample(entry);
    const c = entry.counters;
    return {
      interfaceName: entry.name,
      bytesSent: c.bytesSent,
      bytesReceived: c.bytesReceived,
      messagesSent: c.messagesSent,
      messagesReceived: c.messagesReceived,
      errors: c.errors,
      lastReadTime: c.lastReadTime,
      lastWriteTime: c.lastWriteTime,
      state: this.connectionState(entry),
      // the service specification: "statistics (string holding JSON-encoded metrics)"
      statistics: JSON.stringify(this.statistics(entry)),
      runState: this.runState(entry),
      outbox: m.outboxDepth(entry),
      loopsDropped: c.loopsDropped,
      refused: c.refused,
      rejected: c.rejected,
      qos0Dropped: c.qos0Dropped,
      lastError: entry.lastError ?? '',
    };
  }

  /** The link's moving averages as LinkedMovingAverageRecordDTOs keyed by name (call after `manager.sample`). */
  private statistics(entry: LinkEntry) {
    const r = entry.rates;
    const rec = (name: string, unitName: string, rate: { current: number; avgs: number[] }) => ({
      name,
      unitName,
      timeSpan: 60000,
      current: rate.current,
      stats: { '1 minute': round(rate.avgs[0]!), '5 minutes': round(rate.avgs[1]!), '15 minutes': round(rate.avgs[2]!) },
    });
    return {
      'Messages Sent': rec('Messages Sent', 'Messages/s', r.messagesSent),
      'Messages Received': rec('Messages Received', 'Messages/s', r.messagesReceived),
      'Bytes Sent': rec('Bytes Sent', 'Bytes/s', r.bytesSent),
      'Bytes Received': rec('Bytes Received', 'Bytes/s', r.bytesReceived),
    };
  }

  /** EndPointSummaryDTO of the link's connection (all defaults but the names when it is not connected). */
  connection(entry: LinkEntry, index: number) {
    const c = entry.counters;
    const d = entry.description;
    const connected = c.connectedSince > 0;
    const scheme = entry.config.url.slice(0, entry.config.url.indexOf(':')).toLowerCase();
    return {
      id: index,
      adapter: scheme === 'nats' || scheme === 'tls' ? 'nats' : 'mqtt',
      name: entry.name,
      user: entry.config.authConfig?.username ?? 'anonymous',
      protocolName: connected && d ? d.protocolName : 'Not Detected',
      protocolVersion: connected && d ? d.protocolVersion : 'N/A',
      proxyAddress: '',
      connectedTimeMs: connected ? Date.now() - c.connectedSince : 0,
      lastRead: c.lastReadTime,
      lastWrite: c.lastWriteTime,
      totalBytesRead: c.bytesReceived,
      totalBytesWritten: c.bytesSent,
      totalOverflow: 0,
      totalUnderflow: 0,
      bytesRead: Math.round(entry.rates.bytesReceived.current),
      bytesWritten: Math.round(entry.rates.bytesSent.current),
      overFlow: 0,
      underFlow: 0,
      endpoint: entry.config.url,
      clientId: d?.clientId ?? '',
    };
  }

  /** InterfaceStatusDTO-shaped rows of the links, for `$SYS/server/interface/status` (endpoints and integration connections, as MAPS). */
  interfaceStatuses() {
    return this.entries().map((e) => {
      const s = this.status(e);
      const statistics = this.statistics(e);
      return {
        interfaceName: `integration:${e.name}`,
        totalBytesSent: s.bytesSent,
        totalBytesReceived: s.bytesReceived,
        totalMessagesSent: s.messagesSent,
        totalMessagesReceived: s.messagesReceived,
        bytesSent: e.rates.bytesSent.current,
        bytesReceived: e.rates.bytesReceived.current,
        messagesSent: e.rates.messagesSent.current,
        messagesReceived: e.rates.messagesReceived.current,
        connections: s.state === 'Established' ? 1 : 0,
        errors: s.errors,
        statistics,
        state: s.state,
      };
    });
  }
}

function round(x: number): number {
  return Math.round(x * 100) / 100;
}

export function integrationsService(deps: IntegrationsDeps): IntegrationsService {
  return new IntegrationsService(deps);
}
