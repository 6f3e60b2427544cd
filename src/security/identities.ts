import { randomUUID } from 'node:crypto';
import { ConflictError, NotFoundError, ValidationError } from '../errors.js';
import type { Store } from '../store/store.js';
import type { ScramCredentials } from './scram.js';

/**
 * Users and groups: in memory for look-ups, the `users` and `groups` sublevels for durability. Membership is kept on
 * the user, in membership order (the order ACL evaluation tries a user's groups).
 */
export interface UserRecord {
  uniqueId: string;
  username: string;
  /** scrypt hash; '' means the user cannot log in with a password (the built-in anonymous user). */
  passwordHash: string;
  /**
   * SCRAM-SHA-256 credentials (salt, iterations, StoredKey, ServerKey), set with the password. Absent for users whose
   * password was set before SCRAM support (and for anonymous): they cannot use SCRAM until the password is set again.
   */
  scramSha256?: ScramCredentials;
  /** Group UUIDs in membership order. */
  groups: string[];
  attributes: Record<string, string>;
  createdAt: string;
  /** Built-in users (anonymous) cannot be deleted. */
  builtIn?: boolean;
}

export interface GroupRecord {
  uniqueId: string;
  name: string;
  createdAt: string;
}

export const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Usernames and group names: 1–128 characters, no control characters, no ':' (it would break Basic credentials). */
export function checkName(kind: 'Username' | 'Group name', raw: unknown): string {
  if (typeof raw !== 'string' || raw.trim() === '') throw new ValidationError(`${kind} is required`);
  const name = raw.trim();
  if ([...name].length > 128) throw new ValidationError(`${kind} is too long: at most 128 characters`);
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(name)) throw new ValidationError(`${kind} must not contain control characters`);
  if (kind === 'Username' && name.includes(':')) throw new ValidationError("Username must not contain ':' (it separates the name from the password in Basic credentials)");
  return name;
}

export class Identities {
  private readonly users = new Map<string, UserRecord>();
  private readonly userByName = new Map<string, string>();
  private readonly groups = new Map<string, GroupRecord>();
  private readonly groupByName = new Map<string, string>();

  constructor(
    private readonly store: Store,
    private readonly onChange: () => void,
  ) {}

  async load(): Promise<void> {
    this.users.clear();
    this.userByName.clear();
    this.groups.clear();
    this.groupByName.clear();
    for await (const [, g] of this.store.entriesJson<GroupRecord>('groups')) {
      this.groups.set(g.uniqueId, g);
      this.groupByName.set(g.name, g.uniqueId);
    }
    for await (const [, u] of this.store.entriesJson<UserRecord>('users')) {
      u.groups = u.groups.filter((g) => this.groups.has(g));
      this.users.set(u.uniqueId, u);
      this.userByName.set(u.username, u.uniqueId);
    }
  }

  get userCount(): number {
    return this.users.size;
  }

  listUsers(): UserRecord[] {
    return [...this.users.values()].sort((a, b) => a.username.localeCompare(b.username));
  }
  listGroups(): GroupRecord[] {
    return [...this.groups.values()].sort((a, b) => a.name.localeCompare(b.name));
  }
  user(uniqueId: string): UserRecord | undefined {
    return this.users.get(uniqueId.toLowerCase());
  }
  userByUsername(username: string): UserRecord | undefined {
    const id = this.userByName.get(username);
    return id ? this.users.get(id) : undefined;
  }
  group(uniqueId: string): GroupRecord | undefined {
    return this.groups.get(uniqueId.toLowerCase());
  }
  groupByGroupName(name: string): GroupRecord | undefined {
    const id = this.groupByName.get(name);
    return id ? this.groups.get(id) : undefined;
  }
  /** Users of a group, by username. */
  members(groupId: string): UserRecord[] {
    return this.listUsers().filter((u) => u.groups.includes(groupId));
  }

  requireUser(uniqueId: string): UserRecord {
    const u = this.users.get(uniqueId.toLowerCase());
    if (!u) throw new NotFoundError(`User not found: no user has the id ${uniqueId}`);
    return u;
  }
  requireGroup(uniqueId: string): GroupRecord {
    const g = this.groups.get(uniqueId.toLowerCase());
    if (!g) throw new NotFoundError(`Group not found: no group has the id ${uniqueId}`);
    return g;
  }

