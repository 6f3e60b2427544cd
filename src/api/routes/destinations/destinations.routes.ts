import { createHash } from 'node:crypto';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Engine } from '../../../engine/index.js';
import { parseFilterParam } from '../../../engine/selector/selector.js';
import { NotFoundError, ServiceUnavailableError, ValidationError } from '../../../errors.js';
import { ResponseCache } from '../../cache.js';
import type { ApiContext } from '../../context.js';
import { ErrorResponses } from '../../schemas.js';
import {
  PAGE_SIZE_MAX,
  PAGE_SIZE_MIN,
  SORT_NAMES,
  browseLevel,
  destinationList,
  etagMatches,
  isSystemDestination,
  normalizePrefix,
  pageEtag,
  pageOf,
  parseSortBy,
} from './views.js';

const DestinationDTO = z
  .object({
    name: z.string(),
    type: z.enum(['Topic', 'Queue', 'TemporaryTopic', 'TemporaryQueue']),
    storedMessages: z.number().int(),
    delayedMessages: z.number().int(),
    pendingMessages: z.number().int(),
    schemaId: z.string(),
    noInterestMessages: z.number().int(),
    publishedMessages: z.number().int(),
    retrievedMessages: z.number().int(),
    expiredMessages: z.number().int(),
    deliveredMessages: z.number().int(),
    readTimeAveNs: z.number().int(),
    writeTimeAveNs: z.number().int(),
    deleteTimeAveNs: z.number().int(),
  })
  .meta({ id: 'DestinationDTO' });

const SubscriptionStateDTO = z
  .object({
    destinationName: z.string(),
    sessionId: z.string(),
    hibernating: z.boolean(),
    size: z.number().int(),
    pending: z.number().int(),
    sync: z.boolean(),
    hasMessagesInFlight: z.boolean(),
    hasAtRestMessages: z.boolean(),
    isPaused: z.boolean(),
    messagesIgnored: z.number().int(),
    messagesRegistered: z.number().int(),
    messagesSent: z.number().int(),
    messagesAcked: z.number().int(),
    messagesRolledBack: z.number().int(),
    messagesExpired: z.number().int(),
    maxQueuedMessages: z.number().int().describe('Switchyard: the subscription\'s cap (queued + in flight); docs/messaging.md "Flow control and limits"'),
    queuedBytes: z.number().int().describe('Switchyard: bytes held + in flight (payload and properties + 512 per message)'),
    maxQueuedBytes: z.number().int().describe('Switchyard: the subscription\'s cap in those bytes (DestinationManager.maxQueuedBytes)'),
    messagesDropped: z.number().int().describe('Switchyard: copies dropped by the overflow policy'),
    messagesRefused: z.number().int().describe('Switchyard: QoS 1/2 publishes refused to their publisher because this subscription was full'),
  })
  .meta({ id: 'SubscriptionStateDTO' });

const DestinationEntry = z.object({
  name: z.string().describe('one namespace segment ("" for the absolute-root folder)'),
  fullPath: z.string(),
  destinationType: z.enum(['FOLDER', 'TOPIC', 'QUEUE', 'TEMP_TOPIC', 'TEMP_QUEUE']),
  childCount: z.number().int().describe('entries listed when browsing this folder; 0 for destinations'),
});
const DestinationPageResponseDTO = z
  .object({ totalEntries: z.number().int(), totalPages: z.number().int(), pageNo: z.number().int(), entries: z.array(DestinationEntry) })
  .meta({ id: 'DestinationPageResponseDTO' });

/** An integer query parameter with a readable 400 (zod's coercion would accept '', ' 1e3 ' and the like). */
function intParam(name: string, raw: string | undefined, dflt: number): number {
  if (raw === undefined) return dflt;
  const t = raw.trim();
  if (!/^[+-]?\d{1,9}$/.test(t)) throw new ValidationError(`${name} must be an integer, got "${raw}"`);
  return Number(t);
}

function engineOf(ctx: ApiContext): Engine {
  const engine = ctx.rt.engine;
  if (engine === undefined) throw new ServiceUnavailableError('The messaging engine is not running (the server is starting or restarting); try again');
  return engine;
}

/** The permission MAPS names for looking at destinations. */
const listDestinations = { permission: { permission: 'list_destinations' as const } };

/**
 * Destination management (MAPS DestinationManagementApi + DestinationListManagementAPI), with MAPS's defects
 * fixed: names sort ascending, a bad filter or sortBy is a 400 (not a 500), totalPages is a ceiling, and the browse
 * tree is built from the live destinations on every request. Registered when RestApi.enableDestinationManagement.
 */
