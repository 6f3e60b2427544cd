import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import mqtt, { type MqttClient } from 'mqtt';
import type { ActorTransition } from '../../src/runtime/events.js';
import { removeDir, spawnBroker, startServer, tempDir, waitUntil, type BrokerProcess, type TestServer } from '../helpers.js';

/**
 * Destination and subscription lifecycles commanded over REST (issue 22 item 2; docs/messaging.md "Commanding
 * destinations and subscriptions"): real MQTT clients (mqtt.js), a real broker process for the SIGKILL.
 */

interface Row {
  systemId: string;
  state: string;
  status: string;
}

/** Messages a client receives, as text, in arrival order. */
function collect(c: MqttClient): string[] {
  const got: string[] = [];
  c.on('message', (_t, payload) => got.push(payload.toString()));
  return got;
}

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('lifecycle commands across a SIGKILL', () => {
  const dirs: string[] = [];
  const brokers: BrokerProcess[] = [];
  const clients: MqttClient[] = [];
  after(async () => {
    for (const c of clients) c.end(true);
    for (const b of brokers) await b.stop('SIGKILL');
    dirs.forEach(removeDir);
  });

  test('lifecycle - a destination paused over REST holds QoS 1 messages across a SIGKILL and delivers them in order when resumed; a paused subscription stays paused', async () => {
    const data = tempDir();
    dirs.push(data);
    const env = { SWITCHYARD_DATA_DIR: data };
    const start = async () => {
      const b = await spawnBroker(env);
      brokers.push(b);
      await waitUntil(() => /endpoint MQTT Interface listening on tcp:\/\/127\.0\.0\.1:\d+/.test(b.stdout()), 20000, 'MQTT endpoint');
      return { b, mqttPort: Number(/endpoint MQTT Interface listening on tcp:\/\/127\.0\.0\.1:(\d+)/.exec(b.stdout())![1]) };
    };
    let { b, mqttPort } = await start();
    const password = readFileSync(join(data, 'admin_password'), 'utf8').trim();
    const auth = { authorization: `Basic ${Buffer.from(`admin:${password}`).toString('base64')}` };
    const rest = async (method: string, path: string, body?: object) => {
      const r = await fetch(`http://127.0.0.1:${b.port}${path}`, { method, headers: { ...auth, ...(body ? { 'content-type': 'application/json' } : {}) }, body: body ? JSON.stringify(body) : undefined });
      return { code: r.status, json: (await r.json()) as Record<string, unknown> };
    };
    const rows = async (kind: string, prefix: string) =>
      ((await rest('GET', `/api/v1/server/actors?kind=${kind}&prefix=${encodeURIComponent(prefix)}`)).json.items as Row[]);
    const connect = async (clientId: string) => {
      const c = await mqtt.connectAsync(`mqtt://127.0.0.1:${mqttPort}`, { clientId, clean: false, username: 'admin', password, reconnectPeriod: 0 });
      clients.push(c);
      return c;
    };

    // a persistent session subscribed at QoS 1, another one whose subscription will be paused
    let fleet = await connect('fleet-reader');
    let got = collect(fleet);
    await fleet.subscribeAsync('fleet/+/temp', { qos: 1 });
    let audit = await connect('audit-reader');
    let audited = collect(audit);
    await audit.subscribeAsync('audit/#', { qos: 1 });
    const pub = await connect('fleet-writer');
    await pub.publishAsync('fleet/a/temp', 'before', { qos: 1 });
    await waitUntil(() => got.length === 1, 5000, 'the first message');

    let r = await rest('PATCH', '/api/v1/server/destinations/fleet%2Fa%2Ftemp', { state: 'paused' });
    assert.deepEqual([r.code, r.json], [200, { status: 'Success', state: 'Paused' }]);
    r = await rest('PATCH', '/api/v1/server/destinations/fleet%2Fa%2Ftemp', { state: 'PAUSED' });
    assert.deepEqual([r.code, r.json], [200, { status: 'No change', state: 'Paused' }]);
    const [auditRow] = await rows('subscription', 'subscription:mqtt%3Aaudit-reader|');
    assert.ok(auditRow, 'the durable subscription is listed as an actor');
    r = await rest('PATCH', `/api/v1/server/subscriptions/${encodeURIComponent(auditRow.systemId.slice('subscription:'.length))}`, { state: 'paused' });
    assert.deepEqual([r.code, r.json], [200, { status: 'Success', state: 'Paused' }]);

    // every publish is acknowledged (stored) while delivery holds
    for (let i = 1; i <= 5; i++) await pub.publishAsync('fleet/a/temp', `m${i}`, { qos: 1 });
    await pub.publishAsync('audit/x', 'audited', { qos: 1 });
    await pause(300);
    assert.deepEqual(got, ['before'], 'nothing delivered while the destination is paused');
    assert.deepEqual(audited, [], 'nothing delivered to the paused subscription');
    assert.deepEqual((await rows('destination', 'destination:fleet/a/temp')).map((x) => x.state), ['live.run.paused,load.normal']);

    await b.stop('SIGKILL');
    for (const c of clients.splice(0)) c.end(true);
    ({ b, mqttPort } = await start());

    // after the restart: still paused, holding the five, and listed so
    assert.deepEqual((await rows('destination', 'destination:fleet/a/temp')).map((x) => x.state), ['live.run.paused,load.normal']);
    assert.deepEqual((await rows('subscription', 'subscription:mqtt%3Aaudit-reader|')).map((x) => x.state), ['paused']);
    const detail = await rest('GET', '/api/v1/server/destination/detail?destinationName=fleet/a/temp');
    assert.equal((detail.json.destination as { delayedMessages: number }).delayedMessages, 5);
    fleet = await connect('fleet-reader');
    got = collect(fleet);
    audit = await connect('audit-reader');
    audited = collect(audit);
    await pause(300);
    assert.deepEqual(got, [], 'still held after the restart');
    assert.deepEqual(audited, []);

    r = await rest('PATCH', '/api/v1/server/destinations/fleet%2Fa%2Ftemp', { state: 'resumed' });
    assert.deepEqual([r.code, r.json], [200, { status: 'Success', state: 'Active' }]);
    await waitUntil(() => got.length >= 5, 10000, 'the held messages');
    assert.deepEqual(got, ['m1', 'm2', 'm3', 'm4', 'm5'], 'in publish order, each once');
    r = await rest('PATCH', `/api/v1/server/subscriptions/${encodeURIComponent(auditRow.systemId.slice('subscription:'.length))}`, { state: 'resumed' });
    assert.deepEqual([r.code, r.json], [200, { status: 'Success', state: 'Active' }]);
    await waitUntil(() => audited.length >= 1, 10000, 'the paused subscription\'s message');
    assert.deepEqual(audited, ['audited']);

    r = await rest('PATCH', '/api/v1/server/destinations/fleet%2Fa%2Ftemp', { state: 'resumed' });
    assert.deepEqual([r.code, r.json], [200, { status: 'No change', state: 'Active' }]);
    assert.equal((await rest('PATCH', '/api/v1/server/destinations/fleet%2Fa%2Ftemp', { state: 'started' })).code, 400);
    assert.equal((await rest('PATCH', '/api/v1/server/destinations/no%2Fsuch', { state: 'paused' })).code, 404);
  });
});

