import { ValidationError } from '../errors.js';
import type { Store } from '../store/store.js';
import { ModelPermissions, Permissions, ResourceTypes, ServerPermissions, type Permission, type ResourceType } from './types.js';

/**
 * ACLs (reference section 8). Per resource (type, key) one entry per principal with an allow set and a deny set.
 * Evaluation walks from the resource to its ancestors; at each level the identity's own entry first (allow, then
 * deny), then its groups in membership order; the first definite answer wins; nothing matched: default deny.
 */

export const SERVER_PERMISSIONS: ReadonlySet<Permission> = new Set<Permission>(ServerPermissions);
/** Permissions of the `Model` resource type only. */
export const MODEL_PERMISSIONS: ReadonlySet<Permission> = new Set<Permission>(ModelPermissions);

export const PERMISSION_DESCRIPTIONS: Record<Permission, string> = {
  connect: 'Allows the identity to open a connection',
  persistent_session: 'Allows use of persistent/durable sessions',
  create_destination: 'Global gate: may create destinations anywhere',
  purge_server: 'Allows purging messages globally',
  list_destinations: 'Allows listing all destinations',
  manage_destinations: 'Allows managing destination configuration globally',
  view_stats: 'Allows viewing server statistics',
  view_config: 'Allows viewing server configuration',
  manage_config: 'Allows modifying server configuration',
  manage_authentication: 'Allows managing authentication',
  manage_authorization: 'Allows managing authorisation rules',
  rest_api_access: 'Allows access to the server REST management API',
  manage_interfaces: 'Allows managing network interfaces and listeners',
  manage_protocols: 'Allows enabling, disabling and configuring protocols',
  wildcard_subscription: 'Allows wildcard subscriptions',
  publish: 'Allows publishing to this destination',
  subscribe: 'Allows subscribing to this destination',
  schema_subscribe: 'Allows subscribing to schema updates',
  schema_publish: 'Allows publishing schema updates',
  retain: 'Allows setting retained messages here',
  delete: 'Allows deleting this destination',
  durable: 'Allows subscribing to durable resources on this destination',
  purge: 'Allows purging messages from this destination',
  view: 'Allows viewing/browsing this destination',
  use_model: 'Allows calling this model in a selector (subscription filters, list filters)',
  train_model: 'Allows creating or changing this model: upload, delete, online training from a selector',
};

export const DESTINATION_TYPES: ReadonlySet<ResourceType> = new Set<ResourceType>(['Topic', 'Queue', 'TemporaryTopic', 'TemporaryQueue']);

/** A permission name in any case → its wire name; unknown → ValidationError listing the known ones. */
export function parsePermission(raw: unknown, field = 'permission'): Permission {
  if (typeof raw !== 'string' || raw.trim() === '') throw new ValidationError(`${field} is required`);
  const p = raw.trim().toLowerCase();
  if (!(Permissions as readonly string[]).includes(p)) throw new ValidationError(`${field} '${raw}' is not a known permission; known: ${Permissions.join(', ')}`);
  return p as Permission;
}

/** A resource type in any case → its canonical name (Topic, TemporaryQueue, ...). */
export function parseResourceType(raw: unknown, field = 'resourceType'): ResourceType {
  if (typeof raw !== 'string' || raw.trim() === '') throw new ValidationError(`${field} is required`);
  const t = ResourceTypes.find((x) => x.toLowerCase() === raw.trim().toLowerCase());
  if (!t) throw new ValidationError(`${field} '${raw}' is not known; known: ${ResourceTypes.join(', ')}`);
  return t;
}

export function parseResourceKey(raw: unknown, field = 'resourceKey'): string {
  if (typeof raw !== 'string' || raw === '') throw new ValidationError(`${field} is required`);
  if (raw.length > 4096) throw new ValidationError(`${field} is too long: at most 4096 characters`);
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f]/.test(raw)) throw new ValidationError(`${field} must not contain control characters`);
  return raw;
}

/**
 * Which resource types a permission applies to: server permissions to Server, model permissions to Model, the
 * others to destinations (and Schema, Metrics). Throws a 400 naming the mismatch.
 */
export function checkPermissionScope(type: ResourceType, p: Permission): void {
  if (MODEL_PERMISSIONS.has(p) !== (type === 'Model')) {
    throw new ValidationError(type === 'Model' ? `Permission ${p} does not apply to models (use_model, train_model do)` : `Permission ${p} applies to the Model resource only, not to ${type}`);
  }
}

