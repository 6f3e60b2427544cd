import Fastify, { type FastifyBaseLogger, type FastifyReply, type FastifyInstance, type RouteOptions } from 'fastify';
import fastifyCookie from '@fastify/cookie';
import fastifyRateLimit from '@fastify/rate-limit';
import { fastifySSE } from '@fastify/sse';
import fastifySwagger from '@fastify/swagger';
import fastifySwaggerUi from '@fastify/swagger-ui';
import { jsonSchemaTransform, jsonSchemaTransformObject, serializerCompiler, validatorCompiler, type ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Runtime } from '../runtime/runtime.js';
import { VERSION } from '../runtime/monitor.js';
import { ResponseCache } from './cache.js';
import { MAX_PATH_PARAM, MAX_REQUEST_HEAD_BYTES } from './limits.js';
import type { ApiContext } from './context.js';
import { clientErrorHandler, registerErrorHandling } from './plugins/errors.js';
import { nullAwareCompiler, nullOptionalFields } from './plugins/null-fields.js';
import { registerCors } from './plugins/cors.js';
import { registerClientAddress, trustProxyOf } from './plugins/client-address.js';
import { connectionsCheckingInterval, registerSlowRequestCap } from './plugins/slow-requests.js';
import { trackRestConnections } from './routes/connections/rest-connections.js';
import { interfaceRoutes } from './routes/interfaces/interfaces.routes.js';
import { connectionRoutes } from './routes/connections/connections.routes.js';
import { annotateOpenApi, registerAuth } from './plugins/auth.js';
import { authRoutes } from './routes/auth/index.js';
import { destinationRoutes } from './routes/destinations/destinations.routes.js';
import { destinationControlRoutes } from './routes/destinations/destination-control.routes.js';
import { docsRoutes } from './routes/docs/docs.routes.js';
import { metricsRoutes } from './routes/metrics/metrics.routes.js';
import { probeRoutes } from './routes/probes/probes.routes.js';
import { serverRoutes } from './routes/server/server.routes.js';
import { actorRoutes } from './routes/server/actors.routes.js';
import { machineRoutes } from './routes/server/machines.routes.js';
import { logRoutes } from './routes/server/log.routes.js';
import { messagingRoutes } from './routes/messaging/messaging.routes.js';
import { sseRoutes } from './routes/messaging/sse.routes.js';
import { schemaRoutes } from './routes/schemas/schemas.routes.js';
import { modelRoutes } from './routes/models/models.routes.js';
import { registerModelAccess } from './routes/models/model-access.js';
import { hardwareRoutes } from './routes/hardware/hardware.routes.js';
import { RestSessions } from './rest-session.js';
import { TokenStore } from './tokens.js';
import { restTlsOptions } from './https.js';

export interface BuiltApp {
  app: FastifyInstance;
  ctx: ApiContext;
}

/**
 * Builds the REST application for a runtime. Never listens: `main.ts` does, tests use `app.inject()` or listen on
 * port 0 themselves.
 */
