import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { adminPasswordOf, removeDir, spawnBroker, startServer, tempDir, type BrokerProcess } from '../helpers.js';

describe('first boot and anonymous access', () => {
  const dirs: string[] = [];
  const procs: BrokerProcess[] = [];
  after(async () => {
    for (const p of procs) await p.stop('SIGKILL');
    dirs.forEach(removeDir);
  });

  test('first boot - admin is created with a password printed once and kept in admin_password (0600); a restart keeps it', async () => {
    const data = tempDir();
    dirs.push(data);
    const first = await spawnBroker({ SWITCHYARD_DATA_DIR: data });
    procs.push(first);
    const password = adminPasswordOf(data);
    assert.ok(password.length >= 12);
    assert.equal(statSync(join(data, 'admin_password')).mode & 0o777, 0o600);
    assert.match(first.stdout(), new RegExp(`created user "admin" with password: ${password.replace(/[.*+?^${}()|[\]\\-]/g, '\\$&')}`));
    const base = `http://127.0.0.1:${first.port}`;
    assert.equal((await fetch(`${base}/api/v1/server/details/info`)).status, 401);
    const session = await (await fetch(`${base}/api/v1/session`, { headers: first.auth() })).json();
    assert.equal(session.username, 'admin');
    assert.deepEqual(session.groupList, ['admins', 'everyone']);
    const login = await fetch(`${base}/api/v1/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'admin', password }) });
    assert.equal(login.status, 200);
    assert.equal(await first.stop(), 0);
    const second = await spawnBroker({ SWITCHYARD_DATA_DIR: data });
    procs.push(second);
    assert.doesNotMatch(second.stdout(), /created user "admin"/, 'printed once, on the first boot only');
    assert.equal((await fetch(`http://127.0.0.1:${second.port}/api/v1/session`, { headers: second.auth() })).status, 200);
    await second.stop();
  });

  test('anonymous - off by default; SWITCHYARD_ALLOW_ANONYMOUS=true lets callers without credentials act as anonymous', async () => {
    const data = tempDir();
    dirs.push(data);
    const b = await spawnBroker({ SWITCHYARD_DATA_DIR: data, SWITCHYARD_ALLOW_ANONYMOUS: 'true' });
    procs.push(b);
    const base = `http://127.0.0.1:${b.port}`;
    const s = await (await fetch(`${base}/api/v1/session`)).json();
    assert.equal(s.username, 'anonymous');
    assert.equal(s.authenticationMethod, 'anonymous');
    assert.equal((await fetch(`${base}/api/v1/messaging/sse?destination=a/b`)).status, 200, 'everyone may connect and subscribe');
    assert.equal((await fetch(`${base}/api/v1/server/details/stats`)).status, 403, 'server-wide views (view_stats) are for operators, not everyone');
    assert.equal((await fetch(`${base}/api/v1/auth/users`)).status, 403, 'but not manage users');
    assert.equal((await fetch(`${base}/api/v1/session`, { headers: { authorization: 'Basic YWRtaW46d3Jvbmc=' } })).status, 401, 'bad credentials are still refused');
    await b.stop();
  });

  test('anonymous - the anonymous principal may publish but not subscribe to test/nosubscribe', async () => {
    const s = await startServer({ overrides: { AuthManager: { allowAnonymous: true } } });
    try {
      const p = await s.rt.security.authenticate(undefined, undefined, { protocol: 'MQTT', clientAddress: '127.0.0.1' });
      assert.equal(p.username, 'anonymous');
      assert.equal(p.anonymous, true);
      assert.equal(s.rt.security.isAllowed(p, 'connect', 'Server', s.rt.serverName), true);
      assert.equal(s.rt.security.isAllowed(p, 'publish', 'Topic', 'test/nosubscribe'), true);
      assert.equal(s.rt.security.isAllowed(p, 'subscribe', 'Topic', 'test/nosubscribe'), false);
      assert.equal(s.rt.security.isAllowed(p, 'subscribe', 'Topic', 'test/other'), true);
      assert.equal(s.rt.security.isAllowed(p, 'manage_config', 'Server', s.rt.serverName), false);
    } finally {
      await s.close();
    }
    const closed = await startServer();
    try {
      await assert.rejects(closed.rt.security.authenticate(undefined, undefined, { protocol: 'MQTT' }), /Credentials are required/);
      await assert.rejects(closed.rt.security.authenticate('admin', 'wrong', { protocol: 'MQTT' }), /Invalid username or password/);
      const admin = await closed.rt.security.authenticate('admin', Buffer.from(closed.adminPassword), { protocol: 'MQTT' });
      assert.equal(admin.username, 'admin');
    } finally {
      await closed.close();
    }
  });

  test('auth off - startServer({ auth: false }) needs no credentials and creates no admin', async () => {
    const s = await startServer({ auth: false });
    try {
      assert.equal((await s.app.inject('/api/v1/server/details/info')).statusCode, 200);
      assert.equal(s.adminPassword, '');
    } finally {
      await s.close();
    }
  });
});
