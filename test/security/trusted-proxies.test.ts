import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { forwardedFor } from '../../src/api/plugins/client-address.js';
import { securityOf } from '../../src/security/service.js';
import { basicAuth, startServer, type TestServer } from '../helpers.js';
import { auditLines, createUser } from './helpers.js';

/**
 * Issue 20 item 5, REST: behind reverse proxies listed in RestApi.trustedProxies the client is the rightmost
 * X-Forwarded-For (or Forwarded) address that is not a trusted proxy; the header of any other peer is ignored. That
 * address is what the per-address login limits, the audit and GET /api/v1/server/connections use; a request that
 * came through a proxy gets no loopback lockout exemption. Requests come from any address with
 * `inject({ remoteAddress })`.
 */
describe('trusted proxies', () => {
  let s: TestServer;
  const PROXY = '10.0.0.5';

  before(async () => {
    s = await startServer({
      overrides: {
        RestApi: { trustedProxies: ['10.0.0.0/24', '::1'] },
        AuthManager: { loginRateLimit: 100000, addressFailureLimit: 5, addressBlockSeconds: 300 },
      },
    });
  });
  after(async () => s.close());

  const get = (url: string, headers: Record<string, string>, remoteAddress: string) => s.app.inject({ url, headers, remoteAddress });

  test('trusted proxies - failures behind a trusted proxy count against the forwarded client: it is blocked, other clients of the proxy and loopback are not', async () => {
    const bad = basicAuth('no-such-user', 'not-the-password'); // an unknown name: the per-user lock of admin stays out of it
    for (let i = 0; i < 5; i++) {
      const r = await get('/api/v1/session', { ...bad, 'x-forwarded-for': '203.0.113.50' }, PROXY);
      assert.equal(r.statusCode, 401);
    }
    const blocked = await get('/api/v1/session', { ...s.auth, 'x-forwarded-for': '203.0.113.50' }, PROXY);
    assert.equal(blocked.statusCode, 429, 'the forwarded client is blocked, even with the right password');
    assert.ok(Number(blocked.headers['retry-after']) > 0);
    assert.equal((await get('/api/v1/session', { ...s.auth, 'x-forwarded-for': '203.0.113.51' }, PROXY)).statusCode, 200, 'another client of the same proxy');
    assert.equal((await get('/api/v1/session', s.auth, PROXY)).statusCode, 200, 'the proxy itself (no header)');
    assert.equal((await get('/api/v1/session', s.auth, '127.0.0.1')).statusCode, 200, 'admin on loopback');
    const lines = await auditLines(s, (l) => l.event === 'login.address_blocked' && l.clientAddress === '203.0.113.50');
    assert.ok(lines.some((l) => l.event === 'login.failed' && l.clientAddress === '203.0.113.50'), 'failures audited with the client address');
  });

  test('trusted proxies - the rightmost untrusted hop is the client; the connection list shows it', async () => {
    const u = await createUser(s, 'xff-user', 'xff-password-123');
    // the client forged 198.51.100.1; the trusted proxies 10.0.0.7 and ::1 appended what they saw
    const r = await get('/api/v1/session', { ...u.auth, 'x-forwarded-for': '198.51.100.1, 203.0.113.60, 10.0.0.7' }, PROXY);
    assert.equal(r.statusCode, 200);
    const list = (await s.inject('/api/v1/server/connections')).json() as Array<{ user: string; name: string; adapter: string }>;
    const mine = list.find((c) => c.adapter === 'rest-server' && c.user === 'xff-user');
    assert.match(mine?.name ?? '', /^http_\/203\.0\.113\.60:\d+$/, JSON.stringify(mine));
  });

  test('trusted proxies - the header of a peer that is no trusted proxy is ignored (its failures count against the peer)', async () => {
    const sm = securityOf(s.rt);
    const bad = basicAuth('admin', 'still-not-the-password');
    for (let i = 0; i < 5; i++) {
      // a different forged client every time: it must not help
      assert.equal((await get('/api/v1/session', { ...bad, 'x-forwarded-for': `203.0.113.${100 + i}` }, '192.0.2.9')).statusCode, 401);
    }
    assert.ok(sm.lockouts.addresses.blockedSeconds('192.0.2.9') > 0, 'the real peer is blocked');
    assert.equal(sm.lockouts.addresses.blockedSeconds('203.0.113.100'), 0, 'the forged address is not');
    assert.equal((await get('/api/v1/session', { ...s.auth, 'x-forwarded-for': '203.0.113.200' }, '192.0.2.9')).statusCode, 429);
  });

  test('trusted proxies - no loopback lockout exemption for a request that came through a proxy; a direct one is let through and audited', async () => {
    const sm = securityOf(s.rt);
    const u = await createUser(s, 'exempt-victim', 'victim-password-123');
    // locked by failures from five forwarded clients (each below the address limit)
    for (let i = 0; i < 5; i++) {
      await get('/api/v1/session', { ...basicAuth('exempt-victim', `wrong-${i}`), 'x-forwarded-for': `198.51.100.${10 + i}` }, PROXY);
    }
    assert.equal(sm.lockouts.status('exempt-victim')?.locked, true);
    // a proxy on the same host (not trusted) forwarding an attacker: loopback address, but a forwarding header
    const viaLocalProxy = await get('/api/v1/session', { ...u.auth, 'x-forwarded-for': '203.0.113.77' }, '127.0.0.1');
    assert.equal(viaLocalProxy.statusCode, 401, 'locked: the loopback exemption does not apply behind a proxy');
    const viaForwarded = await get('/api/v1/session', { ...u.auth, forwarded: 'for=203.0.113.78' }, '127.0.0.1');
    assert.equal(viaForwarded.statusCode, 401, 'nor with a Forwarded header');
    const loginViaProxy = await s.app.inject({ method: 'POST', url: '/api/v1/login', payload: { username: 'exempt-victim', password: u.password }, headers: { 'x-forwarded-for': '203.0.113.79' }, remoteAddress: '127.0.0.1' });
    assert.equal(loginViaProxy.statusCode, 401, 'POST /api/v1/login too');
    // directly on loopback: exempt, and audited
    assert.equal((await get('/api/v1/session', u.auth, '127.0.0.1')).statusCode, 200);
    await auditLines(s, (l) => l.event === 'login.lock_exempt' && l.username === 'exempt-victim' && l.clientAddress === '127.0.0.1');
    sm.lockouts.reset('exempt-victim');
  });

  test('trusted proxies - failures through a local proxy that is no trusted proxy block its clients, not the administrator on the host', async () => {
    // a reverse proxy on 127.0.0.2 (loopback, lockout-exempt) that trustedProxies does not list: every client arrives
    // from 127.0.0.2 with an X-Forwarded-For header
    const bad = basicAuth('no-such-user-2', 'guess');
    for (let i = 0; i < 5; i++) assert.equal((await get('/api/v1/session', { ...bad, 'x-forwarded-for': `203.0.113.${150 + i}` }, '127.0.0.2')).statusCode, 401);
    const throughProxy = await get('/api/v1/session', { ...s.auth, 'x-forwarded-for': '203.0.113.160' }, '127.0.0.2');
    assert.equal(throughProxy.statusCode, 429, 'the proxy side of 127.0.0.2 is blocked');
    assert.equal((await get('/api/v1/session', s.auth, '127.0.0.2')).statusCode, 200, 'admin directly on 127.0.0.2 is not');
    const lines = await auditLines(s, (l) => l.event === 'login.address_blocked' && l.clientAddress === '127.0.0.2 (proxied)');
    assert.ok(lines.some((l) => l.event === 'login.failed' && l.clientAddress === '127.0.0.2' && l.proxied === true), 'failures through the proxy are audited as proxied');
  });

  test('trusted proxies - Forwarded (RFC 7239) for= values: IPv4, quoted IPv6 with port, obfuscated nodes', () => {
    assert.deepEqual(forwardedFor('for=192.0.2.43, for="[2001:db8:cafe::17]:4711";proto=https'), ['192.0.2.43', '2001:db8:cafe::17']);
    assert.deepEqual(forwardedFor('for=192.0.2.60:8080;by=203.0.113.43'), ['192.0.2.60']);
    assert.deepEqual(forwardedFor('for=198.51.100.1, for=_hidden, for=203.0.113.9'), ['203.0.113.9'], 'only what is right of an obfuscated node');
  });
});

