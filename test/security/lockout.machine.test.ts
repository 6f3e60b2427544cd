import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createActor, SimulatedClock } from 'xstate';
import { lockoutMachine, recordOf, type LockoutRecord } from '../../actors/lockout/lockout.machine.js';

const T0 = 1_700_000_000_000;

/** The lockout machine alone, on XState's SimulatedClock: the whole 15-minute timeline runs in milliseconds. */
function start(
  policy: Partial<{ maxFailuresBeforeLock: number; initialLockSeconds: number; maxLockSeconds: number; failureDecaySeconds: number; restored: LockoutRecord }> = {},
) {
  const clock = new SimulatedClock();
  clock.set(T0);
  const stored: Array<LockoutRecord | null> = [];
  const logic = lockoutMachine.provide({
    actions: {
      persist: ({ context }) => void stored.push(recordOf(context)),
      forget: () => void stored.push(null),
    },
  });
  const actor = createActor(logic, {
    clock,
    input: { username: 'bob', maxFailuresBeforeLock: 5, initialLockSeconds: 30, maxLockSeconds: 900, failureDecaySeconds: 900, now: () => clock.now(), ...policy },
  });
  actor.start();
  const fail = (n = 1) => {
    for (let i = 0; i < n; i++) actor.send({ type: 'login.failed', address: '127.0.0.1' });
  };
  const locked = () => actor.getSnapshot().hasTag('locked');
  const lockedFor = () => (actor.getSnapshot().context.lockedUntil - clock.now()) / 1000;
  return { clock, actor, fail, locked, lockedFor, stored };
}

