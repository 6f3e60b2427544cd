import type { ActorRefFrom, AnyActorRef } from 'xstate';
import { lockoutMachine, recordOf, type LockoutContext, type LockoutInput, type LockoutRecord } from '../../actors/lockout/lockout.machine.js';
import type { ChildSpec } from '../../actors/supervisor/supervisor.machine.js';
import { defineActorKind } from '../runtime/actor-kind.js';
import type { CommandReporter } from '../runtime/command.js';
import type { Sub } from '../store/store.js';
import { AddressBlockedError, AddressLimits, AttemptLimitError, type AddressLimitPolicy } from './address-limits.js';

/** Where lockout actors live: the `lockouts` supervisor of the runtime (tests may give a fake). */
export interface LockoutHost {
  start(spec: ChildSpec): void;
  get(id: string): AnyActorRef | undefined;
  ids(): string[];
  /** Where commands (an unlock) are reported: the runtime bus's `actor.command`. */
  report?: CommandReporter;
}

/**
 * The lockout kind (src/runtime/actor-kind.ts): `lockout:<username>` under the `lockouts` supervisor; an unlock
 * (DELETE /api/v1/auth/user-lockouts/{userUuid}, a password change, a deleted user) is `lockout.reset` through the
 * command helper. Failed and successful logins are notices from the login path, sent as they happen.
 */
export const lockoutKind = defineActorKind({
  kind: 'lockout',
  machine: lockoutMachine,
  supervisor: 'lockouts',
  noun: 'Lockout',
  stateName: (snap) => (snap.status !== 'active' ? 'Forgotten' : snap.hasTag('locked') ? 'Locked' : 'Counting'),
  routes: ['DELETE /api/v1/auth/user-lockouts/{userUuid}'],
});

export interface LockoutPolicy {
  maxFailuresBeforeLock: number;
  initialLockSeconds: number;
  maxLockSeconds: number;
  failureDecaySeconds: number;
}

export interface LockState {
  username: string;
  failures: number;
  lockCount: number;
  locked: boolean;
  /** Epoch ms, 0 when not locked. */
  lockedUntil: number;
  remainingLockSeconds: number;
}

/**
 * At most this many names are tracked at once (each decays away); beyond it new names are not tracked. Only names
 * of existing users are tracked here (unknown names are counted per source address, see address-limits.ts), so
 * this bound is only reached with more failing users than this (AuthManager.lockoutTableSize).
 */
export const MAX_TRACKED_NAMES = 10000;

/** The login-limit part of the AuthManager section. */
export interface LoginLimitConfig {
  maxFailuresBeforeLock: number;
  initialLockSeconds: number;
  maxLockSeconds: number;
  failureDecaySeconds: number;
  addressFailureLimit: number;
  addressFailureWindow: number;
  addressBlockSeconds: number;
  maxTrackedAddresses: number;
  unknownNamesPerAddress: number;
  lockoutExemptAddresses: readonly string[];
  lockoutTableSize: number;
  addressAttemptLimit: number;
  addressAttemptWindow: number;
}

/** What Lockouts needs beyond the per-user policy: which names are users, the address limits, the audit. */
export interface LoginLimitOptions {
  /** Is this the name of an existing user? Unknown names are counted per address only. */
  known: (username: string) => boolean;
  addresses: AddressLimitPolicy;
  tableSize: number;
  audit?: () => { event(event: string, fields: Record<string, unknown>, msg: string): void; denied(fields: Record<string, unknown>, msg: string): void } | undefined;
}

/** LoginLimitOptions from the AuthManager section. */
export function loginLimitsOf(a: LoginLimitConfig, known: LoginLimitOptions['known'], audit?: LoginLimitOptions['audit']): LoginLimitOptions {
  return {
    known,
    audit,
    tableSize: a.lockoutTableSize,
    addresses: {
      failureLimit: a.addressFailureLimit,
      windowSeconds: a.addressFailureWindow,
      blockSeconds: a.addressBlockSeconds,
      maxAddresses: a.maxTrackedAddresses,
      namesPerAddress: a.unknownNamesPerAddress,
      exempt: a.lockoutExemptAddresses,
      attemptLimit: a.addressAttemptLimit,
      attemptWindowSeconds: a.addressAttemptWindow,
      maxFailuresBeforeLock: a.maxFailuresBeforeLock,
      initialLockSeconds: a.initialLockSeconds,
      maxLockSeconds: a.maxLockSeconds,
      failureDecaySeconds: a.failureDecaySeconds,
    },
  };
}

export const lockoutId = (username: string) => `lockout:${username}`;

