import { createHmac, randomBytes } from 'node:crypto';
import { BrokerError, ConflictError, ForbiddenError, NotFoundError, ServiceUnavailableError, ValidationError } from '../errors.js';
import type { Escalation } from '../runtime/events.js';
import type { Runtime, Service } from '../runtime/runtime.js';
import { AclStore, DESTINATION_TYPES, describeEntry, explainDecision, SERVER_PERMISSIONS, type AclEntry, type Decision, type Subject } from './acl.js';
import { Audit } from './audit.js';
import { EVERYONE, ensureDefaults } from './defaults.js';
import { Identities, type GroupRecord, type UserRecord } from './identities.js';
import { LockoutJournal, Lockouts, loginLimitsOf, type LockoutHost, type LockState } from './lockouts.js';
import { checkPasswordPolicy, passwordCredentials, verifyPassword } from './passwords.js';
import { defaultHashWorkers, HashAbortedError, HashPool, ServerBusyError } from './hash-pool.js';
import { addressKey } from './address-limits.js';
import { forgetGeneratedPassword } from './admin-password.js';
import { mockCredentials, parseClientFirst, SCRAM_SHA_256, ScramError, ScramServer, type ClientFirst } from './scram.js';
import { Sessions } from './sessions.js';
import {
  ANONYMOUS,
  AuthenticationFailedError,
  USER_DELETED,
  type AuthContext,
  type AuthExchange,
  type DeliveryAuthorizer,
  type Permission,
  type Principal,
  type ResourceType,
  type SecurityService,
  type UserDeletion,
} from './types.js';

/**
 * Delivery decisions remembered (topic × user), in all; when full they are all forgotten and decided again on use
 * (each costs one ACL walk). Kept by topic: a fan-out asks one small map per message, however many users it reaches.
 */
export const DELIVERY_CACHE_ENTRIES = 500_000;
/** Delivery authorizers kept for reuse (one per user); beyond that they are dropped and made again on use. */
export const DELIVERY_AUTHORIZERS = 10_000;

/** One permission on one resource, as the no-escalation checks compare them. */
interface Grant {
  type: ResourceType;
  key: string;
  permission: Permission;
}

/**
 * The real SecurityService: users, groups, ACLs, sessions and lockouts from the store. Installed as `rt.security`
 * by `SecurityManagerService` at boot. Protocols use `authenticate` (with lockout) and `isAllowed` (cached); the REST
 * routes use the management methods, which audit every change and clear the caches.
 */
export class SecurityManager implements SecurityService {
  readonly identities: Identities;
  readonly acl: AclStore;
  readonly sessions: Sessions;
  readonly lockouts: Lockouts;
  readonly audit: Audit;
  /** Password checks run here, never on libuv's thread pool that the store uses (hash-pool.ts). */
  readonly hashPool: HashPool;
  private readonly decisions = new Map<string, boolean>();
  private readonly basicCache = new Map<string, { uniqueId: string; expires: number }>();
  private readonly basicKey = randomBytes(32);
  private gen = 0;
  /** Delivery decisions of the current generation: topic → user key (`u:<uniqueId>`, `n:<username>`) → allowed. */
  private readonly deliveryByTopic = new Map<string, Map<number, boolean>>();
  /** Each delivery authorizer's own number, its key in the per-topic maps (cheaper than a string); never reused. */
  private nextDeliveryId = 0;
  private deliveryEntries = 0;
  /** The topic map asked last (a fan-out asks the same topic for every subscription). */
  private lastTopic: string | undefined = undefined;
  private lastTopicMap: Map<number, boolean> | undefined = undefined;
  /** One delivery authorizer per user key (it follows the generation itself), shared by that user's subscriptions. */
  private readonly deliveryAuthorizers = new Map<string, DeliveryAuthorizer>();

  private constructor(
    private readonly rt: Runtime,
    key: Uint8Array,
    host: LockoutHost,
    /** Salts the SCRAM exchange of unknown user names, so they look like known ones (kept across restarts). */
    private readonly scramMockKey: Buffer,
  ) {
    const now = () => rt.now();
    this.identities = new Identities(rt.store, () => this.invalidate());
    this.acl = new AclStore(rt.store, () => this.invalidate());
    this.sessions = new Sessions(rt.store, key, now);
    const a = rt.config.AuthManager;
    this.lockouts = new Lockouts(
      host,
      { maxFailuresBeforeLock: a.maxFailuresBeforeLock, initialLockSeconds: a.initialLockSeconds, maxLockSeconds: a.maxLockSeconds, failureDecaySeconds: a.failureDecaySeconds },
      now,
      (msg) => rt.log.warn(msg),
      new LockoutJournal(rt.store.sublevel('lockouts'), (err) => rt.log.error({ err }, 'lockout state could not be written to the store')),
      // login limits per source address; unknown names are counted per address, never in the per-user table
      loginLimitsOf(a, (name) => this.identities.userByUsername(name) !== undefined, () => this.audit),
    );
    this.audit = new Audit(rt.logs.audit, now);
    this.hashPool = new HashPool({ workers: a.passwordHashWorkers || defaultHashWorkers(), queueLimit: a.passwordHashQueue });
  }

