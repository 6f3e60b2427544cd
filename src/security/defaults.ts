import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Runtime } from '../runtime/runtime.js';
import { DESTINATION_TYPES, SERVER_PERMISSIONS } from './acl.js';
import { passwordCredentials, randomPassword } from './passwords.js';
import type { SecurityManager } from './service.js';
import { initialAdminPassword } from './admin-password.js';
import { Permissions, type Permission } from './types.js';

const DESTINATION_PERMISSIONS = Permissions.filter((p) => !SERVER_PERMISSIONS.has(p));
const EVERYONE_SERVER: Permission[] = ['connect', 'persistent_session', 'create_destination', 'purge_server', 'list_destinations', 'view_stats', 'wildcard_subscription'];
const EVERYONE_DESTINATION: Permission[] = ['publish', 'subscribe', 'retain', 'view', 'durable'];
const ANONYMOUS_DESTINATION: Permission[] = ['delete', 'publish', 'subscribe', 'retain', 'view', 'durable'];

/**
 * First boot (authentication on, no users yet), reference section 8: groups `admins` and `everyone`; user `admin`
 * (admins, everyone) with a random password printed once and written to {data_dir}/admin_password (mode 0600);
 * the built-in `anonymous` user (everyone, no password: used only when anonymous access is switched on); and the
 * default ACLs. Later boots change nothing.
 */
export async function ensureDefaults(sm: SecurityManager, rt: Runtime): Promise<void> {
  const ids = sm.identities;
  if (ids.userCount > 0) return;
  const admins = ids.groupByGroupName('admins') ?? (await ids.createGroup('admins'));
  const everyone = ids.groupByGroupName('everyone') ?? (await ids.createGroup('everyone'));
  const given = initialAdminPassword(sm.config);
  const password = given?.password ?? randomPassword(20);
  const { passwordHash, scramSha256 } = await passwordCredentials(password);
  const admin = await ids.createUser('admin', passwordHash, { groups: [admins.uniqueId, everyone.uniqueId], scramSha256 });
  const anonymous = await ids.createUser('anonymous', '', { groups: [everyone.uniqueId], builtIn: true });

  const server = rt.serverName;
  await sm.acl.grant('Server', server, admins.uniqueId, true, 'ALLOW', [...SERVER_PERMISSIONS]);
  await sm.acl.grant('Server', server, everyone.uniqueId, true, 'ALLOW', EVERYONE_SERVER);
  for (const type of DESTINATION_TYPES) {
    await sm.acl.grant(type, '/', admins.uniqueId, true, 'ALLOW', DESTINATION_PERMISSIONS);
    await sm.acl.grant(type, '/', everyone.uniqueId, true, 'ALLOW', EVERYONE_DESTINATION);
    await sm.acl.grant(type, '/', anonymous.uniqueId, false, 'ALLOW', ANONYMOUS_DESTINATION);
  }
  // Schema and Metrics resources have no ancestors; admins get their permissions on '/' there too.
  for (const type of ['Schema', 'Metrics'] as const) await sm.acl.grant(type, '/', admins.uniqueId, true, 'ALLOW', DESTINATION_PERMISSIONS);
  await sm.acl.grant('Topic', 'test/nosubscribe', everyone.uniqueId, true, 'DENY', ['subscribe']);
  await sm.acl.grant('Topic', 'test/nosubscribe', admins.uniqueId, true, 'DENY', ['subscribe']);

  if (given) {
    // given in advance (SWITCHYARD_ADMIN_PASSWORD[_FILE]): nothing is printed, no file is written
    sm.audit.event('user.created', { by: 'first boot', username: 'admin', uniqueId: admin.uniqueId, passwordFrom: given.source }, 'first boot: admin user created');
    rt.log.info({ source: given.source }, `first boot: created user admin with the password from ${given.source}`);
    return;
  }
  const file = join(rt.config.MessageDaemon.dataDirectory, 'admin_password');
  writeFileSync(file, password + '\n', { mode: 0o600 });
  chmodSync(file, 0o600);
  sm.audit.event('user.created', { by: 'first boot', username: 'admin', uniqueId: admin.uniqueId }, 'first boot: admin user created');
  rt.log.info({ file }, 'first boot: created user admin; its password is in the file named here');
  if (rt.stdoutEnabled) {
    process.stdout.write(`\nSwitchyard first boot: created user "admin" with password: ${password}\n  (also written to ${file}, mode 0600; change it with PUT /api/v1/auth/users/${admin.uniqueId}/password)\n\n`);
  }
}
