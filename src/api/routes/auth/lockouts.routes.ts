import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { securityOf } from '../../../security/service.js';
import type { ApiContext } from '../../context.js';
import { ErrorResponses, StatusResponse } from '../../schemas.js';
import { LockStatus, uuidParam } from './schemas.js';

const manageAuthentication = { permission: { permission: 'manage_authentication' as const } };
const tags = ['Authentication and Authorisation Management'];

/** LockedUsersApi: names locked after repeated failed logins (unknown names are locked too but have no uuid). */
export const lockoutRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  const { rt } = ctx;

  app.get(
    '/api/v1/auth/user-lockouts',
    { config: manageAuthentication, schema: { tags, summary: 'Get all currently locked users', response: { 200: z.array(LockStatus), ...ErrorResponses } } },
    async () =>
      securityOf(rt)
        .lockedUsers()
        .map((s) => ({ uuid: s.uuid, username: s.username, locked: s.locked, remainingLockSeconds: s.remainingLockSeconds, lockedUntilIso: new Date(s.lockedUntil).toISOString() })),
  );

  app.delete(
    '/api/v1/auth/user-lockouts/:userUuid',
    {
      config: manageAuthentication,
      schema: {
        tags,
        summary: 'Unlock a user currently locked due to invalid login attempts',
        description: 'Forgets every failed login of the user (also when it was not locked).',
        params: z.object({ userUuid: uuidParam('userUuid') }),
        response: { 200: StatusResponse, ...ErrorResponses },
      },
    },
    async (req) => {
      securityOf(rt).unlock(req.principal, req.params.userUuid);
      return { status: 'User unlocked' };
    },
  );
};