  static async open(rt: Runtime, host?: LockoutHost): Promise<SecurityManager> {
    const key = new Uint8Array(await rt.store.secret('jwt-hs256', 64));
    const sm = new SecurityManager(rt, key, host ?? supervisorHost(rt), await rt.store.secret('scram-mock-salt', 32));
    await sm.identities.load();
    await sm.acl.load();
    await sm.sessions.load();
    await sm.lockouts.load();
    if (sm.enabled) await ensureDefaults(sm, rt);
    return sm;
  }

  get config() {
    return this.rt.config.AuthManager;
  }
  /** Authentication on (AuthManager.authenticationEnabled). */
  get enabled(): boolean {
    return this.config.authenticationEnabled;
  }
  /** ACLs decide (authentication and authorisation on); otherwise every principal may do everything. */
  get authorising(): boolean {
    return this.config.authenticationEnabled && this.config.authorisationEnabled;
  }
  get allowAnonymous(): boolean {
    return this.config.allowAnonymous;
  }
  get serverKey(): string {
    return this.rt.serverName;
  }

  /**
   * Bumped on any ACL, group, membership or user change: delivery authorizers compare it on every call and forget
   * their cached topics when it moved, so a change applies to live subscriptions at once.
   */
  get generation(): number {
    return this.gen;
  }

  /** Decision cache and Basic credential cache are cleared on any ACL, group or user change. */
  invalidate(): void {
    this.gen++;
    this.forgetDeliveries();
    this.decisions.clear();
    this.basicCache.clear();
  }

  /**
   * The engine subscription's `authorize` hook for `who`: subscribe on the delivered topic (or queue), decided once
   * per topic and user and remembered until the next ACL, group, membership or user change (invalidate: the
   * generation moves and every decision is forgotten), at most DELIVERY_CACHE_ENTRIES in all. One function per user,
   * shared by all of that user's subscriptions (the engine asks it once per routed message); decisions are kept by
   * topic, so a fan-out to many users reads one small map. A user that no longer exists reads nothing. Undefined with
   * authentication off (no hook at all).
   */
  deliveryAuthorizer(who: { uniqueId?: string; username?: string }): DeliveryAuthorizer | undefined {
    if (!this.enabled) return undefined;
    const key = who.uniqueId !== undefined ? `u:${who.uniqueId}` : `n:${who.username ?? ''}`;
    const known = this.deliveryAuthorizers.get(key);
    if (known !== undefined) return known;
    const id = this.nextDeliveryId++;
    const fn: DeliveryAuthorizer = (name) => {
      let t = name === this.lastTopic ? this.lastTopicMap! : this.topicDecisions(name);
      let v = t.get(id);
      if (v === undefined) {
        v = this.mayRead(who, name, this.rt.engine?.isQueueName(name) === true);
        if (this.deliveryEntries >= DELIVERY_CACHE_ENTRIES) {
          this.forgetDeliveries();
          t = this.topicDecisions(name);
        }
        t.set(id, v);
        this.deliveryEntries++;
      }
      return v;
    };
    if (this.deliveryAuthorizers.size >= DELIVERY_AUTHORIZERS) this.deliveryAuthorizers.clear(); // made again on use
    this.deliveryAuthorizers.set(key, fn);
    return fn;
  }

  private topicDecisions(name: string): Map<number, boolean> {
    let t = this.deliveryByTopic.get(name);
    if (t === undefined) {
      t = new Map();
      this.deliveryByTopic.set(name, t);
    }
    this.lastTopic = name;
    this.lastTopicMap = t;
    return t;
  }

  private forgetDeliveries(): void {
    this.deliveryByTopic.clear();
    this.deliveryEntries = 0;
    this.lastTopic = undefined;
    this.lastTopicMap = undefined;
  }

  private mayRead(who: { uniqueId?: string; username?: string }, name: string, queue: boolean): boolean {
    if (!this.authorising) return true;
    const u = who.uniqueId !== undefined ? this.identities.user(who.uniqueId) : who.username !== undefined ? this.identities.userByUsername(who.username) : undefined;
    if (!u) return false;
    return this.isAllowed(this.principalOf(u), 'subscribe', queue ? 'Queue' : 'Topic', name);
  }