  private async saveUser(u: UserRecord): Promise<void> {
    await this.store.putJson('users', u.uniqueId, u);
    this.users.set(u.uniqueId, u);
    this.userByName.set(u.username, u.uniqueId);
    this.onChange();
  }

  async createUser(
    username: string,
    passwordHash: string,
    opts: { groups?: string[]; builtIn?: boolean; uniqueId?: string; scramSha256?: ScramCredentials } = {},
  ): Promise<UserRecord> {
    const name = checkName('Username', username);
    if (this.userByName.has(name)) throw new ConflictError(`Username already exists: ${name}`);
    const u: UserRecord = {
      uniqueId: opts.uniqueId ?? randomUUID(),
      username: name,
      passwordHash,
      ...(opts.scramSha256 ? { scramSha256: opts.scramSha256 } : {}),
      groups: [...(opts.groups ?? [])],
      attributes: {},
      createdAt: new Date().toISOString(),
      ...(opts.builtIn ? { builtIn: true } : {}),
    };
    await this.saveUser(u);
    return u;
  }

  /** Replaces the password credentials; SCRAM credentials of the old password are dropped when none are given. */
  async setPasswordHash(uniqueId: string, passwordHash: string, scramSha256?: ScramCredentials): Promise<UserRecord> {
    const u = this.requireUser(uniqueId);
    const next: UserRecord = { ...u, passwordHash };
    if (scramSha256) next.scramSha256 = scramSha256;
    else delete next.scramSha256;
    await this.saveUser(next);
    return next;
  }

  async deleteUser(uniqueId: string): Promise<UserRecord> {
    const u = this.requireUser(uniqueId);
    await this.store.del('users', u.uniqueId);
    this.users.delete(u.uniqueId);
    this.userByName.delete(u.username);
    this.onChange();
    return u;
  }

  async createGroup(name: string): Promise<GroupRecord> {
    const n = checkName('Group name', name);
    if (this.groupByName.has(n)) throw new ConflictError(`Group ${n} already exists`);
    const g: GroupRecord = { uniqueId: randomUUID(), name: n, createdAt: new Date().toISOString() };
    await this.store.putJson('groups', g.uniqueId, g);
    this.groups.set(g.uniqueId, g);
    this.groupByName.set(n, g.uniqueId);
    this.onChange();
    return g;
  }

  /** Deletes the group and every membership of it (one atomic batch). */
  async deleteGroup(uniqueId: string): Promise<{ group: GroupRecord; members: UserRecord[] }> {
    const g = this.requireGroup(uniqueId);
    const members = this.members(g.uniqueId);
    const updated = members.map((u) => ({ ...u, groups: u.groups.filter((x) => x !== g.uniqueId) }));
    const ops: Array<{ type: 'put'; key: string; value: Buffer } | { type: 'del'; key: string }> = [];
    await this.store.sublevel('groups').del(g.uniqueId);
    for (const u of updated) ops.push({ type: 'put', key: u.uniqueId, value: Buffer.from(JSON.stringify(u)) });
    if (ops.length) await this.store.sublevel('users').batch(ops);
    for (const u of updated) this.users.set(u.uniqueId, u);
    this.groups.delete(g.uniqueId);
    this.groupByName.delete(g.name);
    this.onChange();
    return { group: g, members };
  }

  /** Adds at the end of the membership order; already a member: unchanged (false). */
  async addMember(groupId: string, userId: string): Promise<boolean> {
    const g = this.requireGroup(groupId);
    const u = this.requireUser(userId);
    if (u.groups.includes(g.uniqueId)) return false;
    await this.saveUser({ ...u, groups: [...u.groups, g.uniqueId] });
    return true;
  }

  /** Not a member: false. */
  async removeMember(groupId: string, userId: string): Promise<boolean> {
    const g = this.requireGroup(groupId);
    const u = this.requireUser(userId);
    if (!u.groups.includes(g.uniqueId)) return false;
    await this.saveUser({ ...u, groups: u.groups.filter((x) => x !== g.uniqueId) });
    return true;
  }
}
