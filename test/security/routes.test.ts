import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { routePermission } from '../../src/api/plugins/auth.js';
import { MODEL_PERMISSIONS, SERVER_PERMISSIONS } from '../../src/security/acl.js';
import { Permissions, ResourceTypes, type Permission, type RoutePermission } from '../../src/security/types.js';
import { basicAuth, routeTable, startServer, type TestServer, type RouteMethod } from '../helpers.js';
import { auditLines, createGroup, leaveEveryone } from './helpers.js';

/**
 * Walks the live route table (every route any module registers, including ones added later): without credentials
 * every protected route is a 401; as a user holding every permission except the one the route declares, a 403; as
 * admin, neither. New routes are covered without editing this test.
 */
// The two SSE stream routes need no credentials: their single-use token replaces them (test/api/sse-token.test.ts).
const PUBLIC = new Set([
  'GET /health',
  'GET /api/v1/ping',
  'POST /api/v1/login',
  'GET /openapi.json',
  'GET /openapi.yaml',
  'GET /api/v1/server/actors/sse/stream/:token',
  'GET /api/v1/server/log/sse/stream/:token',
  'GET /api/v1/messaging/sse/stream/:token',
  // probes and Prometheus scraping (docs/operations.md); /metrics needs view_stats with RestApi.metricsAuthentication
  'GET /livez',
  'GET /readyz',
  'GET /metrics',
  // the web console's static files (GET /console/...) and / redirecting there (docs/console.md)
  'GET /',
]);
const FILLER = '00000000-0000-4000-8000-00000000abcd';

