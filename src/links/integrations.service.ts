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
  type IntegrationEvent,
  type IntegrationRunState,
} from '../../actors/integrations/integration.machine.js';
import { BrokerError, ConflictError, NotFoundError, ValidationError } from '../errors.js';
import { command, type CommandTarget } from '../runtime/command.js';
import type { CommandRecord } from '../runtime/events.js';
import { acceptedEvents } from '../runtime/inspector.js';
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

/** REST words (MAPS: started, stopped, paused, resumed) ↔ machine events. */
const EVENT_OF: Record<string, IntegrationEvent['type']> = {
  started: 'integration.start',
  stopped: 'integration.stop',
  paused: 'integration.pause',
  resumed: 'integration.resume',
};
const REQUEST_OF: Record<string, string> = Object.fromEntries(Object.entries(EVENT_OF).map(([k, v]) => [v, k]));
/** The run state each request leads to: asking for the state the link is in is "No change". */
const TARGET_OF: Record<string, IntegrationRunState> = { started: 'Started', stopped: 'Stopped', paused: 'Paused', resumed: 'Started' };

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
  if (!s || !s.manager) throw new ConflictError('The integrations are not running');
  return s;
}

export class IntegrationsService implements Service {
  readonly name = 'integrations';
  /** The outboxes are engine subscriptions. */
  readonly dependsOn = ['messaging'] as const;
  manager?: LinkManager;
  private rt!: Runtime;

  async start(rt: Runtime): Promise<void> {
    this.rt = rt;
    const manager = new LinkManager(rt, rt.config.NetworkConnectionManager);
    if (rt.engine) manager.openOutboxes(rt.engine);
    this.manager = manager;
  }

  running(rt: Runtime): void {
    const m = this.manager;
    if (!m) return;
    for (const entry of m.entries.values()) this.spawn(rt, m, entry);
  }

  private spawn(rt: Runtime, m: LinkManager, entry: LinkEntry): void {
    const b = entry.config.backoff ?? rt.config.NetworkConnectionManager.globalConfig.backoff;
    rt.startChild('integrations', {
      id: `integration:${entry.name}`,
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
    return this.rt.actor('integration', entry.name);
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

  private readonly report = (r: CommandRecord) => this.rt.emit('actor.command', r);

  private target(entry: LinkEntry): CommandTarget<IntegrationRef> {
    return {
      ref: this.actor(entry),
      label: `Integration "${entry.name}"`,
      systemId: `integration:${entry.name}`,
      stateName: (snap) => integrationRunState(snap.value),
      accepts: (snap) => {
        const ref = this.actor(entry);
        const out = ref ? acceptedEvents(ref).map((e) => REQUEST_OF[e]).filter((x): x is string => x !== undefined) : [];
        const st = integrationRunState(snap.value);
        for (const [req, target] of Object.entries(TARGET_OF)) if (target === st && !out.includes(req)) out.push(req);
        return out;
      },
    };
  }

  /** started | stopped | paused | resumed (trimmed, case-insensitive) on one link, through the command helper. */
  async control(entry: LinkEntry, requested: string): Promise<{ changed: boolean; state: IntegrationRunState }> {
    const action = requested.trim().toLowerCase();
    const type = EVENT_OF[action];
    if (!type) throw new ValidationError(`Unknown action "${requested}"; expected started, stopped, paused or resumed`);
    if (!this.actor(entry)) {
      if (action === 'stopped') return { changed: false, state: 'Stopped' };
      if (action !== 'started') throw new ConflictError(`Integration "${entry.name}" is Stopped; it cannot be ${action} now (it accepts: started)`);
      this.spawn(this.rt, this.manager!, entry);
      return { changed: true, state: this.runState(entry) };
    }
    const result = await command(this.report, this.target(entry), {
      event: { type } as IntegrationEvent,
      what: action,
      already: (snap) => integrationRunState(snap.value) === TARGET_OF[action],
      settled: () => true, // the run state changes at once; the connection state follows on its own
    });
    return { changed: result.changed, state: this.runState(entry) };
  }

  /** The same request on every link (MAPS stop / start / pause / resume); links whose state cannot take it are left as they are. */
  async controlAll(requested: string): Promise<void> {
    const action = requested.trim().toLowerCase();
    if (!EVENT_OF[action]) throw new ValidationError(`Unknown action "${requested}"; expected started, stopped, paused or resumed`);
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

  /** IntegrationStatusDTO, plus Switchyard's run state, outbox depth, loop drops, refusals and last error. */
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

export function integrationsService(): IntegrationsService {
  return new IntegrationsService();
}
