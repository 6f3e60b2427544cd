import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { maskSecrets } from '../../../config/load.js';
import { sectionAliases, sectionNames, sectionSchemas, type SectionName } from '../../../config/schema.js';
import { NotFoundError, ValidationError } from '../../../errors.js';
import { command } from '../../../runtime/command.js';
import { serverKind } from '../../../runtime/actor-kind.js';
import { acceptedEvents } from '../../../runtime/inspector.js';
import { healthOf, serverInfo, serverStats, subsystemStatus, type SubSystemStatus } from '../../../runtime/monitor.js';
import { ResponseCache } from '../../cache.js';
import type { ApiContext } from '../../context.js';
import { ErrorResponses, StatusResponse } from '../../schemas.js';

const SubSystemStatusDTO = z.object({ name: z.string(), comment: z.string(), status: z.enum(['OK', 'STOPPED', 'PAUSED', 'DISABLED', 'WARN', 'ERROR']) });
const ServerInfoDTO = z.object({
  serverName: z.string(),
  version: z.string(),
  buildDate: z.string(),
  totalMemory: z.number().int(),
  maxMemory: z.number().int(),
  freeMemory: z.number().int(),
  numberOfThreads: z.number().int(),
  timeToCreateNano: z.number().int(),
  uptime: z.number().int(),
  connections: z.number().int(),
  destinations: z.number().int(),
  cpuTime: z.number().int(),
  cpuPercent: z.number(),
  storageSize: z.number().int(),
  threadState: z.record(z.string(), z.number().int()),
});
const ServerStatisticsDTO = z.object({
  packetsSent: z.number().int(),
  packetsReceived: z.number().int(),
  totalReadBytes: z.number().int(),
  totalWriteBytes: z.number().int(),
  totalConnections: z.number().int(),
  totalDisconnections: z.number().int(),
  totalNoInterestMessages: z.number().int(),
  totalSubscribedMessages: z.number().int(),
  totalPublishedMessages: z.number().int(),
  totalRetrievedMessages: z.number().int(),
  totalExpiredMessages: z.number().int(),
  totalDeliveredMessages: z.number().int(),
  publishedPerSecond: z.number(),
  subscribedPerSecond: z.number(),
  noInterestPerSecond: z.number(),
  deliveredPerSecond: z.number(),
  retrievedPerSecond: z.number(),
  stats: z.string().describe('JSON-encoded metrics: name → {name, unitName, timeSpan, current, stats}'),
});

/** Subsystem statuses plus the API's own (cache). */
export function statusList(ctx: ApiContext): SubSystemStatus[] {
  const info = ctx.cache.info();
  return subsystemStatus(ctx.rt, [
    { name: 'RestAPI Caching', comment: info.enabled ? `Cached Items:${info.cacheSize}` : 'disabled', status: info.enabled ? 'OK' : 'DISABLED' },
  ]);
}

function resolveSection(name: string): SectionName {
  const trimmed = name.trim();
  if (!trimmed) throw new ValidationError('name is required');
  const direct = sectionNames.find((s) => s.toLowerCase() === trimmed.toLowerCase());
  const found = direct ?? sectionAliases[trimmed.toLowerCase()];
  if (!found) throw new NotFoundError(`Unknown configuration section: ${trimmed}; known sections: ${sectionNames.join(', ')}`);
  return found;
}

