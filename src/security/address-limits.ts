import { isIPv6, type BlockList } from 'node:net';
import { addressList, inList } from '../transport/address-list.js';
import { AuthenticationFailedError } from './types.js';

/**
 * Login limits per source address (docs/security.md, "Login limits"), beside the per-user lock of the spec:
 *
 * - Every failed login from an address (wrong password or unknown name over Basic, login, MQTT CONNECT or SCRAM; a
 *   forged Bearer token or cookie) counts against it. `failureLimit` failures within `windowSeconds` block the
 *   address for `blockSeconds`: while blocked, any login from it is refused at once (REST 429, MQTT CONNACK
 *   0x9F / 3.1.1 return code 3) before any password is checked or any lockout state is touched.
 * - Unknown user names are tracked here, per address, not in the per-user lockout table: each address remembers
 *   at most `namesPerAddress` unknown names with the same lock rules as a user (so from that address an unknown
 *   name locks like a real one and a lock tells nothing about which names exist), and no stream of made-up names
 *   can fill the per-user table and hide a real user's failures.
 * - Addresses are keyed as written, IPv4-mapped IPv6 as IPv4, other IPv6 by their /64 (one host owns a /64).
 * - Memory: at most `maxAddresses` entries (each with at most `namesPerAddress` names); when full the entry least
 *   recently failed is dropped (an expired one first, as they are dropped when touched).
 *
 * `exempt` lists addresses and CIDR ranges where the per-user lock and the attempt limit do not apply (default
 * loopback) for connections made directly (not through a proxy: the callers decide): a locked user still logs in
 * from there. Failure limits apply to every address.
 */
export interface AddressLimitPolicy {
  failureLimit: number;
  windowSeconds: number;
  blockSeconds: number;
  maxAddresses: number;
  namesPerAddress: number;
  exempt: readonly string[];
  /**
   * Password checks (right or wrong) one address may start within `attemptWindowSeconds`; beyond that a login is
   * refused at once (AttemptLimitError: REST 429, MQTT 0x9F / 3.1.1 return code 3) without a hash. Undefined: none.
   */
  attemptLimit?: number;
  attemptWindowSeconds?: number;
  /** The per-user lock rules, applied to unknown names per address. */
  maxFailuresBeforeLock: number;
  initialLockSeconds: number;
  maxLockSeconds: number;
  failureDecaySeconds: number;
}

/** A login refused because its source address failed too often: REST 429, MQTT 0x9F (3.1.1: 3). */
export class AddressBlockedError extends AuthenticationFailedError {
  constructor(
    readonly address: string,
    retryAfterSeconds: number,
  ) {
    super(`Too many failed logins from ${address}; try again in ${retryAfterSeconds} s`, retryAfterSeconds);
    this.name = 'AddressBlockedError';
  }
}

/** A login refused because its address started too many password checks (right or wrong) in a short time. */
export class AttemptLimitError extends AddressBlockedError {
  constructor(address: string, limit: number, windowSeconds: number, retryAfterSeconds: number) {
    super(address, retryAfterSeconds);
    this.message = `Too many logins from ${address}: at most ${limit} password checks per ${windowSeconds} s; try again in ${retryAfterSeconds} s`;
    this.name = 'AttemptLimitError';
  }
}

interface NameState {
  failures: number;
  lockCount: number;
  lastFailureAt: number;
  lockedUntil: number;
}

interface AddressEntry {
  windowStart: number;
  failures: number;
  blockedUntil: number;
  /** Failures in all, for the audit. */
  total: number;
  names: Map<string, NameState>;
}

export interface NameLock {
  failures: number;
  lockCount: number;
  locked: boolean;
  lockedUntil: number;
  remainingLockSeconds: number;
}

