import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { parseFilterParam } from '../../../engine/selector/selector.js';
import { ValidationError } from '../../../errors.js';
import { endpointsOf } from '../../../endpoints/endpoints.service.js';
import type { ApiContext } from '../../context.js';
import { ErrorResponses, FilterQuery, StatusResponse } from '../../schemas.js';
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

  app.get(
    '/api/v1/server/connections',
    {
      config: view,
      schema: {
        tags,
        summary: 'Get all connections',
        description:
          'REST sessions (adapter rest-server, protocolName REST; a login, Basic user or anonymous session cookie, listed until RestApi.inactiveTimeout without a request) first, then the network connections.',
        querystring: FilterQuery,
        response: { 200: z.array(EndPointSummaryDTO), ...ErrorResponses },
      },
    },
    async (req) => {
      let f;
      try {
        f = parseFilterParam(req.query.filter);
      } catch (err) {
        throw new ValidationError(`Invalid filter: ${(err as Error).message}`);
      }
      const svc = endpointsOf(rt);
      // REST sessions first, then the network connections (as MAPS); the filter applies to both
      const rest = app.restConnections?.list() ?? [];
      return [...rest, ...svc.connections().map((c) => svc.connectionSummary(c))].filter((c) => !f || f.matches(c));
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