/**
 * Lockout state in the store's `lockouts` sublevel (key: username, value: JSON LockoutRecord), so a restart or a
 * crash neither unlocks a locked name nor forgets failures. Writes are queued in order and coalesced per name
 * (one batch at a time); a failed write is logged, never thrown.
 */
export class LockoutJournal {
  private readonly pending = new Map<string, LockoutRecord | null>();
  /** The batch being written, and the one the pending writes will go into. */
  private current?: Promise<void>;
  private next?: { promise: Promise<void>; resolve: () => void };

  constructor(
    private readonly sub: Pick<Sub, 'batch' | 'iterator'>,
    private readonly onError: (err: unknown) => void,
  ) {}

  /** Records every stored name (unreadable records are deleted). */
  async load(): Promise<Map<string, LockoutRecord>> {
    const out = new Map<string, LockoutRecord>();
    for await (const [k, v] of this.sub.iterator()) {
      try {
        const r = JSON.parse(v.toString('utf8')) as LockoutRecord;
        if ([r.failures, r.lockCount, r.lastFailureAt, r.lockedUntil].every((n) => typeof n === 'number' && Number.isFinite(n))) {
          out.set(k, r);
          continue;
        }
      } catch {
        /* deleted below */
      }
      void this.write(k, null);
    }
    return out;
  }

  /** Stores (or, with null, deletes) a name's state; resolves once written (or failed and logged). */
  write(username: string, record: LockoutRecord | null): Promise<void> {
    this.pending.set(username, record);
    if (!this.next) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      this.next = { promise, resolve };
    }
    const done = this.next.promise;
    if (!this.current) void this.run();
    return done;
  }

  private async run(): Promise<void> {
    while (this.next) {
      const batch = this.next;
      this.next = undefined;
      const ops = [...this.pending].map(([key, r]) => (r ? { type: 'put' as const, key, value: Buffer.from(JSON.stringify(r)) } : { type: 'del' as const, key }));
      this.pending.clear();
      this.current = batch.promise;
      try {
        await this.sub.batch(ops);
      } catch (err) {
        this.onError(err);
      }
      batch.resolve();
    }
    this.current = undefined;
  }

  /** Resolves once every write asked for so far is done (later writes are not waited for). */
  flushed(): Promise<void> {
    return this.next?.promise ?? this.current ?? Promise.resolve();
  }
}

/** The API over the lockout actors: ask, report a failure or a success, reset. */
export class Lockouts {
  private warnedFull = false;
  /** The machine with its persistence supplied (the plain machine without a journal). */
  private readonly logic: typeof lockoutMachine;
  /** Stored states loaded at boot that have no actor yet (see `load` and `revive`). */
  private readonly dormant = new Map<string, LockoutRecord>();
  /** Failures per source address, and unknown names per address. */
  readonly addresses: AddressLimits;
  private readonly known: (username: string) => boolean;
  private readonly tableSize: number;
  private readonly auditor: NonNullable<LoginLimitOptions['audit']>;
  private readonly limitsPolicy: AddressLimitPolicy | undefined;

  constructor(
    private readonly host: LockoutHost,
    private readonly policy: LockoutPolicy,
    private readonly now: () => number,
    private readonly warn: (msg: string) => void = () => {},
    private readonly journal?: LockoutJournal,
    limits?: LoginLimitOptions,
  ) {
    // Without options (tests of the per-user lock alone): every name is tracked per name, no address limits.
    this.known = limits?.known ?? (() => true);
    this.tableSize = limits?.tableSize ?? MAX_TRACKED_NAMES;
    this.auditor = limits?.audit ?? (() => undefined);
    this.limitsPolicy = limits?.addresses;
    this.addresses = new AddressLimits(
      limits?.addresses ?? {
        failureLimit: Number.MAX_SAFE_INTEGER,
        windowSeconds: 60,
        blockSeconds: 0,
        maxAddresses: 1,
        namesPerAddress: 1,
        exempt: [],
        ...policy,
      },
      now,
    );
    this.logic = journal
      ? lockoutMachine.provide({
          actions: {
            persist: ({ context }) => void journal.write(context.username, recordOf(context)),
            forget: ({ context }) => void journal.write(context.username, null),
          },
        })
      : lockoutMachine;
  }

  /**
   * Configuration reload (src/runtime/reload.ts): the per-user lock and the per-address limits from the AuthManager
   * section, read at each login from here on (a lock already running keeps the times it started with). The exempt
   * addresses and the table sizes are fixed at start.
   */
  setLimits(a: LoginLimitConfig): void {
    Object.assign(this.policy, { maxFailuresBeforeLock: a.maxFailuresBeforeLock, initialLockSeconds: a.initialLockSeconds, maxLockSeconds: a.maxLockSeconds, failureDecaySeconds: a.failureDecaySeconds });
    if (!this.limitsPolicy) return;
    const { exempt: _exempt, maxAddresses: _max, ...live } = loginLimitsOf(a, this.known).addresses;
    Object.assign(this.limitsPolicy, live);
  }

