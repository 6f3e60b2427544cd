import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { parseFilterParam } from '../../../engine/selector/selector.js';
import { ValidationError } from '../../../errors.js';
import { endpointsOf } from '../../../endpoints/endpoints.service.js';
import type { ApiContext } from '../../context.js';
import { ErrorResponses, FilterQuery, StatusResponse } from '../../schemas.js';
import { ClusterList } from '../../../cluster/rpc.js';
import { clusterList, clusterListDTO, ScopeParam, serveClusterList } from '../cluster/scope.js';
import { EndPointSummaryDTO } from '../interfaces/interfaces.routes.js';

/** ConnectionManagementApi: the live network connections (MQTT), their session details, and closing one. */
const tags = ['Connection Management'];
const view = { permission: { permission: 'view_stats' as const } };
const manage = { permission: { permission: 'manage_interfaces' as const } };
const IdParam = z.object({ connectionId: z.string() });

function idOf(raw: string): number {
  const t = raw.trim();
  if (!/^\d{1,15}$/.test(t)) throw new ValidationError(`Invalid connectionId "${raw}": expected a positive integer`);
  return Number(t);
}

export const connectionRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  if (!ctx.rt.config.RestApi.enableInterfaceManagement) return; // as MAPS: the connection routes go with interface management
  const { rt } = ctx;
  const localConnections = (filter: string | undefined) => {
    let f;
    try {
      f = parseFilterParam(filter);
    } catch (err) {
      throw new ValidationError(`Invalid filter: ${(err as Error).message}`);
    }
    const svc = endpointsOf(rt);
    // REST sessions first, then the network connections (as MAPS); the filter applies to both
    const rest = app.restConnections?.list() ?? [];
    return [...rest, ...svc.connections().map((c) => svc.connectionSummary(c))].filter((c) => !f || f.matches(c));
  };
  // the other nodes' `scope=cluster` requests get this node's list from the same function
  serveClusterList(rt, ClusterList.Connections, (q, cap) => {
    const all = localConnections(typeof q.filter === 'string' ? q.filter : undefined);
    return { total: all.length, items: all.slice(0, cap), truncated: all.length > cap };
  });

  app.get(
    '/api/v1/server/connections',
    {
      config: view,
      schema: {
        tags,
        summary: 'Get all connections',
        description:
          'REST sessions (adapter rest-server, protocolName REST; a login, Basic user or anonymous session cookie, listed until RestApi.inactiveTimeout without a request) first, then the network connections. With scope=cluster (Switchyard extension) an object with the connections of every live cluster node, each naming its node (connection ids are per node).',
        querystring: FilterQuery.extend({ scope: ScopeParam }),
        response: { 200: z.union([z.array(EndPointSummaryDTO), clusterListDTO(EndPointSummaryDTO, 'ClusterConnections')]), ...ErrorResponses },
      },
    },
    async (req) => {
      if (req.query.scope === 'cluster') return clusterList(rt, ClusterList.Connections, { filter: req.query.filter });
      return localConnections(req.query.filter);
    },
  );

  app.get(
    '/api/v1/server/connections/:connectionId',
    {
      config: view,
      schema: {
        tags,
        summary: 'Get connection details for the specified id',
        params: IdParam,
        response: { 200: z.object({ endPointSummary: EndPointSummaryDTO, protocolInformation: z.record(z.string(), z.unknown()) }), ...ErrorResponses },
      },
    },
    async (req) => {
      const svc = endpointsOf(rt);
      return svc.connectionDetails(svc.connection(idOf(req.params.connectionId)));
    },
  );

  app.delete(
    '/api/v1/server/connections/:connectionId',
    { config: manage, schema: { tags, summary: 'Close a connection', params: IdParam, response: { 200: StatusResponse, ...ErrorResponses } } },
    async (req) => {
      const svc = endpointsOf(rt);
      svc.closeConnection(svc.connection(idOf(req.params.connectionId)));
      return { status: 'Success' };
    },
  );
};
