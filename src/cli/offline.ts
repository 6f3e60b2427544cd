/**
 * Offline user administration: opens the data directory's store directly (the broker must not be running: the
 * LevelDB lock says so) and changes users through the security services the broker uses (same hashing, same audit
 * lines in `{data}/log/audit.log`, `by: "switchyard-cli"`).
 */
import type { AnyActorRef } from 'xstate';
import { Runtime, type RuntimeOptions } from '../runtime/runtime.js';
import { existsSync } from 'node:fs';
import { forgetGeneratedPassword, generatedPasswordFile } from '../security/admin-password.js';
import { parsePermission, parseResourceKey, parseResourceType } from '../security/acl.js';
import { passwordCredentials } from '../security/passwords.js';
import { SecurityManager } from '../security/service.js';
import type { UserRecord } from '../security/identities.js';
import { CliError, EXIT_CLI } from './output.js';

/**
 * Offline changes act as the system (no principal: like first boot, no permission checks; the operator who can open
 * the data directory owns the broker). Lines of our own name `switchyard-cli`.
 */
const CLI_ACTOR = undefined;
const CLI_NAME = 'switchyard-cli';

export interface Offline {
  rt: Runtime;
  sm: SecurityManager;
  close(): Promise<void>;
}

/** No lockout actors offline: stored lock states are read and reset as records (Lockouts' dormant states). */
const noActors = { start: () => {}, get: (): AnyActorRef | undefined => undefined, ids: (): string[] => [] };

export async function openOffline(options: RuntimeOptions): Promise<Offline> {
  const rt = await Runtime.create({ ...options, stdoutLogs: false });
  if (!rt.config.AuthManager.authenticationEnabled) {
    await rt.stop();
    throw new CliError('authentication is off in this configuration (AuthManager.authenticationEnabled: false): there are no users to manage', EXIT_CLI.USAGE);
  }
  const fileBefore = existsSync(generatedPasswordFile(rt));
  const hadUsers = !(await isEmpty(rt));
  const sm = await SecurityManager.open(rt, noActors);
  if (!hadUsers && !fileBefore && existsSync(generatedPasswordFile(rt))) {
    process.stderr.write(`switchyard: a new data directory: made the first-boot defaults; admin's password is in ${generatedPasswordFile(rt)}\n`);
  }
  return {
    rt,
    sm,
    async close() {
      await sm.lockouts.flushed();
      await rt.stop();
    },
  };
}

/** No user in the store yet (a data directory that never booted with authentication on). */
async function isEmpty(rt: Runtime): Promise<boolean> {
  for await (const _ of rt.store.entriesJson('users')) return false;
  return true;
}

export function requireUser(sm: SecurityManager, name: string): UserRecord {
  const u = sm.identities.userByUsername(name);
  if (!u) throw new CliError(`no user is named "${name}"`, EXIT_CLI.NOT_FOUND);
  return u;
}

export async function addUser(o: Offline, name: string, password: string, groups: string[]): Promise<UserRecord> {
  const gids = groups.map((g) => {
    const group = o.sm.identities.groupByGroupName(g);
    if (!group) throw new CliError(`no group is named "${g}"`, EXIT_CLI.NOT_FOUND);
    return group.uniqueId;
  });
  const u = await o.sm.createUser(CLI_ACTOR, name, password);
  for (const gid of gids) await o.sm.addMember(CLI_ACTOR, gid, u.uniqueId);
  return u;
}

/** Sets a password as an administrator would (policy, scrypt and SCRAM credentials, sessions ended, lockout reset). */
export async function setPassword(o: Offline, name: string, password: string): Promise<{ fileDeleted: boolean }> {
  const u = requireUser(o.sm, name);
  if (u.builtIn) throw new CliError(`the user ${u.username} is built in and has no password`, EXIT_CLI.REFUSED);
  o.sm.policyCheck(password);
  const { passwordHash, scramSha256 } = await passwordCredentials(password);
  await o.sm.identities.setPasswordHash(u.uniqueId, passwordHash, scramSha256);
  await o.sm.sessions.endAllFor(u.uniqueId);
  o.sm.lockouts.reset(u.username);
  o.sm.audit.event('user.password_changed', { by: CLI_NAME, username: u.username, uniqueId: u.uniqueId }, `password of ${u.username} changed (offline)`);
  return { fileDeleted: forgetGeneratedPassword(o.rt, u.username) };
}

export async function deleteUser(o: Offline, name: string): Promise<void> {
  const u = requireUser(o.sm, name);
  await o.sm.deleteUser(CLI_ACTOR, u.uniqueId);
}

export function listUsers(o: Offline): Array<{ username: string; uniqueId: string; groups: string[]; locked: boolean; remainingLockSeconds: number }> {
  return o.sm.identities.listUsers().map((u) => {
    const lock = o.sm.lockouts.status(u.username);
    return {
      username: u.username,
      uniqueId: u.uniqueId,
      groups: u.groups.map((g) => o.sm.identities.group(g)?.name ?? g),
      locked: lock?.locked ?? false,
      remainingLockSeconds: lock?.remainingLockSeconds ?? 0,
    };
  });
}

export function unlockUser(o: Offline, name: string): boolean {
  const u = requireUser(o.sm, name);
  const was = o.sm.lockouts.status(u.username)?.locked ?? false;
  o.sm.unlock(CLI_ACTOR, u.uniqueId);
  return was;
}

export function aclCheck(o: Offline, name: string, permission: string, type: string, key: string) {
  const u = requireUser(o.sm, name);
  const p = parsePermission(permission);
  const t = parseResourceType(type);
  const k = parseResourceKey(key);
  const r = o.sm.check(u, p, t, k);
  return { decision: r.decision.allowed ? 'ALLOW' : 'DENY', permission: p, resourceType: t, resourceKey: k, reason: r.reason, sources: r.sources };
}