  /**
   * At boot, before the supervisors run: the stored states. A lock that has not ended, or failures not yet decayed,
   * are kept (answered from memory until `revive` gives them actors); the rest is deleted from the store.
   */
  async load(): Promise<void> {
    if (!this.journal) return;
    const now = this.now();
    const decay = this.policy.failureDecaySeconds;
    for (const [username, r] of await this.journal.load()) {
      const locked = r.lockedUntil > now;
      const decayed = decay > 0 && r.lastFailureAt + decay * 1000 <= now;
      // names that are no user (stored by an older version, or a user deleted meanwhile) are counted per address now
      if ((decayed && !locked) || r.failures <= 0 || !this.known(username)) void this.journal.write(username, null);
      else if (this.dormant.size < this.tableSize) this.dormant.set(username, r);
    }
    await this.journal.flushed();
  }

  /** Once the `lockouts` supervisor runs: an actor for every stored state, resuming it. */
  revive(): void {
    for (const username of [...this.dormant.keys()]) {
      if (this.actor(username)) this.dormant.delete(username);
      else this.spawn(username);
    }
  }

  /** Resolves once the lockout state asked to be stored so far is written. */
  flushed(): Promise<void> {
    return this.journal?.flushed() ?? Promise.resolve();
  }

  private spawn(username: string): AnyActorRef | undefined {
    const restored = this.dormant.get(username);
    const input: LockoutInput = { username, ...this.policy, now: this.now, ...(restored ? { restored } : {}) };
    this.host.start({ id: lockoutId(username), logic: this.logic, input });
    this.dormant.delete(username); // the actor holds it now
    return this.actor(username);
  }

  private actor(username: string): AnyActorRef | undefined {
    const a = this.host.get(lockoutId(username));
    return a && a.getSnapshot().status === 'active' ? a : undefined;
  }

  status(username: string): LockState | undefined {
    const a = this.actor(username);
    const now = this.now();
    const view = (failures: number, lockCount: number, lockedUntil: number, locked: boolean): LockState => ({
      username,
      failures,
      lockCount,
      locked,
      lockedUntil: locked ? lockedUntil : 0,
      remainingLockSeconds: locked ? Math.ceil((lockedUntil - now) / 1000) : 0,
    });
    if (!a) {
      const r = this.dormant.get(username);
      return r ? view(r.failures, r.lockCount, r.lockedUntil, r.lockedUntil > now) : undefined;
    }
    const snap = a.getSnapshot() as { context: LockoutContext; hasTag(t: string): boolean };
    const ctx = snap.context;
    return view(ctx.failures, ctx.lockCount, ctx.lockedUntil, snap.hasTag('locked') && ctx.lockedUntil > now);
  }

  /**
   * The lock that applies to a login of `username` from `address`, asked before the password is checked: none from
   * a lockout-exempt address reached directly (`proxied` false: not through a trusted proxy or the PROXY protocol,
   * and no forwarding header); for an unknown name, the name's state as seen from that address; else the user's
   * lock. An attempt refused because of a lock is a failed login of the address (it counts towards its limit). A
   * login of a locked user let through by the exemption is audited (`login.lock_exempt`), so it is never unnoticed.
   */
  statusAt(username: string, address: string | undefined, proxied = false, fields: Record<string, unknown> = {}): LockState | undefined {
    if (!proxied && this.addresses.exempt(address)) {
      const s = this.known(username) ? this.status(username) : undefined;
      if (s?.locked) {
        this.auditor()?.event(
          'login.lock_exempt',
          { ...fields, username, clientAddress: address, remainingLockSeconds: s.remainingLockSeconds },
          `login attempt of locked user ${username} from ${address}, a lockout-exempt address (AuthManager.lockoutExemptAddresses): the lock does not apply, the password is checked`,
        );
      }
      return undefined;
    }
    let state: LockState | undefined;
    if (!this.known(username)) {
      const s = this.addresses.nameStatus(address, username);
      state = s ? { username, ...s } : undefined;
    } else state = this.status(username);
    if (state?.locked) {
      const r = this.addresses.failed(address);
      if (r.blocked) this.auditBlocked(address!, r, { username });
    }
    return state;
  }