/** The key an address is counted under: IPv4 as is, IPv4-mapped IPv6 as IPv4, IPv6 by its /64. */
export function addressKey(address: string): string {
  const a = address.trim().toLowerCase();
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(a);
  if (mapped) return mapped[1]!;
  if (!isIPv6(a)) return a;
  // expand to eight groups and keep the first four
  const [head = '', tail = ''] = a.split('::');
  const h = head ? head.split(':') : [];
  const t = a.includes('::') ? (tail ? tail.split(':') : []) : [];
  const groups = a.includes('::') ? [...h, ...Array(8 - h.length - t.length).fill('0'), ...t] : h;
  return `${groups.slice(0, 4).map((g) => g.replace(/^0+(?=.)/, '')).join(':')}::/64`;
}

export class AddressLimits {
  private readonly entries = new Map<string, AddressEntry>();
  /** Password checks per address in the current window (a separate table: right passwords count too). */
  private readonly attempts = new Map<string, { windowStart: number; count: number }>();
  private readonly exemptList: BlockList;
  private readonly exemptEmpty: boolean;

  constructor(
    private readonly policy: AddressLimitPolicy,
    private readonly now: () => number,
  ) {
    this.exemptList = addressList(policy.exempt, 'AuthManager.lockoutExemptAddresses');
    this.exemptEmpty = policy.exempt.length === 0;
  }

  /** Is the address on the lockout-exempt list? */
  exempt(address: string | undefined): boolean {
    if (address === undefined || this.exemptEmpty) return false;
    return inList(this.exemptList, address);
  }

  /** Seconds until the address may try again (0: not blocked). */
  blockedSeconds(address: string | undefined): number {
    if (address === undefined) return 0;
    const e = this.entries.get(addressKey(address));
    if (!e) return 0;
    const left = e.blockedUntil - this.now();
    return left > 0 ? Math.ceil(left / 1000) : 0;
  }

  /**
   * Counts a password check from the address, whatever its outcome; returns 0 when it may go on, else the seconds
   * until its window ends (nothing counted then). Bounded like the failure table (`maxAddresses`, oldest dropped).
   */
  attempt(address: string | undefined): number {
    const limit = this.policy.attemptLimit;
    const windowMs = (this.policy.attemptWindowSeconds ?? 10) * 1000;
    if (address === undefined || limit === undefined) return 0;
    const now = this.now();
    const key = addressKey(address);
    let a = this.attempts.get(key);
    if (a && now - a.windowStart >= windowMs) {
      this.attempts.delete(key);
      a = undefined;
    }
    if (!a) {
      if (this.attempts.size >= this.policy.maxAddresses) {
        // forget ended windows among the oldest, else the oldest
        let scanned = 0;
        for (const [k, v] of this.attempts) {
          if (now - v.windowStart >= windowMs) this.attempts.delete(k);
          if (++scanned >= 64) break;
        }
        if (this.attempts.size >= this.policy.maxAddresses) this.attempts.delete(this.attempts.keys().next().value!);
      }
      a = { windowStart: now, count: 0 };
      this.attempts.set(key, a);
    }
    if (a.count >= limit) return Math.max(1, Math.ceil((a.windowStart + windowMs - now) / 1000));
    a.count++;
    return 0;
  }

  /** Gives back a check counted by `attempt` that hashed nothing (the hash pool was busy, or the caller left first). */
  unattempt(address: string | undefined): void {
    if (address === undefined) return;
    const a = this.attempts.get(addressKey(address));
    if (a && a.count > 0) a.count--;
  }

  /** Counts a failed login from the address; returns true when this failure blocked it. */
  failed(address: string | undefined): { blocked: boolean; failures: number; blockSeconds: number } {
    if (address === undefined) return { blocked: false, failures: 0, blockSeconds: 0 };
    const now = this.now();
    const e = this.entry(address, true)!;
    if (now - e.windowStart >= this.policy.windowSeconds * 1000) {
      e.windowStart = now;
      e.failures = 0;
    }
    e.failures++;
    e.total++;
    if (e.failures >= this.policy.failureLimit && e.blockedUntil <= now) {
      e.blockedUntil = now + this.policy.blockSeconds * 1000;
      e.failures = 0;
      e.windowStart = now;
      return { blocked: true, failures: e.total, blockSeconds: this.policy.blockSeconds };
    }
    return { blocked: false, failures: e.total, blockSeconds: 0 };
  }

