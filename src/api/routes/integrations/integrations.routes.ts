import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { parseFilterParam } from '../../../engine/selector/selector.js';
import { ValidationError } from '../../../errors.js';
import { integrationsOf } from '../../../links/integrations.service.js';
import type { ApiContext } from '../../context.js';
import { ErrorResponses, FilterQuery, StatusResponse } from '../../schemas.js';
import { EndPointSummaryDTO } from '../interfaces/interfaces.routes.js';

/**
 * IntegrationManagementApi and IntegrationInstanceApi (maps-rest-api #48–54): the integration links
 * (NetworkConnectionManager), their state and control. `{name}` is matched case-insensitively. Nothing here is
 * cached: a state change is visible in the next answer (MAPS serves stale state from its cache). Registered when
 * RestApi.enableInterfaceManagement (default true), as MAPS does.
 */
const IntegrationInfoDTO = z
  .object({
    config: z.record(z.string(), z.unknown()).describe('EndPointConnectionServerConfigDTO (authConfig.password masked)'),
    state: z.enum(['Started', 'Stopped', 'Paused']),
  })
  .meta({ id: 'IntegrationInfoDTO' });

const IntegrationStatusDTO = z
  .object({
    interfaceName: z.string(),
    bytesSent: z.number().int(),
    bytesReceived: z.number().int(),
    messagesSent: z.number().int(),
    messagesReceived: z.number().int(),
    errors: z.number().int(),
    lastReadTime: z.number().int(),
    lastWriteTime: z.number().int(),
    state: z.string().describe('connection state: Disconnected, Connecting, Connected, Establishing, Established, Delayed (backing off), Shutdown (stopped)'),
    statistics: z.string().describe('JSON-encoded moving averages (as the service specification has it): an object of LinkedMovingAverageRecordDTO {name, unitName, timeSpan, current, stats} keyed by name'),
    runState: z.string().describe('Switchyard extension: Started, Stopped or Paused'),
    outbox: z.number().int().describe('Switchyard extension: messages waiting in the persistent outbox (push linkConfigs)'),
    loopsDropped: z.number().int().describe('Switchyard extension: received messages that originated on this broker, dropped'),
    refused: z.number().int().describe('Switchyard extension: pushed messages the remote side refused for good, dropped'),
    rejected: z.number().int().describe('Switchyard extension: received messages this broker refused ($SYS topic, payload schema), acknowledged and dropped'),
    qos0Dropped: z.number().int().describe('Switchyard extension: QoS 0 messages dropped unread while this broker was behind (NATS links with qos0Subjects: the cluster)'),
    lastError: z.string().describe("Switchyard extension: the link's last error ('' when none)"),
  })
  .meta({ id: 'IntegrationStatusDTO' });

/** The service specification: "All inter-server configurations: object with `data` (array) and `globalConfig` (object)". */
const IntegrationList = z
  .object({ data: z.array(IntegrationInfoDTO), globalConfig: z.record(z.string(), z.unknown()).describe('NetworkConnectionManager.globalConfig') })
  .meta({ id: 'IntegrationInfoList' });
/** The service specification: "All inter-server status: object with `list` (array)". */
const IntegrationStatusList = z.object({ list: z.array(IntegrationStatusDTO) }).meta({ id: 'IntegrationStatusList' });

const RequestedAction = z.object({ state: z.string().optional() });
const NameParam = z.object({ name: z.string().describe('integration name (case-insensitive)') });
const view = { permission: { permission: 'view_stats' as const } };
const manage = { permission: { permission: 'manage_interfaces' as const } };
const tags = ['Server Integration Management'];
const stateHelp =
  'state (trimmed, case-insensitive): started (from Stopped), stopped (from Started or Paused), paused (from Started: the link closes its connection, push messages wait in its persistent outbox), resumed (from Paused: reconnects and drains the outbox in order).';

function filterOf(text: string | undefined) {
  try {
    return parseFilterParam(text);
  } catch (err) {
    throw new ValidationError(`Invalid filter: ${(err as Error).message}`);
  }
}

