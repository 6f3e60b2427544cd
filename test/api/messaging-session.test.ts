import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { RestSessions } from '../../src/api/rest-session.js';
import { startServer, type TestServer } from '../helpers.js';
import { b64, RestClient } from '../rest-client.js';

describe('REST messaging sessions', () => {
  let s: TestServer;
  before(async () => {
    s = await startServer({ overrides: { AuthManager: { loginRateLimit: 1000 } } });
  });
  after(async () => s.close());

  async function loggedIn(): Promise<RestClient> {
    const c = new RestClient(s.app);
    const r = await c.post('/api/v1/login', { username: 'admin', password: s.adminPassword });
    assert.equal(r.statusCode, 200, r.body);
    assert.ok(c.cookies.maps_access_token, 'the login cookie is set');
    return c;
  }

  test('session - messaging state belongs to the login session and ends with logout', async () => {
    const c = await loggedIn();
    assert.equal((await c.post('/api/v1/messaging/subscribe', { destinationName: 'sess/a', maxDepth: 5 })).statusCode, 200);
    await c.post('/api/v1/messaging/publish', { destinationName: 'sess/a', message: { payload: b64('one') } });
    const depth = await c.post('/api/v1/messaging/subscriptionDepth', { destination: 'sess/a' });
    assert.deepEqual(depth.json(), { subscriptionDepths: [{ destination: 'sess/a', depth: 1 }] });

    const other = await loggedIn();
    const theirs = await other.post('/api/v1/messaging/consume', { destination: 'sess/a' });
    assert.equal(theirs.statusCode, 404, 'another login session of the same user does not share it');

    assert.equal((await c.post('/api/v1/logout')).statusCode, 200);
    const after = await loggedIn();
    after.cookies.maps_session = c.cookies.maps_session ?? '';
    const gone = await after.post('/api/v1/messaging/consume', { destination: 'sess/a' });
    assert.equal(gone.statusCode, 404, 'the subscription ended with the logout');
    const stale = await c.post('/api/v1/messaging/consume', { destination: 'sess/a' });
    assert.equal(stale.statusCode, 401, 'the logged-out token is refused');
  });

  test('session - an idle session ends after RestApi.inactiveTimeout and its subscriptions go', async () => {
    let now = 1_000_000;
    const sessions = new RestSessions(s.rt, 180_000, () => now);
    try {
      const a = sessions.get('idle-a');
      const b = sessions.get('idle-b');
      a.subs.set('x', { name: 'x', sub: s.rt.engine!.subscribe({ sessionId: a.engineSessionId, filter: 'idle/x', sink: { kind: 'pull' } }), transactional: false });
      now += 100_000;
      sessions.get('idle-b'); // b is used, a is not
      now += 100_000;
      sessions.sweep();
      assert.equal(sessions.size, 1, 'the idle session is gone, the used one stays');
      assert.equal(s.rt.engine!.sessionSubscriptions(a.engineSessionId).length, 0, 'its subscriptions were closed');
      assert.notEqual(sessions.get('idle-a'), a, 'using the id again starts a fresh session');
      void b;
    } finally {
      sessions.stop();
    }
  });
});
