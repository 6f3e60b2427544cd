import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { ROOT, startServer, type TestServer } from '../helpers.js';

/** The console's routes in process (app.inject): on by default, off with RestApi.enableConsole: false. */
describe('console routes', () => {
  let on: TestServer;
  let off: TestServer;
  before(async () => {
    execFileSync(process.execPath, [join(ROOT, 'scripts/console.mjs'), '--if-stale'], { cwd: ROOT, stdio: 'ignore' });
    [on, off] = await Promise.all([startServer(), startServer({ overrides: { RestApi: { enableConsole: false } } })]);
  });
  after(async () => {
    await Promise.all([on?.close(), off?.close()]);
  });

  test('console routes - the files are public, revalidated by ETag, under the CSP; unknown files are a JSON 404', async () => {
    const r = await on.app.inject('/console/'); // no credentials: the login form is one of these files
    assert.equal(r.statusCode, 200);
    assert.match(r.body, /<script type="module" src="\/console\/main.js"><\/script>/);
    assert.match(String(r.headers['cache-control']), /max-age=0/);
    const etag = String(r.headers.etag);
    assert.equal((await on.app.inject({ url: '/console/', headers: { 'if-none-match': etag } })).statusCode, 304);
    for (const f of ['main.js', 'style.css', 'favicon.svg']) {
      const x = await on.app.inject(`/console/${f}`);
      assert.equal(x.statusCode, 200, f);
      assert.match(String(x.headers['content-security-policy']), /^default-src 'self'; script-src 'self'; style-src 'self';/);
      assert.equal(x.headers['x-content-type-options'], 'nosniff');
    }
    const missing = await on.app.inject('/console/nothing.js');
    assert.equal(missing.statusCode, 404);
    assert.equal(typeof missing.json().status, 'string');
    assert.equal((await on.app.inject('/console/../package.json')).statusCode, 404);
  });

  test('console routes - a 401 to a script (X-Requested-With: XMLHttpRequest) has no Basic challenge, which would open the browser\'s password dialog', async () => {
    const plain = await on.app.inject('/api/v1/session');
    assert.equal(plain.statusCode, 401);
    assert.match(String(plain.headers['www-authenticate']), /^Basic realm="switchyard"/, 'other clients are still offered Basic');
    const script = await on.app.inject({ url: '/api/v1/session', headers: { 'x-requested-with': 'XMLHttpRequest' } });
    assert.equal(script.statusCode, 401);
    assert.match(script.json().status, /User not authenticated/);
    assert.deepEqual([script.headers['www-authenticate']].flat(), ['Bearer realm="switchyard", error="invalid_request"']);
    const badLogin = await on.app.inject({ method: 'POST', url: '/api/v1/login', headers: { 'x-requested-with': 'XMLHttpRequest' }, payload: { username: 'admin', password: 'wrong-password-1' } });
    assert.equal(badLogin.statusCode, 401);
    assert.doesNotMatch(String(badLogin.headers['www-authenticate']), /Basic/);
  });

  test('console routes - RestApi.enableConsole: false leaves / and /console/ JSON 404s', async () => {
    for (const url of ['/', '/console/', '/console/main.js']) {
      const r = await off.app.inject(url);
      assert.equal(r.statusCode, 404, url);
      assert.equal(typeof r.json().status, 'string');
    }
    assert.equal((await on.app.inject('/')).statusCode, 302);
  });
});
