import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { parseFilterParam } from '../../../engine/selector/selector.js';
import type { LogEntry } from '../../../log.js';
import type { ApiContext } from '../../context.js';
import { ErrorResponses, StatusResponse } from '../../schemas.js';
import { principalOf } from '../messaging/access.js';
import { requireStreamPermission, streamPrincipal } from '../../tokens.js';
import { trackUserStream } from '../../user-streams.js';

/** Entries held for one slow log stream before the oldest are dropped. */
const MAX_QUEUED = 1000;

const LogEntryDTO = z.object({ logNumber: z.number().int(), level: z.number().int(), message: z.string() });
const FilterQuery = z.object({
  filter: z.string().optional().describe('Selector over logNumber, level (ERROR 40000, WARN 30000, INFO 20000, DEBUG 10000, TRACE 5000) and message'),
});

export const logRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  const { rt, tokens } = ctx;

  app.get(
    '/api/v1/server/log',
    { config: { permission: { permission: 'view_stats' } },
      schema: {
        tags: ['Logging Monitor'],
        summary: 'Get last stored log entries',
        querystring: FilterQuery,
        response: { 200: z.object({ logEntries: z.array(LogEntryDTO) }), ...ErrorResponses },
      },
    },
    async (req) => {
      const selector = parseFilterParam(req.query.filter);
      const entries = rt.logs.monitor.entries();
      return { logEntries: selector ? entries.filter((e) => selector.matches(e)) : entries };
    },
  );

  app.get(
    '/api/v1/server/log/sse',
    { config: { permission: { permission: 'view_stats' } },
      schema: {
        tags: ['Logging Monitor'],
        summary: 'Request a temporary token to access the server side logs',
        description: 'The token is random, single use, bound to the caller and expires after RestApi.sseTokenLifetime (60 s); it alone opens the stream.',
        response: { 200: z.string(), 429: StatusResponse, ...ErrorResponses },
      },
    },
    async (req, reply) => {
      reply.type('text/plain; charset=utf-8');
      return tokens.issue('log', principalOf(req));
    },
  );

  app.get(
    '/api/v1/server/log/sse/stream/:token',
    { // The token replaces authentication for the stream (no credentials needed): it runs as the token's user.
      config: { public: true },
      sse: { kind: 'manual', heartbeat: true },
      schema: {
        tags: ['Logging Monitor'],
        summary: 'Stream live log entries',
        description:
          'Needs no credentials: the token from GET /api/v1/server/log/sse replaces them (its user must still hold view_stats). Server-sent events named logEvent, data = LogEntry JSON; the stored entries first, then live ones. The headers and a `: connected` comment are sent at once.',
        params: z.object({ token: z.string().min(1, 'token is required') }),
        querystring: FilterQuery,
        response: { 200: z.string().describe('text/event-stream'), ...ErrorResponses },
      },
    },
    async (req, reply) => {
      const selector = parseFilterParam(req.query.filter);
      const principal = streamPrincipal(rt, tokens.consume(req.params.token, 'log'));
      req.principal = principal;
      requireStreamPermission(rt, principal, 'view_stats');
      const sse = reply.sse!;
      sse.keepAlive();
      sse.sendHeaders();
      reply.raw.write(': connected\n\n'); // headers go out now, not with the first entry
      const pass = (e: LogEntry) => !selector || selector.matches(e);
      const queue: LogEntry[] = rt.logs.monitor.entries().filter(pass);
      let sending = false;
      const pump = async () => {
        if (sending) return;
        sending = true;
        try {
          while (queue.length && sse.isConnected) {
            const e = queue.shift()!;
            await sse.send({ event: 'logEvent', data: e });
          }
        } catch {
          /* the client went away */
        } finally {
          sending = false;
        }
      };
      const unsubscribe = rt.logs.monitor.subscribe((e) => {
        if (!pass(e)) return;
        queue.push(e);
        // a client that cannot keep up loses the oldest entries, not the server's memory
        if (queue.length > MAX_QUEUED) queue.splice(0, queue.length - MAX_QUEUED);
        void pump();
      });
      const untrack = trackUserStream(rt, req.principal?.uniqueId, () => sse.close());
      sse.onClose(() => {
        untrack();
        unsubscribe();
      });
      void pump();
    },
  );
};