/** The levels tried, most specific first: destinations /a/b/c → /a/b → /a → /; Server <id> → *; Model <name> → *; others only themselves. */
export function ancestors(type: ResourceType, key: string): string[] {
  if (type === 'Server' || type === 'Model') return key === '*' ? ['*'] : [key, '*'];
  if (!DESTINATION_TYPES.has(type)) return [key];
  const out = [key];
  let k = key;
  while (k !== '/') {
    const i = k.lastIndexOf('/');
    k = i <= 0 ? '/' : k.slice(0, i);
    out.push(k);
  }
  return out;
}

export interface AclEntry {
  principalId: string;
  isGroup: boolean;
  allow: Permission[];
  deny: Permission[];
}

export interface AclRecord {
  resourceType: ResourceType;
  resourceKey: string;
  entries: AclEntry[];
}

export type DecisionReason =
  | 'ALLOW_EXPLICIT_IDENTITY'
  | 'ALLOW_EXPLICIT_GROUP'
  | 'ALLOW_INHERITED_RESOURCE'
  | 'DENY_EXPLICIT_IDENTITY'
  | 'DENY_EXPLICIT_GROUP'
  | 'DENY_INHERITED_RESOURCE'
  | 'DEFAULT_DENY';

export interface Subject {
  uniqueId: string;
  username: string;
  /** Groups in membership order. */
  groups: Array<{ uniqueId: string; name: string }>;
}

export interface Decision {
  allowed: boolean;
  reason: DecisionReason;
  /** Where the answer came from (absent on default deny). */
  level?: string;
  entry?: AclEntry;
  principalName?: string;
}

const keyOf = (type: ResourceType, key: string) => `${type}\u0000${key}`;

export class AclStore {
  private readonly acls = new Map<string, AclRecord>();

  constructor(
    private readonly store: Store,
    private readonly onChange: () => void,
  ) {}

  async load(): Promise<void> {
    this.acls.clear();
    for await (const [k, rec] of this.store.entriesJson<AclRecord>('acl')) this.acls.set(k, rec);
  }

  get(type: ResourceType, key: string): AclRecord {
    return this.acls.get(keyOf(type, key)) ?? { resourceType: type, resourceKey: key, entries: [] };
  }

  all(): AclRecord[] {
    return [...this.acls.values()];
  }

  /** Replaces the whole ACL of one resource with one store write (atomic). Empty entries remove it. */
  async replace(type: ResourceType, key: string, entries: AclEntry[]): Promise<AclRecord> {
    for (const e of entries) for (const p of [...e.allow, ...e.deny]) checkPermissionScope(type, p);
    const k = keyOf(type, key);
    const clean = entries.filter((e) => e.allow.length || e.deny.length);
    const rec: AclRecord = { resourceType: type, resourceKey: key, entries: clean };
    if (clean.length) {
      await this.store.putJson('acl', k, rec);
      this.acls.set(k, rec);
    } else {
      await this.store.del('acl', k);
      this.acls.delete(k);
    }
    this.onChange();
    return rec;
  }

  /** Adds allow/deny bits for a principal (grant sets allow and clears deny; deny the reverse). */
  async grant(type: ResourceType, key: string, principalId: string, isGroup: boolean, effect: 'ALLOW' | 'DENY', perms: Permission[]): Promise<void> {
    const rec = this.get(type, key);
    const entries = rec.entries.map((e) => ({ ...e, allow: [...e.allow], deny: [...e.deny] }));
    let e = entries.find((x) => x.principalId === principalId);
    if (!e) {
      e = { principalId, isGroup, allow: [], deny: [] };
      entries.push(e);
    }
    for (const p of perms) {
      if (effect === 'ALLOW') {
        if (!e.allow.includes(p)) e.allow.push(p);
        e.deny = e.deny.filter((x) => x !== p);
      } else {
        if (!e.deny.includes(p)) e.deny.push(p);
        e.allow = e.allow.filter((x) => x !== p);
      }
    }
    await this.replace(type, key, entries);
  }