  // ---- no escalation: nobody hands out (or takes away) more than they hold ----

  /**
   * A full administrator holds every Server permission on this server (the default `admins` group). Only a full
   * administrator sets another user's password, and the no-escalation checks do not limit one. Authorisation off:
   * everyone is.
   */
  isFullAdmin(p: Principal): boolean {
    if (!this.authorising) return true;
    for (const perm of SERVER_PERMISSIONS) if (!this.isAllowed(p, perm, 'Server', this.serverKey)) return false;
    return true;
  }

  /** Does `actor` itself hold the grant? (`Server *` is read as this server.) */
  private holds(actor: Principal, g: Grant): boolean {
    return this.isAllowed(actor, g.permission, g.type, g.type === 'Server' && g.key === '*' ? this.serverKey : g.key);
  }

  /**
   * Refuses (403, audited) an action that would hand out or take away a permission the actor does not hold itself.
   * No actor (the server itself), authorisation off or a full administrator: allowed.
   */
  private refuseEscalation(actor: Principal | undefined, grants: Grant[], what: string): void {
    if (!actor || !this.authorising || grants.length === 0 || this.isFullAdmin(actor)) return;
    const missing: string[] = [];
    const seen = new Set<string>();
    for (const g of grants) {
      const k = `${g.permission} on ${g.type} ${g.key}`;
      if (seen.has(k)) continue;
      seen.add(k);
      if (!this.holds(actor, g)) missing.push(k);
    }
    if (missing.length === 0) return;
    missing.sort((a, b) => Number(b.includes(' on Server ')) - Number(a.includes(' on Server '))); // the Server permissions first
    this.audit.denied({ username: actor.username, action: what, missing: missing.slice(0, 20) }, `refused: ${what} needs permissions ${actor.username} does not hold`);
    const list = missing.slice(0, 5).join(', ') + (missing.length > 5 ? ` and ${missing.length - 5} more` : '');
    throw new ForbiddenError(`Access denied: ${what} would hand out or take away permissions ${actor.username} does not hold itself: ${list}`);
  }

  /** What a group's ACL entries allow (and with `denies`, deny) anywhere. */
  private groupGrants(groupId: string, denies: boolean): Grant[] {
    const out: Grant[] = [];
    for (const { resourceType, resourceKey, entry } of this.acl.entriesOf(groupId)) {
      for (const permission of entry.allow) out.push({ type: resourceType, key: resourceKey, permission });
      if (denies) for (const permission of entry.deny) out.push({ type: resourceType, key: resourceKey, permission });
    }
    return out;
  }

  /** What a user effectively holds where its own or its groups' entries allow something. */
  private userGrants(u: UserRecord): Grant[] {
    const p = this.principalOf(u);
    const ids = new Set([u.uniqueId, ...u.groups]);
    const out: Grant[] = [];
    for (const rec of this.acl.all()) {
      for (const e of rec.entries) {
        if (!ids.has(e.principalId)) continue;
        for (const permission of e.allow) if (this.isAllowed(p, permission, rec.resourceType, rec.resourceKey)) out.push({ type: rec.resourceType, key: rec.resourceKey, permission });
      }
    }
    return out;
  }

  principalOf(u: UserRecord): Principal {
    return { username: u.username, uniqueId: u.uniqueId, groups: [...u.groups], anonymous: u.builtIn === true && u.username === 'anonymous' };
  }

  /** The stored anonymous user as a principal (anonymous access), or the contract's ANONYMOUS when there is none. */
  anonymousPrincipal(): Principal {
    const u = this.identities.userByUsername('anonymous');
    return u ? { ...this.principalOf(u), anonymous: true } : ANONYMOUS;
  }

  async authenticate(username: string | undefined, password: string | Buffer | undefined, ctx: AuthContext): Promise<Principal> {
    if (!this.enabled) return username ? { ...ANONYMOUS, username, anonymous: false } : ANONYMOUS;
    if (username === undefined || username === '') {
      if (this.allowAnonymous) return this.anonymousPrincipal();
      this.audit.event('login.failed', { username: null, protocol: ctx.protocol, clientAddress: ctx.clientAddress, reason: 'no credentials' }, 'login refused: no credentials');
      throw new AuthenticationFailedError('Credentials are required');
    }
    const locked = this.lockedOut(username, ctx);
    if (locked) throw locked;
    // password checks per address, right or wrong (AuthManager.addressAttemptLimit): refused before any hash
    const limited = this.lockouts.attemptRefusal(this.limitAddress(ctx), ctx.proxied === true, { username, protocol: ctx.protocol });
    if (limited) throw limited;
    const user = this.identities.userByUsername(username);
    // on the hashing pool: ServerBusyError when its queue is full, HashAbortedError when the caller went away
    let ok: boolean;
    try {
      ok = password !== undefined && (await verifyPassword(password, user?.passwordHash, { pool: this.hashPool, signal: ctx.signal, source: addressKey(this.limitAddress(ctx) ?? '') }));
    } catch (err) {
      // refused by a full queue or dropped before it ran: no hash was made, so the check is not counted either
      if (err instanceof ServerBusyError || err instanceof HashAbortedError) this.lockouts.attemptReturned(this.limitAddress(ctx), ctx.proxied === true);
      throw err;
    }
    if (!ok || !user) {
      const failed = this.loginFailed(username, ctx);
      await this.lockouts.flushed(); // the failure is in the store before the caller hears of it (a crash now keeps it)
      throw failed;
    }
    return this.loginSucceeded(user, ctx);
  }

