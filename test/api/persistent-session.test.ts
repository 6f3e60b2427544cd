import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { RestSessions } from '../../src/api/rest-session.js';
import { durableRestSessionId, restSessionsOf } from '../../src/messaging/rest-sessions.service.js';
import { startServer, tempDir, removeDir, type TestServer } from '../helpers.js';
import { b64, RestClient, unb64 } from '../rest-client.js';
import { createUser, groupId, leaveEveryone } from '../security/helpers.js';

/** REST messaging state of a persistent login (LoginRequest.persistent / sessionId), as a REST user sees it. */
describe('persistent REST sessions', () => {
  let s: TestServer;
  let alice: { uuid: string; password: string };
  let bob: { uuid: string; password: string };
  let dave: { uuid: string; password: string };
  before(async () => {
    s = await startServer({ overrides: { AuthManager: { loginRateLimit: 1000 } } });
    const everyone = await groupId(s, 'everyone');
    alice = await createUser(s, 'alice', 'alice-password-1', [everyone]);
    bob = await createUser(s, 'bob', 'bob-password-12', [everyone]);
    dave = await createUser(s, 'dave', 'dave-password-1');
    await leaveEveryone(s, dave.uuid); // no group: no persistent_session
  });
  after(async () => s.close());

  async function login(user: string, password: string, extra: Record<string, unknown> = {}): Promise<RestClient> {
    const c = new RestClient(s.app);
    const r = await c.post('/api/v1/login', { username: user, password, ...extra });
    assert.equal(r.statusCode, 200, r.body);
    return c;
  }
  const publish = async (destinationName: string, text: string) => {
    const r = await s.inject({ method: 'POST', url: '/api/v1/messaging/publish', payload: { destinationName, message: { payload: b64(text) } } });
    assert.equal(r.statusCode, 200, r.body);
  };
  const consume = async (c: RestClient, destination?: string) => {
    const r = await c.post('/api/v1/messaging/consume', destination ? { destination, depth: 100 } : { depth: 100 });
    return { status: r.statusCode, payloads: r.statusCode === 200 ? (r.json().consumedMessages as Array<{ payload: string }>).map((m) => unb64(m.payload)) : [] };
  };
  const depths = async (c: RestClient) => (await c.post('/api/v1/messaging/subscriptionDepth', {})).json().subscriptionDepths as Array<{ destination: string; depth: number }>;
  const subscribe = async (c: RestClient, body: Record<string, unknown>) => {
    const r = await c.post('/api/v1/messaging/subscribe', { maxDepth: 100, ...body });
    assert.equal(r.statusCode, 200, r.body);
  };

  test('persistent - logout keeps the subscriptions; the next persistent login with the same sessionId consumes what came meanwhile', async () => {
    const c = await login('alice', alice.password, { persistent: true, sessionId: 'alice-1' });
    await subscribe(c, { destinationName: 'ps/a/#' });
    await subscribe(c, { destinationName: 'queue/ps-a' });
    await publish('ps/a/1', 'before');
    assert.deepEqual((await consume(c, 'ps/a/#')).payloads, ['before'], 'an ordinary session while logged in');
    assert.equal((await c.post('/api/v1/logout')).statusCode, 200);
    assert.equal((await c.post('/api/v1/messaging/consume', {})).statusCode, 401, 'the logged-out token is refused');

    await publish('ps/a/1', 'away-1');
    await publish('ps/a/2', 'away-2');
    await publish('queue/ps-a', 'queued');

    const back = await login('alice', alice.password, { persistent: true, sessionId: 'alice-1' });
    assert.deepEqual(
      (await depths(back)).sort((x, y) => x.destination.localeCompare(y.destination)),
      [
        { destination: 'ps/a/#', depth: 2 },
        { destination: 'queue/ps-a', depth: 1 },
      ],
    );
    assert.deepEqual((await consume(back, 'ps/a/#')).payloads, ['away-1', 'away-2']);
    assert.deepEqual((await consume(back, 'queue/ps-a')).payloads, ['queued']);
    await publish('ps/a/3', 'live');
    assert.deepEqual((await consume(back)).payloads, ['live'], 'the resumed subscriptions deliver as usual');
    await back.post('/api/v1/logout');
  });

  test('persistent - the login answer names the sessionId to resume with; without one it is the login session id', async () => {
    const c = new RestClient(s.app);
    const r = await c.post('/api/v1/login', { username: 'alice', password: alice.password, persistent: true });
    assert.equal(r.statusCode, 200);
    const sessionId = r.json().sessionId as string;
    assert.ok(sessionId, 'a persistent login answers with its sessionId');
    assert.equal((await c.get('/api/v1/session')).json().sessionId, sessionId);
    await subscribe(c, { destinationName: 'ps/default' });
    await c.post('/api/v1/logout');
    await publish('ps/default', 'kept');
    const back = await login('alice', alice.password, { persistent: true, sessionId });
    assert.deepEqual((await consume(back, 'ps/default')).payloads, ['kept']);
    await back.post('/api/v1/logout');

    const plain = new RestClient(s.app);
    const p = await plain.post('/api/v1/login', { username: 'alice', password: alice.password });
    assert.equal(p.json().sessionId, undefined, 'not for an ordinary login');
  });

  test('persistent - a transactional message taken and not committed before logout is delivered again', async () => {
    const c = await login('alice', alice.password, { persistent: true, sessionId: 'alice-tx' });
    await subscribe(c, { destinationName: 'ps/tx', transactional: true });
    await publish('ps/tx', 'once');
    assert.deepEqual((await consume(c, 'ps/tx')).payloads, ['once']);
    await c.post('/api/v1/logout');
    const back = await login('alice', alice.password, { persistent: true, sessionId: 'alice-tx' });
    const r = await back.post('/api/v1/messaging/consume', { destination: 'ps/tx' });
    const [m] = r.json().consumedMessages as Array<{ payload: string; identifier: number }>;
    assert.equal(unb64(m!.payload), 'once');
    assert.equal((await back.post('/api/v1/messaging/commit', { destinationName: 'ps/tx', eventIds: [m!.identifier] })).statusCode, 200);
    await back.post('/api/v1/logout');
    const again = await login('alice', alice.password, { persistent: true, sessionId: 'alice-tx' });
    assert.deepEqual(await depths(again), [{ destination: 'ps/tx', depth: 0 }], 'committed: gone for good');
    await again.post('/api/v1/logout');
  });

  test('persistent - a login with the same sessionId and persistent false starts clean: nothing kept, the subscription is gone', async () => {
    const c = await login('alice', alice.password, { persistent: true, sessionId: 'alice-2' });
    await subscribe(c, { destinationName: 'ps/b' });
    await c.post('/api/v1/logout');
    await publish('ps/b', 'away');

    const clean = await login('alice', alice.password, { persistent: false, sessionId: 'alice-2' });
    assert.equal((await clean.post('/api/v1/messaging/consume', { destination: 'ps/b' })).statusCode, 404);
    assert.deepEqual((await consume(clean)).payloads, []);
    await clean.post('/api/v1/logout');

    const later = await login('alice', alice.password, { persistent: true, sessionId: 'alice-2' });
    assert.deepEqual(await depths(later), [], 'the durable session was discarded');
    assert.equal((await later.post('/api/v1/messaging/consume', { destination: 'ps/b' })).statusCode, 404);
    await publish('ps/b', 'after');
    assert.deepEqual((await consume(later)).payloads, []);
    await later.post('/api/v1/logout');
  });

  test('persistent - another user with the same sessionId gets a session of their own and cannot read or discard it', async () => {
    const c = await login('alice', alice.password, { persistent: true, sessionId: 'shared-name' });
    await subscribe(c, { destinationName: 'ps/c' });
    await c.post('/api/v1/logout');
    await publish('ps/c', 'for alice');

    const b = await login('bob', bob.password, { persistent: true, sessionId: 'shared-name' });
    assert.deepEqual(await depths(b), []);
    assert.equal((await b.post('/api/v1/messaging/consume', { destination: 'ps/c' })).statusCode, 404);
    assert.deepEqual((await consume(b)).payloads, []);
    await b.post('/api/v1/logout');
    const b2 = await login('bob', bob.password, { persistent: false, sessionId: 'shared-name' });
    await b2.post('/api/v1/logout');

    const back = await login('alice', alice.password, { persistent: true, sessionId: 'shared-name' });
    assert.deepEqual((await consume(back, 'ps/c')).payloads, ['for alice'], "bob's logins changed nothing");
    await back.post('/api/v1/logout');
  });

  test('persistent - unsubscribe removes the durable subscription for good', async () => {
    const c = await login('alice', alice.password, { persistent: true, sessionId: 'alice-3' });
    await subscribe(c, { destinationName: 'ps/d' });
    await publish('ps/d', 'held');
    assert.equal((await c.post('/api/v1/messaging/unsubscribe', { destinationName: 'ps/d' })).statusCode, 200);
    await c.post('/api/v1/logout');
    await publish('ps/d', 'away');

    const back = await login('alice', alice.password, { persistent: true, sessionId: 'alice-3' });
    assert.deepEqual(await depths(back), []);
    assert.equal((await back.post('/api/v1/messaging/consume', { destination: 'ps/d' })).statusCode, 404);
    assert.deepEqual((await consume(back)).payloads, []);
    await back.post('/api/v1/logout');
  });

  test('persistent - a user without persistent_session is refused (403) and may log in without persistent', async () => {
    const r = await s.app.inject({ method: 'POST', url: '/api/v1/login', payload: { username: 'dave', password: dave.password, persistent: true } });
    assert.equal(r.statusCode, 403);
    assert.match(r.json().status, /persistent_session/);
    assert.equal(r.cookies.length, 0, 'no login cookie');
    const ok = await s.app.inject({ method: 'POST', url: '/api/v1/login', payload: { username: 'dave', password: dave.password } });
    assert.equal(ok.statusCode, 200, ok.body);
  });

  test('persistent - a detached session is kept RestApi.persistentSessionExpiry ms (1 day), then discarded', async () => {
    const c = await login('alice', alice.password, { persistent: true, sessionId: 'alice-exp' });
    await subscribe(c, { destinationName: 'ps/e' });
    await c.post('/api/v1/logout');
    await publish('ps/e', 'away');
    const keeper = restSessionsOf(s.rt)!;
    assert.equal(s.rt.config.RestApi.persistentSessionExpiry, 86_400_000);
    assert.equal(keeper.sweep(Date.now() + 3_600_000), 0, 'an hour later it is still kept');
    assert.ok(keeper.sweep(Date.now() + 86_400_000 + 1000) >= 1, 'a day later it goes');
    const back = await login('alice', alice.password, { persistent: true, sessionId: 'alice-exp' });
    assert.deepEqual(await depths(back), []);
    assert.deepEqual((await consume(back)).payloads, []);
    await back.post('/api/v1/logout');
  });

  test('persistent - the idle timeout hibernates a persistent session instead of closing it', async () => {
    let now = 1_000_000;
    const sessions = new RestSessions(s.rt, 180_000, () => now);
    const loginRecord = { sessionId: 'idle-login', uniqueId: alice.uuid, username: 'alice', persistent: true, engineSessionId: 'alice-idle' };
    try {
      const a = sessions.get('login:idle-login', loginRecord);
      assert.equal(a.engineSessionId, durableRestSessionId(alice.uuid, 'alice-idle'));
      const sub = s.rt.engine!.subscribe({ sessionId: a.engineSessionId, filter: 'ps/idle', durable: true, maxDepth: 10, sink: { kind: 'pull' } });
      a.subs.set('ps/idle', { name: 'ps/idle', sub, transactional: false });
      sessions.changed(a);
      now += 200_000;
      sessions.sweep();
      assert.equal(sessions.size, 0, 'the idle session is gone');
      assert.equal(sub.hibernating, true, 'its subscription hibernates');
      await publish('ps/idle', 'while idle');
      const b = sessions.get('login:idle-login-2', { ...loginRecord, sessionId: 'idle-login-2' });
      assert.equal(b.subs.get('ps/idle')?.sub, sub, 'the next persistent login takes it back');
      assert.equal(sub.hibernating, false);
      assert.deepEqual(
        sub.take(10).map((d) => d.message.payload.toString()),
        ['while idle'],
      );
      sessions.discard(alice.uuid, 'alice-idle');
      assert.equal(sub.closed, true);
    } finally {
      sessions.stop();
    }
  });

  test('persistent - an in-process restart keeps the detached session and what it holds', async () => {
    const c = await login('alice', alice.password, { persistent: true, sessionId: 'alice-rs' });
    await subscribe(c, { destinationName: 'ps/rs' });
    await c.post('/api/v1/logout');
    await publish('ps/rs', 'before restart');
    await s.rt.restart();
    await publish('ps/rs', 'after restart');
    const back = await login('alice', alice.password, { persistent: true, sessionId: 'alice-rs' });
    assert.deepEqual((await consume(back, 'ps/rs')).payloads, ['before restart', 'after restart']);
    await back.post('/api/v1/logout');
  });
});