describe('lockout machine', () => {
  test('lockout - four failures do not lock; the fifth locks for 30 s', () => {
    const { fail, locked, lockedFor, actor } = start();
    fail(4);
    assert.equal(locked(), false);
    assert.equal(actor.getSnapshot().context.failures, 4);
    fail();
    assert.equal(locked(), true);
    assert.equal(lockedFor(), 30);
  });

  test('lockout - locks of 30, 60, 120 s: after each lock one more failure locks again for twice as long', () => {
    const { clock, fail, locked, lockedFor } = start();
    fail(5);
    assert.equal(lockedFor(), 30);
    clock.increment(29_999);
    assert.equal(locked(), true, 'still locked 1 ms before the end');
    clock.increment(1);
    assert.equal(locked(), false, 'unlocked after 30 s');
    fail();
    assert.equal(locked(), true, 'failures are not forgotten when a lock ends: one more locks again');
    assert.equal(lockedFor(), 60);
    clock.increment(60_000);
    assert.equal(locked(), false);
    fail();
    assert.equal(lockedFor(), 120);
    clock.increment(120_000);
    fail();
    assert.equal(lockedFor(), 240);
  });

  test('lockout - the lock never exceeds maxLockSeconds', () => {
    const { clock, fail, lockedFor } = start();
    const seen: number[] = [];
    fail(5);
    for (let i = 0; i < 8; i++) {
      seen.push(lockedFor());
      clock.increment(lockedFor() * 1000);
      fail();
    }
    assert.deepEqual(seen, [30, 60, 120, 240, 480, 900, 900, 900]);
  });

  test('lockout - failures while locked do not count or extend the lock', () => {
    const { clock, fail, lockedFor, actor } = start();
    fail(5);
    clock.increment(10_000);
    fail(3);
    assert.equal(lockedFor(), 20);
    assert.equal(actor.getSnapshot().context.failures, 5);
  });

  test('lockout - failures are forgotten 900 s after the last one and the actor ends', () => {
    const { clock, fail, actor } = start();
    fail(3);
    clock.increment(899_000);
    fail(); // the window restarts from this failure
    clock.increment(899_000);
    assert.equal(actor.getSnapshot().status, 'active');
    assert.equal(actor.getSnapshot().context.failures, 4);
    clock.increment(1_000);
    assert.equal(actor.getSnapshot().status, 'done', '900 s after the last failure everything is forgotten');
  });

  test('lockout - after a lock, the decay is measured from the last failure', () => {
    const { clock, fail, actor, locked } = start();
    fail(5);
    clock.increment(30_000);
    assert.equal(locked(), false);
    assert.equal(actor.getSnapshot().status, 'active', 'still counting after the lock');
    clock.increment(870_000);
    assert.equal(actor.getSnapshot().status, 'done');
  });

  test('lockout - failureDecaySeconds <= 0 never forgets', () => {
    const { clock, fail, actor } = start({ failureDecaySeconds: 0 });
    fail(2);
    clock.increment(30 * 24 * 3600 * 1000);
    assert.equal(actor.getSnapshot().status, 'active');
    assert.equal(actor.getSnapshot().context.failures, 2);
  });

  test('lockout - unlock (lockout.reset) ends a lock at once; a success ends the counting', () => {
    const a = start();
    a.fail(5);
    a.actor.send({ type: 'lockout.reset' });
    assert.equal(a.actor.getSnapshot().status, 'done');
    const b = start();
    b.fail(3);
    b.actor.send({ type: 'login.succeeded' });
    assert.equal(b.actor.getSnapshot().status, 'done');
  });

  test('lockout - every failure stores the counted state (with lockedUntil when it locks); the end forgets it; a success without failures stores nothing', () => {
    const { clock, fail, stored, actor } = start({ maxFailuresBeforeLock: 2 });
    fail();
    assert.deepEqual(stored, [{ failures: 1, lockCount: 0, lastFailureAt: T0, lockedUntil: 0, lastAddress: '127.0.0.1' }]);
    clock.increment(1000);
    fail();
    assert.deepEqual(stored[1], { failures: 2, lockCount: 1, lastFailureAt: T0 + 1000, lockedUntil: T0 + 1000 + 30_000, lastAddress: '127.0.0.1' });
    fail(3); // locked: nothing counts, nothing is stored
    clock.increment(30_000); // the lock ends: a past lockedUntil reads as unlocked, no write needed
    assert.equal(stored.length, 2);
    actor.send({ type: 'login.succeeded' });
    assert.deepEqual(stored[2], null);
    const fresh = start();
    fresh.actor.send({ type: 'login.succeeded' });
    assert.deepEqual(fresh.stored, [null], 'an actor only exists after a failure, so this costs one delete at most');
  });

  test('lockout - restored while locked: stays locked until the stored lockedUntil, then the next failure locks for twice as long', () => {
    const { clock, fail, locked, lockedFor, actor } = start({ restored: { failures: 5, lockCount: 1, lastFailureAt: T0 - 10_000, lockedUntil: T0 + 20_000 } });
    assert.equal(locked(), true);
    assert.equal(lockedFor(), 20);
    fail(2);
    assert.equal(actor.getSnapshot().context.failures, 5, 'failures while locked do not count after a restore either');
    clock.increment(20_000);
    assert.equal(locked(), false);
    fail();
    assert.equal(lockedFor(), 60);
  });

  test('lockout - restored below the threshold: counting goes on from the stored count; decay from the stored last failure', () => {
    const a = start({ maxFailuresBeforeLock: 3, restored: { failures: 2, lockCount: 0, lastFailureAt: T0 - 60_000, lockedUntil: 0 } });
    assert.equal(a.locked(), false);
    a.fail();
    assert.equal(a.locked(), true, 'the third failure locks');
    const b = start({ restored: { failures: 2, lockCount: 0, lastFailureAt: T0 - 800_000, lockedUntil: T0 - 700_000 } });
    assert.equal(b.locked(), false, 'a stored lock that has ended is not a lock');
    assert.equal(b.actor.getSnapshot().context.lockedUntil, 0);
    b.clock.increment(99_999);
    assert.equal(b.actor.getSnapshot().status, 'active');
    b.clock.increment(1);
    assert.equal(b.actor.getSnapshot().status, 'done', '900 s after the stored last failure');
    assert.deepEqual(b.stored, [null]);
  });
});