export async function buildApp(rt: Runtime): Promise<FastifyInstance> {
  const rest = rt.config.RestApi;
  const https = restTlsOptions(rest);
  const app = Fastify({
    // No Fastify logger: requests are not logged one by one, and with a logger Fastify makes a child logger and
    // attaches 'finish' and 'error' listeners to every response (publish route, server thread: 16.6 -> 15.1 µs of
    // CPU per request without them and without onResponse hooks). Errors are logged with the URL by the error
    // handler (plugins/errors.ts) through the REST logger; main.ts logs the listening address.
    // Router-level errors (a malformed URL, a path parameter over the length limit) answer like every other error.
    frameworkErrors: (error, _request, reply) => {
      const tooLong = error.code === 'FST_ERR_MAX_PARAM_LENGTH';
      void (reply as unknown as FastifyReply).code(tooLong ? 414 : 400).send({ status: tooLong ? `A path parameter is longer than ${MAX_PATH_PARAM} characters` : `Malformed URL: ${error.message}` });
    },
    bodyLimit: rest.bodyLimit,
    // a request (headers and body) must arrive within RestApi.requestTimeout, else 408 and closed (plugins/slow-requests.ts)
    requestTimeout: rest.requestTimeout,
    http: { maxHeaderSize: MAX_REQUEST_HEAD_BYTES, requestTimeout: rest.requestTimeout, headersTimeout: Math.min(60000, rest.requestTimeout), connectionsCheckingInterval: connectionsCheckingInterval(rest.requestTimeout) },
    clientErrorHandler, // 431 / 408 / 400 from the HTTP parser answer with a JSON status too
    forceCloseConnections: true,
    trustProxy: trustProxyOf(rest.trustedProxies), // request.ip: the client behind RestApi.trustedProxies (plugins/client-address.ts)
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: MAX_PATH_PARAM }, // as long as a request head can carry (limits.ts)
    ...(https
      ? { https: { ...https, maxHeaderSize: MAX_REQUEST_HEAD_BYTES, requestTimeout: rest.requestTimeout, headersTimeout: Math.min(60000, rest.requestTimeout), connectionsCheckingInterval: connectionsCheckingInterval(rest.requestTimeout) } }
      : {}), // RestApi.sslConfig (api/https.ts)
  }).withTypeProvider<ZodTypeProvider>();
  // null in an optional body field means absent, for every route (plugins/null-fields.ts), as part of its body validator
  app.setValidatorCompiler(nullAwareCompiler(validatorCompiler));
  app.setSerializerCompiler(serializerCompiler);

  const routes: RouteOptions[] = [];
  app.addHook('onRoute', (r) => {
    routes.push(r);
  });
  registerErrorHandling(app, rt.log.child({ name: 'rest' }) as FastifyBaseLogger);

  const cache = new ResponseCache(rest.enableCache, rest.cacheLifetime, rest.cacheCleanup);
  const tokens = new TokenStore(rest.sseTokenLifetime);
  const sessions = new RestSessions(rt, rest.inactiveTimeout);
  const ctx: ApiContext = { rt, cache, tokens, routes, sessions };
  app.decorate('apiContext', ctx);
  app.addHook('onClose', async () => {
    cache.close();
    sessions.stop();
  });

  await registerCors(app, rest.corsHeaders); // before authentication: a preflight needs no credentials
  await app.register(fastifyCookie);
  await app.register(fastifyRateLimit, { global: false });
  // RestApi.trustedProxies: with the Forwarded header, its for= chain becomes X-Forwarded-For before anything reads
  // request.ip (the slow-request cap, authentication, the audit)
  registerClientAddress(app, rest.trustedProxies, rest.trustedProxyHeader);
  registerSlowRequestCap(app, rest); // before authentication: a body still arriving counts whoever sends it
  registerAuth(app, ctx); // after the cookie parser (its onRequest hook must run first), before every route
  registerModelAccess(app, ctx); // model functions in any `filter`: use_model / train_model, maxModels, cost
  await app.register(fastifySSE, { heartbeatInterval: 15000 });
  trackRestConnections(app, ctx); // REST sessions in GET /api/v1/server/connections
  await app.register(fastifySwagger, {
    openapi: {
      openapi: '3.1.0',
      info: { title: 'Switchyard REST API', description: 'MAPS Messaging compatible management and messaging API', version: VERSION },
      components: {
        securitySchemes: {
          basicAuth: { type: 'http', scheme: 'basic' },
          authScheme: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' },
          cookieAuth: { type: 'apiKey', in: 'cookie', name: 'maps_access_token' },
        },
      },
      security: [{ basicAuth: [] }, { authScheme: [] }, { cookieAuth: [] }],
    },
    transform: jsonSchemaTransform,
    transformObject: (doc) =>
      nullOptionalFields(annotateOpenApi(jsonSchemaTransformObject(doc) as Record<string, unknown>, routes)) as ReturnType<typeof jsonSchemaTransformObject>,
  });
  if (rest.enableSwaggerUI) await app.register(fastifySwaggerUi, { routePrefix: '/swagger-ui' });

  await app.register(docsRoutes, ctx);
  await app.register(authRoutes, ctx);
  await app.register(serverRoutes, ctx);
  await app.register(actorRoutes, ctx);
  await app.register(machineRoutes, ctx);
  await app.register(logRoutes, ctx);
  await app.register(destinationRoutes, ctx);
  await app.register(destinationControlRoutes, ctx);
  await app.register(metricsRoutes, ctx);
  await app.register(probeRoutes, ctx);
  await app.register(interfaceRoutes, ctx);
  await app.register(connectionRoutes, ctx);
  await app.register(messagingRoutes, ctx);
  await app.register(sseRoutes, ctx);
  await app.register(schemaRoutes, ctx);
  await app.register(modelRoutes, ctx);
  await app.register(hardwareRoutes, ctx);
  await app.register((await import('./routes/lora/lora.routes.js')).loraRoutes, ctx); // LoRaDeviceApi
  await app.register((await import('./routes/discovery/discovery.routes.js')).discoveryRoutes, ctx); // DiscoveryManagementApi
  await app.register((await import('./routes/integrations/integrations.routes.js')).integrationRoutes, ctx); // IntegrationManagementApi (#48–54)
  await app.register((await import('./routes/cluster/cluster.routes.js')).clusterRoutes, ctx); // GET /api/v1/server/cluster (Switchyard extension, docs/cluster.md)
  await app.register((await import('./routes/console/console.routes.js')).consoleRoutes, ctx); // the web console at /console/ (docs/console.md)
  await app.ready();
  return app as unknown as FastifyInstance;
}