describe('persistent REST sessions across a broker restart', () => {
  test('persistent - a stopped and restarted broker restores the session, its subscriptions and held messages', async () => {
    const dataDir = tempDir();
    try {
      let s = await startServer({ dataDir, overrides: { AuthManager: { loginRateLimit: 1000 } } });
      const password = s.adminPassword;
      const login = async () => {
        const c = new RestClient(s.app);
        const r = await c.post('/api/v1/login', { username: 'admin', password, persistent: true, sessionId: 'admin-boot' });
        assert.equal(r.statusCode, 200, r.body);
        return c;
      };
      const publish = (text: string) =>
        s.inject({ method: 'POST', url: '/api/v1/messaging/publish', payload: { destinationName: 'ps/boot', message: { payload: b64(text) } } });
      try {
        const c = await login();
        assert.equal((await c.post('/api/v1/messaging/subscribe', { destinationName: 'ps/boot', maxDepth: 10, filter: "kind = 'keep'" })).statusCode, 200);
        await c.post('/api/v1/logout');
        await s.inject({ method: 'POST', url: '/api/v1/messaging/publish', payload: { destinationName: 'ps/boot', message: { payload: b64('held'), dataMap: { kind: 'keep' } } } });
        await publish('filtered out');
      } finally {
        await s.close();
      }
      s = await startServer({ dataDir, overrides: { AuthManager: { loginRateLimit: 1000 } } });
      try {
        await s.inject({ method: 'POST', url: '/api/v1/messaging/publish', payload: { destinationName: 'ps/boot', message: { payload: b64('after boot'), dataMap: { kind: 'keep' } } } });
        await publish('filtered out too');
        const back = await login();
        const r = await back.post('/api/v1/messaging/consume', { destination: 'ps/boot' });
        assert.equal(r.statusCode, 200, r.body);
        assert.deepEqual(
          (r.json().consumedMessages as Array<{ payload: string }>).map((m) => unb64(m.payload)),
          ['held', 'after boot'],
          'held before the stop, and published after the boot (the selector was restored too)',
        );
      } finally {
        await s.close();
      }
    } finally {
      removeDir(dataDir);
    }
  });
});
