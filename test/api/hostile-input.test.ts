import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { routeTable, startServer, type TestServer, type RouteMethod } from '../helpers.js';

/**
 * Walks the live route table as admin and throws malformed and hostile input at every route: odd path parameters,
 * nonsense query parameters, broken JSON, wrong JSON types, wrong content types. Every answer must be a 4xx (or a
 * success) with a JSON `{"status": "..."}` body for errors — never a 5xx — and the server must keep serving.
 * New routes are covered without editing this test.
 */
const PATH_VALUES = ['x', '%00', 'a'.repeat(900), 'a'.repeat(3000), '%E0%A4%A', '..%2F..%2Fetc', '%F0%9F%92%A9', '-1', '99999999999999999999999'];
const QUERY =
  'filter=%27%28%28&size=abc&sortBy=Nope&pageSize=-1&pageNumber=-5&prefix=%00%2B%23&destinationName=&destination=&depth=x&resourceType=Nope&resourceKey=&batchTimeoutMillis=-3&maxDepth=0&retainMessage=maybe';
const deep = (n: number): unknown => (n === 0 ? 1 : { a: deep(n - 1) });
const BODIES: Array<{ type: string; payload: string }> = [
  { type: 'application/json', payload: '{"state": ' },
  { type: 'application/json', payload: '[1, 2, 3]' },
  { type: 'application/json', payload: 'null' },
  { type: 'application/json', payload: '"just a string"' },
  { type: 'application/json', payload: '42' },
  { type: 'application/json', payload: JSON.stringify(deep(500)) },
  { type: 'application/json', payload: '{"__proto__": {"polluted": true}, "constructor": {"prototype": {"x": 1}}}' },
  {
    type: 'application/json',
    payload: JSON.stringify({
      state: {},
      destinationName: 5,
      message: 'nope',
      username: [],
      password: 1,
      eventIds: 'all',
      entries: {},
      resourceType: 7,
      name: null,
      url: 'gopher://x',
      schema: 3,
    }),
  },
  { type: 'application/json', payload: JSON.stringify({ destinationName: 'x'.repeat(70000), state: 'y'.repeat(70000), username: 'z'.repeat(70000) }) },
  { type: 'text/plain', payload: '\u0000\u0001garbage' },
  { type: 'application/octet-stream', payload: '\u00ff\u00fe' },
  { type: 'application/xml', payload: '<a/>' },
];

describe('hostile input', () => {
  let s: TestServer;
  let routes: Array<{ method: RouteMethod; url: string }>;
  before(async () => {
    s = await startServer({ overrides: { AuthManager: { loginRateLimit: 100000 } } });
    routes = routeTable(s.app).filter((r) => !r.url.startsWith('/swagger-ui'));
  });
  after(async () => s.close());

  const check = (what: string, r: { statusCode: number; headers: Record<string, unknown>; body: string }) => {
    assert.ok(r.statusCode < 500, `${what} → ${r.statusCode} ${r.body.slice(0, 300)}`);
    if (r.statusCode >= 400 && String(r.headers['content-type'] ?? '').startsWith('application/json') && r.body) {
      const body = JSON.parse(r.body);
      assert.equal(typeof body.status, 'string', `${what}: an error says what is wrong`);
      assert.ok(body.status.length > 0);
    }
  };

  test('hostile input - odd path parameters and nonsense query parameters never cause a 5xx', async () => {
    assert.ok(routes.length > 60, `the route table is walked (${routes.length} routes)`);
    for (const r of routes) {
      for (const v of r.url.includes(':') ? PATH_VALUES : ['']) {
        const path = r.url.replace(/:[A-Za-z0-9_]+/g, v);
        const url = `${path}?${QUERY}`;
        const res = await s.inject({ method: r.method, url, ...(r.method === 'GET' || r.method === 'DELETE' ? {} : { payload: {} }) });
        check(`${r.method} ${url.slice(0, 120)}`, res);
      }
    }
  });

  test('hostile input - broken JSON, wrong JSON types and wrong content types never cause a 5xx', async () => {
    for (const r of routes) {
      if (r.method === 'GET' || r.method === 'DELETE') continue;
      const path = r.url.replace(/:[A-Za-z0-9_]+/g, 'x');
      for (const b of BODIES) {
        const res = await s.inject({ method: r.method, url: path, headers: { 'content-type': b.type }, payload: b.payload });
        check(`${r.method} ${path} with ${b.type} ${b.payload.slice(0, 40)}`, res);
      }
    }
    assert.equal(({} as Record<string, unknown>).polluted, undefined, 'no prototype pollution');
  });

  test('hostile input - the server is still healthy afterwards', async () => {
    assert.equal((await s.inject('/health')).body, 'Ok');
    assert.equal((await s.inject('/api/v1/ping')).statusCode, 200);
  });
});
