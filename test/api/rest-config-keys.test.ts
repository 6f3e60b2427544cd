import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, type TestServer } from '../helpers.js';
import { b64, RestClient, unb64 } from '../rest-client.js';

/** RestApi keys MAPS reads: maxEventsPerDestination, enableInterfaceManagement, enableSchemaManagement. */
describe('RestApi configuration keys', () => {
  const servers: TestServer[] = [];
  after(async () => {
    for (const s of servers) await s.close();
  });
  const start = async (RestApi: Record<string, unknown> = {}) => {
    const s = await startServer({ auth: false, overrides: { RestApi } });
    servers.push(s);
    return s;
  };
  const publish = async (c: RestClient, destinationName: string, text: string) => {
    const r = await c.post('/api/v1/messaging/publish', { destinationName, message: { payload: b64(text) } });
    assert.equal(r.statusCode, 200, r.body);
  };
  const consumeAll = async (c: RestClient, destination?: string) => {
    const r = await c.post('/api/v1/messaging/consume', { ...(destination ? { destination } : {}), depth: 1000 });
    assert.equal(r.statusCode, 200, r.body);
    return (r.json().consumedMessages as Array<{ payload: string; destinationName: string }>).map((m) => `${m.destinationName}=${unb64(m.payload)}`);
  };

  test('rest-config - maxEventsPerDestination (default 10): a REST subscription keeps the newest 10 events of each destination, the oldest dropped', async () => {
    const s = await start();
    assert.equal(s.rt.config.RestApi.maxEventsPerDestination, 10);
    const c = new RestClient(s.app);
    assert.equal((await c.post('/api/v1/messaging/subscribe', { destinationName: 'evt/#', maxDepth: 1000 })).statusCode, 200);
    for (let i = 1; i <= 12; i++) await publish(c, 'evt/a', `a${i}`);
    await publish(c, 'evt/b', 'b1');
    await publish(c, 'evt/b', 'b2');
    const depth = await c.post('/api/v1/messaging/subscriptionDepth', { destination: 'evt/#' });
    assert.deepEqual(depth.json(), { subscriptionDepths: [{ destination: 'evt/#', depth: 12 }] });
    const got = await consumeAll(c, 'evt/#');
    assert.deepEqual(got, [...Array.from({ length: 10 }, (_, i) => `evt/a=a${i + 3}`), 'evt/b=b1', 'evt/b=b2']);
    const detail = await c.get('/api/v1/server/destination/detail?destinationName=evt%2Fa');
    assert.equal(detail.statusCode, 200, detail.body);
    const subs = detail.json().subscriptionList as Array<{ destinationName: string; messagesDropped: number }>;
    assert.deepEqual(subs.map((x) => [x.destinationName, x.messagesDropped]), [['evt/#', 2]], 'the two oldest events of evt/a were dropped (counted)');
  });

  test('rest-config - maxEventsPerDestination set to 3: the oldest events of a destination make room; maxDepth still caps the total', async () => {
    const s = await start({ maxEventsPerDestination: 3 });
    const c = new RestClient(s.app);
    await c.post('/api/v1/messaging/subscribe', { destinationName: 'few/t', maxDepth: 50 });
    for (let i = 1; i <= 5; i++) await publish(c, 'few/t', `m${i}`);
    assert.deepEqual(await consumeAll(c), ['few/t=m3', 'few/t=m4', 'few/t=m5']);
    // maxDepth below the per-destination cap: new ones are dropped once maxDepth is held (unchanged behaviour)
    await c.post('/api/v1/messaging/subscribe', { destinationName: 'tiny/t', maxDepth: 2 });
    for (let i = 1; i <= 5; i++) await publish(c, 'tiny/t', `t${i}`);
    assert.deepEqual(await consumeAll(c, 'tiny/t'), ['tiny/t=t1', 'tiny/t=t2']);
  });

  test('rest-config - enableInterfaceManagement false: the interface, connection, integration, discovery and LoRa routes are not registered (as MAPS)', async () => {
    const routes = [
      ['GET', '/api/v1/server/interfaces'],
      ['GET', '/api/v1/server/interface/:endpoint'],
      ['GET', '/api/v1/server/connections'],
      ['GET', '/api/v1/server/integrations'],
      ['GET', '/api/v1/server/discovery'],
      ['GET', '/api/v1/device/lora'],
    ] as const;
    const on = await start();
    for (const [method, url] of routes) assert.equal(on.app.hasRoute({ method, url }), true, `${method} ${url} registered by default`);
    const off = await start({ enableInterfaceManagement: false });
    for (const [method, url] of routes) assert.equal(off.app.hasRoute({ method, url }), false, `${method} ${url} not registered`);
    assert.equal((await off.inject('/api/v1/server/integrations')).statusCode, 404);
    assert.equal((await off.inject('/api/v1/server/status')).statusCode, 200, 'the rest of the API is there');
  });

  test('rest-config - enableSchemaManagement false: the schema routes are not registered (as MAPS)', async () => {
    const on = servers[0] ?? (await start());
    assert.equal(on.app.hasRoute({ method: 'GET', url: '/api/v1/server/schemas' }), true);
    const off = await start({ enableSchemaManagement: false });
    assert.equal(off.app.hasRoute({ method: 'GET', url: '/api/v1/server/schemas' }), false);
    assert.equal(off.app.hasRoute({ method: 'GET', url: '/api/v1/server/schemas/:schemaId' }), false);
    assert.equal((await off.inject('/api/v1/server/schemas')).statusCode, 404);
  });
});
