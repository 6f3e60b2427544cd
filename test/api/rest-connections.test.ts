import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { MAX_TRACKED, REST_ID_BASE, RestConnections } from '../../src/api/routes/connections/rest-connections.js';
import { groupId as groupIdOf, createUser } from '../security/helpers.js';
import { startServer, type TestServer } from '../helpers.js';

/** REST sessions appear in GET /api/v1/server/connections as MAPS shows them (adapter rest-server, protocol REST). */
describe('REST sessions in the connection list', () => {
  let s: TestServer;
  let base: string;
  before(async () => {
    s = await startServer();
    await s.app.listen({ port: 0, host: '127.0.0.1' });
    base = `http://127.0.0.1:${(s.app.server.address() as { port: number }).port}`;
  });
  after(async () => s.close());

  const list = async (filter?: string) => {
    const r = await fetch(`${base}/api/v1/server/connections${filter ? `?filter=${encodeURIComponent(filter)}` : ''}`, { headers: s.auth });
    assert.equal(r.status, 200);
    return (await r.json()) as Array<Record<string, unknown>>;
  };

  test('rest connections - a Basic caller and a cookie login are listed with adapter rest-server, protocol REST, their user and address', async () => {
    const everyone = await groupIdOf(s, 'everyone');
    const dora = await createUser(s, 'rest-dora', 'correct-horse-battery', [everyone]);
    const login = await fetch(`${base}/api/v1/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'rest-dora', password: dora.password }) });
    assert.equal(login.status, 200);
    const cookie = login.headers.getSetCookie().map((c) => c.split(';')[0]).join('; ');
    const me = await fetch(`${base}/api/v1/session`, { headers: { cookie } });
    assert.equal(me.status, 200);
    await fetch(`${base}/health`); // no credentials, no session: not listed

    const all = await list();
    const rest = all.filter((c) => c.adapter === 'rest-server');
    const admin = rest.find((c) => c.user === 'admin');
    const doraConn = rest.find((c) => c.user === 'rest-dora');
    assert.ok(admin, JSON.stringify(rest));
    assert.ok(doraConn, JSON.stringify(rest));
    for (const c of [admin, doraConn]) {
      assert.equal(c.protocolName, 'REST');
      assert.equal(c.protocolVersion, '1.1');
      assert.match(String(c.name), /^http_\/127\.0\.0\.1:\d+$/);
      assert.ok((c.id as number) >= REST_ID_BASE);
      assert.ok((c.totalBytesWritten as number) > 0, 'answer bytes are counted');
    }
    assert.equal(rest.length, 2, 'one entry per session, not per request; the anonymous /health call is none');
    assert.equal(all[0]!.adapter, 'rest-server', 'REST sessions come first, as in MAPS');
    const filtered = await list("protocolName = 'REST' AND user = 'rest-dora'");
    assert.deepEqual(filtered.map((c) => c.user), ['rest-dora']);
  });

  test('rest connections - idle sessions drop out after the inactive timeout and the table is capped', () => {
    let now = 1_000_000;
    const t = new RestConnections(() => 10_000, () => now);
    const info = { user: 'u', address: '10.0.0.1', port: 1234, scheme: 'http', httpVersion: '1.1', bytesIn: 10, bytesOut: 20, at: now };
    t.seen('a', info);
    now += 6_000;
    t.seen('b', { ...info, at: now });
    now += 6_000;
    assert.deepEqual(t.list().map((c) => c.name), ['http_/10.0.0.1:1234'], 'a went idle, b stays');
    for (let i = 0; i < MAX_TRACKED + 50; i++) t.seen(`k${i}`, { ...info, at: now });
    assert.equal(t.size, MAX_TRACKED);
  });
});
