import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { EndPointConfigSchema, EndPointServerConfigSchema } from '../../../config/schema.js';
import { parseFilterParam } from '../../../engine/selector/selector.js';
import { ValidationError } from '../../../errors.js';
import { endpointsOf } from '../../../endpoints/endpoints.service.js';
import { ResponseCache } from '../../cache.js';
import type { ApiContext } from '../../context.js';
import { ErrorResponses, FilterQuery, RequestedAction, StatusResponse } from '../../schemas.js';

/**
 * InterfaceManagementApi and InterfaceInstanceApi: list, status and control of the network endpoints, and
 * configuration updates (PUT restarts that endpoint's actor with the new configuration and keeps it in the store).
 * `{endpoint}` is the endpoint's name or its uniqueId. Registered when RestApi.enableInterfaceManagement (default
 * true), as MAPS does; the connection routes follow the same switch.
 */
const InterfaceInfoDTO = z
  .object({
    schemaLoadingVersion: z.number().int(),
    uniqueId: z.string(),
    name: z.string(),
    port: z.number().int(),
    host: z.string(),
    state: z.string().describe('Started, Stopped, Paused, Failed (bind failed, retrying), Starting, Stopping'),
    config: z.record(z.string(), z.unknown()),
  })
  .meta({ id: 'InterfaceInfoDTO' });
const Record = z.object({ name: z.string(), unitName: z.string(), timeSpan: z.number().int(), current: z.number(), stats: z.record(z.string(), z.number()) });
const InterfaceStatusDTO = z
  .object({
    interfaceName: z.string(),
    totalBytesSent: z.number().int(),
    totalBytesReceived: z.number().int(),
    totalMessagesSent: z.number().int(),
    totalMessagesReceived: z.number().int(),
    bytesSent: z.number(),
    bytesReceived: z.number(),
    messagesSent: z.number(),
    messagesReceived: z.number(),
    connections: z.number().int(),
    errors: z.number().int(),
    statistics: z.record(z.string(), Record),
  })
  .meta({ id: 'InterfaceStatusDTO' });
export const EndPointSummaryDTO = z
  .object({
    id: z.number().int(),
    adapter: z.string(),
    name: z.string(),
    user: z.string(),
    protocolName: z.string(),
    protocolVersion: z.string(),
    proxyAddress: z.string(),
    connectedTimeMs: z.number().int(),
    lastRead: z.number().int(),
    lastWrite: z.number().int(),
    totalBytesRead: z.number().int(),
    totalBytesWritten: z.number().int(),
    totalOverflow: z.number().int(),
    totalUnderflow: z.number().int(),
    bytesRead: z.number().int(),
    bytesWritten: z.number().int(),
    overFlow: z.number().int(),
    underFlow: z.number().int(),
    endpoint: z.string().describe('Switchyard extension: the endpoint name'),
    clientId: z.string().describe('Switchyard extension: the MQTT client id'),
  })
  .meta({ id: 'EndPointSummaryDTO' });

/** The update body: the configuration file's schema, with the fields the specification requires. */
const EndPointServerConfigDTO = EndPointServerConfigSchema.safeExtend({
  authenticationRealm: z.string().trim().min(1, 'authenticationRealm is required'),
  endPointConfig: EndPointConfigSchema,
}).meta({ id: 'EndPointServerConfigDTO' });

const EndpointParam = z.object({ endpoint: z.string().describe('endpoint name or uniqueId') });
const view = { permission: { permission: 'view_stats' as const } };
const manage = { permission: { permission: 'manage_interfaces' as const } };
const tags = ['Server Interface Management'];

function filterOf(text: string | undefined) {
  try {
    return parseFilterParam(text);
  } catch (err) {
    throw new ValidationError(`Invalid filter expression: ${(err as Error).message}`);
  }
}