  /** Removes every entry of a principal (user or group deleted). */
  async removePrincipal(principalId: string): Promise<void> {
    for (const rec of [...this.acls.values()]) {
      if (rec.entries.some((e) => e.principalId === principalId)) {
        await this.replace(
          rec.resourceType,
          rec.resourceKey,
          rec.entries.filter((e) => e.principalId !== principalId),
        );
      }
    }
  }

  /** Every explicit entry of one principal, by resource. */
  entriesOf(principalId: string): Array<{ resourceType: ResourceType; resourceKey: string; entry: AclEntry }> {
    const out: Array<{ resourceType: ResourceType; resourceKey: string; entry: AclEntry }> = [];
    for (const rec of this.acls.values()) {
      for (const e of rec.entries) if (e.principalId === principalId) out.push({ resourceType: rec.resourceType, resourceKey: rec.resourceKey, entry: e });
    }
    return out.sort((a, b) => (a.resourceType + a.resourceKey).localeCompare(b.resourceType + b.resourceKey));
  }

  evaluate(subject: Subject, permission: Permission, type: ResourceType, key: string): Decision {
    const levels = ancestors(type, key);
    for (const level of levels) {
      const rec = this.acls.get(keyOf(type, level));
      if (!rec) continue;
      const explicit = level === key;
      const own = rec.entries.find((e) => e.principalId === subject.uniqueId && !e.isGroup);
      if (own) {
        if (own.allow.includes(permission)) return { allowed: true, reason: explicit ? 'ALLOW_EXPLICIT_IDENTITY' : 'ALLOW_INHERITED_RESOURCE', level, entry: own, principalName: subject.username };
        if (own.deny.includes(permission)) return { allowed: false, reason: explicit ? 'DENY_EXPLICIT_IDENTITY' : 'DENY_INHERITED_RESOURCE', level, entry: own, principalName: subject.username };
      }
      for (const g of subject.groups) {
        const ge = rec.entries.find((e) => e.principalId === g.uniqueId && e.isGroup);
        if (!ge) continue;
        if (ge.allow.includes(permission)) return { allowed: true, reason: explicit ? 'ALLOW_EXPLICIT_GROUP' : 'ALLOW_INHERITED_RESOURCE', level, entry: ge, principalName: g.name };
        if (ge.deny.includes(permission)) return { allowed: false, reason: explicit ? 'DENY_EXPLICIT_GROUP' : 'DENY_INHERITED_RESOURCE', level, entry: ge, principalName: g.name };
      }
    }
    return { allowed: false, reason: 'DEFAULT_DENY' };
  }
}

/** One line per deciding entry, e.g. `GROUP everyone (<uuid>) ALLOW [publish, subscribe] on Topic /`. */
export function describeEntry(type: ResourceType, level: string, entry: AclEntry, name: string | undefined, effect: 'ALLOW' | 'DENY'): string {
  const perms = effect === 'ALLOW' ? entry.allow : entry.deny;
  return `${entry.isGroup ? 'GROUP' : 'IDENTITY'} ${name ?? '(unknown)'} (${entry.principalId}) ${effect} [${perms.join(', ')}] on ${type} ${level}`;
}

/** A sentence naming the deciding entry, its principal and the resource level. */
export function explainDecision(subject: Subject, permission: Permission, type: ResourceType, key: string, d: Decision): string {
  const verdict = d.allowed ? 'ALLOW' : 'DENY';
  const head = `${verdict}: ${permission} on ${type} ${key} for user '${subject.username}'`;
  if (d.reason === 'DEFAULT_DENY' || !d.entry || !d.level) {
    const groups = subject.groups.length ? `its groups (${subject.groups.map((g) => `'${g.name}'`).join(', ')})` : 'any group (it has none)';
    return `${head}: no ACL entry of the user or ${groups} on ${ancestors(type, key).map((l) => `${type} ${l}`).join(', ')} mentions ${permission}; default deny`;
  }
  const who = d.entry.isGroup ? `its group '${d.principalName}' (GROUP ${d.entry.principalId})` : `the user's own entry (IDENTITY ${d.entry.principalId})`;
  const where = d.level === key ? `on the resource itself (${type} ${d.level})` : `inherited from the ancestor ${type} ${d.level}`;
  const beaten = d.entry.isGroup ? '' : ' (an identity entry is tried before group entries at the same level)';
  return `${head}: decided by the ${verdict} entry of ${who} ${where}${beaten}; reason ${d.reason}`;
}