function requestedState(body: { state?: string } | undefined | null): string {
  if (body === undefined || body === null) throw new ValidationError('Request body is required');
  if (body.state === undefined || body.state.trim() === '') throw new ValidationError('State is required');
  return body.state;
}

export const integrationRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  if (!ctx.rt.config.RestApi.enableInterfaceManagement) return;
  const { rt } = ctx;

  app.get(
    '/api/v1/server/integrations',
    {
      config: view,
      schema: {
        tags,
        summary: 'Get all inter-server connections',
        description: "filter: a selector over IntegrationInfoDTO, e.g. state = 'Paused' or config#name = 'site-b' (case-insensitive values).",
        querystring: FilterQuery,
        response: { 200: IntegrationList, ...ErrorResponses },
      },
    },
    async (req) => {
      const f = filterOf(req.query.filter);
      const svc = integrationsOf(rt);
      const data = svc
        .entries()
        .map((e) => svc.info(e))
        .filter((i) => !f || f.matches(i));
      return { data, globalConfig: { ...rt.config.NetworkConnectionManager.globalConfig } };
    },
  );

  app.patch(
    '/api/v1/server/integrations',
    {
      config: manage,
      schema: { tags, summary: 'Manages all inter-server connections', description: stateHelp, body: RequestedAction.optional(), response: { 200: StatusResponse, ...ErrorResponses, 503: StatusResponse } },
    },
    async (req) => {
      await integrationsOf(rt).controlAll(requestedState(req.body));
      return { status: 'Success' };
    },
  );

  app.get(
    '/api/v1/server/integrations/status',
    {
      config: view,
      schema: {
        tags,
        summary: 'Get all inter-server status',
        description: "filter: a selector over IntegrationStatusDTO, e.g. state = 'Established'.",
        querystring: FilterQuery,
        response: { 200: IntegrationStatusList, ...ErrorResponses },
      },
    },
    async (req) => {
      const f = filterOf(req.query.filter);
      const svc = integrationsOf(rt);
      const list = svc
        .entries()
        .map((e) => svc.status(e))
        .filter((s) => !f || f.matches(s));
      return { list };
    },
  );

  app.get(
    '/api/v1/server/integration/:name',
    { config: view, schema: { tags, summary: 'Get integration by name', params: NameParam, response: { 200: IntegrationInfoDTO, ...ErrorResponses } } },
    async (req) => {
      const svc = integrationsOf(rt);
      return svc.info(svc.find(req.params.name));
    },
  );

  app.get(
    '/api/v1/server/integration/:name/connection',
    {
      config: view,
      schema: { tags, summary: 'Get integration connection status by name', params: NameParam, response: { 200: EndPointSummaryDTO, ...ErrorResponses } },
    },
    async (req) => {
      const svc = integrationsOf(rt);
      const e = svc.find(req.params.name);
      return svc.connection(e, svc.entries().indexOf(e) + 1);
    },
  );

  app.patch(
    '/api/v1/server/integration/:name',
    {
      config: manage,
      schema: {
        tags,
        summary: 'Manages inter-server connection',
        description: `${stateHelp} The state the link is already in answers 200 {"status":"No change"}; a request its state cannot take is a 409 naming the state and what it accepts.`,
        params: NameParam,
        body: RequestedAction.optional(),
        response: { 200: StatusResponse, ...ErrorResponses, 409: StatusResponse, 503: StatusResponse },
      },
    },
    async (req) => {
      const svc = integrationsOf(rt);
      const e = svc.find(req.params.name);
      const { changed } = await svc.control(e, requestedState(req.body));
      return { status: changed ? 'Success' : 'No change' };
    },
  );

  app.get(
    '/api/v1/server/integration/:name/status',
    { config: view, schema: { tags, summary: 'Get inter-server status', params: NameParam, response: { 200: IntegrationStatusDTO, ...ErrorResponses } } },
    async (req) => {
      const svc = integrationsOf(rt);
      return svc.status(svc.find(req.params.name));
    },
  );
};
