import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client';
import { registerClusterMetrics } from '../../../cluster/stats.js';
import { registerLinkMetrics } from '../../../links/link-metrics.js';
import { endpointsOf, type EndpointEntry } from '../../../endpoints/endpoints.service.js';
import { healthOf } from '../../../runtime/monitor.js';
import type { Runtime } from '../../../runtime/runtime.js';
import type { ApiContext } from '../../context.js';
import { readiness } from '../probes/readiness.js';
import { statusList } from '../server/server.routes.js';

/**
 * Prometheus text at /metrics (docs/operations.md). Every value is read from live state at scrape time: totals are
 * Counters (monotonic since start, `_total`), levels are Gauges, so `promtool check metrics` is clean. Labels carry
 * endpoint names, destination names and types only: never a user name, client id or address. Cardinality is
 * bounded: one series set per configured endpoint, and per destination only for the `RestApi.metricsTopDestinations`
 * destinations published to most ($SYS and temporary destinations never).
 *
 * Open by default, as Prometheus scrapes; `RestApi.metricsAuthentication: true` requires credentials and view_stats.
 */

/** A counter whose value is read at scrape time (the broker keeps the running totals itself). */
function liveCounter(register: Registry, name: string, help: string, read: () => number): Counter {
  return new Counter({
    name: `switchyard_${name}`,
    help,
    registers: [register],
    collect() {
      this.reset();
      this.inc(Math.max(0, read()));
    },
  });
}

function liveGauge(register: Registry, name: string, help: string, read: () => number): Gauge {
  return new Gauge({
    name: `switchyard_${name}`,
    help,
    registers: [register],
    collect() {
      this.set(read());
    },
  });
}

/** Labelled counters or gauges filled at scrape time from a list of rows. */
function labelled<R>(register: Registry, kind: 'counter' | 'gauge', name: string, help: string, labelNames: string[], rows: () => R[], labels: (r: R) => Record<string, string>, value: (r: R) => number): void {
  const common = { name: `switchyard_${name}`, help, labelNames, registers: [register] };
  if (kind === 'counter') {
    new Counter({
      ...common,
      collect() {
        this.reset();
        for (const r of rows()) this.inc(labels(r), Math.max(0, value(r)));
      },
    });
  } else {
    new Gauge({
      ...common,
      collect() {
        this.reset();
        for (const r of rows()) this.set(labels(r), value(r));
      },
    });
  }
}

function endpointRows(rt: Runtime): EndpointEntry[] {
  try {
    return [...endpointsOf(rt).entries.values()];
  } catch {
    return []; // not running (restart, shutdown)
  }
}

interface DestinationRow {
  name: string;
  type: string;
  publishedMessages: number;
  deliveredMessages: number;
  expiredMessages: number;
  noInterestMessages: number;
  storedMessages: number;
  pendingMessages: number;
}

/** The `top` destinations published to most; $SYS and temporary destinations are left out. */
export function topDestinations(rt: Runtime, top: number): DestinationRow[] {
  if (top <= 0 || !rt.engine) return [];
  const all = rt.engine.destinations().filter((d) => !d.name.startsWith('$SYS') && !String(d.type).startsWith('Temporary')) as DestinationRow[];
  return all.sort((a, b) => b.publishedMessages - a.publishedMessages || a.name.localeCompare(b.name)).slice(0, top);
}