describe('route table enforcement', () => {
  let s: TestServer;
  let routes: Array<{ method: RouteMethod; url: string; path: string; need: RoutePermission | undefined }>;
  const lacking = new Map<Permission, { authorization: string }>();

  before(async () => {
    s = await startServer({ overrides: { AuthManager: { loginRateLimit: 100000 } } });
    routes = routeTable(s.app).map((r) => ({
      method: r.method,
      url: r.url,
      path: r.url.replace(/:[A-Za-z0-9_]+/g, FILLER).replace(/\*$/, 'x'),
      need: routePermission(r.config as never),
    }));
    // One user per permission a route declares: it holds every permission except that one.
    const needed = new Set(routes.flatMap((r) => (r.need ? [r.need.permission] : [])));
    for (const perm of needed) {
      const gid = await createGroup(s, `all-but-${perm}`);
      const server = Permissions.filter((p) => SERVER_PERMISSIONS.has(p) && p !== perm);
      const model = Permissions.filter((p) => MODEL_PERMISSIONS.has(p) && p !== perm);
      const dest = Permissions.filter((p) => !SERVER_PERMISSIONS.has(p) && !MODEL_PERMISSIONS.has(p) && p !== perm);
      const entry = (permissions: string[]) => [{ principalType: 'GROUP', principalId: gid, effect: 'ALLOW', permissions }];
      for (const type of ResourceTypes) {
        const key = type === 'Server' ? s.rt.serverName : type === 'Model' ? '*' : '/';
        const existing = (await s.inject(`/api/v1/auth/resources/acl?resourceType=${type}&resourceKey=${encodeURIComponent(key)}`)).json().entries;
        const put = await s.inject({ method: 'PUT', url: '/api/v1/auth/resources/acl', payload: { resourceType: type, resourceKey: key, entries: [...existing, ...entry(type === 'Server' ? server : type === 'Model' ? model : dest)] } });
        assert.equal(put.statusCode, 200, put.body);
      }
      const name = `lacks-${perm}`;
      const password = `password-of-${perm}`;
      const u = await s.inject({ method: 'POST', url: '/api/v1/auth/users', payload: { username: name, password } });
      await leaveEveryone(s, u.json().uniqueId); // only the all-but group decides
      await s.inject({ method: 'POST', url: `/api/v1/auth/groups/${gid}/${u.json().uniqueId}` });
      lacking.set(perm, basicAuth(name, password));
    }
  });
  after(async () => s.close());

  test('routes - exactly /health, /api/v1/ping, /api/v1/login, the OpenAPI document (and its UI) and the token-opened SSE streams are public', () => {
    const open = routes.filter((r) => !r.need).map((r) => `${r.method} ${r.url}`);
    assert.deepEqual(open.filter((k) => !k.includes('/swagger-ui') && !k.startsWith('GET /console')).sort(), [...PUBLIC].sort());
  });

  test('routes - without credentials every protected route answers 401 with a JSON status and WWW-Authenticate', async () => {
    const protectedRoutes = routes.filter((r) => r.need);
    assert.ok(protectedRoutes.length >= 40, `the table has the auth, server and other routes (${protectedRoutes.length})`);
    for (const r of protectedRoutes) {
      const res = await s.app.inject({ method: r.method, url: r.path });
      assert.equal(res.statusCode, 401, `${r.method} ${r.url}: ${res.statusCode} ${res.body}`);
      assert.match(res.json().status, /^User not authenticated/, `${r.method} ${r.url}`);
      assert.match(String(res.headers['www-authenticate']), /Basic realm=/);
    }
  });

  test('routes - as a user lacking only the declared permission every protected route answers 403 naming it', async () => {
    for (const r of routes.filter((x) => x.need)) {
      const res = await s.app.inject({ method: r.method, url: r.path, headers: lacking.get(r.need!.permission)! });
      assert.equal(res.statusCode, 403, `${r.method} ${r.url}: ${res.statusCode} ${res.body}`);
      assert.match(res.json().status, new RegExp(`^Access denied: .* needs the permission ${r.need!.permission} on ${r.need!.resourceType}`));
    }
    // Denied access is audited, rate-limited: at most 20 lines per 10 s however many requests were refused.
    const lines = await auditLines(s, (l) => l.event === 'access.denied');
    const denied = lines.filter((l) => l.event === 'access.denied');
    assert.ok(denied.length >= 1 && denied.length <= 20, `${denied.length} access.denied lines`);
    assert.match(String(denied[0]!.username), /^lacks-/);
    assert.ok(denied[0]!.permission && denied[0]!.route && denied[0]!.clientAddress);
  });

  test('routes - as admin no route answers 401, nor 403 for want of a permission', async () => {
    for (const r of routes.filter((x) => x.need)) {
      const res = await s.inject({ method: r.method, url: r.path });
      assert.notEqual(res.statusCode, 401, `${r.method} ${r.url}: ${res.body}`);
      if (res.statusCode === 403) {
        // A refused SSE token (unknown token) is a 403 by design; a missing permission never is for admin.
        assert.doesNotMatch(res.json().status, /needs the permission/, `${r.method} ${r.url}: ${res.body}`);
      }
      assert.ok(res.statusCode < 500, `${r.method} ${r.url}: ${res.statusCode} ${res.body}`);
    }
  });

  test('routes - the OpenAPI document carries x-required-permission for each protected operation', async () => {
    const doc = (await s.app.inject('/openapi.json')).json();
    const stats = doc.paths['/api/v1/server/details/stats'].get;
    assert.deepEqual(stats['x-required-permission'], { permission: 'view_stats', resourceType: 'Server' });
    assert.deepEqual(doc.paths['/api/v1/auth/users/{userUuid}'].delete['x-required-permission'], { permission: 'manage_authentication', resourceType: 'Server' });
    assert.deepEqual(doc.paths['/api/v1/ping'].get.security, []);
    assert.equal(doc.paths['/api/v1/ping'].get['x-required-permission'], undefined);
    assert.deepEqual(stats.security, [{ basicAuth: [] }, { authScheme: [] }, { cookieAuth: [] }]);
    // the service specification: "Discovery of servers lists only basicAuth as its scheme"
    assert.deepEqual(doc.paths['/api/v1/server/discovery'].get.security, [{ basicAuth: [] }]);
    for (const r of routes.filter((x) => x.need)) {
      const op = doc.paths[r.url.replace(/:([A-Za-z0-9_]+)/g, '{$1}')]?.[r.method.toLowerCase()];
      if (!op) continue; // hidden from the document (WADL)
      assert.deepEqual(op['x-required-permission'], { permission: r.need!.permission, resourceType: r.need!.resourceType }, `${r.method} ${r.url}`);
    }
  });

  test('routes - unknown paths stay a JSON 404 and wrong methods a 405, with or without credentials', async () => {
    assert.equal((await s.app.inject('/api/v1/nothing')).statusCode, 404);
    assert.equal((await s.app.inject({ method: 'DELETE', url: '/api/v1/ping' })).statusCode, 405);
  });
});
