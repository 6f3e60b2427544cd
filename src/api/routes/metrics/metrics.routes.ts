import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { collectDefaultMetrics, Gauge, Registry } from 'prom-client';
import { healthOf } from '../../../runtime/monitor.js';
import type { ApiContext } from '../../context.js';
import { statusList } from '../server/server.routes.js';

/** Prometheus text at /metrics: process metrics plus broker counters read from live state at scrape time. */
export const metricsRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  const { rt } = ctx;
  const register = new Registry();
  collectDefaultMetrics({ register, prefix: 'switchyard_' });
  const gauge = (name: string, help: string, read: () => number) =>
    new Gauge({
      name: `switchyard_${name}`,
      help,
      registers: [register],
      collect() {
        this.set(read());
      },
    });
  const totals = () => rt.engineStats();
  gauge('messages_published_total', 'Messages published since start', () => totals().totalPublishedMessages);
  gauge('messages_delivered_total', 'Messages delivered to subscribers since start', () => totals().totalDeliveredMessages);
  gauge('messages_no_interest_total', 'Messages published with no subscriber', () => totals().totalNoInterestMessages);
  gauge('messages_expired_total', 'Messages that expired before delivery', () => totals().totalExpiredMessages);
  gauge('messages_retrieved_total', 'Messages retrieved over REST consume', () => totals().totalRetrievedMessages);
  gauge('destinations', 'Destinations that exist now', () => rt.destinationCount());
  gauge('connections', 'Client connections open now', () => rt.network.currentConnections);
  gauge('connections_total', 'Client connections accepted since start', () => rt.network.totalConnections);
  gauge('bytes_received_total', 'Bytes read from clients', () => rt.network.totalReadBytes);
  gauge('bytes_sent_total', 'Bytes written to clients', () => rt.network.totalWriteBytes);
  gauge('health', 'Server health: 0 Ok, 1 Warning, 2 Error', () => ({ Ok: 0, Warning: 1, Error: 2 })[healthOf(statusList(ctx)).status]);
  gauge('uptime_seconds', 'Seconds since the process started', () => (Date.now() - rt.startedAt) / 1000);

  app.get('/metrics', { config: { permission: { permission: 'view_stats' } }, schema: { tags: ['Server Management'], summary: 'Prometheus metrics (text exposition format)' } }, async (_req, reply) => {
    reply.type(register.contentType);
    return register.metrics();
  });
};
