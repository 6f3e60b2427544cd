import { randomUUID } from 'node:crypto';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { PushSink } from '../../../engine/index.js';
import { ForbiddenError } from '../../../errors.js';
import type { ApiContext } from '../../context.js';
import { messageSelector, toDto } from '../../message-dto.js';
import { ErrorResponses, StatusResponse } from '../../schemas.js';
import { requireStreamPermission, streamPrincipal } from '../../tokens.js';
import { principalOf, requireSubscribe } from './access.js';
import { trackUserStream } from '../../user-streams.js';
import { checkSelectorModels } from '../../../models/access.js';

const StreamQuery = z.object({
  destinationName: z.string({ error: 'destinationName is required' }).trim().min(1, 'destinationName must not be blank').describe('must equal the destination the token was issued for; wildcards allowed'),
  namedSubscription: z.string().trim().min(1).max(256).optional(),
  filter: z.string().optional().describe('JMS / SQL-92 selector'),
  maxDepth: z.coerce.number().int().min(1).max(100000).optional().describe('messages held for a slow client before new ones are dropped (default 1)'),
  retainMessage: z
    .enum(['true', 'false'], { error: 'retainMessage must be true or false' })
    .optional()
    .describe('true: receive the retained message first'),
});

export const sseRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  const { rt, tokens } = ctx;
  const tags = ['Messaging Interface'];

  app.get(
    '/api/v1/messaging/sse',
    {
      config: { permission: { permission: 'connect' } },
      schema: {
        tags,
        summary: 'Request a temporary token to access the listed destinations events',
        description:
          'Random, single use, bound to the destination and to the caller (the stream runs with the caller’s rights), expires after RestApi.sseTokenLifetime (60 s). The token alone opens the stream: no credentials needed there.',
        querystring: z.object({ destination: z.string({ error: 'destination is required' }).trim().min(1, 'destination must not be blank') }),
        response: { 200: z.string(), 429: StatusResponse, ...ErrorResponses },
      },
    },
    async (req, reply) => {
      requireSubscribe(rt, req, req.query.destination);
      const token = tokens.issue('messaging', principalOf(req), { destination: req.query.destination });
      reply.type('text/plain; charset=utf-8');
      return token;
    },
  );

  app.get(
    '/api/v1/messaging/sse/stream/:token',
    {
      sse: { kind: 'manual', heartbeat: true },
      // The token replaces authentication for the stream (no credentials needed): it runs as the token's user.
      config: { public: true },
      schema: {
        tags,
        summary: 'Stream destination events (SSE)',
        description:
          'Needs no credentials: the token from GET /api/v1/messaging/sse replaces them (its user must still hold connect and subscribe). The headers and a `: connected` comment are sent at once. Each message is an event named by destinationName as subscribed, data = the message JSON (MessageDTO plus destinationName). Comments keep the connection alive. The subscription ends when the client goes away.',
        params: z.object({ token: z.string().min(1, 'token is required') }),
        querystring: StreamQuery,
        response: { 200: z.string().describe('text/event-stream'), ...ErrorResponses },
      },
    },
    async (req, reply) => {
      const q = req.query;
      const selector = messageSelector(q.filter);
      const engine = rt.requireEngine(); // 503 while the server restarts
      const token = tokens.consume(req.params.token, 'messaging');
      if (token.destination !== q.destinationName) {
        throw new ForbiddenError(`Token was issued for destination ${token.destination}, not ${q.destinationName}`);
      }
      req.principal = streamPrincipal(rt, token);
      requireStreamPermission(rt, req.principal, 'connect');
      requireSubscribe(rt, req, q.destinationName);
      // model functions in the filter: checked for the token's user (the stream route is public); the subscription holds them
      (await checkSelectorModels(rt, req.principal, q.filter))();
      const sse = reply.sse!;
      const raw = reply.raw;
      const eventName = q.destinationName;
      const filter = q.namedSubscription ? `$share/${q.namedSubscription}/${q.destinationName}` : q.destinationName;
      const sink: PushSink = {
        kind: 'push',
        deliver(_sub, msg, destinationName) {
          if (!sse.isConnected) return false;
          if (raw.writableNeedDrain) return false;
          sse.send({ event: eventName, data: toDto(msg, destinationName) }).catch(() => {});
          return true;
        },
        closed() {
          if (sse.isConnected) sse.close();
        },
      };
      sse.keepAlive();
      sse.sendHeaders();
      raw.write(': connected\n\n'); // headers go out now, not with the first message
      const sub = engine.subscribe({
        sessionId: `sse:${randomUUID()}`,
        filter,
        selector,
        maxDepth: q.maxDepth ?? 1,
        retainHandling: q.retainMessage === 'true' ? 0 : 2,
        // subscribe per delivered topic, for the token's user
        authorize: rt.security.deliveryAuthorizer?.({ uniqueId: req.principal.uniqueId }),
        sink,
      });
      const onDrain = () => sub.resume();
      raw.on('drain', onDrain);
      const untrack = trackUserStream(rt, req.principal?.uniqueId, () => sse.close());
      sse.onClose(() => {
        untrack();
        raw.off('drain', onDrain);
        if (rt.engine === engine) engine.unsubscribe(sub);
      });
    },
  );
};
