import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { controlDestination, deleteDestination, purgeDestination } from '../../../messaging/destinations.service.js';
import { controlSubscription } from '../../../messaging/subscriptions.service.js';
import type { ApiContext } from '../../context.js';
import { MAX_PATH_PARAM } from '../../limits.js';
import { MAX_TOPIC_BYTES } from '../../../engine/index.js';
import { ErrorResponses, RequestedAction, StatusResponse } from '../../schemas.js';

/**
 * Destination and subscription lifecycles (a Switchyard extension of the MAPS API; MAPS has no such routes, and
 * these paths — plural `destinations`, `subscriptions` — are outside its `/api/v1/server/destination/...` family):
 * - `PATCH  /api/v1/server/destinations/{destination}` `{"state":"paused"|"resumed"}`
 * - `POST   /api/v1/server/destinations/{destination}/purge` → `{"status":..., "purged": n}`
 * - `DELETE /api/v1/server/destinations/{destination}`
 * - `PATCH  /api/v1/server/subscriptions/{subscription}` `{"state":"paused"|"resumed"}`
 * Each goes through the destination or subscription actor and the one command helper (src/runtime/command.ts):
 * the state it is already in → 200 "No change", a request its state cannot take → 409, otherwise the actor's new
 * state is awaited. Names are URL-encoded (`sensors%2Froom1`). Registered with destination management
 * (RestApi.enableDestinationManagement); permission manage_destinations. docs/messaging.md "Commanding
 * destinations and subscriptions".
 */
const tags = ['Destination Management'];
const manage = { permission: { permission: 'manage_destinations' as const } };
const DestinationParam = z.object({ destination: z.string().min(1, 'destination is required').max(MAX_TOPIC_BYTES).describe('the destination name, URL-encoded (sensors%2Froom1)') }); // any accepted name (api/limits.ts)
const SubscriptionParam = z.object({
  subscription: z
    .string()
    .min(1, 'subscription is required')
    .max(MAX_PATH_PARAM) // a session id and a filter of any accepted length (api/limits.ts)
    .describe('the durable subscription\'s actor name `<url-encoded session id>|<filter>`, URL-encoded as a whole (as GET /api/v1/server/actors?kind=subscription lists it)'),
});
const StateResponse = z.object({ status: z.string().describe('Success or No change'), state: z.string().describe('the state now') }).meta({ id: 'LifecycleStateResponse' });
const ExtensionNote = 'Switchyard extension of the MAPS API (docs/messaging.md "Commanding destinations and subscriptions").';

export const destinationControlRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  if (!ctx.rt.config.RestApi.enableDestinationManagement) return;
  const { rt, cache } = ctx;
  const evict = () => cache.evictPrefix('/api/v1/server/destination');

  app.patch(
    '/api/v1/server/destinations/:destination',
    {
      config: manage,
      schema: {
        tags,
        summary: 'Pause or resume a destination (Switchyard extension)',
        description:
          `${ExtensionNote} state: paused (from Active) or resumed (from Paused), case-insensitive. Paused: publishes are accepted and stored ` +
          'as usual (queue messages and QoS 1/2 topic messages durably; QoS 0 topic messages in memory), nothing is delivered; beyond 100 000 held ' +
          'topic messages QoS 1/2 publishes are refused (MQTT 5 0x97, REST 429) and QoS 0 ones dropped; ' +
          'the pause survives a restart. Resumed: what was held is delivered in publish order. The state it is in answers 200 ' +
          '{"status":"No change"}; a request its state cannot take is a 409 naming the state and what it accepts. Answers once the change is in the store.',
        params: DestinationParam,
        body: RequestedAction,
        response: { 200: StateResponse, ...ErrorResponses, 409: StatusResponse, 503: StatusResponse },
      },
    },
    async (req) => {
      const { changed, state } = await controlDestination(rt, req.params.destination, req.body.state);
      evict();
      return { status: changed ? 'Success' : 'No change', state };
    },
  );

  app.post(
    '/api/v1/server/destinations/:destination/purge',
    {
      config: manage,
      schema: {
        tags,
        summary: 'Drop the messages waiting in a destination (Switchyard extension)',
        description:
          `${ExtensionNote} Drops a queue's waiting messages (not those already handed to a consumer) or a topic's messages held while paused ` +
          'and the copies of its messages waiting in subscription buffers (not those in flight); the retained message stays. purged is how many. ' +
          'Works paused or active; answers once the deletes are in the store.',
        params: DestinationParam,
        response: { 200: z.object({ status: z.string(), purged: z.number().int() }).meta({ id: 'PurgeResponse' }), ...ErrorResponses, 409: StatusResponse, 503: StatusResponse },
      },
    },
    async (req) => {
      const purged = await purgeDestination(rt, req.params.destination);
      evict();
      return { status: `Purged ${purged} message${purged === 1 ? '' : 's'}`, purged };
    },
  );

  app.delete(
    '/api/v1/server/destinations/:destination',
    {
      config: manage,
      schema: {
        tags,
        summary: 'Delete a destination (Switchyard extension)',
        description:
          `${ExtensionNote} The destination goes with its stored, held and retained messages; copies of its messages waiting for subscribers are ` +
          'dropped (messages already sent and awaiting an acknowledgement complete normally), so a subscriber receives nothing more from it. ' +
          'A queue\'s consumers are unsubscribed (MQTT has no server-initiated UNSUBSCRIBE: an MQTT client stays connected and simply receives ' +
          'nothing more; a REST consumer\'s subscription is gone). A topic subscription is a filter and stays: a later publish creates the topic again.',
        params: DestinationParam,
        response: { 200: StatusResponse, ...ErrorResponses, 409: StatusResponse, 503: StatusResponse },
      },
    },
    async (req) => {
      await deleteDestination(rt, req.params.destination);
      evict();
      return { status: 'Success' };
    },
  );

  app.patch(
    '/api/v1/server/subscriptions/:subscription',
    {
      config: manage,
      schema: {
        tags,
        summary: 'Pause or resume a durable subscription (Switchyard extension)',
        description:
          `${ExtensionNote} state: paused (from Active, Hibernated or Full) or resumed (from Paused), case-insensitive. Paused: the subscription keeps ` +
          'taking copies within its caps (maxQueuedMessages / maxQueuedBytes, with its overflow policy) and delivers none; the pause survives a restart. ' +
          'Resumed: what it holds is delivered in order. Non-durable subscriptions (clean sessions, REST) have no actor: 404.',
        params: SubscriptionParam,
        body: RequestedAction,
        response: { 200: StateResponse, ...ErrorResponses, 409: StatusResponse, 503: StatusResponse },
      },
    },
    async (req) => {
      const { changed, state } = await controlSubscription(rt, req.params.subscription, req.body.state);
      evict();
      return { status: changed ? 'Success' : 'No change', state };
    },
  );
};
