import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { ClusterList } from '../../../cluster/rpc.js';
import { NotFoundError, ServiceUnavailableError, ValidationError } from '../../../errors.js';
import type { ActorTransition } from '../../../runtime/events.js';
import { actorDetail, actorPage, parentOf } from '../../../runtime/inspector.js';
import { actorTree } from '../../../runtime/monitor.js';
import type { ApiContext } from '../../context.js';
import { MAX_PATH_PARAM } from '../../limits.js';
import { ErrorResponses, StatusResponse } from '../../schemas.js';
import { clusterList, clusterListDTO, ScopeParam, serveClusterList } from '../cluster/scope.js';
import { principalOf } from '../messaging/access.js';
import { requireStreamPermission, streamPrincipal } from '../../tokens.js';
import { trackUserStream } from '../../user-streams.js';

/**
 * Actor inspection (Switchyard extension; the design card "inspect actor state via REST"), all with view_stats:
 * - `GET /api/v1/server/actors` — a page of registered actors `{systemId, kind, name, state, parent, children}`,
 *   filtered by kind, state and systemId prefix;
 * - `GET /api/v1/server/actors/{systemId}` — one actor: state, the events it accepts now, a safe view of its
 *   context, its children and its last 50 transitions; 404 for an unknown id;
 * - `GET /api/v1/server/actors/sse` + `/sse/stream/{token}` — live transitions (token as the other SSE streams);
 * - `GET /api/v1/server/actors/tree` — the whole tree, each node's children paged.
 */

/** Transitions held for one slow SSE client; beyond that the oldest are dropped and the client is told. */
export const MAX_QUEUED_TRANSITIONS = 1000;

const ActorRowDTO = z
  .object({
    systemId: z.string(),
    kind: z.string(),
    name: z.string(),
    state: z.string(),
    status: z.string().describe('active, done, error or stopped; passive for a virtual actor (destination, subscription) with no XState instance right now'),
    parent: z.string().nullable(),
    children: z.array(z.string()).describe('registered children (through shard supervisors), at most 50'),
    childCount: z.number().int(),
  })
  .meta({ id: 'ActorRow' });
const TransitionDTO = z.object({ systemId: z.string(), kind: z.string(), from: z.string(), to: z.string(), event: z.string(), at: z.number().int() }).meta({ id: 'ActorTransition' });
const ActorDetailDTO = ActorRowDTO.extend({
  machine: z.string(),
  tags: z.array(z.string()),
  accepts: z.array(z.string()).describe('event types the machine takes in its current state'),
  context: z.record(z.string(), z.unknown()),
  transitions: z.array(TransitionDTO).describe('the last 50 state changes, oldest first'),
}).meta({ id: 'ActorDetail' });
const ActorNode = z
  .object({
    id: z.string(),
    machine: z.string(),
    state: z.unknown(),
    status: z.string(),
    tags: z.array(z.string()),
    context: z.record(z.string(), z.unknown()),
    childCount: z.number().int().optional(),
    get children(): z.ZodArray<typeof ActorNode> {
      return z.array(ActorNode);
    },
  })
  .meta({ id: 'ActorNode' });

const ActorQueryDTO = z.object({
  kind: z.string().trim().min(1).max(64).optional(),
  state: z.string().trim().min(1).max(256).optional(),
  prefix: z.string().max(MAX_PATH_PARAM).optional().describe('systemId prefix, e.g. destination:sensors/'),
  limit: z.coerce.number().int().min(1).max(1000).default(100).describe('entries per page (with scope=cluster: per node)'),
  offset: z.coerce.number().int().min(0).default(0).describe('entries skipped (with scope=cluster: on each node)'),
});

const view = { permission: { permission: 'view_stats' as const } };
const tags = ['Server Management'];