  /**
   * The address the login limits count a login under: the client's, except that a lockout-exempt address reached
   * through a proxy (a reverse proxy on the same host that is no trusted proxy: every client arrives from
   * 127.0.0.1 with a forwarding header) is counted apart from the same address reached directly, as
   * `<address> (proxied)`: failures through the proxy block the proxy's clients, not the administrator on the host.
   */
  limitAddress(ctx: Pick<AuthContext, 'clientAddress' | 'proxied'>): string | undefined {
    const a = ctx.clientAddress;
    return a !== undefined && ctx.proxied === true && this.lockouts.addresses.exempt(a) ? `${a} (proxied)` : a;
  }

  /** While the name is locked: audited, and the error to throw (the attempt is not counted). */
  private lockedOut(username: string, ctx: AuthContext, method?: string): AuthenticationFailedError | undefined {
    // a blocked source address first: nothing counted, no password checked (AddressBlockedError: REST 429, MQTT 0x9F)
    const blocked = this.lockouts.addressRefusal(this.limitAddress(ctx), { username, protocol: ctx.protocol, ...(method ? { method } : {}) });
    if (blocked) return blocked;
    // none from a lockout-exempt address reached directly (not through a proxy); a locked user let through is audited
    const lock = this.lockouts.statusAt(username, this.limitAddress(ctx), ctx.proxied === true, { protocol: ctx.protocol, ...(method ? { method } : {}) });
    if (!lock?.locked) return undefined;
    this.audit.event(
      'login.failed',
      { username, protocol: ctx.protocol, clientAddress: ctx.clientAddress, ...(ctx.proxied ? { proxied: true } : {}), ...(method ? { method } : {}), reason: 'locked', retryAfterSeconds: lock.remainingLockSeconds },
      'login refused: account locked',
    );
    return new AuthenticationFailedError(`Account is locked after repeated failed logins; try again in ${lock.remainingLockSeconds} s`, lock.remainingLockSeconds);
  }

  /** A wrong password (or unknown name): counted by the lockout, audited; returns the error to throw. */
  private loginFailed(username: string, ctx: AuthContext, method?: string, reason = 'bad credentials'): AuthenticationFailedError {
    const after = this.lockouts.recordFailure(username, this.limitAddress(ctx));
    this.audit.event(
      'login.failed',
      { username, protocol: ctx.protocol, clientAddress: ctx.clientAddress, ...(ctx.proxied ? { proxied: true } : {}), ...(method ? { method } : {}), reason, failures: after?.failures },
      'login failed: invalid username or password',
    );
    if (after?.locked) {
      this.audit.event('lockout.locked', { username, clientAddress: ctx.clientAddress, lockSeconds: after.remainingLockSeconds, lockCount: after.lockCount }, `account locked for ${after.remainingLockSeconds} s`);
    }
    return new AuthenticationFailedError('Invalid username or password');
  }

  private loginSucceeded(user: UserRecord, ctx: AuthContext, method?: string): Principal {
    this.lockouts.succeeded(user.username);
    this.audit.event('login.succeeded', { username: user.username, uniqueId: user.uniqueId, protocol: ctx.protocol, clientAddress: ctx.clientAddress, ...(method ? { method } : {}) }, 'login succeeded');
    return this.principalOf(user);
  }

  /** Enhanced authentication methods (MQTT 5 AUTH) offered while authentication is on. */
  get authenticationMethods(): readonly string[] {
    return this.enabled ? [SCRAM_SHA_256] : [];
  }

