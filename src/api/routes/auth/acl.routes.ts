import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { NotFoundError, ValidationError } from '../../../errors.js';
import { PERMISSION_DESCRIPTIONS, parsePermission, parseResourceKey, parseResourceType, SERVER_PERMISSIONS, type AclEntry, type AclRecord } from '../../../security/acl.js';
import { UUID_RE } from '../../../security/identities.js';
import { securityOf } from '../../../security/service.js';
import { Permissions, ResourceTypes, type Permission } from '../../../security/types.js';
import type { ApiContext } from '../../context.js';
import { ErrorResponses, StatusResponse } from '../../schemas.js';
import { AclEntryDTO, AclResourceViewDTO, IdentityAclViewDTO, uuidParam } from './schemas.js';

const manageAuthorization = { permission: { permission: 'manage_authorization' as const } };
const tags = ['Authentication and Authorisation Management'];

/** One DTO per (principal, effect), ALLOW before DENY; deny entries are shown (MAPS hides them). */
function entriesView(rec: AclRecord) {
  const out: Array<z.infer<typeof AclEntryDTO>> = [];
  for (const e of rec.entries) {
    const principalType = e.isGroup ? ('GROUP' as const) : ('IDENTITY' as const);
    if (e.allow.length) out.push({ principalType, principalId: e.principalId, effect: 'ALLOW', permissions: [...e.allow] });
    if (e.deny.length) out.push({ principalType, principalId: e.principalId, effect: 'DENY', permissions: [...e.deny] });
  }
  return out;
}

