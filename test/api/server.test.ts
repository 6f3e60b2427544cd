import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, type TestServer } from '../helpers.js';

describe('server routes', () => {
  let s: TestServer;
  before(async () => {
    s = await startServer();
  });
  after(async () => s.close());

  const get = (url: string) => s.inject({ method: 'GET', url });

  test('health - GET /health answers Ok as text', async () => {
    const r = await get('/health');
    assert.equal(r.statusCode, 200);
    assert.match(String(r.headers['content-type']), /^text\/plain/);
    assert.equal(r.body, 'Ok');
  });

  test('ping - GET /api/v1/ping answers {"status":"Success"}', async () => {
    const r = await get('/api/v1/ping');
    assert.equal(r.statusCode, 200);
    assert.match(String(r.headers['content-type']), /^application\/json/);
    assert.deepEqual(r.json(), { status: 'Success' });
  });

  test('name - GET /api/v1/name is the instance name as a bare JSON string', async () => {
    const r = await get('/api/v1/name');
    assert.equal(r.statusCode, 200);
    assert.equal(r.json(), s.rt.serverName);
    assert.match(r.body, /^"switchyard-[0-9a-f]{8}"$/);
  });

  test('updates - GET /api/v1/updates has the three counters', async () => {
    const r = await get('/api/v1/updates');
    assert.equal(r.statusCode, 200);
    assert.deepEqual(Object.keys(r.json()).sort(), ['destinationUpdate', 'interfaceUpdate', 'schemaUpdate']);
  });

  test('details - GET /api/v1/server/details/info carries real process figures', async () => {
    const r = await get('/api/v1/server/details/info');
    assert.equal(r.statusCode, 200);
    const info = r.json();
    assert.equal(info.serverName, s.rt.serverName);
    assert.equal(info.version, '0.1.0');
    assert.ok(info.totalMemory > 1_000_000, 'heap is at least 1 MB');
    assert.ok(info.maxMemory >= info.totalMemory);
    assert.ok(info.numberOfThreads >= 1);
    assert.ok(info.uptime >= 0);
    assert.ok(info.cpuTime > 0);
    assert.ok(info.storageSize > 0, 'the LevelDB files have a size');
    assert.ok(info.timeToCreateNano > 0);
    for (const k of ['buildDate', 'freeMemory', 'connections', 'destinations', 'cpuPercent', 'threadState']) assert.ok(k in info, k);
  });

  test('details - GET /api/v1/server/details/stats has every ServerStatisticsDTO field', async () => {
    const r = await get('/api/v1/server/details/stats');
    assert.equal(r.statusCode, 200);
    const st = r.json();
    for (const k of [
      'packetsSent',
      'packetsReceived',
      'totalReadBytes',
      'totalWriteBytes',
      'totalConnections',
      'totalDisconnections',
      'totalNoInterestMessages',
      'totalSubscribedMessages',
      'totalPublishedMessages',
      'totalRetrievedMessages',
      'totalExpiredMessages',
      'totalDeliveredMessages',
      'publishedPerSecond',
      'subscribedPerSecond',
      'noInterestPerSecond',
      'deliveredPerSecond',
      'retrievedPerSecond',
    ])
      assert.equal(typeof st[k], 'number', k);
    assert.equal(typeof JSON.parse(st.stats), 'object');
  });

  test('status - GET /api/v1/server/status lists each subsystem as OK', async () => {
    const r = await get('/api/v1/server/status');
    assert.equal(r.statusCode, 200);
    const list = r.json() as Array<{ name: string; comment: string; status: string }>;
    const names = list.map((x) => x.name);
    for (const n of ['Server', 'Store', 'Destinations', 'Endpoints', 'Integrations', 'Lockouts', 'RestAPI Caching']) assert.ok(names.includes(n), n);
    // the discovery manager is off in the shipped configuration and says so (MAPS: DISABLED)
    const discovery = list.find((x) => x.name === 'Discovery Manager');
    assert.equal(discovery?.status, 'DISABLED');
    for (const x of list) if (x !== discovery) assert.equal(x.status, 'OK', `${x.name}: ${x.comment}`);
  });

  test('health - GET /api/v1/server/health summarises', async () => {
    const r = await get('/api/v1/server/health');
    assert.deepEqual(r.json(), { status: 'Ok', issueCount: 0 });
  });

  test('config - GET /api/v1/server/config lists the sections', async () => {
    const r = await get('/api/v1/server/config');
    assert.deepEqual(r.json(), [
      'MessageDaemon',
      'RestApi',
      'NetworkManager',
      'AuthManager',
      'DestinationManager',
      'DiscoveryManager',
      'NetworkConnectionManager',
      'DeviceManager',
      'LoRaDeviceManager',
      'Cluster',
    ]);
  });

  test('config - GET /api/v1/server/config/{name} returns the value and its JSON Schema, by name or MAPS alias', async () => {
    for (const name of ['RestApi', 'restapi', 'Rest%20API', 'RestApiManagerConfig']) {
      const r = await get(`/api/v1/server/config/${name}`);
      assert.equal(r.statusCode, 200, name);
      const body = r.json();
      assert.equal(body.config.port, 0);
      assert.equal(body.schema.type, 'object');
      assert.equal(body.schema.properties.port.maximum, 65535);
    }
  });

  test('config - unknown section is a 404 naming the known ones', async () => {
    const r = await get('/api/v1/server/config/Nope');
    assert.equal(r.statusCode, 404);
    assert.match(r.json().status, /Unknown configuration section: Nope; known sections: MessageDaemon/);
  });

  test('cache - GET /api/v1/server/cache counts hits and misses; DELETE clears it', async () => {
    await s.inject({ method: 'DELETE', url: '/api/v1/server/cache' });
    const before = (await get('/api/v1/server/cache')).json();
    assert.equal(before.enabled, true);
    assert.equal(before.cacheSize, 0);
    await get('/api/v1/server/details/info');
    await get('/api/v1/server/details/info');
    const afterTwo = (await get('/api/v1/server/cache')).json();
    assert.equal(afterTwo.cacheMisses - before.cacheMisses, 1);
    assert.equal(afterTwo.cacheHits - before.cacheHits, 1);
    assert.equal(afterTwo.cacheSize, 1);
    assert.equal(afterTwo.lifeTime, 30000);
    assert.equal(afterTwo.scanTime, 10000);
    const del = await s.inject({ method: 'DELETE', url: '/api/v1/server/cache' });
    assert.equal(del.statusCode, 204);
    assert.equal((await get('/api/v1/server/cache')).json().cacheSize, 0);
  });

  test('log - GET /api/v1/server/log returns recent entries and filters them with a selector', async () => {
    s.rt.log.warn('disk nearly full on /var');
    s.rt.log.info('an ordinary line');
    const all = (await get('/api/v1/server/log')).json().logEntries as Array<{ logNumber: number; level: number; message: string }>;
    assert.ok(all.length >= 2);
    assert.ok(all.every((e, i) => i === 0 || e.logNumber > all[i - 1].logNumber));
    const r = await get(`/api/v1/server/log?filter=${encodeURIComponent("level >= 30000 AND message LIKE '%disk%'")}`);
    assert.equal(r.statusCode, 200);
    const hits = r.json().logEntries as Array<{ level: number; message: string }>;
    assert.equal(hits.length, 1);
    assert.equal(hits[0].level, 30000);
    assert.match(hits[0].message, /^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] WARN disk nearly full on \/var \(server\)$/);
  });

  test('log - a bad filter is a 400 giving the position; a blank one is refused', async () => {
    const r = await get(`/api/v1/server/log?filter=${encodeURIComponent('level >= ')}`);
    assert.equal(r.statusCode, 400);
    assert.match(r.json().status, /position 9/);
    const blank = await get('/api/v1/server/log?filter=%20');
    assert.equal(blank.statusCode, 400);
    assert.match(blank.json().status, /must not be blank/);
  });

  test('log - the SSE token route returns a token as text', async () => {
    const r = await get('/api/v1/server/log/sse');
    assert.equal(r.statusCode, 200);
    assert.match(r.body, /^[0-9a-f-]{36}$/);
  });

  test('log - an unknown SSE token is refused with 403', async () => {
    const r = await get('/api/v1/server/log/sse/stream/not-a-token');
    assert.equal(r.statusCode, 403);
    assert.match(r.json().status, /unknown or has already been used/);
  });

  test('actors - GET /api/v1/server/actors shows the live tree', async () => {
    const r = await get('/api/v1/server/actors/tree');
    assert.equal(r.statusCode, 200);
    const tree = r.json();
    assert.equal(tree.machine, 'server');
    assert.equal(tree.state, 'running');
    const ids = tree.children.map((c: { id: string }) => c.id);
    assert.deepEqual(ids, ['destinations', 'subscriptions', 'endpoints', 'integrations', 'devices', 'lora', 'lockouts']);
    for (const c of tree.children) {
      assert.equal(c.machine, 'supervisor');
      assert.equal(c.state, 'running');
      assert.equal(c.status, 'active');
    }
  });

  test('metrics - GET /metrics is Prometheus text with process and broker metrics', async () => {
    const r = await get('/metrics');
    assert.equal(r.statusCode, 200);
    assert.match(String(r.headers['content-type']), /^text\/plain/);
    assert.match(r.body, /^# HELP switchyard_process_cpu_user_seconds_total/m);
    assert.match(r.body, /^switchyard_messages_published_total \d+$/m);
    assert.match(r.body, /^switchyard_health 0$/m);
  });

  test('openapi - /openapi.json and /openapi.yaml describe the routes from the zod schemas', async () => {
    const j = await get('/openapi.json');
    assert.equal(j.statusCode, 200);
    const doc = j.json();
    assert.equal(doc.openapi, '3.1.0');
    assert.ok(doc.paths['/api/v1/server/details/info'].get);
    const stats = doc.paths['/api/v1/server/details/stats'].get.responses['200'].content['application/json'].schema;
    assert.ok(stats.properties.totalPublishedMessages);
    assert.ok(doc.paths['/api/v1/server/config/{name}'].get.parameters.some((p: { name: string }) => p.name === 'name'));
    const y = await get('/openapi.yaml');
    assert.equal(y.statusCode, 200);
    assert.match(String(y.headers['content-type']), /yaml/);
    assert.match(y.body, /^openapi: 3\.1\.0/m);
  });

  test('swagger - the Swagger UI is served', async () => {
    const r = await get('/swagger-ui/');
    assert.equal(r.statusCode, 200);
    assert.match(r.body, /swagger/i);
  });

  test('wadl - /application.wadl is generated from the route table, with its grammar', async () => {
    const r = await get('/application.wadl');
    assert.equal(r.statusCode, 200);
    assert.match(String(r.headers['content-type']), /wadl/);
    assert.match(r.body, /<resource path="\/api\/v1\/server\/config\/\{name\}">/);
    assert.match(r.body, /<param name="name" style="template"/);
    assert.match(r.body, /<method name="PATCH"/);
    assert.ok(s.app.hasRoute({ method: 'GET', url: '/api/v1/server/actors' }), 'the route exists and so does its WADL entry');
    assert.match(r.body, /path="\/api\/v1\/server\/actors"/);
    const xsd = await get('/application.wadl/xsd0.xsd');
    assert.equal(xsd.statusCode, 200);
    assert.match(xsd.body, /<xs:element name="getServerDetailsInfoResponse">/);
    assert.match(xsd.body, /<xs:element name="totalMemory" type="xs:long"/);
    assert.equal((await get('/application.wadl/other.xsd')).statusCode, 404);
  });

  test('errors - unknown route is a JSON 404', async () => {
    const r = await get('/api/v1/nothing/here');
    assert.equal(r.statusCode, 404);
    assert.deepEqual(r.json(), { status: 'Not found: GET /api/v1/nothing/here' });
  });

  test('errors - a known path with the wrong method is a 405 with Allow', async () => {
    const r = await s.inject({ method: 'POST', url: '/api/v1/ping' });
    assert.equal(r.statusCode, 405);
    assert.match(String(r.headers.allow), /GET/);
    assert.match(r.json().status, /Method POST is not allowed on \/api\/v1\/ping/);
    const p = await s.inject({ method: 'PUT', url: '/api/v1/server/config/RestApi' });
    assert.equal(p.statusCode, 405);
  });

  test('errors - malformed JSON is a 400 saying so', async () => {
    const r = await s.inject({ method: 'PATCH', url: '/api/v1/server', headers: { 'content-type': 'application/json' }, payload: '{"state": ' });
    assert.equal(r.statusCode, 400);
    assert.match(r.json().status, /^Malformed JSON body/);
  });

  test('errors - a body over the limit is a 413', async () => {
    const big = JSON.stringify({ state: 'x'.repeat(1_100_000) });
    const r = await s.inject({ method: 'PATCH', url: '/api/v1/server', headers: { 'content-type': 'application/json' }, payload: big });
    assert.equal(r.statusCode, 413);
    assert.match(r.json().status, /too large: the limit is 1048576 bytes/);
  });

  test('server - PATCH /api/v1/server refuses bad input with 400 naming the problem', async () => {
    const cases: Array<[unknown, RegExp]> = [
      [{}, /body field 'state'/],
      [{ state: 42 }, /body field 'state'.*expected string/],
      [{ state: '' }, /state is required/],
      [{ state: 'explode' }, /Unknown action: explode; expected restart or shutdown/],
    ];
    for (const [payload, msg] of cases) {
      const r = await s.inject({ method: 'PATCH', url: '/api/v1/server', payload: payload as object });
      assert.equal(r.statusCode, 400, JSON.stringify(payload));
      assert.match(r.json().status, msg);
    }
    const none = await s.inject({ method: 'PATCH', url: '/api/v1/server' });
    assert.equal(none.statusCode, 400);
    assert.match(none.json().status, /body/);
    const text = await s.inject({ method: 'PATCH', url: '/api/v1/server', headers: { 'content-type': 'text/plain' }, payload: 'restart' });
    assert.equal(text.statusCode, 400);
  });

  test('server - PATCH restart rebuilds the actor tree in-process and keeps the name', async () => {
    const name = s.rt.serverName;
    const r = await s.inject({ method: 'PATCH', url: '/api/v1/server', payload: { state: 'ReStArT' } });
    assert.equal(r.statusCode, 200);
    assert.deepEqual(r.json(), { status: 'Restarting' });
    const deadline = Date.now() + 10000;
    let tree: { state: string; context: { bootCount: number }; children: unknown[] } | undefined;
    while (Date.now() < deadline) {
      tree = (await get('/api/v1/server/actors/tree')).json();
      if (tree!.state === 'running' && tree!.context.bootCount === 2) break;
      await new Promise((res) => setTimeout(res, 20));
    }
    assert.equal(tree!.state, 'running');
    assert.equal(tree!.context.bootCount, 2);
    assert.equal(tree!.children.length, 7);
    assert.equal((await get('/api/v1/name')).json(), name);
    assert.equal((await get('/health')).body, 'Ok');
  });
});
