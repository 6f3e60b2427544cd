import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Runtime } from '../runtime/runtime.js';
import { DESTINATION_TYPES, MODEL_PERMISSIONS, SERVER_PERMISSIONS } from './acl.js';
import { passwordCredentials, randomPassword } from './passwords.js';
import type { AclStore } from './acl.js';
import type { Audit } from './audit.js';
import type { Identities } from './identities.js';

/** The parts of the SecurityManager the defaults need (typed here, so this module does not import service.ts). */
export interface DefaultsHost {
  readonly identities: Identities;
  readonly acl: AclStore;
  readonly audit: Audit;
  readonly config: Runtime['config']['AuthManager'];
}
import { initialAdminPassword } from './admin-password.js';
import { Permissions, type Permission } from './types.js';

const DESTINATION_PERMISSIONS = Permissions.filter((p) => !SERVER_PERMISSIONS.has(p) && !MODEL_PERMISSIONS.has(p));
/**
 * Models (resource `Model`, key `*` = every model): administrators use and train (create, change, train online) any
 * model; `everyone` may call the models that are in the store in its selectors, but neither creates nor trains one
 * (a selector naming a model not in the store trains it: that needs train_model).
 */
export const ADMINS_MODEL: Permission[] = ['use_model', 'train_model'];
export const EVERYONE_MODEL: Permission[] = ['use_model'];
/**
 * What every logged-in user may do on the server: connect (MQTT, and the REST routes that need `connect`: own
 * session, own password, messaging), keep a persistent session, create and list destinations, subscribe with
 * wildcards. Not `view_stats` (server log, actor tree, connection list, statistics: the `operators` group) and not
 * `purge_server` (a global purge is an administrator's act); MAPS gives `everyone` both.
 */
export const EVERYONE_SERVER: Permission[] = ['connect', 'persistent_session', 'create_destination', 'list_destinations', 'wildcard_subscription'];
export const EVERYONE_DESTINATION: Permission[] = ['publish', 'subscribe', 'retain', 'view', 'durable'];
const ANONYMOUS_DESTINATION: Permission[] = ['delete', 'publish', 'subscribe', 'retain', 'view', 'durable'];
/** Server-wide views, for the `operators` group. */
export const OPERATORS_SERVER: Permission[] = ['view_stats'];

export const ADMINS = 'admins';
export const EVERYONE = 'everyone';
export const OPERATORS = 'operators';

/** Version of the default groups and ACLs; kept in the store (`instance` sublevel) once applied. */
const DEFAULTS_VERSION = 3;
const DEFAULTS_KEY = 'security-defaults';

/**
 * First boot (authentication on, no users yet), reference section 8 with the changes of docs/security.md: groups
 * `admins`, `everyone` and `operators`; user `admin` (admins, everyone) with a random password printed once and
 * written to {data_dir}/admin_password (mode 0600); the built-in `anonymous` user (everyone, no password: used only
 * when anonymous access is switched on); and the default ACLs. A store made by an older version is upgraded once
 * (upgradeDefaults); later boots change nothing.
 */