/** AuthorisationResource: permission list, ACL views and replace, access check with explanation. */
export const aclRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  const { rt } = ctx;

  app.get(
    '/api/v1/auth/permissions',
    {
      schema: {
        tags,
        summary: 'Get the authorisation permission list',
        description:
          'As the specification says: permissions and resourceTypes are comma-separated strings (MAPS answers arrays of objects). ' +
          'The details MAPS gives (description, whether a permission applies to the Server resource) are in permissionDetails and resourceTypeDetails.',
        response: {
          200: z
            .object({
              schemaLoadingVersion: z.number().int(),
              permissions: z.string().describe('comma-separated permission names, e.g. connect,publish,subscribe,...'),
              resourceTypes: z.string().describe('comma-separated resource types, e.g. Server,Topic,Queue,...'),
              permissionDetails: z
                .array(z.object({ name: z.string(), description: z.string(), server: z.boolean() }))
                .describe('Switchyard: each permission with its description; server: it is granted on the Server resource'),
              resourceTypeDetails: z.array(z.object({ name: z.string(), server: z.boolean() })).describe('Switchyard: each resource type; server: the Server resource'),
            })
            .meta({ id: 'AuthorisationConfigDTO' }),
          ...ErrorResponses,
        },
      },
    },
    async () => ({
      schemaLoadingVersion: 0,
      permissions: Permissions.join(','),
      resourceTypes: ResourceTypes.join(','),
      permissionDetails: Permissions.map((name) => ({ name, description: PERMISSION_DESCRIPTIONS[name], server: SERVER_PERMISSIONS.has(name) })),
      resourceTypeDetails: ResourceTypes.map((name) => ({ name, server: name === 'Server' })),
    }),
  );

  app.get(
    '/api/v1/auth/resources/acl',
    {
      config: manageAuthorization,
      schema: {
        tags,
        summary: 'Get the ACL for a specific resource',
        description: 'resourceType in any case (Server, Topic, Queue, TemporaryTopic, TemporaryQueue, Schema, Metrics); resourceKey e.g. /sensors/room1 or the server name. ALLOW and DENY entries.',
        querystring: z.object({ resourceType: z.string().optional(), resourceKey: z.string().optional() }),
        response: { 200: AclResourceViewDTO, ...ErrorResponses },
      },
    },
    async (req) => {
      const type = parseResourceType(req.query.resourceType);
      const key = parseResourceKey(req.query.resourceKey);
      return { resourceType: type, resourceKey: key, entries: entriesView(securityOf(rt).acl.get(type, key)) };
    },
  );

  app.put(
    '/api/v1/auth/resources/acl',
    {
      config: manageAuthorization,
      schema: {
        tags,
        summary: 'Replace the ACL for a specific resource',
        description:
          'Replaces every entry of the resource in one atomic write; an empty entries list removes the ACL. Permission names and resource types in any case. ' +
          'The update is applied within batchTimeoutMillis (default 5000) or refused with 503 and nothing changed. ' +
          'The caller must hold, on this resource, every permission whose allow or deny changes for any principal (403 naming them otherwise; a full administrator may always).',
        querystring: z.object({
          batchTimeoutMillis: z.coerce
            .number({ error: 'batchTimeoutMillis must be a number of milliseconds' })
            .int('batchTimeoutMillis must be an integer')
            .min(1, 'batchTimeoutMillis must be > 0')
            .max(600000, 'batchTimeoutMillis must be at most 600000')
            .default(5000),
        }),
        body: z
          .object({ resourceType: z.string(), resourceKey: z.string(), entries: z.array(AclEntryDTO.extend({ principalType: z.string(), effect: z.string() })).max(10000) })
          .meta({ id: 'AclResourceUpdateRequestDTO' }),
        response: { 200: AclResourceViewDTO, 503: StatusResponse, ...ErrorResponses },
      },
    },
    async (req) => {
      const sm = securityOf(rt);
      const type = parseResourceType(req.body.resourceType, 'body field resourceType');
      const key = parseResourceKey(req.body.resourceKey, 'body field resourceKey');
      const byPrincipal = new Map<string, AclEntry>();
      req.body.entries.forEach((dto, i) => {
        const principalType = dto.principalType.trim().toUpperCase();
        if (principalType !== 'IDENTITY' && principalType !== 'GROUP') throw new ValidationError(`entries[${i}].principalType '${dto.principalType}' must be IDENTITY or GROUP`);
        const effect = dto.effect.trim().toUpperCase();
        if (effect !== 'ALLOW' && effect !== 'DENY') throw new ValidationError(`entries[${i}].effect '${dto.effect}' must be ALLOW or DENY`);
        if (!UUID_RE.test(dto.principalId)) throw new ValidationError(`entries[${i}].principalId '${dto.principalId}' must be a UUID`);
        const perms = dto.permissions.map((p, j) => parsePermission(p, `entries[${i}].permissions[${j}]`));
        const id = dto.principalId.toLowerCase();
        const e = byPrincipal.get(id) ?? { principalId: id, isGroup: principalType === 'GROUP', allow: [] as Permission[], deny: [] as Permission[] };
        if (e.isGroup !== (principalType === 'GROUP')) throw new ValidationError(`entries[${i}]: principal ${id} appears both as IDENTITY and as GROUP`);
        const list = effect === 'ALLOW' ? e.allow : e.deny;
        for (const p of perms) if (!list.includes(p)) list.push(p);
        byPrincipal.set(id, e);
      });
      await sm.replaceAcl(req.principal, type, key, [...byPrincipal.values()], req.query.batchTimeoutMillis);
      return { resourceType: type, resourceKey: key, entries: entriesView(sm.acl.get(type, key)) };
    },
  );

  const principalView = (principalType: 'IDENTITY' | 'GROUP', principalId: string) => {
    const sm = securityOf(rt);
    return {
      principalType,
      principalId,
      entries: sm.acl.entriesOf(principalId).flatMap(({ resourceType, resourceKey, entry }) => [
        ...(entry.allow.length ? [{ resourceType, resourceKey, effect: 'ALLOW' as const, permissions: [...entry.allow] }] : []),
        ...(entry.deny.length ? [{ resourceType, resourceKey, effect: 'DENY' as const, permissions: [...entry.deny] }] : []),
      ]),
    };
  };

  app.get(
    '/api/v1/auth/identities/:userUuid/acl',
    {
      config: manageAuthorization,
      schema: {
        tags,
        summary: 'Get explicit ACL entries for an identity',
        description: "Only the identity's own entries (not its groups'), ALLOW and DENY. A group id is answered as the group's view.",
        params: z.object({ userUuid: uuidParam('userUuid') }),
        response: { 200: IdentityAclViewDTO, ...ErrorResponses },
      },
    },
    async (req) => {
      const sm = securityOf(rt);
      const id = req.params.userUuid.toLowerCase();
      if (sm.identities.user(id)) return principalView('IDENTITY', id);
      if (sm.identities.group(id)) return principalView('GROUP', id);
      throw new NotFoundError(`Identity not found: no user or group has the id ${id}`);
    },
  );

  app.get(
    '/api/v1/auth/groups/:groupUuid/acl',
    {
      config: manageAuthorization,
      schema: {
        tags,
        summary: 'Get explicit ACL entries for a group',
        params: z.object({ groupUuid: uuidParam('groupUuid') }),
        response: { 200: IdentityAclViewDTO, ...ErrorResponses },
      },
    },
    async (req) => {
      const id = securityOf(rt).identities.requireGroup(req.params.groupUuid.toLowerCase()).uniqueId;
      return principalView('GROUP', id);
    },
  );

  app.post(
    '/api/v1/auth/acl/check',
    {
      config: manageAuthorization,
      schema: {
        tags,
        summary: 'Check access for an identity to a resource',
        description: 'identityId: a user UUID or username. permission in any case (publish, PUBLISH), echoed as sent. With explain: reason is a sentence naming the deciding entry, its principal and the resource level; sources lists the deciding entry.',
        body: z
          .object({ identityId: z.string(), resourceType: z.string(), resourceKey: z.string(), permission: z.string(), explain: z.boolean().default(false) })
          .meta({ id: 'AclCheckRequestDTO' }),
        response: {
          200: z
            .object({
              decision: z.enum(['ALLOW', 'DENY']),
              permission: z.string(),
              reason: z.string().nullable(),
              sources: z.array(z.string()).nullable(),
              decisionReason: z.string().nullable().describe('Switchyard: ALLOW_EXPLICIT_IDENTITY, DENY_INHERITED_RESOURCE, DEFAULT_DENY, ... (with explain)'),
            })
            .meta({ id: 'AclCheckResponseDTO' }),
          ...ErrorResponses,
        },
      },
    },
    async (req) => {
      const sm = securityOf(rt);
      const b = req.body;
      const type = parseResourceType(b.resourceType, 'body field resourceType');
      const key = parseResourceKey(b.resourceKey, 'body field resourceKey');
      const permission = parsePermission(b.permission, 'body field permission');
      const user = UUID_RE.test(b.identityId) ? sm.identities.user(b.identityId.toLowerCase()) : sm.identities.userByUsername(b.identityId);
      if (!user) throw new NotFoundError(`Identity not found: no user has the id or name '${b.identityId}'`);
      const r = sm.check(user, permission, type, key);
      return {
        decision: r.decision.allowed ? ('ALLOW' as const) : ('DENY' as const),
        permission: b.permission, // echoed as the caller named it (MAPS: the enum constant, e.g. PUBLISH)
        reason: b.explain ? r.reason : null,
        sources: b.explain ? r.sources : null,
        decisionReason: b.explain ? r.decision.reason : null,
      };
    },
  );
};
