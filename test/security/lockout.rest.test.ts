import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SimulatedClock } from 'xstate';
import { securityOf } from '../../src/security/service.js';
import { CONFIG_DIR, removeDir, spawnBroker, startServer, tempDir, type BrokerProcess, type TestServer, supervisedActors, waitUntil } from '../helpers.js';
import { auditLines, createUser, login } from './helpers.js';

/**
 * A SimulatedClock set to now, and `advance`: SimulatedClock.increment jumps to the end time and then runs the due
 * timers; a timer scheduled by one of them (the decay timer set when a lock ends) is only run by a later flush, so
 * flush again.
 */
function simulatedClock() {
  const clock = new SimulatedClock();
  clock.set(Date.now());
  const advance = (ms: number) => {
    clock.increment(ms);
    clock.increment(0);
    clock.increment(0);
  };
  return { clock, advance };
}

/**
 * Lockout through the REST API with the runtime's clock replaced by XState's SimulatedClock: the lockout actors'
 * `after` delays and `rt.now()` both follow it, so 30/60/120 s locks and the 900 s decay pass in milliseconds.
 */
describe('lockout over REST', () => {
  let s: TestServer;
  const { clock, advance } = simulatedClock();
  before(async () => {
    // the per-user lock alone: no address exempt from it (these tests run on loopback), no address limit in the way
    s = await startServer({ clock, overrides: { AuthManager: { loginRateLimit: 10000, lockoutExemptAddresses: [], addressFailureLimit: 100000 } } });
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

  test('lockout - unknown usernames are locked the same way from the address that failed, and are not in the per-user list', async () => {
    await failTimes('nobody-here', 5);
    const r = await login(s, 'nobody-here', 'whatever-password');
    assert.equal(r.statusCode, 401);
    assert.equal(r.headers['retry-after'], '30');
    assert.match(r.json().status, /locked.*30 s/, 'the same answer as for a real user');
    assert.equal((await lockouts()).find((l) => l.username === 'nobody-here'), undefined, 'unknown names are counted per address, not per name');
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
    await createUser(s, 'grace-lock'); // only users have lockout actors
    await failTimes('grace-lock', 1);
    const tree = (await s.inject('/api/v1/server/actors/tree')).json();
    const sup = tree.children.find((c: { id: string }) => c.id === 'lockouts');
    const child = supervisedActors(sup).find((c: { id: string }) => c.id === 'lockout:grace-lock');
    assert.ok(child, 'the lockout actor is under the lockouts supervisor (or one of its shards)');
    assert.equal(child.machine, 'lockout');
    assert.equal(child.state, 'counting');
  });
});

/**
 * Lockout state is kept in the store (`lockouts` sublevel): a restart on the same data directory, in process or
 * after SIGKILL, neither unlocks a locked name nor forgets failures below the threshold.
 */
describe('lockout across a restart', () => {
  const dirs: string[] = [];
  const procs: BrokerProcess[] = [];
  after(async () => {
    for (const p of procs) await p.stop('SIGKILL');
    dirs.forEach(removeDir);
  });

  /** In-process brokers on one data directory and one SimulatedClock (time goes on across the restart). */
  function onOneDataDir(AuthManager: Record<string, unknown>) {
    const dataDir = tempDir();
    dirs.push(dataDir);
    const { clock, advance } = simulatedClock();
    const boot = () => startServer({ dataDir, clock, overrides: { AuthManager: { loginRateLimit: 10000, lockoutExemptAddresses: [], addressFailureLimit: 100000, ...AuthManager } } });
    return { clock, advance, boot };
  }
  const fail = async (s: TestServer, username: string, n: number) => {
    for (let i = 0; i < n; i++) assert.equal((await login(s, username, 'wrong-password-123')).statusCode, 401);
  };

  test('lockout - a locked user is still locked after a restart until the original lock ends, then the right password works', async () => {
    const { clock, advance, boot } = onOneDataDir({ maxFailuresBeforeLock: 3, initialLockSeconds: 20 });
    let s = await boot();
    const u = await createUser(s, 'henry-lock');
    await fail(s, 'henry-lock', 3);
    assert.equal((await login(s, 'henry-lock', u.password)).headers['retry-after'], '20');
    await s.close();
    advance(5_000); // down for 5 s

    s = await boot();
    try {
      const r = await login(s, 'henry-lock', u.password);
      assert.equal(r.statusCode, 401, 'the restart did not unlock the account');
      assert.equal(r.headers['retry-after'], '15', 'the original lock goes on: 20 s from the lock, 5 s of them passed');
      assert.equal((await s.app.inject({ url: '/api/v1/session', headers: u.auth })).statusCode, 401, 'Basic is refused too');
      const listed = ((await s.inject('/api/v1/auth/user-lockouts')).json() as Array<{ uuid: string; username: string; lockedUntilIso: string }>).find((l) => l.username === 'henry-lock');
      assert.equal(listed?.uuid, u.uuid, 'listed as locked');
      assert.equal(Date.parse(listed!.lockedUntilIso), clock.now() + 15_000);
      const tree = (await s.inject('/api/v1/server/actors/tree')).json();
      const child = supervisedActors(tree.children.find((c: { id: string }) => c.id === 'lockouts')).find((c: { id: string }) => c.id === 'lockout:henry-lock');
      assert.equal(child?.state, 'locked', 'the lockout actor was started again at boot, locked');
      advance(14_999);
      assert.equal((await login(s, 'henry-lock', u.password)).statusCode, 401, 'still locked 1 ms before the end');
      advance(1);
      assert.equal((await login(s, 'henry-lock', u.password)).statusCode, 200, 'the lock ended at its original time');
      await securityOf(s.rt).lockouts.flushed();
      assert.equal(await s.rt.store.getJson('lockouts', 'henry-lock'), undefined, 'the success removed the stored state');
    } finally {
      await s.close();
    }
    s = await boot();
    try {
      await fail(s, 'henry-lock', 2);
      assert.equal((await login(s, 'henry-lock', u.password)).statusCode, 200, 'after the success the count started again');
    } finally {
      await s.close();
    }
  });

  test('lockout - failures below the threshold survive a restart (threshold 3: 2 failures, restart, 1 failure locks)', async () => {
    const { advance, boot } = onOneDataDir({ maxFailuresBeforeLock: 3 });
    let s = await boot();
    const u = await createUser(s, 'ivy-lock');
    await fail(s, 'ivy-lock', 2);
    await s.close();
    advance(60_000);
    s = await boot();
    try {
      assert.deepEqual((await s.inject('/api/v1/auth/user-lockouts')).json(), [], 'two failures do not lock');
      await fail(s, 'ivy-lock', 1);
      const r = await login(s, 'ivy-lock', u.password);
      assert.equal(r.statusCode, 401, 'the third failure, after the restart, locked the account');
      assert.equal(r.headers['retry-after'], '30');
    } finally {
      await s.close();
    }
  });

  test('lockout - stored failures decay while the broker is down; a restart in process (PATCH /api/v1/server restart) keeps a lock', async () => {
    const { advance, boot } = onOneDataDir({ maxFailuresBeforeLock: 3, failureDecaySeconds: 600 });
    let s = await boot();
    const u = await createUser(s, 'jack-lock');
    await fail(s, 'jack-lock', 2);
    await s.close();
    advance(600_000); // down for the whole decay window
    s = await boot();
    try {
      assert.equal(await s.rt.store.getJson('lockouts', 'jack-lock'), undefined, 'the decayed state was deleted at boot');
      await fail(s, 'jack-lock', 2);
      assert.equal((await login(s, 'jack-lock', u.password)).statusCode, 200, 'the count started again');
      await fail(s, 'jack-lock', 3);
      await s.rt.restart(); // what PATCH /api/v1/server {"state":"restart"} does: a fresh actor tree
      const r = await login(s, 'jack-lock', u.password);
      assert.equal(r.statusCode, 401, 'still locked after the in-process restart');
      assert.equal(r.headers['retry-after'], '30');
    } finally {
      await s.close();
    }
  });

  test('lockout - a lock survives SIGKILL of the broker process', async () => {
    const data = tempDir();
    const config = tempDir('switchyard-cfg-');
    dirs.push(data, config);
    cpSync(CONFIG_DIR, config, { recursive: true });
    writeFileSync(join(config, 'AuthManager.yaml'), 'AuthManager:\n  maxFailuresBeforeLock: 3\n  initialLockSeconds: 20\n  lockoutExemptAddresses: []\n');
    const env = { SWITCHYARD_DATA_DIR: data, SWITCHYARD_CONFIG_DIR: config };
    const first = await spawnBroker(env);
    procs.push(first);
    const call = (b: BrokerProcess, method: string, path: string, body: unknown, headers: Record<string, string> = {}) =>
      fetch(`http://127.0.0.1:${b.port}${path}`, { method, headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
    const password = 'kate-password-123';
    assert.equal((await call(first, 'POST', '/api/v1/auth/users', { username: 'kate-lock', password }, first.auth())).status, 201);
    for (let i = 0; i < 3; i++) assert.equal((await call(first, 'POST', '/api/v1/login', { username: 'kate-lock', password: 'wrong-password-123' })).status, 401);
    const lockedAt = Date.now();
    first.proc.kill('SIGKILL');
    assert.equal(await first.exited, null, 'killed, not exited');

    const second = await spawnBroker(env);
    procs.push(second);
    const r = await call(second, 'POST', '/api/v1/login', { username: 'kate-lock', password });
    assert.ok(Date.now() - lockedAt < 19000, 'precondition: the second broker answered within the 20 s lock (a lock long enough for a loaded CI machine)');
    assert.equal(r.status, 401, 'still locked after the crash');
    assert.ok(Number(r.headers.get('retry-after')) >= 1);
    // poll the admin list, not the login (POST /api/v1/login is rate-limited per address)
    const listed = async () => (await (await fetch(`http://127.0.0.1:${second.port}/api/v1/auth/user-lockouts`, { headers: second.auth() })).json()) as Array<{ username: string }>;
    assert.deepEqual((await listed()).map((l) => l.username), ['kate-lock']);
    await waitUntil(async () => (await listed()).length === 0, 30000, 'the lock ended');
    assert.ok(Date.now() - lockedAt >= 19900, 'the lock ends at its original time');
    assert.equal((await call(second, 'POST', '/api/v1/login', { username: 'kate-lock', password })).status, 200, 'then the right password works');
    await second.stop();
  });
});