export async function ensureDefaults(sm: DefaultsHost, rt: Runtime): Promise<void> {
  const ids = sm.identities;
  if (ids.userCount > 0) {
    await upgradeDefaults(sm, rt);
    return;
  }
  const admins = ids.groupByGroupName(ADMINS) ?? (await ids.createGroup(ADMINS));
  const everyone = ids.groupByGroupName(EVERYONE) ?? (await ids.createGroup(EVERYONE));
  const operators = ids.groupByGroupName(OPERATORS) ?? (await ids.createGroup(OPERATORS));
  const given = initialAdminPassword(sm.config);
  const password = given?.password ?? randomPassword(20);
  const { passwordHash, scramSha256 } = await passwordCredentials(password);
  const admin = await ids.createUser('admin', passwordHash, { groups: [admins.uniqueId, everyone.uniqueId], scramSha256 });
  const anonymous = await ids.createUser('anonymous', '', { groups: [everyone.uniqueId], builtIn: true });

  const server = rt.serverName;
  await sm.acl.grant('Server', server, admins.uniqueId, true, 'ALLOW', [...SERVER_PERMISSIONS]);
  await sm.acl.grant('Server', server, everyone.uniqueId, true, 'ALLOW', EVERYONE_SERVER);
  await sm.acl.grant('Server', server, operators.uniqueId, true, 'ALLOW', OPERATORS_SERVER);
  for (const type of DESTINATION_TYPES) {
    await sm.acl.grant(type, '/', admins.uniqueId, true, 'ALLOW', DESTINATION_PERMISSIONS);
    await sm.acl.grant(type, '/', everyone.uniqueId, true, 'ALLOW', EVERYONE_DESTINATION);
    await sm.acl.grant(type, '/', anonymous.uniqueId, false, 'ALLOW', ANONYMOUS_DESTINATION);
  }
  // Schema and Metrics resources have no ancestors; admins get their permissions on '/' there too.
  for (const type of ['Schema', 'Metrics'] as const) await sm.acl.grant(type, '/', admins.uniqueId, true, 'ALLOW', DESTINATION_PERMISSIONS);
  await sm.acl.grant('Topic', 'test/nosubscribe', everyone.uniqueId, true, 'DENY', ['subscribe']);
  await sm.acl.grant('Topic', 'test/nosubscribe', admins.uniqueId, true, 'DENY', ['subscribe']);
  await sm.acl.grant('Model', '*', admins.uniqueId, true, 'ALLOW', ADMINS_MODEL);
  await sm.acl.grant('Model', '*', everyone.uniqueId, true, 'ALLOW', EVERYONE_MODEL);

  await rt.store.putJson('instance', DEFAULTS_KEY, { version: DEFAULTS_VERSION });

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

/**
 * A store whose defaults were made by an older version (no `security-defaults` record), once: `everyone` loses
 * `view_stats` and `purge_server` on this server (the old first-boot grant; whoever still needs them is added to
 * `operators` or granted them by name), and the `operators` group is created with `view_stats` when there is no
 * group of that name. Users in no group stay so (they were made that way; add them to `everyone` to let them log
 * in). From version 3 on, a store without any ACL on `Model *` gets the model grants (admins use_model, train_model;
 * everyone use_model). Audited as `security.defaults_upgraded`.
 */
async function upgradeDefaults(sm: DefaultsHost, rt: Runtime): Promise<void> {
  const done = await rt.store.getJson<{ version: number }>('instance', DEFAULTS_KEY);
  if (done && done.version >= DEFAULTS_VERSION) return;
  const ids = sm.identities;
  const server = rt.serverName;
  const changes: string[] = [];
  const everyone = ids.groupByGroupName(EVERYONE);
  const from = done?.version ?? 1;
  if (from < 3 && sm.acl.get('Model', '*').entries.length === 0) {
    // version 3: the Model resource type (model functions in selectors need use_model, training needs train_model)
    const admins = ids.groupByGroupName(ADMINS);
    if (admins) await sm.acl.grant('Model', '*', admins.uniqueId, true, 'ALLOW', ADMINS_MODEL);
    if (everyone) await sm.acl.grant('Model', '*', everyone.uniqueId, true, 'ALLOW', EVERYONE_MODEL);
    changes.push(`Model * granted: ${ADMINS} ${ADMINS_MODEL.join(', ')}; ${EVERYONE} ${EVERYONE_MODEL.join(', ')}`);
  }
  if (from < 2 && everyone) {
    const rec = sm.acl.get('Server', server);
    const entry = rec.entries.find((e) => e.principalId === everyone.uniqueId && e.isGroup);
    const drop = (['view_stats', 'purge_server'] as Permission[]).filter((p) => entry?.allow.includes(p));
    if (entry && drop.length) {
      await sm.acl.replace(
        'Server',
        server,
        rec.entries.map((e) => (e === entry ? { ...e, allow: e.allow.filter((p) => !drop.includes(p)) } : e)),
      );
      changes.push(`${EVERYONE} no longer has ${drop.join(', ')}`);
    }
  }
  if (from < 2 && !ids.groupByGroupName(OPERATORS)) {
    const operators = await ids.createGroup(OPERATORS);
    await sm.acl.grant('Server', server, operators.uniqueId, true, 'ALLOW', OPERATORS_SERVER);
    changes.push(`group ${OPERATORS} created with ${OPERATORS_SERVER.join(', ')}`);
  }
  await rt.store.putJson('instance', DEFAULTS_KEY, { version: DEFAULTS_VERSION });
  if (changes.length) {
    sm.audit.event('security.defaults_upgraded', { by: 'upgrade', version: DEFAULTS_VERSION, changes }, `default groups and ACLs upgraded: ${changes.join('; ')}`);
    rt.log.warn({ changes }, `security defaults upgraded: ${changes.join('; ')}`);
  }
}