export const interfaceRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  if (!ctx.rt.config.RestApi.enableInterfaceManagement) return; // registered when RestApi.enableInterfaceManagement (as MAPS)
  const { rt, cache } = ctx;
  const cached = <T>(path: string, disc: string, produce: () => T) => cache.get(ResponseCache.key(path, disc), produce);
  // the endpoint's state is in these views: an endpoint's transition drops them (never Started after a failure)
  cache.follow(rt);
  const stateView = <T>(path: string, disc: string, produce: () => T) => cache.getState(ResponseCache.key(path, disc), ['endpoint'], produce);

  app.get(
    '/api/v1/server/interfaces',
    { config: view, schema: { tags, summary: 'Get all end point details', querystring: FilterQuery, response: { 200: z.array(InterfaceInfoDTO), ...ErrorResponses } } },
    async (req) => {
      const f = filterOf(req.query.filter);
      const svc = endpointsOf(rt);
      return stateView(req.routeOptions.url!, req.query.filter ?? '', () => [...svc.entries.values()].map((e) => svc.interfaceInfo(e)).filter((i) => !f || f.matches(i)));
    },
  );

  app.patch(
    '/api/v1/server/interfaces',
    { config: manage, schema: { tags, summary: 'Manages all end points', body: RequestedAction, response: { 200: StatusResponse, ...ErrorResponses } } },
    async (req) => {
      await endpointsOf(rt).controlAll(req.body.state);
      return { status: 'Success' };
    },
  );

  app.get(
    '/api/v1/server/interfaces/status',
    { config: view, schema: { tags, summary: 'Get all end point status', querystring: FilterQuery, response: { 200: z.array(InterfaceStatusDTO), ...ErrorResponses } } },
    async (req) => {
      const f = filterOf(req.query.filter);
      const svc = endpointsOf(rt);
      return cached(req.routeOptions.url!, req.query.filter ?? '', () => [...svc.entries.values()].map((e) => svc.interfaceStatus(e)).filter((i) => !f || f.matches(i)));
    },
  );

  app.get(
    '/api/v1/server/interface/:endpoint',
    { config: view, schema: { tags, summary: 'Get end point configurations', params: EndpointParam, response: { 200: InterfaceInfoDTO, ...ErrorResponses } } },
    async (req) => {
      const svc = endpointsOf(rt);
      const e = svc.find(req.params.endpoint);
      return stateView('/api/v1/server/interface/', e.uniqueId, () => svc.interfaceInfo(e));
    },
  );

  app.put(
    '/api/v1/server/interface/:endpoint',
    {
      config: manage,
      schema: {
        tags,
        summary: 'Update end point configuration',
        description: 'Validates the configuration, keeps it in the store (it survives a restart) and restarts the endpoint with it.',
        params: EndpointParam,
        body: EndPointServerConfigDTO,
        response: { 200: StatusResponse, ...ErrorResponses, 409: StatusResponse },
      },
    },
    async (req) => {
      const svc = endpointsOf(rt);
      const e = svc.find(req.params.endpoint);
      await svc.update(e, req.body);
      cache.evictPrefix('/api/v1/server/interface');
      return { status: 'Success' };
    },
  );

  app.patch(
    '/api/v1/server/interface/:endpoint',
    {
      config: manage,
      schema: {
        tags,
        summary: 'Controls the specific end point',
        description:
          'state: started (from Stopped or Failed), stopped, paused (from Started), resumed (from Paused). The state the endpoint is already in answers 200 {"status":"No change"}; a request its current state cannot take is a 409 naming the state and what it accepts; an endpoint that has not settled within 5 s is a 503 saying what it is still doing.',
        params: EndpointParam,
        body: RequestedAction,
        response: { 200: StatusResponse, ...ErrorResponses, 409: StatusResponse, 503: StatusResponse },
      },
    },
    async (req) => {
      const svc = endpointsOf(rt);
      const e = svc.find(req.params.endpoint);
      const { changed } = await svc.control(e, req.body.state);
      cache.evictPrefix('/api/v1/server/interface');
      return { status: changed ? 'Success' : 'No change' };
    },
  );

  app.get(
    '/api/v1/server/interface/:endpoint/connections',
    { config: view, schema: { tags, summary: 'Get end point connections', params: EndpointParam, response: { 200: z.array(EndPointSummaryDTO), ...ErrorResponses } } },
    async (req) => {
      const svc = endpointsOf(rt);
      const e = svc.find(req.params.endpoint);
      return svc.connections(e).map((c) => svc.connectionSummary(c));
    },
  );

  app.get(
    '/api/v1/server/interface/:endpoint/status',
    { config: view, schema: { tags, summary: 'Get end point status', params: EndpointParam, response: { 200: InterfaceStatusDTO, ...ErrorResponses } } },
    async (req) => {
      const svc = endpointsOf(rt);
      return svc.interfaceStatus(svc.find(req.params.endpoint));
    },
  );
};
