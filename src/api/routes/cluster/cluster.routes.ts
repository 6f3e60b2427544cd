import type { AddressInfo } from 'node:net';
import { hostname } from 'node:os';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { ApiContext } from '../../context.js';
import { ErrorResponses, StatusResponse } from '../../schemas.js';
import { NotFoundError } from '../../../errors.js';

const ClusterNodeDTO = z.object({
  nodeId: z.string(),
  state: z.enum(['live', 'gone', 'left']).describe('live: heartbeats arrive; gone: its lease lapsed (declared by declaredBy); left: stopped cleanly'),
  epoch: z.number().int().describe('grows on every start of the node (and when it rejoins after being declared gone)'),
  serverName: z.string(),
  restAddress: z.string().describe("the node's REST API ('' until it is known)"),
  started: z.string().describe('ISO time this epoch began (the node\'s clock)'),
  lastHeartbeat: z.string().describe('ISO time of its last lease write (the node\'s clock)'),
  heartbeatAge: z.number().describe('seconds since this broker last saw the lease change (this broker\'s clock)'),
  self: z.boolean().describe('this broker'),
  goneReported: z.number().int().describe('times this broker reported the node gone (once per lapse)'),
  declaredBy: z.string().optional().describe('the node that declared it gone'),
});

const ClusterDTO = z.union([
  z.object({
    enabled: z.literal(true),
    clusterName: z.string(),
    bucket: z.string().describe('the JetStream KV bucket of the leases'),
    nodeId: z.string(),
    epoch: z.number().int(),
    state: z.enum(['Connecting', 'Member', 'Isolated', 'Refused', 'Stopped']),
    reason: z.string().optional().describe('why this broker is not a member'),
    replicas: z.number().int(),
    leaseSeconds: z.number(),
    heartbeatSeconds: z.number(),
    nats: z.object({ connected: z.boolean(), server: z.string().optional(), lastError: z.string().optional() }),
    nodes: z.array(ClusterNodeDTO),
    unreachable: z.array(z.string()).describe('nodes gone, or whose lease lapsed and is not declared yet'),
  }),
  z.object({ enabled: z.literal(false) }),
]);

/**
 * Switchyard extension (MAPS has no cluster): `GET /api/v1/server/cluster`, this broker's view of the cluster
 * (docs/cluster.md). Not cached: membership changes without any request.
 */
export const clusterRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  const { rt } = ctx;
  // the lease carries the REST address; with port 0 it is known only once the server listens
  app.server.once('listening', () => {
    const addr = app.server.address() as AddressInfo | string | null;
    if (!addr || typeof addr === 'string') return;
    const host = addr.address === '0.0.0.0' || addr.address === '::' ? hostname() : addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
    rt.service('cluster')?.setRestAddress(`${rt.config.RestApi.sslConfig ? 'https' : 'http'}://${host}:${addr.port}`);
  });

  app.get(
    '/api/v1/server/cluster',
    {
      config: { permission: { permission: 'view_stats' } },
      schema: {
        tags: ['Server Management'],
        summary: "This broker's view of the cluster (Switchyard extension)",
        description:
          'Every node holding or having held a lease in the cluster bucket: state live/gone/left, epoch, heartbeat age, this broker marked `self`. `{"enabled": false}` when Cluster.enabled is off. See docs/cluster.md.',
        response: { 200: ClusterDTO, ...ErrorResponses },
      },
    },
    async (_req, reply) => {
      reply.header('cache-control', 'no-store');
      return rt.service('cluster')?.view() ?? { enabled: false as const };
    },
  );

  app.delete(
    '/api/v1/server/cluster/nodes/:nodeId',
    {
      config: { permission: { permission: 'manage_config' } },
      schema: {
        tags: ['Server Management'],
        summary: 'Forget a gone or left node (Switchyard extension)',
        description:
          "Removes the node's lease from the cluster bucket (a node taken out of service for good), so it is no longer listed or reported unreachable. 409 for a live node, 404 for an unknown one or when the cluster is off, 503 when this broker is not a member.",
        params: z.object({ nodeId: z.string().min(1).max(64).regex(/^[A-Za-z0-9_-]+$/, "a node id: letters, digits, '_' and '-'") }),
        response: { 200: StatusResponse, ...ErrorResponses, 409: StatusResponse, 503: StatusResponse },
      },
    },
    async (req) => {
      const svc = rt.service('cluster');
      if (!svc) throw new NotFoundError('The cluster is not enabled (Cluster.enabled)');
      await svc.forget(req.params.nodeId);
      return { status: 'Success' };
    },
  );
};
