import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import mqtt, { type MqttClient } from 'mqtt';
import { removeDir, startServer, tempDir, waitUntil, type TestServer } from '../helpers.js';
import { RestClient } from '../rest-client.js';

/**
 * A queue deleted over REST leaves no subscription to it in any saved session (MQTT persistent sessions, persistent
 * REST sessions), in use or offline: a restart makes neither the subscription nor the queue again. Real LevelDB data
 * dir, real MQTT clients, the broker restarted in process on the same dir.
 */
describe('deleted queue and saved sessions', () => {
  const dir = tempDir();
  const clients: MqttClient[] = [];
  let s: TestServer | undefined;
  after(async () => {
    for (const c of clients) c.end(true);
    await s?.close();
    removeDir(dir);
  });
  const start = async () => {
    s = await startServer({ dataDir: dir, overrides: { RestApi: { enableCache: false } } });
    const list = (await s.inject('/api/v1/server/interfaces')).json() as Array<{ name: string; port: number }>;
    return list.find((i) => i.name === 'MQTT Interface')!.port;
  };
  const connect = async (port: number, clientId: string) => {
    const c = await mqtt.connectAsync(`mqtt://127.0.0.1:${port}`, {
      clientId, clean: false, reconnectPeriod: 0, protocolVersion: 5, properties: { sessionExpiryInterval: 3600 }, username: 'admin', password: s!.adminPassword,
    });
    clients.push(c);
    return c;
  };
  const login = async (sessionId: string) => {
    const c = new RestClient(s!.app);
    const r = await c.post('/api/v1/login', { username: 'admin', password: s!.adminPassword, persistent: true, sessionId });
    assert.equal(r.statusCode, 200, r.body);
    return c;
  };
  const subscribe = async (c: RestClient, destinationName: string) => {
    const r = await c.post('/api/v1/messaging/subscribe', { destinationName, maxDepth: 100 });
    assert.equal(r.statusCode, 200, r.body);
  };
  /** Session id and filter of every durable subscription, sorted. */
  const durable = () => s!.rt.engine!.durableSubscriptions().map((x) => `${x.sessionId} ${x.filter}`).sort();

  test('sessions - a deleted queue leaves the saved subscription lists of MQTT and REST sessions, online or not, and a restart makes neither it nor its subscriptions again', async () => {
    let port = await start();
    const offline = await connect(port, 'dq-offline');
    await offline.subscribeAsync(['queue/dq-jobs', 'dq/keep'], { qos: 1 });
    await offline.endAsync();
    const online = await connect(port, 'dq-online');
    await online.subscribeAsync('queue/dq-jobs', { qos: 1 });
    const away = await login('dq-rest-away');
    await subscribe(away, 'queue/dq-jobs');
    await subscribe(away, 'dq/keep');
    assert.equal((await away.post('/api/v1/logout')).statusCode, 200);
    const here = await login('dq-rest-here');
    await subscribe(here, 'queue/dq-jobs');
    const before = durable();
    assert.equal(before.filter((x) => x.endsWith(' queue/dq-jobs')).length, 4, before.join('\n'));

    const r = await s!.inject({ method: 'DELETE', url: '/api/v1/server/destinations/queue%2Fdq-jobs' });
    assert.deepEqual([r.statusCode, r.json()], [200, { status: 'Success' }]);
    assert.equal(s!.rt.engine!.hasDestination('queue/dq-jobs'), false);
    assert.deepEqual(durable().filter((x) => x.endsWith(' queue/dq-jobs')), []);
    for (const c of clients.splice(0)) c.end(true);
    await s!.close();

    port = await start();
    assert.equal(s!.rt.engine!.hasDestination('queue/dq-jobs'), false, 'the restart does not make the queue again');
    const after = durable();
    assert.deepEqual(after.filter((x) => x.endsWith(' queue/dq-jobs')), [], after.join('\n'));
    assert.equal(after.filter((x) => x.endsWith(' dq/keep')).length, 2, 'the other subscriptions are kept');
    // the sessions' own views: a REST login resuming the session lists what is left, an MQTT client gets what is left
    const back = await login('dq-rest-away');
    const depths = (await back.post('/api/v1/messaging/subscriptionDepth', {})).json().subscriptionDepths as Array<{ destination: string }>;
    assert.deepEqual(depths.map((d) => d.destination), ['dq/keep']);
    assert.equal(s!.rt.engine!.hasDestination('queue/dq-jobs'), false);
    const again = await connect(port, 'dq-offline');
    const got: string[] = [];
    again.on('message', (t) => got.push(t));
    await again.publishAsync('dq/keep', 'x', { qos: 1 });
    await waitUntil(() => got.length === 1, 5000, 'the kept subscription');
    assert.equal(s!.rt.engine!.hasDestination('queue/dq-jobs'), false);
  });
});