  /** The lock state of an unknown name as seen from this address (undefined: no failures remembered). */
  nameStatus(address: string | undefined, username: string): NameLock | undefined {
    if (address === undefined) return undefined;
    const e = this.entries.get(addressKey(address));
    const s = e?.names.get(username);
    if (!e || !s) return undefined;
    const now = this.now();
    if (this.decayed(s, now)) {
      e.names.delete(username);
      return undefined;
    }
    return this.view(s, now);
  }

  /** Counts a failure of an unknown name from this address, with the per-user lock rules; the state after it. */
  nameFailed(address: string | undefined, username: string): NameLock | undefined {
    if (address === undefined) return undefined;
    const now = this.now();
    const e = this.entry(address, true)!;
    let s = e.names.get(username);
    if (s && this.decayed(s, now)) s = undefined;
    if (!s) {
      s = { failures: 0, lockCount: 0, lastFailureAt: now, lockedUntil: 0 };
      if (e.names.size >= this.policy.namesPerAddress) e.names.delete(e.names.keys().next().value!);
    }
    e.names.delete(username); // most recent last
    e.names.set(username, s);
    if (s.lockedUntil > now) return this.view(s, now); // while locked nothing counts
    s.failures++;
    s.lastFailureAt = now;
    if (s.failures >= this.policy.maxFailuresBeforeLock) {
      const p = this.policy;
      s.lockedUntil = now + Math.min(p.maxLockSeconds, p.initialLockSeconds * 2 ** s.lockCount) * 1000;
      s.lockCount++;
    }
    return this.view(s, now);
  }

  /** Entries held (for tests and metrics). */
  get size(): number {
    return this.entries.size;
  }

  private decayed(s: NameState, now: number): boolean {
    const decay = this.policy.failureDecaySeconds;
    return s.lockedUntil <= now && decay > 0 && s.lastFailureAt + decay * 1000 <= now;
  }

  private view(s: NameState, now: number): NameLock {
    const locked = s.lockedUntil > now;
    return {
      failures: s.failures,
      lockCount: s.lockCount,
      locked,
      lockedUntil: locked ? s.lockedUntil : 0,
      remainingLockSeconds: locked ? Math.ceil((s.lockedUntil - now) / 1000) : 0,
    };
  }

  /** When an entry may be forgotten: its window, block and every name have run out. */
  private expired(e: AddressEntry, now: number): boolean {
    if (e.blockedUntil > now || now - e.windowStart < this.policy.windowSeconds * 1000) return false;
    for (const s of e.names.values()) if (!this.decayed(s, now)) return false;
    return true;
  }

  private entry(address: string, create: boolean): AddressEntry | undefined {
    const key = addressKey(address);
    let e = this.entries.get(key);
    if (e) {
      this.entries.delete(key); // most recently failed last
      this.entries.set(key, e);
      return e;
    }
    if (!create) return undefined;
    if (this.entries.size >= this.policy.maxAddresses) this.evict();
    e = { windowStart: this.now(), failures: 0, blockedUntil: 0, total: 0, names: new Map() };
    this.entries.set(key, e);
    return e;
  }

  /** Makes room for one entry: expired entries among the oldest first, else the least recently failed one. */
  private evict(): void {
    const now = this.now();
    let scanned = 0;
    for (const [key, e] of this.entries) {
      if (this.expired(e, now)) this.entries.delete(key);
      if (++scanned >= 64) break;
    }
    if (this.entries.size >= this.policy.maxAddresses) this.entries.delete(this.entries.keys().next().value!);
  }
}