describe('trusted proxies (Forwarded header, small hashing queue, attempt limit)', () => {
  let s: TestServer;
  before(async () => {
    s = await startServer({
      overrides: {
        RestApi: { trustedProxies: ['10.0.0.5'], trustedProxyHeader: 'Forwarded' },
        AuthManager: { loginRateLimit: 100000, addressAttemptLimit: 4, addressAttemptWindow: 60, passwordHashWorkers: 1, passwordHashQueue: 0 },
      },
    });
  });
  after(async () => s.close());

  const login = (password: string, headers: Record<string, string>, remoteAddress: string) =>
    s.app.inject({ method: 'POST', url: '/api/v1/login', payload: { username: 'admin', password }, headers, remoteAddress });

  test('trusted proxies - with trustedProxyHeader Forwarded the for= chain is read and X-Forwarded-For is ignored', async () => {
    const u = await createUser(s, 'fwd-user', 'fwd-password-123');
    const r = await s.app.inject({ url: '/api/v1/session', headers: { ...u.auth, forwarded: 'for=198.51.100.1, for=203.0.113.90', 'x-forwarded-for': '198.51.100.99' }, remoteAddress: '10.0.0.5' });
    assert.equal(r.statusCode, 200);
    const list = (await s.inject('/api/v1/server/connections')).json() as Array<{ user: string; name: string; adapter: string }>;
    assert.match(list.find((c) => c.adapter === 'rest-server' && c.user === 'fwd-user')?.name ?? '', /^http_\/203\.0\.113\.90:\d+$/);
  });

  test('trusted proxies - password checks per address whatever the outcome (429 beyond addressAttemptLimit), and a full hashing queue answers 503', async () => {
    const codes: number[] = [];
    for (let i = 0; i < 5; i++) codes.push((await login(s.adminPassword, { forwarded: 'for=203.0.113.31' }, '10.0.0.5')).statusCode);
    assert.deepEqual(codes, [200, 200, 200, 200, 429], 'right passwords count too: the fifth is refused before any hash');
    assert.equal((await login(s.adminPassword, { forwarded: 'for=203.0.113.32' }, '10.0.0.5')).statusCode, 200, 'another client is not limited');
    // passwordHashQueue 0, one worker: concurrent checks beyond the running one are refused at once with 503
    const burst = await Promise.all(Array.from({ length: 6 }, (_, i) => login(`wrong-${i}`, { forwarded: `for=203.0.113.${40 + i}` }, '10.0.0.5')));
    const statuses = burst.map((r) => r.statusCode).sort();
    assert.ok(statuses.includes(503), `some refused as busy: ${statuses.join(',')}`);
    const busy = burst.find((r) => r.statusCode === 503)!;
    assert.ok(Number(busy.headers['retry-after']) >= 1);
    assert.match(busy.json().status, /busy/i);
    assert.ok(statuses.every((c) => c === 401 || c === 503), statuses.join(','));
  });
});