export const destinationRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  if (!ctx.rt.config.RestApi.enableDestinationManagement) return;
  const tags = ['Destination Management'];

  app.get(
    '/api/v1/server/destination',
    {
      config: listDestinations,
      schema: {
        tags,
        summary: 'Retrieve a list of all destinations with optional filtering and sorting',
        description:
          'filter: selector over DestinationDTO fields (e.g. `type = \'Queue\' AND storedMessages > 50`). sortBy: Name (ascending) or ' +
          'Published, Delivered, Stored, Pending, Delayed, Expired (descending), case-insensitive. size <= 0 returns all. ' +
          'System ($-prefixed) destinations are not listed.',
        querystring: z.object({
          filter: z.string().optional().describe('selector over DestinationDTO fields'),
          size: z.string().optional().describe('maximum entries, default 40; <= 0 means all'),
          sortBy: z.string().optional().describe(`one of ${SORT_NAMES.join(', ')}; default Published`),
        }),
        response: { 200: z.array(DestinationDTO), ...ErrorResponses },
      },
    },
    async (req) => {
      const selector = parseFilterParam(req.query.filter);
      const sortBy = parseSortBy(req.query.sortBy);
      const size = Math.max(0, intParam('size', req.query.size, 40));
      const filterKey = selector === undefined ? '-' : createHash('sha256').update(selector.text).digest('hex'); // the cache key is lower-cased
      const key = ResponseCache.key('/api/v1/server/destination', `${filterKey}:${sortBy}:${size}`);
      return ctx.cache.get(key, () => destinationList(engineOf(ctx).destinations(), { selector, sortBy, size }));
    },
  );

  app.get(
    '/api/v1/server/destination/list',
    {
      config: listDestinations,
      schema: {
        tags,
        summary: 'Retrieve a paginated list of destinations/folders at the specified namespace',
        description:
          "prefix: namespace to browse ('' = root, '/' = the folder of absolute names); trimmed, surrounding double quotes removed, " +
          `'//' collapsed, trailing '/' removed. pageSize ${PAGE_SIZE_MIN}..${PAGE_SIZE_MAX} (default 100), pageNumber >= 0 (default 0). ` +
          'The ETag covers the page content; If-None-Match with it answers 304.',
        querystring: z.object({
          prefix: z.string().optional(),
          pageSize: z.string().optional(),
          pageNumber: z.string().optional(),
        }),
        headers: z.object({ 'if-none-match': z.string().optional() }).passthrough(),
        response: { 200: DestinationPageResponseDTO, 304: z.null().describe('Not Modified'), ...ErrorResponses },
      },
    },
    async (req, reply) => {
      const prefix = normalizePrefix(req.query.prefix);
      const pageSize = intParam('pageSize', req.query.pageSize, 100);
      if (pageSize < PAGE_SIZE_MIN || pageSize > PAGE_SIZE_MAX) {
        throw new ValidationError(`pageSize must be between ${PAGE_SIZE_MIN} and ${PAGE_SIZE_MAX}, got ${pageSize}`);
      }
      const pageNumber = intParam('pageNumber', req.query.pageNumber, 0);
      if (pageNumber < 0) throw new ValidationError('pageNumber must be >= 0');
      const entries = browseLevel(engineOf(ctx).destinations(), prefix);
      if (entries === undefined) throw new NotFoundError('namespace not found');
      const page = pageOf(entries, pageSize, pageNumber);
      const etag = pageEtag(prefix, page);
      reply.header('etag', etag);
      if (etagMatches(req.headers['if-none-match'], etag)) return reply.code(304).send(undefined as unknown as null); // no body (null would be serialised as "null")
      return page;
    },
  );

  app.get(
    '/api/v1/server/destination/detail',
    {
      config: listDestinations,
      schema: {
        tags,
        summary: 'Retrieve detailed information about a destination',
        description: "A name not found is retried with a leading '/'; system ($-prefixed) destinations are not shown (404).",
        querystring: z.object({ destinationName: z.string().optional() }),
        response: {
          200: z
            .object({
              destination: DestinationDTO,
              subscriptionList: z.array(SubscriptionStateDTO),
              schemaValidation: z
                .object({ schemaId: z.string(), enforcement: z.string(), valid: z.number().int(), invalid: z.number().int(), rejected: z.number().int() })
                .optional()
                .describe('Switchyard: the payload schema bound to the destination and its check counters (docs/schemas.md); absent without a schema'),
            })
            .meta({ id: 'DestinationDetailsResponse' }),
          ...ErrorResponses,
        },
      },
    },
    async (req) => {
      const raw = req.query.destinationName;
      if (raw === undefined || raw.trim() === '') throw new ValidationError('destinationName is required');
      const engine = engineOf(ctx);
      const notFound = () => new NotFoundError(`Destination not found: ${raw}`);
      if (isSystemDestination(raw)) throw notFound();
      const name = engine.hasDestination(raw) ? raw : !raw.startsWith('/') && engine.hasDestination(`/${raw}`) ? `/${raw}` : undefined;
      if (name === undefined) throw notFound();
      const schema = engine.schemaState(name);
      return {
        destination: engine.destinationDto(name),
        subscriptionList: engine.subscriptionQueues(name),
        ...(schema && schema.schemaId !== '' ? { schemaValidation: schema } : {}),
      };
    },
  );
};
