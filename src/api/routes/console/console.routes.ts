import { existsSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import fastifyStatic from '@fastify/static';
import type { FastifyPluginAsync } from 'fastify';
import type { ApiContext } from '../../context.js';

/**
 * The web console (docs/console.md): the static files of dist/console (built from console/ by `npm run build`,
 * so by the `prepare` script of `npm ci`) at /console/, and `/` redirecting there. RestApi.enableConsole (default
 * on) turns both off. The files are public (the login form is one of them); everything the console shows comes from
 * the REST API with the user's own credentials, so it can never do what its user may not.
 *
 * Every response of the console carries a strict Content-Security-Policy: scripts, styles and connections from
 * this origin only, no inline script, no eval, no frames, no plugins.
 */
export const CONSOLE_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

/** dist/console of the package this module belongs to (from src/, dist/src/ or the dist/bundle/ bundle). */
export function consoleDir(): string | undefined {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 8; i++) {
    if (existsSync(join(dir, 'package.json'))) {
      const d = join(dir, 'dist', 'console');
      return existsSync(join(d, 'index.html')) && statSync(d).isDirectory() ? d : undefined;
    }
    const up = dirname(dir);
    if (up === dir) break;
    dir = up;
  }
  return undefined;
}

export const consoleRoutes: FastifyPluginAsync<ApiContext> = async (app, ctx) => {
  if (!ctx.rt.config.RestApi.enableConsole) return;
  // every route of this plugin (the static ones too) is public and answers under the console's policy
  app.addHook('onRoute', (route) => {
    route.config = { ...(route.config ?? {}), public: true } as typeof route.config;
    route.schema = { ...(route.schema ?? {}), hide: true };
  });
  app.addHook('onSend', async (_req, reply, payload) => {
    reply.header('content-security-policy', CONSOLE_CSP);
    reply.header('x-content-type-options', 'nosniff');
    reply.header('referrer-policy', 'no-referrer');
    reply.header('x-frame-options', 'DENY');
    return payload;
  });

  app.get('/', async (_req, reply) => reply.redirect('/console/', 302));

  const root = consoleDir();
  if (!root) {
    // a checkout where `npm run build` has not run yet: say so (the REST API works without the console)
    const notBuilt = async (_req: unknown, reply: import('fastify').FastifyReply) =>
      reply.code(404).send({ status: 'The console is not built: run npm run build (it writes dist/console)' });
    app.get('/console', notBuilt);
    app.get('/console/*', notBuilt);
    return;
  }
  // /console and /console/ are one route (ignoreTrailingSlash): index.html names its files by absolute path
  await app.register(fastifyStatic, {
    root,
    prefix: '/console/',
    index: ['index.html'],
    wildcard: false, // the files present at start only: dist/console is replaced as a whole by a build
    redirect: false,
    dotfiles: 'deny',
    cacheControl: true,
    maxAge: 0, // revalidated with the ETag each time: a rebuilt console is picked up at the next load
    etag: true,
    lastModified: true,
  });
};
