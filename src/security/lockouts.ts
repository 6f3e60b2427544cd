import type { AnyActorRef } from 'xstate';
import { lockoutMachine, type LockoutContext, type LockoutInput } from '../../actors/lockout/lockout.machine.js';
import type { ChildSpec } from '../../actors/supervisor/supervisor.machine.js';

/** Where lockout actors live: the `lockouts` supervisor of the runtime (tests may give a fake). */
export interface LockoutHost {
  start(spec: ChildSpec): void;
  get(id: string): AnyActorRef | undefined;
  ids(): string[];
}

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

/** At most this many names are tracked at once (each decays away); beyond it new names are not tracked. */
export const MAX_TRACKED_NAMES = 10000;

export const lockoutId = (username: string) => `lockout:${username}`;

/** The API over the lockout actors: ask, report a failure or a success, reset. */
export class Lockouts {
  private warnedFull = false;
  constructor(
    private readonly host: LockoutHost,
    private readonly policy: LockoutPolicy,
    private readonly now: () => number,
    private readonly warn: (msg: string) => void = () => {},
  ) {}

  private actor(username: string): AnyActorRef | undefined {
    const a = this.host.get(lockoutId(username));
    return a && a.getSnapshot().status === 'active' ? a : undefined;
  }

  status(username: string): LockState | undefined {
    const a = this.actor(username);
    if (!a) return undefined;
    const snap = a.getSnapshot() as { context: LockoutContext; hasTag(t: string): boolean };
    const ctx = snap.context;
    const now = this.now();
    const locked = snap.hasTag('locked') && ctx.lockedUntil > now;
    return {
      username,
      failures: ctx.failures,
      lockCount: ctx.lockCount,
      locked,
      lockedUntil: locked ? ctx.lockedUntil : 0,
      remainingLockSeconds: locked ? Math.ceil((ctx.lockedUntil - now) / 1000) : 0,
    };
  }

  /** Counts a failure (spawning the actor for a first failure); returns the state after it. */
  recordFailure(username: string, address?: string): LockState | undefined {
    let a = this.actor(username);
    if (!a) {
      if (this.host.ids().length >= MAX_TRACKED_NAMES) {
        if (!this.warnedFull) this.warn(`lockout tracking is full (${MAX_TRACKED_NAMES} names); failures of new names are not counted until some decay`);
        this.warnedFull = true;
        return undefined;
      }
      const input: LockoutInput = { username, ...this.policy, now: this.now };
      this.host.start({ id: lockoutId(username), logic: lockoutMachine, input });
      a = this.actor(username);
      if (!a) return undefined;
    }
    a.send({ type: 'login.failed', address });
    return this.status(username);
  }

  succeeded(username: string): void {
    this.actor(username)?.send({ type: 'login.succeeded' });
  }

  /** Unlock, password change, user deleted: forget everything. */
  reset(username: string): boolean {
    const a = this.actor(username);
    if (!a) return false;
    a.send({ type: 'lockout.reset' });
    return true;
  }

  locked(): LockState[] {
    const out: LockState[] = [];
    for (const id of this.host.ids()) {
      if (!id.startsWith('lockout:')) continue;
      const s = this.status(id.slice('lockout:'.length));
      if (s?.locked) out.push(s);
    }
    return out.sort((a, b) => a.username.localeCompare(b.username));
  }
}
