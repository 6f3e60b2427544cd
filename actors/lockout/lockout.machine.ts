import { assign, setup } from 'xstate';
import { backoffDelay } from '../shared/backoff.js';

/**
 * One actor per user that failed to log in, under the `lockouts` supervisor as `lockout:<username>` (names that are
 * no user are counted per source address by src/security/address-limits.ts with the same rules, so a lock still
 * reveals nothing about which names exist, and made-up names cannot fill this table). MAPS policy (reference
 * section 7):
 *
 * - every failure counts; at `maxFailuresBeforeLock` failures the name is locked for
 *   `min(initialLockSeconds × 2^lockCount, maxLockSeconds)` (30, 60, 120, ... 900 s) and `lockCount` grows;
 * - while locked nothing counts and even the right password fails (the caller asks `locked` first);
 * - when a lock ends the failure count stays, so the next failure locks again at once, for twice as long;
 * - `failureDecaySeconds` after the last failure everything is forgotten (≤ 0: never) and the actor ends;
 * - a successful login, an unlock or a password change (`lockout.reset`) forgets everything and ends the actor.
 *
 * Persistence (no I/O here): every change of the counted state runs `persist` (after a failure, with the new count
 * and, when it locked, `lockedUntil`) and the end runs `forget`; both do nothing unless supplied with
 * `machine.provide` (src/security/lockouts.ts writes them to the store's `lockouts` sublevel). An actor started with
 * `restored` (the stored state, at boot) resumes it: still locked until the stored `lockedUntil`, or counting on
 * from the stored failures (the decay measured from the stored last failure).
 *
 * Time: waits are `after` delays (the system clock: XState's SimulatedClock in tests); `now()` comes in the input so
 * the same clock gives `lockedUntil`.
 */
export interface LockoutInput {
  username: string;
  maxFailuresBeforeLock: number;
  initialLockSeconds: number;
  maxLockSeconds: number;
  /** ≤ 0: failures are never forgotten. */
  failureDecaySeconds: number;
  now: () => number;
  /** The state kept in the store, to resume after a restart. */
  restored?: LockoutRecord;
}

/** What is persisted of a lockout (epoch ms from the same clock as `now`). */
export interface LockoutRecord {
  failures: number;
  lockCount: number;
  lastFailureAt: number;
  /** 0 when not locked (a past time counts as not locked). */
  lockedUntil: number;
  lastAddress?: string;
}

/** The persisted part of a context. */
export function recordOf(ctx: LockoutRecord): LockoutRecord {
  return {
    failures: ctx.failures,
    lockCount: ctx.lockCount,
    lastFailureAt: ctx.lastFailureAt,
    lockedUntil: ctx.lockedUntil,
    ...(ctx.lastAddress !== undefined ? { lastAddress: ctx.lastAddress } : {}),
  };
}

export interface LockoutContext extends LockoutInput {
  failures: number;
  lockCount: number;
  lastFailureAt: number;
  /** Epoch ms; 0 when not locked. */
  lockedUntil: number;
  lastAddress?: string;
}

export type LockoutEvent = { type: 'login.failed'; address?: string } | { type: 'login.succeeded' } | { type: 'lockout.reset' };

/** The longest single setTimeout Node accepts; used when failures never decay. */
const FOREVER = 2 ** 31 - 1;

export function lockSeconds(ctx: Pick<LockoutContext, 'initialLockSeconds' | 'maxLockSeconds'>, lockCount: number): number {
  // the first lock (lockCount 0) is initialLockSeconds: attempt lockCount + 1 of the shared backoff
  return backoffDelay(lockCount + 1, ctx.initialLockSeconds, ctx.maxLockSeconds);
}

export const lockoutMachine = setup({
  types: {
    context: {} as LockoutContext,
    events: {} as LockoutEvent,
    input: {} as LockoutInput,
  },
  guards: {
    reachesLimit: ({ context }) => context.failures + 1 >= context.maxFailuresBeforeLock,
    decays: ({ context }) => context.failureDecaySeconds > 0,
    stillLocked: ({ context }) => context.lockedUntil > context.now(),
  },
  delays: {
    lockDuration: ({ context }) => Math.max(0, context.lockedUntil - context.now()),
    decay: ({ context }) =>
      context.failureDecaySeconds > 0 ? Math.max(0, context.lastFailureAt + context.failureDecaySeconds * 1000 - context.now()) : FOREVER,
  },
  actions: {
    countFailure: assign(({ context, event }) => ({
      failures: context.failures + 1,
      lastFailureAt: context.now(),
      lastAddress: event.type === 'login.failed' ? event.address : context.lastAddress,
    })),
    lock: assign(({ context }) => ({
      lockedUntil: context.now() + lockSeconds(context, context.lockCount) * 1000,
      lockCount: context.lockCount + 1,
    })),
    clearLock: assign({ lockedUntil: 0 }),
    /** Supplied by the runtime: store the counted state (`recordOf(context)`). */
    persist: () => {},
    /** Supplied by the runtime: drop the stored state. */
    forget: () => {},
  },
}).createMachine({
  id: 'lockout',
  context: ({ input }) => {
    const { restored, ...rest } = input;
    return { ...rest, failures: 0, lockCount: 0, lastFailureAt: input.now(), lockedUntil: 0, ...(restored ? recordOf(restored) : {}) };
  },
  initial: 'resuming',
  states: {
    /** Transient: a restored lock that has not ended yet resumes as locked. */
    resuming: {
      always: [{ guard: 'stillLocked', target: 'locked' }, { target: 'counting', actions: 'clearLock' }],
    },
    counting: {
      on: {
        'login.failed': [
          { guard: 'reachesLimit', target: 'locked', actions: ['countFailure', 'lock', 'persist'] },
          { target: 'counting', reenter: true, actions: ['countFailure', 'persist'] },
        ],
        'login.succeeded': 'forgotten',
        'lockout.reset': 'forgotten',
      },
      after: { decay: { guard: 'decays', target: 'forgotten' } },
    },
    locked: {
      tags: ['locked'],
      exit: 'clearLock',
      on: {
        'lockout.reset': 'forgotten',
      },
      after: { lockDuration: 'counting' },
    },
    forgotten: { type: 'final', entry: 'forget' },
  },
});
