import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { parseFilterParam } from '../../../engine/selector/selector.js';
import { securityOf } from '../../../security/service.js';
import type { ApiContext } from '../../context.js';
import { ErrorResponses, FilterQuery, StatusResponse } from '../../schemas.js';
import { UserDTO, userDTO, uuidParam } from './schemas.js';

const manageAuthentication = { permission: { permission: 'manage_authentication' as const } };
const tags = ['Authentication and Authorisation Management'];

/** UserManagementApi: users in the store, passwords with scrypt and the AuthManager password policy. */
export const userRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  const { rt } = ctx;

  app.get(
    '/api/v1/auth/users',
    {
      config: manageAuthentication,
      schema: {
        tags,
        summary: 'Get all users',
        description: "filter: a selector over username and uniqueId, e.g. username = 'bill'",
        querystring: FilterQuery,
        response: { 200: z.array(UserDTO), ...ErrorResponses },
      },
    },
    async (req) => {
      const sm = securityOf(rt);
      const selector = parseFilterParam(req.query.filter);
      return sm.identities
        .listUsers()
        .filter((u) => !selector || selector.matches({ username: u.username, uniqueId: u.uniqueId }))
        .map((u) => userDTO(sm, u));
    },
  );

  app.get(
    '/api/v1/auth/users/:userUuid',
    {
      config: manageAuthentication,
      schema: { tags, summary: 'Get user by uuid', params: z.object({ userUuid: uuidParam('userUuid') }), response: { 200: UserDTO, ...ErrorResponses } },
    },
    async (req) => {
      const sm = securityOf(rt);
      return userDTO(sm, sm.identities.requireUser(req.params.userUuid));
    },
  );

  app.post(
    '/api/v1/auth/users',
    {
      config: manageAuthentication,
      schema: {
        tags,
        summary: 'Add a new user',
        description:
          'The password must satisfy the AuthManager password policy (minimumPasswordLength, requireUpperCase, ...); a 400 names the rule that failed. ' +
          'The new user joins the group everyone (log in, connect, own session and password, messaging); the caller must hold what everyone allows (403 otherwise).',
        body: z.object({ username: z.string({ error: 'username is required' }), password: z.string({ error: 'password is required' }) }).meta({ id: 'NewUserDTO' }),
        response: { 201: StatusResponse.extend({ uniqueId: z.string() }), 409: StatusResponse, ...ErrorResponses },
      },
    },
    async (req, reply) => {
      const sm = securityOf(rt);
      const u = await sm.createUser(req.principal, req.body.username, req.body.password);
      return reply.code(201).send({ status: 'User added successfully', uniqueId: u.uniqueId });
    },
  );

  app.delete(
    '/api/v1/auth/users/:userUuid',
    {
      config: manageAuthentication,
      schema: {
        tags,
        summary: 'Delete a user',
        description:
          'Also removes its ACL entries, forgets its failed logins and ends what it has open: login sessions, REST messaging sessions (persistent ones too), MQTT connections (v5: DISCONNECT 0x98) and MQTT sessions (persistent ones too). The built-in anonymous user and your own account cannot be deleted (409); a user holding a permission the caller does not hold cannot be deleted by it (403).',
        params: z.object({ userUuid: uuidParam('userUuid') }),
        response: { 204: z.null(), 409: StatusResponse, ...ErrorResponses },
      },
    },
    async (req, reply) => {
      await securityOf(rt).deleteUser(req.principal, req.params.userUuid);
      return reply.code(204).send(null);
    },
  );

  app.put(
    '/api/v1/auth/users/:userUuid/password',
    {
      config: { permission: { permission: 'connect' } },
      schema: {
        tags,
        summary: 'Change user password',
        description:
          'A full administrator (every Server permission, e.g. the admins group) sets any user\'s password. A user changes only their own, giving currentPassword when AuthManager.requireCurrentPassword is true. ' +
          'The new password must satisfy the password policy. The user\'s other sessions end and its failed logins are forgotten.',
        params: z.object({ userUuid: uuidParam('userUuid') }),
        body: z
          .object({
            newPassword: z.string({ error: 'newPassword is required' }).min(1, 'New password is required'),
            currentPassword: z.string().optional(),
          })
          .meta({ id: 'ChangePasswordDTO' }),
        response: { 204: z.null(), 409: StatusResponse, ...ErrorResponses },
      },
    },
    async (req, reply) => {
      await securityOf(rt).changePassword(req.principal!, req.params.userUuid, req.body.newPassword, req.body.currentPassword, req.loginSession?.sessionId);
      return reply.code(204).send(null);
    },
  );
};