  /**
   * SCRAM-SHA-256 (RFC 5802 / 7677): `initial` is the client-first-message, the challenge the server-first-message,
   * `finish` takes the client-final-message and returns the server-final-message. A wrong proof is a failed login
   * exactly like a wrong password (lockout, audit); while the name is locked even the right proof fails. Unknown
   * names run the same exchange with credentials that match nothing. A user without SCRAM credentials (password set
   * before SCRAM support) is refused at once, with a message saying the password must be set again.
   */
  startExchange(method: string, initial: Buffer | undefined, ctx: AuthContext): AuthExchange {
    if (method !== SCRAM_SHA_256 || !this.enabled) throw new AuthenticationFailedError(`Authentication method ${method} is not supported`);
    let first: ClientFirst;
    try {
      first = parseClientFirst((initial ?? Buffer.alloc(0)).toString('utf8'));
    } catch (err) {
      throw this.malformed(undefined, ctx, 'client-first-message', err);
    }
    const username = first.username;
    const locked = this.lockedOut(username, ctx, method);
    if (locked) throw locked;
    const found = this.identities.userByUsername(username);
    const user = found && found.passwordHash !== '' ? found : undefined; // anonymous has no password
    // A user without SCRAM credentials (password set before SCRAM support) runs the exchange against mock
    // credentials like an unknown name and fails at the proof: the answer must not tell which names exist.
    const noScram = user !== undefined && !user.scramSha256;
    const creds = user?.scramSha256 ?? mockCredentials(this.scramMockKey, username);
    const server = new ScramServer(first, creds);
    return {
      method,
      username,
      challenge: Buffer.from(server.serverFirst, 'utf8'),
      recorded: () => this.lockouts.flushed(),
      finish: (response) => {
        const lockedNow = this.lockedOut(username, ctx, method);
        if (lockedNow) throw lockedNow;
        let serverFinal: string;
        try {
          serverFinal = server.finish(response.toString('utf8'));
        } catch (err) {
          if (err instanceof ScramError && err.code === 'invalid-proof') {
            throw this.loginFailed(username, ctx, method, noScram ? 'no SCRAM credentials: the password was set before SCRAM support; set it again' : undefined);
          }
          throw this.malformed(username, ctx, 'client-final-message', err);
        }
        // the user must still exist with the same credentials (not deleted, password not changed meanwhile)
        const current = this.identities.userByUsername(username);
        if (!user || !current || current.uniqueId !== user.uniqueId || current.scramSha256 !== creds) throw this.loginFailed(username, ctx, method);
        return { principal: this.loginSucceeded(current, ctx, method), outcome: Buffer.from(serverFinal, 'utf8') };
      },
    };
  }

  /** A SCRAM message that breaks the grammar: audited, not counted as a password guess. */
  private malformed(username: string | undefined, ctx: AuthContext, what: string, err: unknown): AuthenticationFailedError {
    const why = err instanceof Error ? err.message : String(err);
    this.audit.event('login.failed', { username: username ?? null, protocol: ctx.protocol, clientAddress: ctx.clientAddress, method: SCRAM_SHA_256, reason: 'malformed SCRAM message' }, `login refused: malformed SCRAM ${what}`);
    return new AuthenticationFailedError(`Malformed SCRAM ${what}: ${why}`);
  }

  /**
   * Basic credentials on every REST request: the first check is a real one (scrypt, lockout, audit); a repeat of
   * the same credentials within 60 s is answered from a cache (still refused while the name is locked).
   */
  async authenticateBasic(username: string, password: string, ctx: AuthContext): Promise<Principal> {
    const k = createHmac('sha256', this.basicKey).update(username).update('\u0000').update(password).digest('base64');
    const hit = this.basicCache.get(k);
    const now = this.rt.now();
    if (hit && hit.expires > now) {
      const lock = this.lockouts.status(username);
      const user = this.identities.user(hit.uniqueId);
      if (!lock?.locked && user && user.username === username) return this.principalOf(user);
    }
    const p = await this.authenticate(username, password, ctx);
    if (this.basicCache.size > 10000) this.basicCache.clear();
    this.basicCache.set(k, { uniqueId: p.uniqueId, expires: now + 60000 });
    return p;
  }

  subjectOf(p: Principal): Subject | undefined {
    const u = this.identities.user(p.uniqueId);
    if (!u) return undefined;
    return {
      uniqueId: u.uniqueId,
      username: u.username,
      groups: u.groups.map((g) => this.identities.group(g)).filter((g): g is GroupRecord => !!g).map((g) => ({ uniqueId: g.uniqueId, name: g.name })),
    };
  }

  isAllowed(principal: Principal, permission: Permission, resourceType: ResourceType, resourceKey: string): boolean {
    if (!this.authorising) return true;
    const k = `${principal.uniqueId}\u0000${permission}\u0000${resourceType}\u0000${resourceKey}`;
    const cached = this.decisions.get(k);
    if (cached !== undefined) return cached;
    const subject = this.subjectOf(principal);
    const allowed = subject ? this.acl.evaluate(subject, permission, resourceType, resourceKey).allowed : false;
    if (this.decisions.size > 50000) this.decisions.clear();
    this.decisions.set(k, allowed);
    return allowed;
  }