describe('lifecycle commands in process', () => {
  let s: TestServer;
  let mqttPort = 0;
  const clients: MqttClient[] = [];
  const transitions: ActorTransition[] = [];
  before(async () => {
    s = await startServer({ auth: false, overrides: { RestApi: { enableCache: false } } });
    const list = (await s.inject('/api/v1/server/interfaces')).json() as Array<{ name: string; port: number }>;
    mqttPort = list.find((i) => i.name === 'MQTT Interface')!.port;
    s.rt.on('actor.transition', (t) => transitions.push(t));
  });
  after(async () => {
    for (const c of clients) c.end(true);
    await s?.close();
  });
  const connect = async (clientId: string, opts: mqtt.IClientOptions = {}) => {
    const c = await mqtt.connectAsync(`mqtt://127.0.0.1:${mqttPort}`, { clientId, clean: false, reconnectPeriod: 0, ...opts });
    clients.push(c);
    return c;
  };
  const row = async (systemId: string) =>
    ((await s.inject(`/api/v1/server/actors?prefix=${encodeURIComponent(systemId)}`)).json().items as Row[]).find((x) => x.systemId === systemId);
  const patchSub = (key: string, state: string) => s.inject({ method: 'PATCH', url: `/api/v1/server/subscriptions/${encodeURIComponent(key)}`, payload: { state } });

  test('lifecycle - a subscription paused and resumed over REST: its messages are held, then delivered in order', async () => {
    const sub = await connect('sp-reader');
    const got = collect(sub);
    await sub.subscribeAsync('sp/#', { qos: 1 });
    const key = s.rt.engine!.subscription('mqtt:sp-reader', 'sp/#')!.key;
    let r = await patchSub(key, 'paused');
    assert.deepEqual([r.statusCode, r.json()], [200, { status: 'Success', state: 'Paused' }]);
    assert.deepEqual([r.statusCode, (await patchSub(key, 'paused')).json()], [200, { status: 'No change', state: 'Paused' }]);
    const pub = await connect('sp-writer', { clean: true });
    for (let i = 1; i <= 3; i++) await pub.publishAsync(`sp/${i}`, `m${i}`, { qos: 1 });
    await pause(300);
    assert.deepEqual(got, []);
    assert.equal((await row(`subscription:${key}`))?.state, 'paused');
    r = await patchSub(key, 'resumed');
    assert.deepEqual([r.statusCode, r.json()], [200, { status: 'Success', state: 'Active' }]);
    await waitUntil(() => got.length >= 3, 5000, 'the held messages');
    assert.deepEqual(got, ['m1', 'm2', 'm3']);
    assert.deepEqual((await patchSub(key, 'resumed')).json(), { status: 'No change', state: 'Active' });
    assert.equal((await patchSub('nobody%7Cx', 'paused')).statusCode, 404);
  });

  test('lifecycle - purge reports the count: a queue\'s waiting messages, a paused topic\'s hold', async () => {
    const pub = await connect('purge-writer', { clean: true });
    for (let i = 0; i < 4; i++) await pub.publishAsync('queue/purge-me', `j${i}`, { qos: 1 });
    const purge = (name: string) => s.inject({ method: 'POST', url: `/api/v1/server/destinations/${encodeURIComponent(name)}/purge` });
    let r = await purge('queue/purge-me');
    assert.deepEqual([r.statusCode, r.json()], [200, { status: 'Purged 4 messages', purged: 4 }]);
    assert.equal((await s.inject('/api/v1/server/destination/detail?destinationName=queue/purge-me')).json().destination.storedMessages, 0);
    assert.deepEqual((await purge('queue/purge-me')).json(), { status: 'Purged 0 messages', purged: 0 });

    const reader = await connect('purge-reader');
    const got = collect(reader);
    await reader.subscribeAsync('purge/t', { qos: 1 });
    await pub.publishAsync('purge/t', 'first', { qos: 1 });
    await waitUntil(() => got.length === 1, 5000, 'first');
    await s.inject({ method: 'PATCH', url: '/api/v1/server/destinations/purge%2Ft', payload: { state: 'paused' } });
    for (let i = 0; i < 3; i++) await pub.publishAsync('purge/t', `held${i}`, { qos: 1 });
    r = await purge('purge/t');
    assert.deepEqual([r.statusCode, r.json()], [200, { status: 'Purged 3 messages', purged: 3 }]);
    await s.inject({ method: 'PATCH', url: '/api/v1/server/destinations/purge%2Ft', payload: { state: 'resumed' } });
    await pub.publishAsync('purge/t', 'after', { qos: 1 });
    await waitUntil(() => got.length === 2, 5000, 'after');
    assert.deepEqual(got, ['first', 'after'], 'the purged messages are never delivered');
    assert.equal((await purge('no/such')).statusCode, 404);
  });

  test('lifecycle - delete: the destination goes, a subscriber gets nothing more from it', async () => {
    const reader = await connect('del-reader');
    const got = collect(reader);
    await reader.subscribeAsync('del/#', { qos: 1 });
    const pub = await connect('del-writer', { clean: true });
    await pub.publishAsync('del/t', 'one', { qos: 1 });
    await waitUntil(() => got.length === 1, 5000, 'one');
    await s.inject({ method: 'PATCH', url: '/api/v1/server/destinations/del%2Ft', payload: { state: 'paused' } });
    await pub.publishAsync('del/t', 'held', { qos: 1 });
    const r = await s.inject({ method: 'DELETE', url: '/api/v1/server/destinations/del%2Ft' });
    assert.deepEqual([r.statusCode, r.json()], [200, { status: 'Success' }]);
    assert.equal(s.rt.engine!.hasDestination('del/t'), false);
    assert.equal(await row('destination:del/t'), undefined);
    await pause(300);
    assert.deepEqual(got, ['one'], 'the held message went with it');
    assert.equal((await s.inject({ method: 'DELETE', url: '/api/v1/server/destinations/del%2Ft' })).statusCode, 404);
  });

  test('lifecycle - every actor is listed with its true state whether or not its XState instance is active', async () => {
    const e = s.rt.engine!;
    // passive, at rest
    await e.publish('vis/rest', { payload: 'x' });
    let r = await row('destination:vis/rest');
    assert.deepEqual([r?.status, r?.state], ['passive', 'live.run.active,load.normal']);
    // paused in the engine's record with no instance: the list shows it paused, still passive
    await e.publish('vis/paused', { payload: 'x' });
    await e.pauseDestination('vis/paused');
    r = await row('destination:vis/paused');
    assert.deepEqual([r?.status, r?.state], ['passive', 'live.run.paused,load.normal']);
    // commanded: activated, same state
    await s.inject({ method: 'PATCH', url: '/api/v1/server/destinations/vis%2Fpaused', payload: { state: 'paused' } });
    r = await row('destination:vis/paused');
    assert.deepEqual([r?.status, r?.state], ['active', 'live.run.paused,load.normal']);

    // subscriptions: hibernated (passive), paused (record only, passive), full (activated by flow control)
    const off = await connect('vis-offline');
    await off.subscribeAsync('vis/off/#', { qos: 1 });
    await off.endAsync();
    const offKey = e.subscription('mqtt:vis-offline', 'vis/off/#')!.key;
    await waitUntil(async () => (await row(`subscription:${offKey}`))?.state === 'hibernated', 5000, 'hibernated');
    assert.equal((await row(`subscription:${offKey}`))?.status, 'passive');
    await e.pauseSubscription('mqtt:vis-offline', 'vis/off/#');
    r = await row(`subscription:${offKey}`);
    assert.deepEqual([r?.status, r?.state], ['passive', 'paused']);

    const slow = await connect('vis-full');
    await slow.subscribeAsync('vis/full', { qos: 1 });
    await slow.endAsync();
    const fullSub = e.subscription('mqtt:vis-full', 'vis/full')!;
    fullSub.maxDepth = 2; // a small cap for the test (maxQueuedMessages is 10 000 by default)
    const pub = await connect('vis-writer', { clean: true, protocolVersion: 5 });
    for (let i = 0; i < 2; i++) await pub.publishAsync('vis/full', `f${i}`, { qos: 1 });
    await waitUntil(async () => (await row(`subscription:${fullSub.key}`))?.state === 'hibernated', 5000, 'hibernated, the more telling state');
    assert.equal((await row(`subscription:${fullSub.key}`))?.status, 'passive', 'an offline subscription filling up activates nothing');
    const detail = (await s.inject(`/api/v1/server/actors/${encodeURIComponent(`subscription:${fullSub.key}`)}`)).json();
    assert.deepEqual([detail.context.full, detail.context.policy], [true, 'refuse'], 'full, with the policy that applies');
    // online, holding its maximum (its client gives no credit): the flow-control event activated it, state full
    const stuck = e.subscribe({ sessionId: 'vis-stuck', filter: 'vis/stuck', durable: true, qos: 1, maxDepth: 2, sink: { kind: 'push', deliver: () => false } });
    await pub.publishAsync('vis/stuck', 's1', { qos: 1 });
    await pub.publishAsync('vis/stuck', 's2', { qos: 1 });
    r = await row(`subscription:${stuck.key}`);
    assert.deepEqual([r?.status, r?.state], ['active', 'full']);
    e.unsubscribe(stuck);
    // online again: full is what it is now (the session is back, the cap still reached until it acknowledges)
    const back = mqtt.connect(`mqtt://127.0.0.1:${mqttPort}`, { clientId: 'vis-full', clean: false, reconnectPeriod: 0 });
    clients.push(back);
    let delivered = 0;
    back.on('message', () => delivered++); // before CONNACK: the held messages follow it at once
    await waitUntil(() => delivered === 2, 5000, 'the two held');
    await waitUntil(async () => (await row(`subscription:${fullSub.key}`))?.state === 'active', 5000, 'room again once acknowledged');
  });

  test('lifecycle - bad input to the command routes is a 4xx JSON status, never a 500', async () => {
    await s.rt.engine!.publish('bad/input', { payload: 'x' });
    const cases: Array<[string, string, unknown, number]> = [
      ['PATCH', '/api/v1/server/destinations/%ZZ', { state: 'paused' }, 400],
      ['PATCH', '/api/v1/server/destinations/bad%2Finput', {}, 400],
      ['PATCH', '/api/v1/server/destinations/bad%2Finput', { state: 42 }, 400],
      ['PATCH', '/api/v1/server/destinations/bad%2Finput', { state: 'x'.repeat(100_000) }, 400],
      ['PATCH', '/api/v1/server/destinations/%24SYS%2Fserver', { state: 'paused' }, 404],
      ['POST', '/api/v1/server/destinations/%E0%A4%A/purge', undefined, 400],
      ['DELETE', `/api/v1/server/destinations/${'x'.repeat(70_000)}`, undefined, 414],
      ['PATCH', '/api/v1/server/subscriptions/%E0%7Cx', { state: 'paused' }, 400],
      ['PATCH', '/api/v1/server/subscriptions/nope', { state: 'resumed' }, 404],
      ['PATCH', '/api/v1/server/subscriptions/a%7Cb', { state: 'sideways' }, 400],
    ];
    for (const [method, url, payload, code] of cases) {
      const r = await s.inject({ method: method as 'PATCH', url, ...(payload !== undefined ? { payload: payload as object } : {}) });
      assert.equal(r.statusCode, code, `${method} ${url.slice(0, 60)}: ${r.body.slice(0, 200)}`);
      assert.equal(typeof r.json().status, 'string');
      assert.ok(r.body.length < 1000, 'the answer does not echo a huge input');
    }
  });

  test('lifecycle - a session whose expiry interval runs out ends its subscription actor as expired', async () => {
    const c = await connect('vis-expiring', { protocolVersion: 5, properties: { sessionExpiryInterval: 1 } });
    await c.subscribeAsync('exp/#', { qos: 1 });
    const key = s.rt.engine!.subscription('mqtt:vis-expiring', 'exp/#')!.key;
    const id = `subscription:${key}`;
    assert.equal((await s.inject(`/api/v1/server/actors/${encodeURIComponent(id)}`)).statusCode, 200, 'inspected: activated');
    await c.endAsync();
    await waitUntil(() => transitions.some((t) => t.systemId === id && t.to === 'expired'), 10000, 'expired');
    await waitUntil(async () => (await row(id)) === undefined, 5000, 'gone from the list');
  });
});
