import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { NotFoundError } from '../../../errors.js';
import type { ApiContext } from '../../context.js';
import { buildWadl, buildXsd } from './wadl.js';

export const docsRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  const rest = ctx.rt.config.RestApi;
  if (rest.enableSwagger) {
    app.get('/openapi.json', { config: { public: true }, schema: { hide: true } }, async (_req, reply) => {
      reply.type('application/json; charset=utf-8');
      return JSON.stringify(app.swagger());
    });
    app.get('/openapi.yaml', { config: { public: true }, schema: { hide: true } }, async (_req, reply) => {
      reply.type('application/yaml; charset=utf-8');
      return app.swagger({ yaml: true });
    });
  }
  if (rest.enableWadlEndPoint) {
    const base = (req: { protocol: string; host: string }) => `${req.protocol}://${req.host}/`;
    app.get('/application.wadl', { schema: { hide: true } }, async (req, reply) => {
      reply.type('application/vnd.sun.wadl+xml; charset=utf-8');
      return buildWadl(ctx.routes, base(req));
    });
    app.get(
      '/application.wadl/:path',
      { schema: { hide: true, params: z.object({ path: z.string() }) } },
      async (req, reply) => {
        if (req.params.path !== 'xsd0.xsd') throw new NotFoundError(`Unknown WADL grammar: ${req.params.path}; the grammar is xsd0.xsd`);
        reply.type('application/xml; charset=utf-8');
        return buildXsd(ctx.routes);
      },
    );
  }
};
