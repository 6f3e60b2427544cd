import type { FastifyInstance, FastifyRequest } from 'fastify';
import { checkSelectorModels } from '../../../models/access.js';
import { ANONYMOUS } from '../../../security/types.js';
import type { ApiContext } from '../../context.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** Releases the models a `filter` of this request holds (see registerModelAccess). */
    modelRelease?: () => void;
  }
}

/**
 * Model functions in REST selectors: every route takes its selector as `filter` (the query parameter of the list
 * routes and of the SSE stream, the body field of POST /api/v1/messaging/subscribe), so one hook checks them all
 * after validation, before the handler (src/models/access.ts: use_model, train_model, maxModels, cost) and holds the
 * models it names until the response is sent. Public routes (the SSE stream, which runs as its token's user) make
 * the check themselves.
 */
export function registerModelAccess(app: FastifyInstance, ctx: ApiContext): void {
  app.decorateRequest('modelRelease', undefined);
  app.addHook('preHandler', async (request) => {
    if (!request.routeOptions.url || request.routeOptions.config?.public) return; // no route (404) or a public one
    const text = filterOf(request);
    if (text === undefined) return;
    request.modelRelease = await checkSelectorModels(ctx.rt, request.principal ?? ANONYMOUS, text);
  });
  const release = async (request: FastifyRequest) => {
    request.modelRelease?.();
    request.modelRelease = undefined;
  };
  app.addHook('onResponse', release);
  app.addHook('onRequestAbort', release);
}

function filterOf(request: FastifyRequest): string | undefined {
  const q = (request.query as { filter?: unknown } | undefined)?.filter;
  if (typeof q === 'string') return q;
  const b = request.body as { filter?: unknown } | null | undefined;
  return b !== null && typeof b === 'object' && typeof b.filter === 'string' ? b.filter : undefined;
}
