import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { SignJWT } from 'jose';
import { basicAuth, startServer, type TestServer } from '../helpers.js';
import { createUser, login, tokenOf } from './helpers.js';

describe('login, sessions and tokens', () => {
  let s: TestServer;
  before(async () => {
    s = await startServer();
  });
  after(async () => s.close());

  const session = (headers: Record<string, string>) => s.app.inject({ url: '/api/v1/session', headers });
  const bearer = (t: string) => ({ authorization: `Bearer ${t}` });
  const cookie = (t: string) => ({ cookie: `maps_access_token=${t}` });

  test('login - success sets an HttpOnly SameSite cookie with a 15-minute JWT; longLived gives 7 days', async () => {
    const r = await login(s, 'admin', s.adminPassword);
    assert.equal(r.statusCode, 200);
    const body = r.json();
    assert.equal(body.status, 'Success');
    assert.equal(body.username, 'admin');
    assert.deepEqual(body.groupList, ['admins', 'everyone']);
    const set = String(r.headers['set-cookie']);
    assert.match(set, /^maps_access_token=[\w-]+\.[\w-]+\.[\w-]+;/);
    assert.match(set, /Max-Age=900/);
    assert.match(set, /HttpOnly/);
    assert.match(set, /SameSite=Strict/);
    assert.match(set, /Path=\//);
    assert.doesNotMatch(set, /Secure/, 'plain HTTP: no Secure flag');
    const header = JSON.parse(Buffer.from(tokenOf(r).split('.')[0]!, 'base64url').toString());
    assert.equal(header.alg, 'HS256');
    const long = await login(s, 'admin', s.adminPassword, { longLived: true });
    assert.match(String(long.headers['set-cookie']), /Max-Age=604800/);
  });

  test('login - the cookie, the same JWT as Bearer, and Basic all authenticate; /session says how', async () => {
    const t = tokenOf(await login(s, 'admin', s.adminPassword));
    const viaCookie = await session(cookie(t));
    assert.equal(viaCookie.statusCode, 200);
    assert.equal(viaCookie.json().authenticationMethod, 'cookie');
    assert.equal(viaCookie.json().username, 'admin');
    assert.ok(viaCookie.json().sessionExpiresAt);
    const viaBearer = await session(bearer(t));
    assert.equal(viaBearer.statusCode, 200);
    assert.equal(viaBearer.json().authenticationMethod, 'bearer');
    const viaBasic = await session(s.auth);
    assert.equal(viaBasic.statusCode, 200);
    assert.equal(viaBasic.json().authenticationMethod, 'basic');
  });

  test('login - bad credentials are a 401 with WWW-Authenticate, never a 500; malformed input is a 400', async () => {
    const bad = await login(s, 'admin', 'not-the-password');
    assert.equal(bad.statusCode, 401);
    assert.deepEqual(bad.json(), { status: 'Invalid username or password' });
    assert.match(String(bad.headers['www-authenticate']), /Basic realm="switchyard"/);
    assert.equal(bad.headers['set-cookie'], undefined);
    const unknown = await login(s, 'no-such-user', 'whatever-password');
    assert.equal(unknown.statusCode, 401);
    assert.deepEqual(unknown.json(), { status: 'Invalid username or password' }, 'an unknown name looks the same as a wrong password');
    const noPassword = await s.app.inject({ method: 'POST', url: '/api/v1/login', payload: { username: 'admin' } });
    assert.equal(noPassword.statusCode, 400);
    assert.match(noPassword.json().status, /password/);
    const junk = await s.app.inject({ method: 'POST', url: '/api/v1/login', headers: { 'content-type': 'application/json' }, payload: '{"username":' });
    assert.equal(junk.statusCode, 400);
    assert.match(junk.json().status, /Malformed JSON/);
    const wrongTypes = await s.app.inject({ method: 'POST', url: '/api/v1/login', payload: { username: 5, password: ['x'] } });
    assert.equal(wrongTypes.statusCode, 400);
  });

  test('tokens - a tampered signature is a 401', async () => {
    const t = tokenOf(await login(s, 'admin', s.adminPassword));
    const [h, p, sig] = t.split('.') as [string, string, string];
    const flipped = sig.slice(0, -2) + (sig.slice(-2) === 'AA' ? 'AB' : 'AA');
    const r = await session(bearer(`${h}.${p}.${flipped}`));
    assert.equal(r.statusCode, 401);
    assert.match(String(r.headers['www-authenticate']), /error="invalid_token"/);
    const claims = JSON.parse(Buffer.from(p, 'base64url').toString());
    const forged = Buffer.from(JSON.stringify({ ...claims, sub: 'someone-else' })).toString('base64url');
    assert.equal((await session(bearer(`${h}.${forged}.${sig}`))).statusCode, 401, 'changed claims with the old signature');
  });

  test('tokens - alg: none is a 401', async () => {
    const t = tokenOf(await login(s, 'admin', s.adminPassword));
    const claims = t.split('.')[1]!;
    const none = Buffer.from(JSON.stringify({ alg: 'none', typ: 'JWT' })).toString('base64url');
    const r = await session(bearer(`${none}.${claims}.`));
    assert.equal(r.statusCode, 401);
    const viaCookie = await session(cookie(`${none}.${claims}.`));
    assert.equal(viaCookie.statusCode, 401);
    assert.match(String(viaCookie.headers['set-cookie']), /maps_access_token=;/, 'a bad cookie is cleared');
  });

  test('tokens - an expired token is a 401 saying it expired', async () => {
    const good = tokenOf(await login(s, 'admin', s.adminPassword));
    const claims = JSON.parse(Buffer.from(good.split('.')[1]!, 'base64url').toString());
    const key = new Uint8Array(await s.rt.store.secret('jwt-hs256', 64));
    const now = Math.floor(Date.now() / 1000);
    const expired = await new SignJWT({ sid: claims.sid, uid: claims.uid })
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('admin')
      .setIssuer('switchyard')
      .setIssuedAt(now - 3600)
      .setExpirationTime(now - 60)
      .sign(key);
    const r = await session(bearer(expired));
    assert.equal(r.statusCode, 401);
    assert.match(r.json().status, /expired/);
  });

  test('tokens - after logout the same JWT is refused', async () => {
    const t = tokenOf(await login(s, 'admin', s.adminPassword));
    assert.equal((await session(cookie(t))).statusCode, 200);
    const out = await s.app.inject({ method: 'POST', url: '/api/v1/logout', headers: cookie(t) });
    assert.equal(out.statusCode, 200);
    assert.deepEqual(out.json(), { status: 'Success' });
    assert.match(String(out.headers['set-cookie']), /maps_access_token=;.*(Max-Age=0|Expires=Thu, 01 Jan 1970)/);
    const again = await session(cookie(t));
    assert.equal(again.statusCode, 401);
    assert.match(again.json().status, /session of this token has ended/);
    assert.equal((await session(bearer(t))).statusCode, 401);
  });

  test('tokens - refreshToken renews the cookie for the same session; Basic has nothing to refresh', async () => {
    const t = tokenOf(await login(s, 'admin', s.adminPassword, { longLived: true }));
    const r = await s.app.inject({ url: '/api/v1/refreshToken', headers: cookie(t) });
    assert.equal(r.statusCode, 200);
    // the specification: refresh answers the login response (MAPS answered the text ok)
    assert.equal(r.json().status, 'Success');
    assert.equal(r.json().username, 'admin');
    assert.match(String(r.headers['set-cookie']), /Max-Age=604800/, 'a long-lived login stays long-lived');
    const t2 = tokenOf(r);
    assert.equal((await session(cookie(t2))).statusCode, 200);
    const basic = await s.app.inject({ url: '/api/v1/refreshToken', headers: s.auth });
    assert.equal(basic.statusCode, 400);
    assert.match(basic.json().status, /no login session to refresh/);
  });

  test('tokens - Basic: a wrong password, a malformed header and an unknown scheme are 401s', async () => {
    assert.equal((await session(basicAuth('admin', 'wrong-password!'))).statusCode, 401);
    const malformed = await session({ authorization: 'Basic !!!not-base64' });
    assert.equal(malformed.statusCode, 401);
    assert.match(malformed.json().status, /Malformed Basic credentials/);
    const digest = await session({ authorization: 'Digest username="admin"' });
    assert.equal(digest.statusCode, 401);
    assert.match(digest.json().status, /Unsupported Authorization scheme 'Digest'/);
    assert.equal((await session({ authorization: 'Bearer ' })).statusCode, 401);
    assert.equal((await session({ authorization: 'Bearer a.b.c' })).statusCode, 401);
  });

  test("tokens - a password change ends the user's sessions; deleting the user ends them too", async () => {
    const u = await createUser(s, 'tok-user', 'first-password-1', []);
    await s.inject({ method: 'POST', url: `/api/v1/auth/groups/${(await s.inject("/api/v1/auth/groups?filter=name%20%3D%20'everyone'")).json()[0].uniqueId}/${u.uuid}` });
    const t = tokenOf(await login(s, 'tok-user', 'first-password-1'));
    assert.equal((await session(cookie(t))).statusCode, 200);
    await s.inject({ method: 'PUT', url: `/api/v1/auth/users/${u.uuid}/password`, payload: { newPassword: 'second-password-2' } });
    assert.equal((await session(cookie(t))).statusCode, 401);
    const t2 = tokenOf(await login(s, 'tok-user', 'second-password-2'));
    assert.equal((await s.inject({ method: 'DELETE', url: `/api/v1/auth/users/${u.uuid}` })).statusCode, 204);
    assert.equal((await session(cookie(t2))).statusCode, 401);
  });

  test('tokens - a session survives a server restart (sessions are kept in the store)', async () => {
    const t = tokenOf(await login(s, 'admin', s.adminPassword));
    await s.rt.restart();
    assert.equal((await session(cookie(t))).statusCode, 200);
  });
});

describe('login rate limit', () => {
  let s: TestServer;
  before(async () => {
    s = await startServer({ overrides: { AuthManager: { loginRateLimit: 3 } } });
  });
  after(async () => s.close());

  test('login - attempts beyond the per-address limit are a 429 with Retry-After', async () => {
    for (let i = 0; i < 3; i++) assert.equal((await login(s, 'admin', 'wrong-password-x')).statusCode, 401);
    const r = await login(s, 'admin', s.adminPassword);
    assert.equal(r.statusCode, 429);
    assert.match(r.json().status, /Too many login attempts from 127\.0\.0\.1; try again in \d+ s/);
    assert.ok(Number(r.headers['retry-after']) > 0);
    assert.equal((await s.inject('/api/v1/session')).statusCode, 200, 'other routes are not limited');
  });
});