export const actorRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  const { rt, tokens } = ctx;
  const root = () => {
    const r = rt.rootActor;
    if (!r) throw new ServiceUnavailableError('The server actor is not running (the server is starting or stopping); try again');
    return r;
  };

  // the other nodes' `scope=cluster` requests: the same query (validated like the REST one), paged on this node
  serveClusterList(rt, ClusterList.Actors, (raw, cap) => {
    const parsed = ActorQueryDTO.safeParse(raw);
    if (!parsed.success) throw new ValidationError(`Invalid actor query: ${parsed.error.issues[0]?.message ?? 'bad value'}`);
    const page = actorPage(root(), { ...parsed.data, limit: Math.min(parsed.data.limit, cap) }, rt);
    return { total: page.total, items: page.items, truncated: parsed.data.limit > cap && page.total > parsed.data.offset + cap };
  });

  app.get(
    '/api/v1/server/actors',
    {
      config: view,
      schema: {
        tags,
        summary: 'A page of live actors (Switchyard extension)',
        description: 'Registered actors (systemId `<kind>:<name>`), depth first from the root. Destinations and subscriptions are virtual actors, listed from the engine\'s tables whether or not their XState instance is active (status `passive` when it is not). state matches the state string, one of its parallel regions, or a parent state (`live` matches `live.run.active,...`).',
        querystring: ActorQueryDTO.extend({ scope: ScopeParam }),
        response: {
          // the cluster answer first: its `scope` tells the two apart (the page would strip its extra fields)
          200: z.union([
            clusterListDTO(ActorRowDTO, 'ClusterActors').extend({ offset: z.number().int(), limit: z.number().int() }),
            z.object({ total: z.number().int(), offset: z.number().int(), limit: z.number().int(), items: z.array(ActorRowDTO) }),
          ]),
          ...ErrorResponses,
        },
      },
    },
    async (req) => {
      const { scope, ...q } = req.query;
      if (scope !== 'cluster') return actorPage(root(), q, rt);
      return { ...(await clusterList(rt, ClusterList.Actors, q)), offset: q.offset, limit: q.limit };
    },
  );

  app.get(
    '/api/v1/server/actors/tree',
    {
      config: view,
      schema: {
        tags,
        summary: 'The live actor tree (Switchyard extension)',
        description: 'Each actor with id, machine, state value, status, tags, a small context and its children (shard supervisors included); at most `limit` children per node (childCount has them all). For small trees; use the paged list for large ones.',
        querystring: z.object({ limit: z.coerce.number().int().min(1).max(1000).default(100) }),
        response: { 200: ActorNode, ...ErrorResponses },
      },
    },
    async (req) => actorTree(root(), 'server', req.query.limit, rt),
  );

  app.get(
    '/api/v1/server/actors/sse',
    {
      config: view,
      schema: {
        tags,
        summary: 'Request a temporary token for the live actor transition stream',
        description: 'Random, single use, bound to the caller, expires after RestApi.sseTokenLifetime; it alone opens /api/v1/server/actors/sse/stream/{token}.',
        response: { 200: z.string(), 429: StatusResponse, ...ErrorResponses },
      },
    },
    async (req, reply) => {
      reply.type('text/plain; charset=utf-8');
      return tokens.issue('actors', principalOf(req));
    },
  );

  app.get(
    '/api/v1/server/actors/sse/stream/:token',
    {
      config: { public: true },
      sse: { kind: 'manual', heartbeat: true },
      schema: {
        tags,
        summary: 'Stream live actor transitions',
        description: `Needs no credentials: the token from GET /api/v1/server/actors/sse replaces them (its user must still hold view_stats). Events named actorTransition (data: {systemId, kind, from, to, event, at}); kind=a,b keeps those kinds. A client that falls ${MAX_QUEUED_TRANSITIONS} transitions behind loses the oldest and receives an actorTransitionsLost event ({lost}).`,
        params: z.object({ token: z.string().min(1, 'token is required') }),
        querystring: z.object({ kind: z.string().max(1024).optional() }),
        response: { 200: z.string().describe('text/event-stream'), ...ErrorResponses },
      },
    },
    async (req, reply) => {
      const principal = streamPrincipal(rt, tokens.consume(req.params.token, 'actors'));
      req.principal = principal;
      requireStreamPermission(rt, principal, 'view_stats');
      const kinds = req.query.kind ? new Set(req.query.kind.split(',').map((k) => k.trim()).filter(Boolean)) : undefined;
      const sse = reply.sse!;
      sse.keepAlive();
      sse.sendHeaders();
      reply.raw.write(': connected\n\n');
      const queue: ActorTransition[] = [];
      let lost = 0;
      let sending = false;
      const pump = async () => {
        if (sending) return;
        sending = true;
        try {
          while ((queue.length || lost) && sse.isConnected) {
            if (lost) {
              const n = lost;
              lost = 0;
              await sse.send({ event: 'actorTransitionsLost', data: { lost: n } });
              continue;
            }
            await sse.send({ event: 'actorTransition', data: queue.shift()! });
          }
        } catch {
          /* the client went away */
        } finally {
          sending = false;
        }
      };
      const onTransition = (t: ActorTransition) => {
        if (kinds && !kinds.has(t.kind)) return;
        queue.push(t);
        // a client that cannot keep up loses the oldest transitions (and is told how many), not the server's memory
        if (queue.length > MAX_QUEUED_TRANSITIONS) {
          const drop = queue.length - MAX_QUEUED_TRANSITIONS;
          queue.splice(0, drop);
          lost += drop;
        }
        void pump();
      };
      rt.on('actor.transition', onTransition);
      const untrack = trackUserStream(rt, principal.uniqueId, () => sse.close());
      sse.onClose(() => {
        untrack();
        rt.off('actor.transition', onTransition);
      });
    },
  );

  app.get(
    '/api/v1/server/actors/:systemId',
    {
      config: view,
      schema: {
        tags,
        summary: 'One live actor (Switchyard extension)',
        description: 'State, the events it accepts now (from its machine; a passive destination or subscription actor is activated to answer), a safe view of its context (no secrets, no functions), its registered children and its last 50 transitions. The systemId is URL-encoded (destination%3Asensors%2Fa).',
        params: z.object({ systemId: z.string().min(1).max(MAX_PATH_PARAM) }), // `destination:<name>` of any accepted name
        response: { 200: ActorDetailDTO, ...ErrorResponses },
      },
    },
    async (req) => {
      root();
      const ref = rt.actorById(req.params.systemId);
      if (!ref) throw new NotFoundError(`No live actor has the systemId "${req.params.systemId}"`);
      return actorDetail(ref, parentOf(ref), rt.inspector, rt);
    },
  );
};
