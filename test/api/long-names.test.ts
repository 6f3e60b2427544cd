import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import mqtt, { type MqttClient } from 'mqtt';
import { MAX_REQUEST_HEAD_BYTES } from '../../src/api/limits.js';
import { MAX_TOPIC_BYTES } from '../../src/engine/index.js';
import { startServer, type TestServer } from '../helpers.js';

/**
 * Long destination names over REST, on a real socket: a name as long as a request head of Node's 16 KiB can carry
 * in a path is commanded like any other; the longest name the broker accepts (MQTT's 65 535 UTF-8 bytes) is made and
 * listed, and naming it in a path answers 431 as JSON naming the limit; one byte more is refused where a destination
 * is made (REST publish and subscribe; MQTT's 2-byte length cannot encode it). docs/messaging.md, src/api/limits.ts.
 */
describe('destination name length', () => {
  let s: TestServer;
  let base: string;
  let mqttPort: number;
  const clients: MqttClient[] = [];
  before(async () => {
    s = await startServer();
    await s.app.listen({ port: 0, host: '127.0.0.1' });
    base = `http://127.0.0.1:${(s.app.server.address() as { port: number }).port}`;
    const list = (await s.inject('/api/v1/server/interfaces')).json() as Array<{ name: string; port: number }>;
    mqttPort = list.find((i) => i.name === 'MQTT Interface')!.port;
  });
  after(async () => {
    for (const c of clients) c.end(true);
    await s.close();
  });
  const rest = async (method: string, path: string, body?: object) => {
    const r = await fetch(`${base}${path}`, { method, headers: { ...s.auth, ...(body ? { 'content-type': 'application/json' } : {}) }, body: body ? JSON.stringify(body) : undefined });
    const text = await r.text();
    return { code: r.status, json: JSON.parse(text) as Record<string, unknown> };
  };
  const connect = async (clientId: string) => {
    const c = await mqtt.connectAsync(`mqtt://127.0.0.1:${mqttPort}`, { clientId, protocolVersion: 5, reconnectPeriod: 0, username: 'admin', password: s.adminPassword });
    clients.push(c);
    return c;
  };

  // 3 + 21 844 × 3 = 65 535 bytes; every '€' is 3 bytes, 9 characters percent-encoded
  const longest = `lo/${'€'.repeat((MAX_TOPIC_BYTES - 3) / 3)}`;
  const tooLong = `${longest}x`;
  // what a request head of 16 KiB carries in a path, with room for the request line's method and route and the headers
  const commandable = `lo/${'a'.repeat(MAX_REQUEST_HEAD_BYTES - 1400)}`;

  test('names - a destination named as long as a request head carries (about 15 000 bytes) is looked up, paused, resumed and deleted over REST', async () => {
    assert.ok(commandable.length > 1000 * 14, `${commandable.length} bytes: far beyond the router's old limit of 1 000`);
    const pub = await connect('long-names-pub');
    await pub.publishAsync(commandable, 'kept', { qos: 1, retain: true });
    const path = encodeURIComponent(commandable);

    const detail = await rest('GET', `/api/v1/server/destination/detail?destinationName=${path}`);
    assert.equal(detail.code, 200, JSON.stringify(detail.json).slice(0, 200));
    assert.equal((detail.json.destination as { name: string }).name, commandable);
    const actor = await rest('GET', `/api/v1/server/actors/${encodeURIComponent(`destination:${commandable}`)}`);
    assert.equal(actor.code, 200, JSON.stringify(actor.json).slice(0, 200));
    let r = await rest('PATCH', `/api/v1/server/destinations/${path}`, { state: 'paused' });
    assert.deepEqual([r.code, r.json], [200, { status: 'Success', state: 'Paused' }]);
    assert.equal(s.rt.engine!.isPaused(commandable), true);
    r = await rest('PATCH', `/api/v1/server/destinations/${path}`, { state: 'resumed' });
    assert.deepEqual([r.code, r.json], [200, { status: 'Success', state: 'Active' }]);
    r = await rest('POST', `/api/v1/server/destinations/${path}/purge`);
    assert.equal(r.code, 200, JSON.stringify(r.json));
    r = await rest('DELETE', `/api/v1/server/destinations/${path}`);
    assert.deepEqual([r.code, r.json], [200, { status: 'Success' }]);
    assert.equal(s.rt.engine!.hasDestination(commandable), false);
    r = await rest('DELETE', `/api/v1/server/destinations/${path}`);
    assert.equal(r.code, 404, 'gone: an ordinary 404, not a 414');
  });

  test('names - one byte longer is refused where a destination is made: REST publish and subscribe answer 400 (MQTT cannot encode it)', async () => {
    let r = await rest('POST', '/api/v1/messaging/publish', { destinationName: tooLong, message: { payload: Buffer.from('x').toString('base64') } });
    assert.equal(r.code, 400);
    assert.match(String(r.json.status), /longer than 65535 bytes/);
    r = await rest('POST', '/api/v1/messaging/subscribe', { destinationName: tooLong });
    assert.equal(r.code, 400);
    assert.match(String(r.json.status), /longer than 65535 bytes/);
    assert.equal(s.rt.engine!.hasDestination(tooLong), false);
  });

  test('names - the longest accepted name is made and listed; named in a path it answers 431 as JSON naming the limit', async () => {
    assert.equal(Buffer.byteLength(longest), MAX_TOPIC_BYTES);
    const pub = await connect('long-names-longest');
    await pub.publishAsync(longest, 'kept', { qos: 1, retain: true });
    const list = await rest('GET', '/api/v1/server/destination/list?prefix=lo/');
    assert.equal(list.code, 200);
    assert.ok(JSON.stringify(list.json).includes(longest.slice(0, 200)), 'listed');
    const h = await rest('DELETE', `/api/v1/server/destinations/${encodeURIComponent(longest)}`);
    assert.equal(h.code, 431);
    assert.match(String(h.json.status), new RegExp(`Request headers are too large: the limit is ${MAX_REQUEST_HEAD_BYTES} bytes`));
    assert.equal(s.rt.engine!.hasDestination(longest), true, 'the refused request changed nothing');
  });
});
