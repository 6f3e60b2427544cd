import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { SimulatedClock } from 'xstate';
import { startServer, type TestServer, supervisedActors } from '../helpers.js';
import { auditLines, createUser, login } from './helpers.js';

/**
 * Lockout through the REST API with the runtime's clock replaced by XState's SimulatedClock: the lockout actors'
 * `after` delays and `rt.now()` both follow it, so 30/60/120 s locks and the 900 s decay pass in milliseconds.
 */
describe('lockout over REST', () => {
  let s: TestServer;
  const clock = new SimulatedClock();
  clock.set(Date.now());
  /**
   * SimulatedClock.increment jumps to the end time and then runs the due timers; a timer scheduled by one of them
   * (the decay timer set when a lock ends) is only run by a later flush, so flush again.
   */
  const advance = (ms: number) => {
    clock.increment(ms);
    clock.increment(0);
    clock.increment(0);
  };
  before(async () => {
    s = await startServer({ clock, overrides: { AuthManager: { loginRateLimit: 10000 } } });
  });
  after(async () => s.close());

  const failTimes = async (username: string, n: number) => {
    for (let i = 0; i < n; i++) {
      const r = await login(s, username, 'wrong-password-123');
      assert.equal(r.statusCode, 401);
    }
  };
  const lockouts = async () => (await s.inject('/api/v1/auth/user-lockouts')).json() as Array<{ uuid: string | null; username: string; remainingLockSeconds: number; locked: boolean; lockedUntilIso: string }>;

  test('lockout - five failures lock the account; even the right password then gets 401 with Retry-After', async () => {
    const bob = await createUser(s, 'bob-lock');
    await failTimes('bob-lock', 5);
    const r = await login(s, 'bob-lock', bob.password);
    assert.equal(r.statusCode, 401);
    assert.equal(r.headers['retry-after'], '30');
    assert.match(r.json().status, /locked.*30 s/);
    const basic = await s.app.inject({ url: '/api/v1/session', headers: bob.auth });
    assert.equal(basic.statusCode, 401, 'Basic credentials are refused while locked too');
    assert.equal(basic.headers['retry-after'], '30');
    const list = await lockouts();
    const entry = list.find((l) => l.username === 'bob-lock')!;
    assert.equal(entry.uuid, bob.uuid);
    assert.equal(entry.locked, true);
    assert.equal(entry.remainingLockSeconds, 30);
    assert.equal(Date.parse(entry.lockedUntilIso), clock.now() + 30000);
    advance(30_000);
    assert.equal((await login(s, 'bob-lock', bob.password)).statusCode, 200, 'after 30 s the right password works again');
    assert.equal((await lockouts()).some((l) => l.username === 'bob-lock'), false);
  });

  test('lockout - the timeline: 30 s, then 60 s, then 120 s; failures decay 900 s after the last one', async () => {
    const u = await createUser(s, 'carol-lock');
    await failTimes('carol-lock', 5);
    for (const seconds of [30, 60, 120]) {
      const r = await login(s, 'carol-lock', u.password);
      assert.equal(r.headers['retry-after'], String(seconds), `lock of ${seconds} s`);
      advance(seconds * 1000 - 1);
      assert.equal((await login(s, 'carol-lock', u.password)).statusCode, 401, `still locked just before ${seconds} s`);
      advance(1);
      await failTimes('carol-lock', 1); // the lock ended but the failures stay: one more locks again, for twice as long
    }
    assert.equal((await login(s, 'carol-lock', u.password)).headers['retry-after'], '240');
    advance(900_000); // lock over and 900 s since the last failure: all forgotten
    await failTimes('carol-lock', 4);
    assert.equal((await login(s, 'carol-lock', u.password)).statusCode, 200, 'four new failures do not lock: the count started again');
  });

  test('lockout - unknown usernames are locked the same way and listed without a uuid', async () => {
    await failTimes('nobody-here', 5);
    const r = await login(s, 'nobody-here', 'whatever-password');
    assert.equal(r.statusCode, 401);
    assert.equal(r.headers['retry-after'], '30');
    const entry = (await lockouts()).find((l) => l.username === 'nobody-here')!;
    assert.equal(entry.uuid, null);
    advance(30_000);
  });

  test('lockout - DELETE /api/v1/auth/user-lockouts/{uuid} unlocks at once and resets the count; it is audited', async () => {
    const d = await createUser(s, 'dave-lock');
    await failTimes('dave-lock', 5);
    assert.equal((await login(s, 'dave-lock', d.password)).statusCode, 401);
    const un = await s.inject({ method: 'DELETE', url: `/api/v1/auth/user-lockouts/${d.uuid}` });
    assert.equal(un.statusCode, 200);
    assert.deepEqual(un.json(), { status: 'User unlocked' });
    assert.equal((await login(s, 'dave-lock', d.password)).statusCode, 200);
    await failTimes('dave-lock', 4);
    assert.equal((await login(s, 'dave-lock', d.password)).statusCode, 200, 'the count was reset');
    const lines = await auditLines(s, (l) => l.event === 'lockout.unlocked' && l.username === 'dave-lock');
    const locked = lines.find((l) => l.event === 'lockout.locked' && l.username === 'dave-lock')!;
    assert.equal(locked.lockSeconds, 30);
    assert.ok(lines.some((l) => l.event === 'login.failed' && l.username === 'dave-lock' && l.clientAddress === '127.0.0.1'));
    const missing = await s.inject({ method: 'DELETE', url: '/api/v1/auth/user-lockouts/00000000-0000-4000-8000-000000000001' });
    assert.equal(missing.statusCode, 404);
    const bad = await s.inject({ method: 'DELETE', url: '/api/v1/auth/user-lockouts/not-a-uuid' });
    assert.equal(bad.statusCode, 400);
    assert.match(bad.json().status, /userUuid must be a UUID/);
  });

  test('lockout - a password change by an administrator unlocks and resets', async () => {
    const e = await createUser(s, 'erin-lock');
    await failTimes('erin-lock', 5);
    const r = await s.inject({ method: 'PUT', url: `/api/v1/auth/users/${e.uuid}/password`, payload: { newPassword: 'a-brand-new-password' } });
    assert.equal(r.statusCode, 204);
    assert.equal((await login(s, 'erin-lock', 'a-brand-new-password')).statusCode, 200);
  });

  test('lockout - MQTT-style authenticate() shares the lock with REST', async () => {
    const f = await createUser(s, 'frank-lock');
    await failTimes('frank-lock', 5);
    await assert.rejects(s.rt.security.authenticate('frank-lock', f.password, { protocol: 'MQTT', clientAddress: '127.0.0.1' }), (err: Error & { retryAfterSeconds?: number }) => {
      assert.equal(err.name, 'AuthenticationFailedError');
      assert.equal(err.retryAfterSeconds, 30);
      return true;
    });
    advance(30_000);
    const p = await s.rt.security.authenticate('frank-lock', f.password, { protocol: 'MQTT' });
    assert.equal(p.username, 'frank-lock');
  });

  test('lockout - the lockout actors are children of the lockouts supervisor', async () => {
    await failTimes('grace-lock', 1);
    const tree = (await s.inject('/api/v1/server/actors')).json();
    const sup = tree.children.find((c: { id: string }) => c.id === 'lockouts');
    const child = supervisedActors(sup).find((c: { id: string }) => c.id === 'lockout:grace-lock');
    assert.ok(child, 'the lockout actor is under the lockouts supervisor (or one of its shards)');
    assert.equal(child.machine, 'lockout');
    assert.equal(child.state, 'counting');
  });
});
