import type { FastifyPluginAsyncZod, ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { parseFilterParam } from '../../../engine/selector/selector.js';
import { ValidationError } from '../../../errors.js';
import { securityOf } from '../../../security/service.js';
import type { ApiContext } from '../../context.js';
import { ErrorResponses, FilterQuery, StatusResponse } from '../../schemas.js';
import { GroupDTO, groupDTO, uuidParam } from './schemas.js';

const manageAuthentication = { permission: { permission: 'manage_authentication' as const } };
const tags = ['Authentication and Authorisation Management'];
const Membership = z.object({ groupUuid: uuidParam('groupUuid'), userUuid: uuidParam('userUuid') });

/** GroupManagementApi. The POST body is the group name as raw text in any content type; a JSON string works too. */
export const groupRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  const { rt } = ctx;

  app.get(
    '/api/v1/auth/groups',
    {
      config: manageAuthentication,
      schema: {
        tags,
        summary: 'Get all groups',
        description: "filter: a selector over name and uniqueId, e.g. name = 'admins'",
        querystring: FilterQuery,
        response: { 200: z.array(GroupDTO), ...ErrorResponses },
      },
    },
    async (req) => {
      const sm = securityOf(rt);
      const selector = parseFilterParam(req.query.filter);
      return sm.identities
        .listGroups()
        .filter((g) => !selector || selector.matches({ name: g.name, uniqueId: g.uniqueId }))
        .map((g) => groupDTO(sm, g));
    },
  );

  app.get(
    '/api/v1/auth/groups/:groupUuid',
    {
      config: manageAuthentication,
      schema: { tags, summary: 'Get group by UUID', params: z.object({ groupUuid: uuidParam('groupUuid') }), response: { 200: GroupDTO, ...ErrorResponses } },
    },
    async (req) => {
      const sm = securityOf(rt);
      return groupDTO(sm, sm.identities.requireGroup(req.params.groupUuid));
    },
  );

  // "a raw string body (any content type)": in this scope only, every media type (and none) is read as text; a
  // JSON-typed body that parses is taken as JSON (a JSON string is the name; anything else is not a name: 400)
  await app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { parseAs: 'string' }, (req, body, done) => {
      const text = body as string;
      if (/^application\/([\w.+-]*\+)?json\b/i.test(req.headers['content-type'] ?? '')) {
        try {
          const v: unknown = JSON.parse(text);
          // a JSON string is the name; a bare number or boolean is the raw text (a group named 123)
          done(null, typeof v === 'number' || typeof v === 'boolean' ? text.trim() : v);
          return;
        } catch {
          // not JSON after all: the raw text is the name
        }
      }
      done(null, text);
    });
    scope.withTypeProvider<ZodTypeProvider>().post(
      '/api/v1/auth/groups',
      {
        config: manageAuthentication,
        schema: {
          tags,
          summary: 'Add new group',
          description: 'The body is the group name as raw text, in any content type (text/plain, application/octet-stream, none ...); a JSON string works too.',
          consumes: ['text/plain', 'application/octet-stream', 'application/json', '*/*'],
          body: z.string({ error: 'Group name is required: send it as the raw request body' }).describe('the group name'),
          response: { 201: StatusResponse.extend({ uniqueId: z.string() }), 409: StatusResponse, ...ErrorResponses },
        },
      },
      async (req, reply) => {
        if (typeof req.body !== 'string' || req.body.trim() === '') throw new ValidationError('Group name is required: send it as the raw request body');
        const g = await securityOf(rt).createGroup(req.principal, req.body);
        return reply.code(201).send({ status: `Successfully added group ${g.name}`, uniqueId: g.uniqueId });
      },
    );
  });

  app.delete(
    '/api/v1/auth/groups/:groupUuid',
    {
      config: manageAuthentication,
      schema: {
        tags,
        summary: 'Delete a group',
        description: 'Removes every membership of the group and its ACL entries. The caller must hold everything the group allows or denies (403 otherwise; a full administrator may always).',
        params: z.object({ groupUuid: uuidParam('groupUuid') }),
        response: { 204: z.null(), ...ErrorResponses },
      },
    },
    async (req, reply) => {
      await securityOf(rt).deleteGroup(req.principal, req.params.groupUuid);
      return reply.code(204).send(null);
    },
  );

  app.post(
    '/api/v1/auth/groups/:groupUuid/:userUuid',
    {
      config: manageAuthentication,
      schema: {
        tags,
        summary: 'Add user to group',
        description: 'The group goes last in the user\'s membership order (the order ACL evaluation tries groups). The caller must hold everything the group allows (403 otherwise; a full administrator may always).',
        params: Membership,
        response: { 200: StatusResponse, ...ErrorResponses },
      },
    },
    async (req) => {
      const { user, group, changed } = await securityOf(rt).addMember(req.principal, req.params.groupUuid, req.params.userUuid);
      return { status: changed ? `Successfully added user ${user.username} to group ${group.name}` : `User ${user.username} is already in group ${group.name}` };
    },
  );

  app.delete(
    '/api/v1/auth/groups/:groupUuid/:userUuid',
    {
      config: manageAuthentication,
      schema: {
        tags,
        summary: 'Removes a user from group',
        description: 'The caller must hold everything the group allows (taken away) or denies (lifted); 403 otherwise (a full administrator may always).',
        params: Membership,
        response: { 200: StatusResponse, ...ErrorResponses },
      },
    },
    async (req) => {
      const { user, group, changed } = await securityOf(rt).removeMember(req.principal, req.params.groupUuid, req.params.userUuid);
      return { status: changed ? `User ${user.username} removed from group ${group.name}` : `User ${user.username} was not in group ${group.name}` };
    },
  );
};
