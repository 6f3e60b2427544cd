import type { RouteOptions } from 'fastify';
import type { Runtime } from '../runtime/runtime.js';
import type { ResponseCache } from './cache.js';
import type { RestSessions } from './rest-session.js';
import type { TokenStore } from './tokens.js';

/** What every route module gets: the runtime and the API's own shared parts. */
export interface ApiContext {
  rt: Runtime;
  cache: ResponseCache;
  tokens: TokenStore;
  /** REST messaging sessions (subscriptions per caller); logout ends one with `sessions.close(id)`. */
  sessions: RestSessions;
  /** Every route registered, for the WADL and the route-table tests. */
  routes: RouteOptions[];
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The API context (route table, runtime), for tests and tools. */
    apiContext: ApiContext;
  }
}
