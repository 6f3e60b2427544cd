import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction, onRequestAbortHookHandler, onResponseHookHandler, preHandlerAsyncHookHandler } from 'fastify';
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
 * the check themselves. The hooks go only on the routes whose querystring or body schema has a `filter` (or a shape
 * this cannot read): a route that declares none never reads one, and hooks on every route cost the hottest one
 * (POST /api/v1/messaging/publish) two promises per request for nothing.
 */
export function registerModelAccess(app: FastifyInstance, ctx: ApiContext): void {
  app.decorateRequest('modelRelease', undefined);
  const check = async (request: FastifyRequest): Promise<void> => {
    if (request.routeOptions.config?.public) return; // a public route checks its own filter
    const text = filterOf(request);
    if (text === undefined) return;
    request.modelRelease = await checkSelectorModels(ctx.rt, request.principal ?? ANONYMOUS, text);
  };
  const free = (request: FastifyRequest): void => {
    request.modelRelease?.();
    request.modelRelease = undefined;
  };
  const release = (request: FastifyRequest, _reply: FastifyReply, done: HookHandlerDoneFunction): void => {
    free(request);
    done();
  };
  // onRequestAbort hooks are called with (request, done): no reply
  const releaseAborted = (request: FastifyRequest, done: HookHandlerDoneFunction): void => {
    free(request);
    done();
  };
  app.addHook('onRoute', (route) => {
    if (!declaresFilter(route.schema?.querystring) && !declaresFilter(route.schema?.body)) return;
    route.preHandler = [...asArray(route.preHandler), check as preHandlerAsyncHookHandler];
    route.onResponse = [...asArray(route.onResponse), release as onResponseHookHandler];
    route.onRequestAbort = [...asArray(route.onRequestAbort), releaseAborted as onRequestAbortHookHandler];
  });
}

function asArray<T>(h: T | T[] | undefined): T[] {
  return h === undefined ? [] : Array.isArray(h) ? h : [h];
}

type ZodLike = { _zod?: { def?: { type?: string; shape?: Record<string, unknown>; innerType?: unknown; in?: unknown } } };

/** Whether a route schema (zod) can carry a `filter` field: an object with one; true for a shape not read here. */
export function declaresFilter(schema: unknown): boolean {
  let s = schema;
  for (let i = 0; i < 16; i++) {
    if (s === undefined || s === null) return false;
    const def = (s as ZodLike)._zod?.def;
    if (def === undefined || typeof def.type !== 'string') return true; // not zod: assume it may
    switch (def.type) {
      case 'object':
        return def.shape !== undefined && 'filter' in def.shape;
      case 'optional':
      case 'nullable':
      case 'default':
      case 'prefault':
      case 'readonly':
      case 'catch':
      case 'nonoptional':
        s = def.innerType;
        break;
      case 'pipe':
        s = def.in;
        break;
      default:
        return true; // a union, a record, a lazy schema...: assume it may
    }
  }
  return true;
}

function filterOf(request: FastifyRequest): string | undefined {
  const q = (request.query as { filter?: unknown } | undefined)?.filter;
  if (typeof q === 'string') return q;
  const b = request.body as { filter?: unknown } | null | undefined;
  return b !== null && typeof b === 'object' && typeof b.filter === 'string' ? b.filter : undefined;
}
