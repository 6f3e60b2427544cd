import { validatorCompiler, type FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { PUBLISHED as PUBLISHED_NOW, type Delivery, type SubscribeOptions } from '../../../engine/index.js';
import { ConflictError, ForbiddenError, NotFoundError, ServiceUnavailableError, ValidationError } from '../../../errors.js';
import type { ApiContext } from '../../context.js';
import { restSubscribeOptions } from '../../../messaging/rest-sessions.service.js';
import { fromDto, MessageIn, MessageOut, toDto } from '../../message-dto.js';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { sessionIdOf } from '../../plugins/auth.js';
import type { RestSession, RestSubscription } from '../../rest-session.js';
import { ErrorResponses, StatusResponse } from '../../schemas.js';
import { principalOf, requireDurable, requireSubscribe } from './access.js';
import { IngressResult, ingress, ingressContext, type IngressContext } from '../../../engine/ingress.js';
import { nullAwareCompiler } from '../../plugins/null-fields.js';
import { publishBodyCompiler } from './publish-body.js';

const name = (what: string) =>
  z
    .string({ error: `${what} is required` })
    .trim()
    .min(1, `${what} must not be blank`)
    .max(65535, `${what} is too long`);

export const SubscriptionRequest = z
  .object({
    destinationName: name('destinationName').describe('topic or queue name; MQTT wildcards + and # allowed'),
    namedSubscription: z.string().trim().min(1).max(256).nullish().describe('a shared subscription name: sessions using the same name share the messages'),
    filter: z.string().nullish().describe('JMS / SQL-92 selector over message fields, dataMap and metaData'),
    maxDepth: z
      .number()
      .int()
      .min(1, 'maxDepth must be at least 1')
      .max(100000, 'maxDepth must be at most 100000')
      .nullish()
      .describe('messages held before new ones are dropped (default 1); besides, at most RestApi.maxEventsPerDestination (10) per destination are kept, the oldest of that destination dropped'),
    transactional: z.boolean().nullish().describe('taken messages stay in flight until commit or abort'),
    retainMessage: z.boolean().nullish().describe('true: receive the topic’s retained message on subscribe'),
  })
  .meta({ id: 'SubscriptionRequestDTO' });

export const PublishRequest = z
  .object({
    destinationName: name('destinationName').describe('topic or queue name (no wildcards)'),
    message: MessageIn,
    retain: z.boolean().nullish().describe('store as the topic’s retained message, sent to new subscribers'),
  })
  .meta({ id: 'PublishRequestDTO' });

const ConsumeRequest = z
  .object({
    destination: z.string().trim().min(1).nullish().describe('subscription name as subscribed; omitted: every subscription of the session'),
    depth: z.number().int().nullish().describe('most messages returned (default 10; <=0 → 10; >1000 → 1000)'),
  })
  .meta({ id: 'ConsumeRequestDTO' });

const TransactionData = z
  .object({
    destinationName: name('destinationName').describe('subscription name as subscribed'),
    eventIds: z.array(z.number().int().nonnegative()).min(1, 'eventIds must not be empty').max(100000),
  })
  .meta({ id: 'TransactionData' });

const PUBLISHED = JSON.stringify({ status: 'Message published successfully' });
/** The answer to an accepted publish. A constant body: no per-request serialisation on the hottest REST route. */
function sendPublished(reply: FastifyReply): void {
  void reply.type('application/json; charset=utf-8').send(PUBLISHED as unknown as { status: string });
}
const EMPTY = Buffer.alloc(0);

function clampDepth(depth: number | null | undefined): number {
  if (depth === undefined || depth === null || depth <= 0) return 10;
  return Math.min(depth, 1000);
}

/**
 * Subscribes the session (or updates an existing subscription of the same name); durable in a persistent session.
 * `authorize`: the caller's subscribe check per delivered topic (a wildcard never delivers a denied topic).
 */
export function subscribeSession(session: RestSession, body: z.infer<typeof SubscriptionRequest>, authorize?: SubscribeOptions['authorize']): RestSubscription {
  const engine = session.engine;
  const dest = body.destinationName;
  const filter = body.namedSubscription ? `$share/${body.namedSubscription}/${dest}` : dest;
  const transactional = body.transactional === true;
  const selector = body.filter ?? undefined;
  const existing = session.subs.get(dest);
  if (existing && existing.sub.filter !== filter) engine.unsubscribe(existing.sub);
  const sub = engine.subscribe(
    restSubscribeOptions(
      session.engineSessionId,
      { name: dest, filter, selector, maxDepth: body.maxDepth ?? 1, transactional },
      { durable: session.durable !== undefined, retainMessage: body.retainMessage === true, authorize, maxPerDestination: session.maxPerDestination },
    ),
  );
  const rs: RestSubscription = { name: dest, sub, transactional, ...(selector !== undefined ? { selector } : {}) };
  session.subs.set(dest, rs);
  return rs; // the caller stores a durable session's new list (RestSessions.changed)
}

export const messagingRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  const { rt, sessions } = ctx;
  const session = (req: FastifyRequest) => sessions.get(sessionIdOf(req), req.loginSession);
  const findSub = (s: RestSession, name: string): RestSubscription => {
    const rs = s.subs.get(name);
    if (!rs || rs.sub.closed) {
      if (s.subs.delete(name)) void sessions.changed(s);
      throw new NotFoundError(`No subscription to ${name} in this session`);
    }
    return rs;
  };
  const tags = ['Messaging Interface'];

  app.post(
    '/api/v1/messaging/publish',
    {
      config: { permission: { permission: 'connect' } },
      // a plain check of the common body before zod (publish-body.ts); zod still decides every other body
      validatorCompiler: publishBodyCompiler(nullAwareCompiler(validatorCompiler)),
      schema: {
        tags,
        summary: 'Publish a message',
        description:
          'Resolves once the message is accepted: for queue messages and retained messages, once they are in the store. ' +
          '429 {"status": ...} when flow control refuses a QoS 1/2 message because an MQTT subscription it would reach is full (DestinationManager.maxQueuedMessages or maxQueuedBytes; nothing was published, retry later).',
        body: PublishRequest,
        response: { 200: StatusResponse, ...ErrorResponses, 429: StatusResponse },
      },
    },
    (req, reply) => {
      const engine = rt.requireEngine(); // 503 while the server restarts
      const { destinationName, message, retain } = req.body;
      const principal = principalOf(req);
      // the one ingress path (src/engine/ingress.ts): $SYS, ACL publish/retain, the body decoded (only for a caller
      // who may publish here), payload format, payload schema, then the engine with its flow control. The decoder is
      // an argument, not a named const: the bundle keeps function names (keepNames), which would define a name on
      // a new function every request.
      const cx = ingressContext(engine, rt.security, principal, destinationName, { payload: EMPTY, retain: retain === true }, undefined, (c: IngressContext) => {
        const init = fromDto(message, Date.now());
        init.retain = retain === true;
        c.init = init;
      });
      switch (ingress(cx)) {
        case IngressResult.Accepted:
        case IngressResult.QuotaExceeded: // the engine's QuotaExceededError: 429
          // A QoS 0 message to a topic (most publishes) is routed when `publish` returns and the engine hands back its
          // shared resolved promise: answered now, without the promise and microtasks of an async handler. A queue
          // or retained message waits for its store write, a refusal by flow control rejects (429).
          if (cx.written !== PUBLISHED_NOW) return cx.written!.then(() => sendPublished(reply));
          break;
        case IngressResult.SysTopic:
          // $SYS belongs to the server on every path (MQTT refuses it too): never published, never retained by a client
          throw new ForbiddenError(`Access denied: ${destinationName} is a $SYS topic; only the server publishes there`);
        case IngressResult.NotAuthorized:
          throw new ForbiddenError(`Access denied: ${principal.username} lacks ${cx.denied} on ${cx.resourceType} ${destinationName}`);
        case IngressResult.PayloadFormatInvalid:
          throw new ValidationError('message.payload is not UTF-8 text although payloadFormatIndicator is 1');
        case IngressResult.SchemaRejected:
          throw new ValidationError(`Payload does not match the schema of ${destinationName}: ${cx.problem}`);
        case IngressResult.Unavailable:
          throw new ServiceUnavailableError('The messaging engine is not running (the server is starting, restarting or stopping); try again');
      }
      return sendPublished(reply);
    },
  );

  app.post(
    '/api/v1/messaging/subscribe',
    {
      config: { permission: { permission: 'connect' } },
      schema: {
        tags,
        summary: 'Subscribe to a topic',
        description:
          'Needs subscribe on the destination (and wildcard_subscription on Server for a wildcard filter); in the durable session of a persistent login also durable on the destination. 403 otherwise.',
        body: SubscriptionRequest,
        response: { 200: StatusResponse, ...ErrorResponses },
      },
    },
    async (req) => {
      requireSubscribe(rt, req, req.body.destinationName);
      const s = session(req);
      if (s.durable) requireDurable(rt, req, req.body.destinationName);
      subscribeSession(s, req.body, rt.security.deliveryAuthorizer?.({ uniqueId: principalOf(req).uniqueId }));
      await sessions.changed(s); // a durable session's list is in the store before the answer (kill -9 keeps it)
      return { status: `Successfully subscribed to ${req.body.destinationName}` };
    },
  );

  app.post(
    '/api/v1/messaging/unsubscribe',
    { config: { permission: { permission: 'connect' } }, schema: { tags, summary: 'Unsubscribe from a topic', body: SubscriptionRequest, response: { 200: StatusResponse, ...ErrorResponses } } },
    async (req) => {
      const s = session(req);
      const rs = findSub(s, req.body.destinationName);
      s.engine.unsubscribe(rs.sub); // a durable subscription goes for good, with the messages held for it
      s.subs.delete(rs.name);
      await sessions.changed(s);
      return { status: `Successfully unsubscribed to ${req.body.destinationName}` };
    },
  );

  app.post(
    '/api/v1/messaging/consume',
    {
      config: { permission: { permission: 'connect' } },
      schema: {
        tags,
        summary: 'Get messages',
        description: 'Takes up to depth messages from one subscription, or round-robin from every subscription of the session (wildcard ones too).',
        body: ConsumeRequest.nullish(),
        response: { 200: z.object({ consumedMessages: z.array(MessageOut) }).meta({ id: 'ConsumedResponse' }), ...ErrorResponses },
      },
    },
    async (req) => {
      const s = session(req);
      const depth = clampDepth(req.body?.depth);
      let taken: Delivery[] = [];
      if (req.body?.destination) {
        taken = findSub(s, req.body.destination).sub.take(depth);
      } else {
        const list = [...s.subs.values()].filter((r) => !r.sub.closed);
        // Round-robin, one message at a time, starting after where the last call stopped.
        let progress = true;
        while (taken.length < depth && progress && list.length) {
          progress = false;
          for (let i = 0; i < list.length && taken.length < depth; i++) {
            const r = list[(s.next + i) % list.length];
            const one = r.sub.take(1);
            if (one.length) {
              taken.push(one[0]);
              progress = true;
            }
          }
        }
        if (list.length) s.next = (s.next + 1) % list.length;
      }
      return { consumedMessages: taken.map((d) => toDto(d.message, d.destinationName)) };
    },
  );

  app.post(
    '/api/v1/messaging/subscriptionDepth',
    {
      config: { permission: { permission: 'connect' } },
      schema: {
        tags,
        summary: 'Get message depth',
        body: ConsumeRequest.nullish(),
        response: {
          200: z
            .object({ subscriptionDepths: z.array(z.object({ destination: z.string(), depth: z.number().int() })) })
            .meta({ id: 'SubscriptionDepthResponse' }),
          ...ErrorResponses,
        },
      },
    },
    async (req) => {
      const s = session(req);
      const list = req.body?.destination ? [findSub(s, req.body.destination)] : [...s.subs.values()].filter((r) => !r.sub.closed);
      return { subscriptionDepths: list.map((r) => ({ destination: r.name, depth: r.sub.depth() })) };
    },
  );

  for (const [path, commit] of [
    ['/api/v1/messaging/commit', true],
    ['/api/v1/messaging/abort', false],
  ] as const) {
    app.post(
      path,
      {
        config: { permission: { permission: 'connect' } },
        schema: {
          tags,
          summary: commit ? 'Commit the message' : 'Abort the message',
          description: commit
            ? 'Acknowledges every listed event id of a transactional subscription.'
            : 'Rolls back every listed event id: the messages become deliverable again.',
          body: TransactionData,
          response: { 200: StatusResponse, ...ErrorResponses },
        },
      },
      async (req) => {
        const s = session(req);
        const rs = findSub(s, req.body.destinationName);
        if (!rs.transactional) throw new ConflictError(`Subscription ${rs.name} is not transactional: messages are acknowledged when consumed`);
        const unknown = req.body.eventIds.filter((id) => !rs.sub.inFlight.has(id));
        if (unknown.length) throw new ValidationError(`No such transaction: event ids ${unknown.join(', ')} are not in flight on ${rs.name}`);
        if (commit) rs.sub.commit(req.body.eventIds);
        else rs.sub.abort(req.body.eventIds);
        return { status: commit ? 'Successfully committed messages' : 'Successfully aborted messages' };
      },
    );
  }
};