export function buildRegistry(ctx: ApiContext): Registry {
  const { rt } = ctx;
  const register = new Registry();
  collectDefaultMetrics({ register, prefix: 'switchyard_' });
  // prom-client's nodejs_active_{handles,requests,resources}_total are gauges named like counters (promtool refuses
  // them): replaced by one gauge without the suffix.
  for (const m of ['handles', 'requests', 'resources']) register.removeSingleMetric(`switchyard_nodejs_active_${m}_total`);
  register.removeSingleMetric('switchyard_nodejs_active_handles');
  register.removeSingleMetric('switchyard_nodejs_active_requests');
  register.removeSingleMetric('switchyard_nodejs_active_resources');
  liveGauge(register, 'nodejs_active_resources', 'Resources (handles, requests, timers) keeping the event loop alive', () => process.getActiveResourcesInfo().length);
  // engine totals, read loosely so that a total another part adds shows once it exists
  const totals = () => rt.engineStats() as unknown as Record<string, number | undefined>;
  const total = (key: string) => () => totals()[key] ?? 0;
  liveCounter(register, 'messages_published_total', 'Messages published since start', total('totalPublishedMessages'));
  liveCounter(register, 'messages_delivered_total', 'Messages delivered to subscribers since start', total('totalDeliveredMessages'));
  liveCounter(register, 'messages_no_interest_total', 'Messages published with no subscriber', total('totalNoInterestMessages'));
  liveCounter(register, 'messages_expired_total', 'Messages that expired before delivery', total('totalExpiredMessages'));
  liveCounter(register, 'messages_retrieved_total', 'Messages retrieved over REST consume', total('totalRetrievedMessages'));
  // queue limits and flow control (docs/messaging.md "Flow control and limits")
  liveCounter(register, 'messages_dropped_total', 'Message copies dropped by a full subscription or paused topic (QoS 0 drop-oldest, REST maxDepth)', total('totalDroppedMessages'));
  liveCounter(register, 'messages_refused_total', 'QoS 1/2 publishes refused by flow control: a subscription they would reach was full (MQTT 5 0x97, REST 429, 3.1.1 policy)', total('totalRefusedMessages'));
  liveGauge(register, 'subscription_queued_bytes', 'Bytes held for subscriptions now (queued + in flight; payload and properties + 512 per message; each capped by DestinationManager.maxQueuedBytes)', () => rt.engine?.queuedBytes() ?? 0);
  liveGauge(register, 'destinations', 'Destinations that exist now', () => rt.destinationCount());
  liveGauge(register, 'connections', 'Client connections open now', () => rt.network.currentConnections);
  liveCounter(register, 'connections_total', 'Client connections accepted since start', () => rt.network.totalConnections);
  liveCounter(register, 'disconnections_total', 'Client connections closed since start', () => rt.network.totalDisconnections);
  liveCounter(register, 'bytes_received_total', 'Bytes read from clients', () => rt.network.totalReadBytes);
  liveCounter(register, 'bytes_sent_total', 'Bytes written to clients', () => rt.network.totalWriteBytes);
  liveGauge(register, 'health', 'Server health as /health says it: 0 Ok, 1 Warning, 2 Error', () => ({ Ok: 0, Warning: 1, Error: 2 })[healthOf(statusList(ctx)).status]);
  liveGauge(register, 'ready', '1 when /readyz answers 200 (every configured endpoint listens, store open, no failed supervisor), else 0', () => (readiness(rt).ready ? 1 : 0));
  liveGauge(register, 'uptime_seconds', 'Seconds since the process started', () => (Date.now() - rt.startedAt) / 1000);

  // per endpoint (one series set per configured endpoint)
  const eps = () => endpointRows(rt);
  const ep = (e: EndpointEntry) => ({ endpoint: e.name });
  labelled(register, 'gauge', 'endpoint_up', '1 while the endpoint listens (started or paused), else 0', ['endpoint'], eps, ep, (e) => {
    const s = endpointsOf(rt).state(e);
    return s === 'Started' || s === 'Paused' ? 1 : 0;
  });
  labelled(register, 'gauge', 'endpoint_connections', 'Connections open on the endpoint now', ['endpoint'], eps, ep, (e) => e.stats.connections.size);
  labelled(register, 'counter', 'endpoint_bytes_received_total', 'Bytes read on the endpoint', ['endpoint'], eps, ep, (e) => e.stats.bytesIn);
  labelled(register, 'counter', 'endpoint_bytes_sent_total', 'Bytes written on the endpoint', ['endpoint'], eps, ep, (e) => e.stats.bytesOut);
  labelled(register, 'counter', 'endpoint_messages_received_total', 'Messages received on the endpoint', ['endpoint'], eps, ep, (e) => e.stats.messagesIn);
  labelled(register, 'counter', 'endpoint_messages_sent_total', 'Messages sent on the endpoint', ['endpoint'], eps, ep, (e) => e.stats.messagesOut);
  labelled(register, 'counter', 'endpoint_errors_total', 'Errors on the endpoint (failed binds, protocol violations)', ['endpoint'], eps, ep, (e) => e.stats.errors);

  // per destination: the top N by messages published (bounded by RestApi.metricsTopDestinations)
  const top = rt.config.RestApi.metricsTopDestinations;
  if (top > 0) {
    let cached: { at: number; rows: DestinationRow[] } | undefined;
    const dests = () => {
      // one sort per scrape, shared by the series below
      if (!cached || Date.now() - cached.at > 500) cached = { at: Date.now(), rows: topDestinations(rt, top) };
      return cached.rows;
    };
    const dl = (d: DestinationRow) => ({ destination: d.name, type: d.type });
    labelled(register, 'counter', 'destination_messages_published_total', `Messages published to the destination (the ${top} destinations published to most)`, ['destination', 'type'], dests, dl, (d) => d.publishedMessages);
    labelled(register, 'counter', 'destination_messages_delivered_total', 'Messages delivered from the destination', ['destination', 'type'], dests, dl, (d) => d.deliveredMessages);
    labelled(register, 'counter', 'destination_messages_expired_total', 'Messages of the destination that expired', ['destination', 'type'], dests, dl, (d) => d.expiredMessages);
    labelled(register, 'gauge', 'destination_messages_stored', 'Messages stored for the destination now (queue depth, retained message)', ['destination', 'type'], dests, dl, (d) => d.storedMessages);
    labelled(register, 'gauge', 'destination_messages_pending', 'Messages waiting for delivery now', ['destination', 'type'], dests, dl, (d) => d.pendingMessages);
  }

  registerLinkMetrics(register, rt); // per integration link, labelled {link} only (src/links/link-metrics.ts)
  // cluster totals (switchyard_cluster_*, src/cluster/stats.ts), only when the cluster is on
  if (rt.config.Cluster.enabled) registerClusterMetrics(register, () => rt.service('clusterViews')?.totals());
  return register;
}

export const metricsRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  const register = buildRegistry(ctx);
  const open = !ctx.rt.config.RestApi.metricsAuthentication;
  app.get(
    '/metrics',
    {
      config: open ? { public: true } : { permission: { permission: 'view_stats' } },
      schema: { tags: ['Server Management'], summary: `Prometheus metrics (text exposition format)${open ? '; open (RestApi.metricsAuthentication: false)' : ''}` },
    },
    async (_req, reply) => {
      reply.type(register.contentType);
      return register.metrics();
    },
  );
};
