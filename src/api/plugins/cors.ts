import fastifyCors, { type FastifyCorsOptions } from '@fastify/cors';
import type { FastifyInstance } from 'fastify';

/**
 * CORS from `RestApi.corsHeaders` (MAPS's map of header → value, e.g.
 * `Access-Control-Allow-Origin: "*"`), answered by @fastify/cors: preflights (`OPTIONS` with `Origin` and
 * `Access-Control-Request-Method`) get 204 with the configured headers before authentication runs, and every answer
 * carries the `Access-Control-Allow-Origin` the configuration allows for the caller's `Origin`.
 *
 * Keys are read case-insensitively: Allow-Origin (`*`, one origin, or a comma-separated list; each answer names the
 * caller's origin when it is listed, `Vary: Origin`), Allow-Methods, Allow-Headers, Expose-Headers,
 * Allow-Credentials (`true`), Max-Age (s). Any other header in the map is added to every answer as MAPS does.
 * An empty map (the default) turns CORS off: no preflight route, no CORS headers.
 */
export function corsOptionsOf(headers: Record<string, string>): { cors: FastifyCorsOptions; extra: Array<[string, string]> } | undefined {
  const entries = Object.entries(headers);
  if (entries.length === 0) return undefined;
  const list = (v: string) =>
    v
      .split(',')
      .map((x) => x.trim())
      .filter(Boolean);
  const cors: FastifyCorsOptions = { origin: false, strictPreflight: false, hideOptionsRoute: true };
  const extra: Array<[string, string]> = [];
  for (const [key, value] of entries) {
    switch (key.toLowerCase()) {
      case 'access-control-allow-origin': {
        const origins = list(value);
        cors.origin = origins.includes('*') ? '*' : origins.length === 1 ? origins[0]! : origins;
        break;
      }
      case 'access-control-allow-methods':
        cors.methods = list(value);
        break;
      case 'access-control-allow-headers':
        cors.allowedHeaders = list(value);
        break;
      case 'access-control-expose-headers':
        cors.exposedHeaders = list(value);
        break;
      case 'access-control-allow-credentials':
        cors.credentials = value.trim().toLowerCase() === 'true';
        break;
      case 'access-control-max-age': {
        const n = Number(value);
        if (Number.isInteger(n) && n >= 0) cors.maxAge = n;
        break;
      }
      default:
        extra.push([key, value]);
    }
  }
  return { cors, extra };
}

/** Registers CORS (before authentication, so a preflight is answered without credentials); nothing when off. */
export async function registerCors(app: FastifyInstance, headers: Record<string, string>): Promise<void> {
  const opts = corsOptionsOf(headers);
  if (!opts) return;
  // The preflight route needs no credentials (@fastify/cors answers preflights in its onRequest hook anyway).
  app.addHook('onRoute', (route) => {
    if (route.method === 'OPTIONS' && route.url === '*') route.config = { ...(route.config ?? {}), public: true } as typeof route.config;
  });
  if (opts.cors.origin !== false) await app.register(fastifyCors, opts.cors);
  if (opts.extra.length) {
    app.addHook('onRequest', async (_req, reply) => {
      for (const [k, v] of opts.extra) reply.header(k, v);
    });
  }
}
