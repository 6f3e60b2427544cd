import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { ApiContext } from '../../context.js';
import { aclRoutes } from './acl.routes.js';
import { groupRoutes } from './groups.routes.js';
import { lockoutRoutes } from './lockouts.routes.js';
import { loginRoutes } from './login.routes.js';
import { userRoutes } from './users.routes.js';

/** Login always; user, group, lockout and ACL management when RestApi.enableUserManagement (as MAPS). */
export const authRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  await app.register(loginRoutes, ctx);
  if (ctx.rt.config.RestApi.enableUserManagement) {
    await app.register(userRoutes, ctx);
    await app.register(groupRoutes, ctx);
    await app.register(lockoutRoutes, ctx);
    await app.register(aclRoutes, ctx);
  }
};