  /** POST /auth/acl/check: the decision, and with `explain` a sentence and the deciding entry. */
  check(user: UserRecord, permission: Permission, type: ResourceType, key: string): { decision: Decision; reason: string; sources: string[] } {
    const subject = this.subjectOf(this.principalOf(user))!;
    const decision = this.acl.evaluate(subject, permission, type, key);
    const sources = decision.entry && decision.level ? [describeEntry(type, decision.level, decision.entry, decision.principalName, decision.allowed ? 'ALLOW' : 'DENY')] : [];
    return { decision, reason: explainDecision(subject, permission, type, key, decision), sources };
  }

  // ---- management (REST); every change is audited and clears the caches ----

  policyCheck(password: string): void {
    checkPasswordPolicy(password, this.config);
  }

  /** A new user joins `everyone` (when it exists), which the actor must be able to hand out. */
  async createUser(actor: Principal | undefined, username: string, password: string): Promise<UserRecord> {
    this.policyCheck(password);
    const everyone = this.identities.groupByGroupName(EVERYONE);
    if (everyone) this.refuseEscalation(actor, this.groupGrants(everyone.uniqueId, false), `creating a user (who joins group ${EVERYONE})`);
    const { passwordHash, scramSha256 } = await passwordCredentials(password);
    const u = await this.identities.createUser(username, passwordHash, { scramSha256, groups: everyone ? [everyone.uniqueId] : [] });
    this.audit.event('user.created', { by: actor?.username, username: u.username, uniqueId: u.uniqueId, groups: everyone ? [EVERYONE] : [] }, `user ${u.username} created`);
    return u;
  }

  async deleteUser(actor: Principal | undefined, uniqueId: string): Promise<void> {
    const u = this.identities.requireUser(uniqueId);
    if (u.builtIn) throw new ConflictError(`The user ${u.username} is built in and cannot be deleted; remove its ACL entries or group memberships instead`);
    if (actor && actor.uniqueId === uniqueId) throw new ConflictError('You cannot delete your own account');
    this.refuseEscalation(actor, this.userGrants(u), `deleting user ${u.username}`);
    await this.identities.deleteUser(uniqueId);
    await this.acl.removePrincipal(uniqueId);
    const loginSessions = await this.sessions.endAllFor(uniqueId);
    this.lockouts.reset(u.username);
    // What the user had open goes too: MQTT connections and sessions, REST messaging sessions (listeners count them).
    const deletion: UserDeletion = { uniqueId, username: u.username, loginSessions, ended: {} };
    try {
      this.rt.emit(USER_DELETED, deletion);
    } catch (err) {
      this.rt.log.error({ err, username: u.username }, 'ending the sessions of a deleted user failed');
    }
    this.audit.event(
      'user.deleted',
      { by: actor?.username, username: u.username, uniqueId, loginSessionsEnded: loginSessions.length, ...deletion.ended },
      `user ${u.username} deleted`,
    );
  }

  /**
   * A full administrator (every Server permission: see isFullAdmin) sets any password; anyone else only their own,
   * proving the current one when the policy says so. Ends the user's other sessions and resets the lockout.
   */
  async changePassword(actor: Principal, targetId: string, newPassword: string, currentPassword: string | undefined, keepSession?: string): Promise<void> {
    const target = this.identities.requireUser(targetId);
    const admin = this.isFullAdmin(actor);
    if (!admin) {
      if (actor.uniqueId !== targetId) {
        this.audit.denied({ username: actor.username, action: 'password change', target: target.username }, `refused: ${actor.username} may not set the password of ${target.username}`);
        throw new ForbiddenError("Access denied: only a full administrator (every Server permission, e.g. the admins group) may change another user's password");
      }
      if (this.config.requireCurrentPassword) {
        if (!currentPassword) throw new ValidationError('currentPassword is required to change your own password');
        if (!(await verifyPassword(currentPassword, target.passwordHash, { pool: this.hashPool }))) {
          this.audit.event('user.password_change_failed', { username: target.username }, 'password change refused: current password is wrong');
          throw new ForbiddenError('The current password is not correct');
        }
      }
    }
    if (target.builtIn) throw new ConflictError(`The user ${target.username} is built in and has no password`);
    this.policyCheck(newPassword);
    const { passwordHash, scramSha256 } = await passwordCredentials(newPassword);
    await this.identities.setPasswordHash(targetId, passwordHash, scramSha256);
    await this.sessions.endAllFor(targetId, keepSession);
    this.lockouts.reset(target.username);
    this.audit.event('user.password_changed', { by: actor.username, username: target.username, uniqueId: targetId }, `password of ${target.username} changed`);
    forgetGeneratedPassword(this.rt, target.username); // the first-boot admin_password file is stale now (docs/operations.md)
  }

