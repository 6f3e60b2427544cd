import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, type TestServer } from '../helpers.js';

/** CORS per RestApi.corsHeaders (@fastify/cors): preflights answered without credentials, allowed origins echoed. */
describe('CORS', () => {
  let s: TestServer;
  let plain: TestServer;
  before(async () => {
    s = await startServer({
      overrides: {
        RestApi: {
          corsHeaders: {
            'Access-Control-Allow-Origin': 'https://app.example, https://ops.example',
            'Access-Control-Allow-Methods': 'GET, POST, PUT, PATCH, DELETE, OPTIONS',
            'Access-Control-Allow-Headers': 'Content-Type, Authorization',
            'Access-Control-Allow-Credentials': 'true',
            'Access-Control-Max-Age': '600',
            'X-Served-By': 'switchyard',
          },
        },
      },
    });
    plain = await startServer();
  });
  after(async () => {
    await s.close();
    await plain.close();
  });

  const preflight = (t: TestServer, origin: string, url = '/api/v1/server/details/info') =>
    t.app.inject({ method: 'OPTIONS', url, headers: { origin, 'access-control-request-method': 'PATCH', 'access-control-request-headers': 'authorization, content-type' } });

  test('cors - a preflight from an allowed origin is answered 204 without credentials, with the configured headers', async () => {
    const r = await preflight(s, 'https://app.example');
    assert.equal(r.statusCode, 204, r.body);
    assert.equal(r.headers['access-control-allow-origin'], 'https://app.example');
    assert.match(String(r.headers['access-control-allow-methods']), /PATCH/);
    assert.match(String(r.headers['access-control-allow-headers']), /Authorization/);
    assert.equal(r.headers['access-control-allow-credentials'], 'true');
    assert.equal(r.headers['access-control-max-age'], '600');
    assert.match(String(r.headers.vary), /Origin/);
    const sse = await preflight(s, 'https://ops.example', '/api/v1/messaging/sse/stream/some-token');
    assert.equal(sse.statusCode, 204);
    assert.equal(sse.headers['access-control-allow-origin'], 'https://ops.example');
  });

  test('cors - an origin that is not listed gets no Access-Control-Allow-Origin', async () => {
    const r = await preflight(s, 'https://evil.example');
    assert.equal(r.headers['access-control-allow-origin'], undefined);
    const get = await s.inject({ url: '/api/v1/server/details/info', headers: { origin: 'https://evil.example' } });
    assert.equal(get.statusCode, 200);
    assert.equal(get.headers['access-control-allow-origin'], undefined);
  });

  test('cors - actual answers carry the CORS headers, errors too, plus other configured headers', async () => {
    const ok = await s.inject({ url: '/api/v1/server/details/info', headers: { origin: 'https://app.example' } });
    assert.equal(ok.statusCode, 200);
    assert.equal(ok.headers['access-control-allow-origin'], 'https://app.example');
    assert.equal(ok.headers['x-served-by'], 'switchyard');
    const denied = await s.app.inject({ url: '/api/v1/server/details/info', headers: { origin: 'https://app.example' } });
    assert.equal(denied.statusCode, 401);
    assert.equal(denied.headers['access-control-allow-origin'], 'https://app.example', 'a browser can read the 401');
    assert.equal(typeof denied.json().status, 'string');
  });

  test('cors - an SSE stream opened from an allowed origin with the token alone carries Access-Control-Allow-Origin', async () => {
    await s.app.listen({ port: 0, host: '127.0.0.1' });
    const base = `http://127.0.0.1:${(s.app.server.address() as { port: number }).port}`;
    const token = await (await fetch(`${base}/api/v1/server/log/sse`, { headers: s.auth })).text();
    const ac = new AbortController();
    const r = await fetch(`${base}/api/v1/server/log/sse/stream/${token}`, { headers: { origin: 'https://app.example', accept: 'text/event-stream' }, signal: ac.signal });
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('access-control-allow-origin'), 'https://app.example');
    assert.match(r.headers.get('content-type') ?? '', /text\/event-stream/);
    ac.abort();
    await r.body?.cancel().catch(() => {});
  });

  test('cors - without corsHeaders (the default) there is no CORS: a preflight is a JSON 404', async () => {
    const r = await preflight(plain, 'https://app.example');
    assert.equal(r.statusCode, 404);
    assert.equal(typeof r.json().status, 'string');
    assert.equal(r.headers['access-control-allow-origin'], undefined);
  });
});
