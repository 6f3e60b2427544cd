import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { ApiContext } from '../../context.js';
import { readiness } from './readiness.js';

const ProbeAnswer = z.object({
  status: z.string(),
  reasons: z.array(z.string()).optional(),
  unreachableNodes: z.array(z.string()).optional().describe('Cluster.enabled: nodes of the cluster this broker cannot reach (gone, or lease lapsed); they do not make this broker unready'),
});

/**
 * Kubernetes-style probes, unauthenticated and never cached (docs/operations.md):
 * - `GET /livez`: 200 while the process and its event loop answer (a liveness probe restarts on no answer);
 * - `GET /readyz`: 200 when ready, 503 with the reasons otherwise (see readiness.ts).
 * `/health` stays as MAPS has it (text Ok / Warning / Error, always 200).
 */
export const probeRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  app.get(
    '/livez',
    { config: { public: true }, schema: { tags: ['Server Health'], summary: 'Liveness probe: the process and its event loop answer', response: { 200: ProbeAnswer } } },
    async (_req, reply) => {
      reply.header('cache-control', 'no-store');
      return { status: 'Ok' };
    },
  );
  app.get(
    '/readyz',
    {
      config: { public: true },
      schema: {
        tags: ['Server Health'],
        summary: 'Readiness probe: 200 when every configured endpoint listens, the store is open and no supervisor has failed; 503 with the reasons otherwise',
        response: { 200: ProbeAnswer, 503: ProbeAnswer },
      },
    },
    async (_req, reply) => {
      reply.header('cache-control', 'no-store');
      const r = readiness(ctx.rt);
      const unreachable = ctx.rt.service('cluster')?.unreachable() ?? [];
      const nodes = unreachable.length ? { unreachableNodes: unreachable } : {};
      if (r.ready) return { status: 'Ready', ...nodes };
      return reply.code(503).send({ status: `Not ready: ${r.reasons.join('; ')}`, reasons: r.reasons, ...nodes });
    },
  );
};