  /**
   * Asked just before a password is hashed: while the address has started AuthManager.addressAttemptLimit checks
   * (right or wrong) within addressAttemptWindow, the error to throw (audited like denials, rate-limited); else the
   * check is counted and undefined returned. Lockout-exempt addresses reached directly (local tools, the
   * administrator on the host) are not limited; through a proxy they are.
   */
  attemptRefusal(address: string | undefined, proxied = false, fields: Record<string, unknown> = {}): AttemptLimitError | undefined {
    if (!proxied && this.addresses.exempt(address)) return undefined;
    const seconds = this.addresses.attempt(address);
    if (seconds <= 0) return undefined;
    const p = this.limitsPolicy;
    const err = new AttemptLimitError(address!, p?.attemptLimit ?? 0, p?.attemptWindowSeconds ?? 0, seconds);
    this.auditor()?.denied({ ...fields, clientAddress: address, reason: 'attempt limit', retryAfterSeconds: seconds }, `login refused: ${err.message}`);
    return err;
  }

  /** A check `attemptRefusal` counted hashed nothing (ServerBusyError, HashAbortedError): it does not count. */
  attemptReturned(address: string | undefined, proxied = false): void {
    if (!proxied && this.addresses.exempt(address)) return;
    this.addresses.unattempt(address);
  }

  /**
   * Checked first on every login: while the source address is blocked, the error to throw (audited, rate-limited
   * like denials; nothing is counted, no password is checked).
   */
  addressRefusal(address: string | undefined, fields: Record<string, unknown> = {}): AddressBlockedError | undefined {
    const seconds = this.addresses.blockedSeconds(address);
    if (seconds <= 0) return undefined;
    this.auditor()?.denied({ ...fields, clientAddress: address, reason: 'address blocked', retryAfterSeconds: seconds }, `login refused: too many failed logins from ${address}`);
    return new AddressBlockedError(address!, seconds);
  }

  /** A failure that is no password guess against a user (a forged Bearer token or cookie): counted per address. */
  addressFailed(address: string | undefined, fields: Record<string, unknown> = {}): void {
    const r = this.addresses.failed(address);
    if (r.blocked) this.auditBlocked(address!, r, fields);
  }

  private auditBlocked(address: string, r: { failures: number; blockSeconds: number }, fields: Record<string, unknown>): void {
    this.auditor()?.event(
      'login.address_blocked',
      { ...fields, clientAddress: address, failures: r.failures, blockSeconds: r.blockSeconds },
      `logins from ${address} refused for ${r.blockSeconds} s after repeated failures`,
    );
  }

  /**
   * Counts a failure: against the source address always; against the user (spawning its actor for a first
   * failure) when the name is a user's, else against the name as seen from that address. Returns the state
   * after it.
   */
  recordFailure(username: string, address?: string): LockState | undefined {
    const r = this.addresses.failed(address);
    if (r.blocked) this.auditBlocked(address!, r, { username });
    if (!this.known(username)) {
      const s = this.addresses.nameFailed(address, username);
      return s ? { username, ...s } : undefined;
    }
    let a = this.actor(username);
    if (!a) {
      if (!this.dormant.has(username) && this.host.ids().length >= this.tableSize) {
        if (!this.warnedFull) this.warn(`lockout tracking is full (${this.tableSize} users); failures of other users are not counted until some decay`);
        this.warnedFull = true;
        return undefined;
      }
      a = this.spawn(username);
      if (!a) return undefined;
    }
    a.send({ type: 'login.failed', address });
    return this.status(username);
  }

  /** A success forgets the name's failures; a name without failures costs a map look-up (no store write). */
  succeeded(username: string): void {
    const a = this.actor(username);
    if (a) a.send({ type: 'login.succeeded' });
    else if (this.dormant.delete(username)) void this.journal?.write(username, null);
  }

  /** Unlock, password change, user deleted: forget everything (in the store too). */
  reset(username: string): boolean {
    const a = this.actor(username);
    const had = this.dormant.delete(username);
    if (!a) {
      void this.journal?.write(username, null);
      return had;
    }
    void lockoutKind.tell(this.host.report ?? (() => {}), a as ActorRefFrom<typeof lockoutMachine>, username, { type: 'lockout.reset' }).catch(() => {});
    return true;
  }

  locked(): LockState[] {
    const out: LockState[] = [];
    const names = new Set(this.dormant.keys());
    for (const id of this.host.ids()) if (id.startsWith('lockout:')) names.add(id.slice('lockout:'.length));
    for (const name of names) {
      const s = this.status(name);
      if (s?.locked) out.push(s);
    }
    return out.sort((a, b) => a.username.localeCompare(b.username));
  }
}
