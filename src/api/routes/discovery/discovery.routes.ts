import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { discoveryOf } from '../../../discovery/discovery.service.js';
import type { ApiContext } from '../../context.js';
import { ErrorResponses, FilterQuery, RequestedAction, StatusResponse } from '../../schemas.js';

/**
 * DiscoveryManagementApi (maps-rest-api #58, #59): the servers the discovery manager found (mDNS, NATS) and its
 * control. Registered when RestApi.enableInterfaceManagement (default true), as MAPS does. Not cached: a goodbye
 * must show at once (MAPS caches the list; a stale list after `stopped` is what §5 calls out).
 */
const Services = z
  .object({
    protocol: z.string(),
    port: z.number().int(),
    transport: z.string(),
    addresses: z.array(z.string()),
    properties: z.record(z.string(), z.string()),
  })
  .meta({ id: 'Services' });

const DiscoveredServersDTO = z
  .object({
    serverName: z.string(),
    systemTopicPrefix: z.string().optional(),
    schemaSupport: z.boolean(),
    schemaPrefix: z.string().optional(),
    version: z.string().optional(),
    buildDate: z.string().optional(),
    services: z.record(z.string(), Services).describe('keyed by "restApi" (the _maps._tcp record) or the endpoint name'),
    via: z.array(z.enum(['mdns', 'nats'])).describe('Switchyard extension: how the server was heard'),
  })
  .meta({ id: 'DiscoveredServersDTO' });

const tags = ['Discovery Management'];

export const discoveryRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  const { rt } = ctx;
  // the `_maps._tcp` record carries the port the REST API really listens on (RestApi.port 0 picks one), also when
  // the routes below are switched off
  app.server.once('listening', () => {
    const addr = app.server.address();
    if (addr && typeof addr === 'object') rt.service('discovery')?.setRestPort(addr.port);
  });
  if (!rt.config.RestApi.enableInterfaceManagement) return;

  app.get(
    '/api/v1/server/discovery',
    {
      config: { permission: { permission: 'view_stats' as const } },
      schema: {
        tags,
        summary: 'Get discovered servers',
        description:
          'The other servers heard over mDNS (_maps._tcp and the endpoint records) or on the NATS discovery subject, until their TTL passes or they say goodbye. `filter` is a selector on the DTO fields, e.g. schemaSupport = TRUE OR systemTopicPrefix IS NOT NULL. Empty while the discovery manager is stopped or disabled.',
        querystring: FilterQuery,
        response: { 200: z.array(DiscoveredServersDTO), ...ErrorResponses },
      },
    },
    async (req) => discoveryOf(rt).list(req.query.filter),
  );

  app.patch(
    '/api/v1/server/discovery',
    {
      config: { permission: { permission: 'manage_interfaces' as const } },
      schema: {
        tags,
        summary: 'Manages the discovery manager',
        description:
          'state: started or stopped (case-insensitive); anything else (paused, resumed) is 400 Unknown action. 404 when DiscoveryManager.enabled is false. The state it is already in answers {"status":"No change"}; stopped sends the goodbye records.',
        body: RequestedAction,
        response: { 200: StatusResponse, ...ErrorResponses, 409: StatusResponse, 503: StatusResponse },
      },
    },
    async (req) => {
      const { changed } = await discoveryOf(rt).control(req.body.state);
      return { status: changed ? 'Success' : 'No change' };
    },
  );
};