  async createGroup(actor: Principal | undefined, name: string): Promise<GroupRecord> {
    const g = await this.identities.createGroup(name);
    this.audit.event('group.created', { by: actor?.username, group: g.name, uniqueId: g.uniqueId }, `group ${g.name} created`);
    return g;
  }

  async deleteGroup(actor: Principal | undefined, uniqueId: string): Promise<void> {
    const g = this.identities.requireGroup(uniqueId);
    this.refuseEscalation(actor, this.groupGrants(g.uniqueId, true), `deleting group ${g.name}`);
    const { group, members } = await this.identities.deleteGroup(uniqueId);
    await this.acl.removePrincipal(uniqueId);
    this.audit.event('group.deleted', { by: actor?.username, group: group.name, uniqueId, members: members.map((m) => m.username) }, `group ${group.name} deleted`);
  }

  /** The actor must hold everything the group allows. */
  async addMember(actor: Principal | undefined, groupId: string, userId: string): Promise<{ user: UserRecord; group: GroupRecord; changed: boolean }> {
    const g = this.identities.requireGroup(groupId);
    const target = this.identities.requireUser(userId);
    if (!target.groups.includes(g.uniqueId)) this.refuseEscalation(actor, this.groupGrants(g.uniqueId, false), `adding ${target.username} to group ${g.name}`);
    const changed = await this.identities.addMember(groupId, userId);
    const user = this.identities.requireUser(userId);
    const group = this.identities.requireGroup(groupId);
    if (changed) this.audit.event('group.member_added', { by: actor?.username, group: group.name, username: user.username }, `${user.username} added to ${group.name}`);
    return { user, group, changed };
  }

  /** The actor must hold everything the group allows (taken away) and denies (lifted). */
  async removeMember(actor: Principal | undefined, groupId: string, userId: string): Promise<{ user: UserRecord; group: GroupRecord; changed: boolean }> {
    const user = this.identities.requireUser(userId);
    const group = this.identities.requireGroup(groupId);
    if (user.groups.includes(group.uniqueId)) this.refuseEscalation(actor, this.groupGrants(group.uniqueId, true), `removing ${user.username} from group ${group.name}`);
    const changed = await this.identities.removeMember(groupId, userId);
    if (changed) this.audit.event('group.member_removed', { by: actor?.username, group: group.name, username: user.username }, `${user.username} removed from ${group.name}`);
    return { user, group, changed };
  }

  unlock(actor: Principal | undefined, userId: string): void {
    const u = this.identities.requireUser(userId);
    const was = this.lockouts.status(u.username);
    this.lockouts.reset(u.username);
    this.audit.event('lockout.unlocked', { by: actor?.username, username: u.username, wasLocked: was?.locked ?? false }, `${u.username} unlocked`);
  }

  lockedUsers(): Array<LockState & { uuid: string | null }> {
    return this.lockouts.locked().map((s) => ({ ...s, uuid: this.identities.userByUsername(s.username)?.uniqueId ?? null }));
  }

  private aclQueue: Promise<unknown> = Promise.resolve();

