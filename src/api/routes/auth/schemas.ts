import { z } from 'zod';
import { UUID_RE, type GroupRecord, type UserRecord } from '../../../security/identities.js';
import type { SecurityManager } from '../../../security/service.js';

/** DTOs of the auth API (reference 4.2, 4.3), MAPS wire names. */
export const uuidParam = (name: string) => z.string().regex(UUID_RE, `${name} must be a UUID (8-4-4-4-12 hex digits)`);

export const GroupInfoDTO = z.object({ name: z.string(), uniqueId: z.string() }).meta({ id: 'GroupInfoDTO' });
export const UserDTO = z
  .object({ username: z.string(), uniqueId: z.string(), groupList: z.array(GroupInfoDTO), attributes: z.record(z.string(), z.string()) })
  .meta({ id: 'UserDTO' });
export const GroupDTO = z
  .object({ name: z.string(), uniqueId: z.string(), usersList: z.array(z.object({ username: z.string(), uniqueId: z.string() })) })
  .meta({ id: 'GroupDTO' });
export const LockStatus = z
  .object({ uuid: z.string().nullable(), username: z.string(), locked: z.boolean(), remainingLockSeconds: z.number().int(), lockedUntilIso: z.string() })
  .meta({ id: 'LockStatus' });
export const PrincipalType = z.enum(['IDENTITY', 'GROUP']);
export const Effect = z.enum(['ALLOW', 'DENY']);
export const AclEntryDTO = z
  .object({ principalType: PrincipalType, principalId: z.string(), effect: Effect, permissions: z.array(z.string()) })
  .meta({ id: 'AclEntryDTO' });
export const AclResourceViewDTO = z
  .object({ resourceType: z.string(), resourceKey: z.string(), entries: z.array(AclEntryDTO) })
  .meta({ id: 'AclResourceViewDTO' });
export const IdentityAclViewDTO = z
  .object({
    principalType: PrincipalType,
    principalId: z.string(),
    entries: z.array(z.object({ resourceType: z.string(), resourceKey: z.string(), effect: Effect, permissions: z.array(z.string()) })),
  })
  .meta({ id: 'IdentityAclViewDTO' });

export function userDTO(sm: SecurityManager, u: UserRecord) {
  return {
    username: u.username,
    uniqueId: u.uniqueId,
    groupList: u.groups.map((g) => sm.identities.group(g)).filter((g): g is GroupRecord => !!g).map((g) => ({ name: g.name, uniqueId: g.uniqueId })),
    attributes: { ...u.attributes },
  };
}

export function groupDTO(sm: SecurityManager, g: GroupRecord) {
  return { name: g.name, uniqueId: g.uniqueId, usersList: sm.identities.members(g.uniqueId).map((u) => ({ username: u.username, uniqueId: u.uniqueId })) };
}
