/**
 * Answers the service specification decides (issue 21 items 4-7): the refresh answers the login response, a group
 * is created from a raw body of any content type, the permission list has comma-separated strings, and the MAPS
 * client trip-ups (acl/check's echo, endPointConfig.type, the Connections / Devices section names, GET /api/v1/name
 * for a plain user).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startServer, type TestServer } from '../helpers.js';
import { createUser, login, tokenOf } from '../security/helpers.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

describe('spec answers', () => {
  let s: TestServer;
  let plain: { uuid: string; auth: { authorization: string }; password: string };

  before(async () => {
    s = await startServer({
      overrides: {
        NetworkManager: {
          data: [
            { name: 'tcp', url: 'tcp://127.0.0.1:0/', protocolConfigs: [{ type: 'mqtt' }] },
            { name: 'web', url: 'ws://127.0.0.1:0/mqtt', protocolConfigs: [{ type: 'mqtt' }, { type: 'ws' }] },
          ],
        },
      },
    });
    plain = await createUser(s, 'plain-pat', 'Plain-password-1');
  });

  after(async () => {
    await s?.close();
  });

  test('auth - refreshToken answers the login response (status, username, accessMap, uniqueId) with a new cookie', async () => {
    const l = await login(s, 'plain-pat', 'Plain-password-1');
    assert.equal(l.statusCode, 200, l.body);
    const r = await s.app.inject({ url: '/api/v1/refreshToken', headers: { cookie: `maps_access_token=${tokenOf(l)}` } });
    assert.equal(r.statusCode, 200, r.body);
    assert.match(String(r.headers['content-type']), /^application\/json/);
    const body = r.json();
    assert.equal(body.status, 'Success');
    assert.equal(body.username, 'plain-pat');
    assert.equal(body.uniqueId, plain.uuid);
    assert.match(body.uniqueId, UUID);
    assert.deepEqual(body.accessMap, {});
    // the same shape as the login's answer
    assert.deepEqual(Object.keys(body).sort(), Object.keys(l.json()).sort());
    assert.ok(Date.parse(body.sessionExpiresAt) >= Date.parse(l.json().sessionExpiresAt), 'the session is extended');
    const next = tokenOf(r);
    const session = await s.app.inject({ url: '/api/v1/session', headers: { authorization: `Bearer ${next}` } });
    assert.equal(session.statusCode, 200);
    assert.equal(session.json().username, 'plain-pat');
    // Bearer works the same way, and Basic has nothing to refresh (a JSON 400)
    const bearer = await s.app.inject({ url: '/api/v1/refreshToken', headers: { authorization: `Bearer ${next}` } });
    assert.equal(bearer.statusCode, 200);
    assert.equal(bearer.json().username, 'plain-pat');
    const basic = await s.app.inject({ url: '/api/v1/refreshToken', headers: plain.auth });
    assert.equal(basic.statusCode, 400);
    assert.match(basic.json().status, /no login session to refresh/);
  });

  test('groups - a group is created from the raw body in any content type: octet-stream, none, text, form, a JSON string', async () => {
    const post = (payload: string | Buffer, contentType?: string) =>
      s.inject({ method: 'POST', url: '/api/v1/auth/groups', payload, headers: contentType ? { 'content-type': contentType } : {} });
    const cases: Array<[string, string | Buffer, string | undefined]> = [
      ['octets', Buffer.from('octets'), 'application/octet-stream'],
      ['no-type', Buffer.from('no-type'), undefined],
      ['plain-text', 'plain-text', 'text/plain; charset=utf-8'],
      ['formish', 'formish', 'application/x-www-form-urlencoded'],
      ['xmlish', 'xmlish', 'application/xml'],
      ['json-string', '"json-string"', 'application/json'],
      ['2026', '2026', 'application/json'], // a bare JSON number is the raw text
    ];
    for (const [name, payload, type] of cases) {
      const r = await post(payload, type);
      assert.equal(r.statusCode, 201, `${type ?? 'no content type'}: ${r.body}`);
      assert.equal(r.json().status, `Successfully added group ${name}`);
      const g = await s.inject(`/api/v1/auth/groups/${r.json().uniqueId}`);
      assert.equal(g.json().name, name);
    }
    // still refused: an empty body, and a JSON object (a JSON body that is not a string is not a name)
    const empty = await post(Buffer.alloc(0), 'application/octet-stream');
    assert.equal(empty.statusCode, 400);
    assert.match(empty.json().status, /Group name is required/);
    const obj = await post('{"name":"x"}', 'application/json');
    assert.equal(obj.statusCode, 400);
    assert.equal(typeof obj.json().status, 'string');
    // other routes keep their parsers: JSON bodies elsewhere are unaffected, octet-stream is still a 415 there
    const user = await s.inject({ method: 'POST', url: '/api/v1/auth/users', headers: { 'content-type': 'application/octet-stream' }, payload: Buffer.from('{}') });
    assert.equal(user.statusCode, 415);
  });

  test('acl - the permission list answers comma-separated strings, as the specification says', async () => {
    const r = await s.inject('/api/v1/auth/permissions');
    assert.equal(r.statusCode, 200);
    const body = r.json();
    assert.equal(body.schemaLoadingVersion, 0);
    assert.equal(typeof body.permissions, 'string');
    assert.equal(typeof body.resourceTypes, 'string');
    const perms = body.permissions.split(',');
    for (const p of ['connect', 'publish', 'subscribe', 'view', 'manage_interfaces', 'rest_api_access', 'wildcard_subscription']) assert.ok(perms.includes(p), `${p} listed`);
    assert.ok(perms.every((p: string) => /^[a-z_]+$/.test(p)), body.permissions);
    const types = body.resourceTypes.split(',');
    assert.deepEqual(types.slice(0, 7), ['Server', 'Topic', 'Queue', 'TemporaryTopic', 'TemporaryQueue', 'Schema', 'Metrics']);
    // the details MAPS gives stay available
    assert.deepEqual(body.permissionDetails.map((p: { name: string }) => p.name), perms);
    assert.deepEqual(body.permissionDetails.find((p: { name: string }) => p.name === 'wildcard_subscription'), { name: 'wildcard_subscription', description: 'Allows wildcard subscriptions', server: true });
    assert.deepEqual(body.resourceTypeDetails.map((t: { name: string }) => t.name), types);
  });

  test('acl - acl/check echoes the permission as it was sent (PUBLISH, Publish, publish)', async () => {
    for (const permission of ['PUBLISH', 'Publish', 'publish']) {
      const r = await s.inject({ method: 'POST', url: '/api/v1/auth/acl/check', payload: { identityId: plain.uuid, resourceType: 'Topic', resourceKey: '/plant/line1', permission } });
      assert.equal(r.statusCode, 200, r.body);
      assert.equal(r.json().permission, permission);
      assert.equal(r.json().decision, 'ALLOW', 'everyone may publish under /');
    }
    const deny = await s.inject({ method: 'POST', url: '/api/v1/auth/acl/check', payload: { identityId: plain.uuid, resourceType: 'Server', resourceKey: s.rt.serverName, permission: 'MANAGE_CONFIG' } });
    assert.equal(deny.json().decision, 'DENY');
    assert.equal(deny.json().permission, 'MANAGE_CONFIG');
  });

  test('interfaces - endPointConfig carries its type as MAPS sends it (tcp; ws:// runs over tcp)', async () => {
    const list = await s.inject('/api/v1/server/interfaces');
    assert.equal(list.statusCode, 200);
    const byName = Object.fromEntries((list.json() as Array<{ name: string; config: { endPointConfig: { type?: string } } }>).map((i) => [i.name, i.config.endPointConfig]));
    assert.equal(byName.tcp!.type, 'tcp');
    assert.equal(byName.web!.type, 'tcp');
    assert.equal(Object.keys(byName.tcp!)[0], 'type', 'first, as MAPS writes it');
    const one = await s.inject('/api/v1/server/interface/tcp');
    assert.equal(one.json().config.endPointConfig.type, 'tcp');
    // what GET answers can be PUT back as it is
    const put = await s.inject({ method: 'PUT', url: '/api/v1/server/interface/tcp', payload: one.json().config });
    assert.equal(put.statusCode, 200, put.body);
  });

  test('config - the MAPS section names Connections and Devices are served like our aliases', async () => {
    for (const [maps, ours] of [
      ['Connections', 'NetworkConnectionManager'],
      ['Devices', 'DeviceManager'],
      ['connections', 'integrations'],
      ['devices', 'hardware'],
    ]) {
      const a = await s.inject(`/api/v1/server/config/${encodeURIComponent(maps!)}`);
      assert.equal(a.statusCode, 200, `${maps}: ${a.body}`);
      const b = await s.inject(`/api/v1/server/config/${ours}`);
      assert.deepEqual(a.json(), b.json(), `${maps} is ${ours}`);
    }
    assert.equal((await s.inject('/api/v1/server/config/Nonsense')).statusCode, 404);
  });

  test('server - GET /api/v1/name answers a plain logged-in user; without credentials 401', async () => {
    const r = await s.app.inject({ url: '/api/v1/name', headers: plain.auth });
    assert.equal(r.statusCode, 200, r.body);
    assert.equal(r.json(), s.rt.serverName);
    const anon = await s.app.inject({ url: '/api/v1/name' });
    assert.equal(anon.statusCode, 401);
  });
});