  /**
   * Replaces one resource's ACL atomically (one store write). Updates are applied one at a time; one that cannot
   * start within `timeoutMs` is refused (503) and nothing of it is applied.
   */
  async replaceAcl(actor: Principal | undefined, type: ResourceType, key: string, entries: AclEntry[], timeoutMs: number): Promise<void> {
    for (const e of entries) {
      if (e.isGroup ? !this.identities.group(e.principalId) : !this.identities.user(e.principalId)) {
        throw new NotFoundError(`Unknown principal: no ${e.isGroup ? 'group' : 'user'} has the id ${e.principalId}`);
      }
      for (const p of [...e.allow, ...e.deny]) {
        if (type === 'Server' && !SERVER_PERMISSIONS.has(p)) throw new ValidationError(`Permission ${p} applies to destinations, not to the Server resource`);
        if (type !== 'Server' && SERVER_PERMISSIONS.has(p)) throw new ValidationError(`Permission ${p} applies to the Server resource only, not to ${type}`);
      }
      const both = e.allow.filter((p) => e.deny.includes(p));
      if (both.length) throw new ValidationError(`Principal ${e.principalId} is both allowed and denied ${both.join(', ')}; choose one`);
    }
    const deadline = Date.now() + timeoutMs;
    let timer: NodeJS.Timeout | undefined;
    const turn = this.aclQueue;
    let release!: () => void;
    this.aclQueue = new Promise<void>((r) => (release = r));
    try {
      const started = await Promise.race([
        turn.then(() => true),
        new Promise<false>((r) => {
          timer = setTimeout(() => r(false), timeoutMs);
        }),
      ]);
      if (!started || Date.now() > deadline) {
        throw new BrokerError(`ACL update not applied: it could not be applied within batchTimeoutMillis=${timeoutMs} ms (another update is in progress); nothing was changed`, 503);
      }
      // every permission whose allow or deny changes for some principal must be held by the actor
      const changed: Grant[] = [];
      const old = new Map(this.acl.get(type, key).entries.map((e) => [e.principalId, e]));
      const next = new Map(entries.map((e) => [e.principalId, e]));
      for (const id of new Set([...old.keys(), ...next.keys()])) {
        const a = old.get(id);
        const b = next.get(id);
        for (const list of [
          [a?.allow ?? [], b?.allow ?? []],
          [a?.deny ?? [], b?.deny ?? []],
        ] as const) {
          for (const p of list[0]) if (!list[1].includes(p)) changed.push({ type, key, permission: p });
          for (const p of list[1]) if (!list[0].includes(p)) changed.push({ type, key, permission: p });
        }
      }
      this.refuseEscalation(actor, changed, `changing the ACL of ${type} ${key}`);
      const before = this.acl.get(type, key).entries.length;
      await this.acl.replace(type, key, entries);
      this.audit.event(
        'acl.replaced',
        { by: actor?.username, resourceType: type, resourceKey: key, entriesBefore: before, entries: entries.map((e) => ({ principalId: e.principalId, group: e.isGroup, allow: e.allow, deny: e.deny })) },
        `ACL of ${type} ${key} replaced`,
      );
    } finally {
      clearTimeout(timer);
      // Release only after the previous holder finished, so a refused update does not let a later one overtake.
      void turn.then(release, release);
    }
  }
}

/** Lockout actors under the runtime's `lockouts` supervisor. */
export function supervisorHost(rt: Runtime): LockoutHost {
  return {
    start: (spec) => rt.startChild('lockouts', spec),
    get: (id) => rt.childActor('lockouts', id) as ReturnType<LockoutHost['get']>,
    ids: () => rt.childActors('lockouts').map(([id]) => id),
    report: (r) => rt.emit('actor.command', r),
  };
}

export { DESTINATION_TYPES };

declare module '../runtime/runtime.js' {
  interface RuntimeServices {
    security: SecurityManagerService;
  }
}

/**
 * Boots with the server: loads users, groups, ACLs, sessions and stored lockouts, makes the first-boot defaults,
 * installs `rt.security`; once the supervisors run, gives every stored lockout its actor again. Its `manager` is
 * the typed handle REST code reaches through the registry (`rt.service('security')`, `securityOf(rt)`).
 */
export class SecurityManagerService implements Service {
  readonly name = 'security';
  /** The SecurityManager of the current boot (undefined before the first start). */
  manager: SecurityManager | undefined = undefined;

  /** Writes the audit line of a supervisor escalation (the kernel only emits the event). */
  private auditEscalation?: (e: Escalation) => void;

  async start(rt: Runtime): Promise<void> {
    this.manager = await SecurityManager.open(rt);
    rt.security = this.manager;
    const manager = this.manager;
    this.auditEscalation = (e) => manager.audit.event('supervisor.escalated', { subtree: e.subtree, error: e.error, action: e.action, attempt: e.attempt, delayMs: e.delayMs }, `supervisor ${e.subtree} failed: ${e.action === 'restart' ? 'restarting it' : 'given up, server degraded'}`);
    rt.on('supervisor.escalated', this.auditEscalation);
  }

  running(): void {
    this.manager?.lockouts.revive();
  }

  async stop(rt: Runtime): Promise<void> {
    if (this.auditEscalation) rt.off('supervisor.escalated', this.auditEscalation);
    this.auditEscalation = undefined;
    // everything else is in the store already; lockout writes may still be under way
    await this.manager?.lockouts.flushed();
    await this.manager?.hashPool.close();
  }
}

/** The security service of one runtime (register it first: rt.security must be in place before anything uses it). */
export function securityService(): SecurityManagerService {
  return new SecurityManagerService();
}

/** The SecurityManager of a runtime, for the REST auth routes (503 when the security service is not running). */
export function securityOf(rt: Runtime): SecurityManager {
  const manager = rt.service('security')?.manager;
  if (manager !== undefined) return manager;
  throw new ServiceUnavailableError('The security service is not running (the server is starting); try again');
}