export const serverRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  const { rt, cache } = ctx;
  const cached = <T>(path: string, disc: string, produce: () => T | Promise<T>) => cache.get(ResponseCache.key(path, disc), produce);

  app.get(
    '/health',
    { config: { public: true }, schema: { tags: ['Server Health'], summary: 'Check server health', response: { 200: z.enum(['Ok', 'Warning', 'Error']) } } },
    async (_req, reply) => {
      reply.type('text/plain; charset=utf-8');
      // the body stays MAPS' Ok/Warning/Error; a failed subtree (a supervisor that spent its restart budget) is named here
      const failed = rt.failedSubtrees();
      if (failed.length) reply.header('x-switchyard-failed-subtrees', failed.map((f) => `${f.subtree}=${f.state}`).join(', '));
      const stalled = rt.service('integrations')?.stalledNames() ?? []; // Started, not Established for longer than the backoff cap
      if (stalled.length) reply.header('x-switchyard-stalled-integrations', stalled.map(encodeURIComponent).join(', '));
      // Cluster.enabled: this node's membership when it is not a member, and the nodes it cannot reach (docs/cluster.md)
      const cluster = rt.service('cluster');
      const notMember = cluster?.readinessReasons() ?? [];
      if (notMember.length) reply.header('x-switchyard-cluster', notMember.join('; ').replace(/[^\x20-\x7e]/g, '?'));
      const unreachable = cluster?.unreachable() ?? [];
      if (unreachable.length) reply.header('x-switchyard-cluster-unreachable', unreachable.join(', '));
      return healthOf(statusList(ctx)).status;
    },
  );

  app.get(
    '/api/v1/ping',
    { config: { public: true }, schema: { tags: ['Server Health'], summary: 'Ping the server', response: { 200: StatusResponse } } },
    async () => ({ status: 'Success' }),
  );

  app.get(
    '/api/v1/name',
    {
      // any logged-in user (MAPS: authentication only, no permission check): connect, which everyone holds
      config: { permission: { permission: 'connect' } },
      schema: { tags: ['Server Health'], summary: "Retrieve the server's unique name", description: 'Any authenticated user (the connect permission).', response: { 200: z.string(), ...ErrorResponses } },
    },
    async (_req, reply) => reply.type('application/json; charset=utf-8').send(JSON.stringify(rt.serverName)),
  );

  app.get(
    '/api/v1/updates',
    {
      schema: {
        tags: ['Server Health'],
        summary: 'Check for configuration updates',
        response: { 200: z.object({ schemaUpdate: z.number().int(), destinationUpdate: z.number().int(), interfaceUpdate: z.number().int() }) },
      },
    },
    async () => ({ ...rt.updates }),
  );

  app.get(
    '/api/v1/server/details/info',
    { config: { permission: { permission: 'view_stats' } }, schema: { tags: ['Server Management'], summary: 'Get server build information', response: { 200: ServerInfoDTO, ...ErrorResponses } } },
    async (req) => cached(req.routeOptions.url!, 'buildInfo', () => serverInfo(rt, rt.destinationCount())),
  );

  app.get(
    '/api/v1/server/details/stats',
    { config: { permission: { permission: 'view_stats' } }, schema: { tags: ['Server Management'], summary: 'Get server statistics', response: { 200: ServerStatisticsDTO, ...ErrorResponses } } },
    async (req) => cached(req.routeOptions.url!, 'serverStats', () => serverStats(rt)),
  );

  app.get(
    '/api/v1/server/status',
    { config: { permission: { permission: 'view_stats' } }, schema: { tags: ['Server Management'], summary: 'Get server subsystem status', response: { 200: z.array(SubSystemStatusDTO), ...ErrorResponses } } },
    // not cached: it shows actor states and supervisor context (counts, last errors) that change without a
    // transition, and a status view must never be stale (/health computes the same list on every call)
    async () => statusList(ctx),
  );

  app.get(
    '/api/v1/server/health',
    { config: { permission: { permission: 'view_stats' } },
      schema: {
        tags: ['Server Management'],
        summary: 'Get server subsystem status summary',
        response: { 200: z.object({ status: z.enum(['Ok', 'Warning', 'Error']), issueCount: z.number().int() }), ...ErrorResponses },
      },
    },
    async () => healthOf(statusList(ctx)),
  );

  app.patch(
    '/api/v1/server',
    { config: { permission: { permission: 'manage_config' } },
      schema: {
        tags: ['Server Management'],
        summary: 'Restart or shutdown the server',
        description:
          'state: restart (stop every actor child-first, flush the store, rebuild the tree in this process; while the server is degraded it resets the failed subtrees in place, sending them supervisor.reset) or shutdown (graceful exit, code 0). Goes through the command helper: a state that cannot take the request (stopping, booting) is a 409 naming it.',
        body: z.object({ state: z.string().trim().min(1, 'state is required') }),
        response: { 200: StatusResponse, ...ErrorResponses, 409: StatusResponse },
      },
    },
    async (req, reply) => {
      const action = req.body.state.toLowerCase();
      if (action !== 'restart' && action !== 'shutdown') throw new ValidationError(`Unknown action: ${req.body.state}; expected restart or shutdown`);
      const root = serverKind.lookup(rt, '');
      await command((r) => rt.emit('actor.command', r), {
        ...serverKind.target(root, ''),
        accepts: () => (root ? acceptedEvents(root).map((e) => e.replace(/^server\./, '')) : []),
      }, {
        event: { type: action === 'restart' ? 'server.restart' : 'server.shutdown' },
        what: action === 'restart' ? 'restarted' : 'shut down',
        already: () => false,
        settled: () => true,
        noWait: true,
        // the answer goes out first; then the runtime restarts (it sends server.restart itself) or main.ts shuts down
        send: () => reply.raw.once('finish', () => (action === 'restart' ? void rt.restart().catch((err) => rt.log.error({ err }, 'restart failed')) : rt.requestShutdown())),
      });
      return { status: action === 'restart' ? 'Restarting' : 'Shutting down' };
    },
  );

  app.get(
    '/api/v1/server/config',
    { config: { permission: { permission: 'view_config' } }, schema: { tags: ['Server Config Management'], summary: 'List configuration sections', response: { 200: z.array(z.string()), ...ErrorResponses } } },
    async (req) => cached(req.routeOptions.url!, 'knownManagers', () => [...sectionNames]),
  );

  app.get(
    '/api/v1/server/config/:name',
    { config: { permission: { permission: 'view_config' } },
      schema: {
        tags: ['Server Config Management'],
        summary: 'Retrieve configuration section value and schema',
        params: z.object({ name: z.string() }),
        response: { 200: z.object({ config: z.record(z.string(), z.unknown()), schema: z.record(z.string(), z.unknown()) }), ...ErrorResponses },
      },
    },
    async (req) => {
      const section = resolveSection(req.params.name);
      return cached('/api/v1/server/config/', section, () => ({
        config: maskSecrets(rt.config[section]) as Record<string, unknown>,
        schema: z.toJSONSchema(sectionSchemas[section], { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>,
      }));
    },
  );

  app.get(
    '/api/v1/server/cache',
    { config: { permission: { permission: 'view_config' } },
      schema: {
        tags: ['Server Config Management'],
        summary: 'Retrieve cache information',
        response: {
          200: z.object({
            enabled: z.boolean(),
            lifeTime: z.number().int(),
            scanTime: z.number().int(),
            cacheSize: z.number().int(),
            cacheHits: z.number().int(),
            cacheMisses: z.number().int(),
          }),
          ...ErrorResponses,
        },
      },
    },
    async () => cache.info(),
  );

  app.delete('/api/v1/server/cache', { config: { permission: { permission: 'manage_config' } }, schema: { tags: ['Server Config Management'], summary: 'Clear cache', response: { 204: z.null(), ...ErrorResponses } } }, async (_req, reply) => {
    cache.clear();
    return reply.code(204).send(null);
  });
};
