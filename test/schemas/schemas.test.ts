import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import mqtt, { type IClientOptions, type MqttClient } from 'mqtt';
import { endpointsOf } from '../../src/endpoints/endpoints.service.js';
import { startServer, tempDir, removeDir, waitUntil, type TestServer } from '../helpers.js';
import { FORMAT_CASES, schemaPost } from './helpers.js';

const b64 = (b: Buffer) => b.toString('base64');

describe('schemas', () => {
  let s: TestServer;
  let url: string;
  const clients: MqttClient[] = [];
  const dataDir = tempDir();

  const connect = (opts: IClientOptions = {}): Promise<MqttClient> =>
    new Promise((resolve, reject) => {
      const c = mqtt.connect(url, { username: 'admin', password: s.adminPassword, reconnectPeriod: 0, protocolVersion: 5, ...opts });
      clients.push(c);
      c.once('connect', () => resolve(c));
      c.once('error', reject);
    });
  const restPublish = (destinationName: string, payload: Buffer) =>
    s.inject({ method: 'POST', url: '/api/v1/messaging/publish', payload: { destinationName, message: { payload: b64(payload) } } });
  const detail = async (name: string) => (await s.inject(`/api/v1/server/destination/detail?destinationName=${encodeURIComponent(name)}`)).json();
  const addSchema = (config: Record<string, unknown>, context: string) => s.inject({ method: 'POST', url: '/api/v1/server/schemas', payload: schemaPost(config, context) });

  before(async () => {
    s = await startServer({
      dataDir,
      overrides: { NetworkManager: { data: [{ name: 'mqtt-test', url: 'tcp://127.0.0.1:0/', protocolConfigs: [{ type: 'mqtt' }] }] } },
    });
    await waitUntil(() => !!endpointsOf(s.rt).entries.get('mqtt-test')?.handle, 10000, 'MQTT endpoint listening');
    url = `mqtt://127.0.0.1:${endpointsOf(s.rt).entries.get('mqtt-test')!.handle!.port}`;
  });
  after(async () => {
    for (const c of clients) c.end(true);
    await s.close();
    removeDir(dataDir);
  });

  test('schemas - add, get, list with filter, by context, by type, formats, map; errors are 400/404 with a status', async () => {
    const cfg = { uniqueId: 'temp-v', name: 'temperature', format: 'json', labels: { team: 'ops' }, schema: FORMAT_CASES[0]!.schema };
    const added = await addSchema(cfg, 'plant/+/temperature');
    assert.equal(added.statusCode, 200, added.body);
    const dto = added.json();
    assert.equal(dto.uniqueId, 'temp-v');
    assert.equal(dto.versionId, '1');
    assert.equal(dto.format, 'json');
    assert.deepEqual(dto.labels, { team: 'ops' });
    assert.ok(Date.parse(dto.createdAt) > 0 && Date.parse(dto.modifiedAt) > 0);
    // a second add of the same uniqueId is version 2
    const v2 = (await addSchema({ ...cfg, description: 'second' }, 'plant/+/temperature')).json();
    assert.equal(v2.versionId, '2');
    assert.equal(v2.createdAt, dto.createdAt);

    assert.equal((await s.inject('/api/v1/server/schemas/temp-v')).json().description, 'second');
    const list = (await s.inject("/api/v1/server/schemas?filter=format%20%3D%20'json'%20AND%20name%20%3D%20'temperature'")).json();
    assert.deepEqual(
      list.map((x: { uniqueId: string }) => x.uniqueId),
      ['temp-v'],
    );
    assert.equal((await s.inject("/api/v1/server/schemas?filter=format%20%3D%20'avro'")).json().length, 0);
    const badFilter = await s.inject('/api/v1/server/schemas?filter=%28%28');
    assert.equal(badFilter.statusCode, 400);
    assert.match(badFilter.json().status, /^Invalid filter: /);

    const byContext = (await s.inject(`/api/v1/server/schemas/context/${encodeURIComponent(encodeURIComponent('plant/+/temperature'))}`)).json();
    assert.equal(byContext.length, 1);
    assert.equal(JSON.parse(byContext[0]).uniqueId, 'temp-v');
    assert.equal(JSON.parse((await s.inject('/api/v1/server/schemas/type/JSON')).json()[0]).uniqueId, 'temp-v');
    assert.deepEqual((await s.inject('/api/v1/server/schemas/formats')).json().data, ['json', 'protobuf', 'avro', 'xml', 'csv', 'cbor', 'messagepack', 'native', 'raw']);
    assert.deepEqual((await s.inject('/api/v1/server/schemas/map')).json().data['plant/+/temperature'], ['temp-v']);

    // errors
    const post = (payload: unknown) => s.inject({ method: 'POST', url: '/api/v1/server/schemas', payload: payload as object });
    assert.equal((await s.inject({ method: 'POST', url: '/api/v1/server/schemas' })).json().status, 'Request body is required');
    assert.equal((await post({ schema: '{}' })).json().status, 'context is required');
    assert.equal((await post({ context: 'a' })).json().status, 'schema is required');
    const notJson = await post({ schema: '{nope', context: 'a' });
    assert.equal(notJson.statusCode, 400);
    assert.match(notJson.json().status, /^Invalid schema: the schema config is not JSON/);
    assert.match((await post(schemaPost({ format: 'yaml' }, 'a'))).json().status, /"format" must be one of/);
    const noCompile = await post(schemaPost({ format: 'json', schema: { type: 'nope' } }, 'a'));
    assert.equal(noCompile.statusCode, 400);
    assert.match(noCompile.json().status, /^Invalid schema: the JSON Schema does not compile: /);
    const badProto = await post(schemaPost({ format: 'protobuf', schema: { proto: 'message {', messageName: 'X' } }, 'a'));
    assert.match(badProto.json().status, /^Invalid schema: the \.proto does not compile: illegal/);
    assert.match((await post(schemaPost({ format: 'avro', schema: { type: 'record' } }, 'a'))).json().status, /Avro schema does not compile/);
    assert.match((await post(schemaPost({ format: 'json', schema: {}, labels: { enforcement: 'maybe' } }, 'a'))).json().status, /enforcement/);
    const missing = await s.inject('/api/v1/server/schemas/nope');
    assert.equal(missing.statusCode, 404);
    assert.equal(missing.json().status, 'Schema not found: nope');
    assert.equal((await s.inject({ method: 'DELETE', url: '/api/v1/server/schemas/nope' })).statusCode, 404);
    assert.equal((await s.inject('/api/v1/server/schemas/impl/nope')).statusCode, 404);
    assert.equal((await s.inject('/api/v1/server/schemas/context/%2520')).statusCode, 400);
    assert.equal((await s.inject('/api/v1/server/schemas')).json().length, 1, 'nothing was added by the refused requests');
  });

  test('schemas - impl/{id} is the raw artifact with its media type, ETag = sha256, 304 on If-None-Match, Cache-Control', async () => {
    const r = await s.inject('/api/v1/server/schemas/impl/temp-v');
    assert.equal(r.statusCode, 200);
    assert.match(String(r.headers['content-type']), /^application\/schema\+json/);
    assert.deepEqual(JSON.parse(r.body), FORMAT_CASES[0]!.schema);
    const sha = createHash('sha256').update(r.rawPayload).digest('hex');
    assert.equal(r.headers.etag, `"${sha}"`);
    assert.equal(r.headers['cache-control'], 'public, max-age=31536000');
    assert.equal(Number(r.headers['content-length']), r.rawPayload.length);
    const again = await s.inject({ url: '/api/v1/server/schemas/impl/temp-v', headers: { 'if-none-match': `"${sha}"` } });
    assert.equal(again.statusCode, 304);
    assert.equal(again.body, '');
    assert.equal((await s.inject({ url: '/api/v1/server/schemas/impl/temp-v', headers: { 'if-none-match': '"other"' } })).statusCode, 200);
  });

  test('schemas - every format: a conforming payload passes, a non-conforming one is a REST 400 naming the problem; the counters move', async () => {
    for (const c of FORMAT_CASES) {
      const dest = `fmt/${c.format}`;
      const r = await addSchema({ uniqueId: `fmt-${c.format}`, format: c.format, schema: c.schema }, dest);
      assert.equal(r.statusCode, 200, `${c.format}: ${r.body}`);
      const ok = await restPublish(dest, c.valid);
      assert.equal(ok.statusCode, 200, `${c.format} valid: ${ok.body}`);
      const bad = await restPublish(dest, c.invalid);
      assert.equal(bad.statusCode, 400, `${c.format} invalid: ${bad.body}`);
      assert.match(bad.json().status, new RegExp(`^Payload does not match the schema of ${dest}: .+`));
      const d = await detail(dest);
      assert.equal(d.destination.schemaId, `fmt-${c.format}`);
      assert.deepEqual(d.schemaValidation, { schemaId: `fmt-${c.format}`, enforcement: 'reject', valid: 1, invalid: 1, rejected: 1 }, c.format);
      assert.equal(d.destination.publishedMessages, 1, `${c.format}: the refused message was not published`);
    }
    // a destination without a schema has no schemaValidation and takes anything
    assert.equal((await restPublish('fmt/free', Buffer.from('anything'))).statusCode, 200);
    assert.equal((await detail('fmt/free')).schemaValidation, undefined);
  });

  test('schemas - MQTT 5 QoS 1 and 2 get PUBACK/PUBREC 0x99 for every format; QoS 0 and 3.1.1 are dropped and counted; valid payloads are delivered', async () => {
    const pub = await connect();
    const sub = await connect();
    const got: string[] = [];
    sub.on('message', (topic) => got.push(topic));
    await sub.subscribeAsync('fmt/#', { qos: 1 });
    for (const c of FORMAT_CASES) {
      const dest = `fmt/${c.format}`;
      for (const qos of [1, 2] as const) {
        await assert.rejects(pub.publishAsync(dest, c.invalid, { qos }), (err: Error & { code?: number }) => {
          assert.equal(err.code, 0x99, `${c.format} QoS ${qos}: ${err.message}`);
          return true;
        });
      }
      await pub.publishAsync(dest, c.valid, { qos: 1 });
      await pub.publishAsync(dest, c.invalid, { qos: 0 });
    }
    const v311 = await connect({ protocolVersion: 4 });
    await v311.publishAsync('fmt/json', FORMAT_CASES[0]!.invalid, { qos: 1 }); // acknowledged and dropped
    await pub.publishAsync('fmt/json', FORMAT_CASES[0]!.valid, { qos: 1 });
    await waitUntil(() => got.filter((t) => t === 'fmt/json').length >= 2, 5000, 'valid json messages delivered');
    for (const c of FORMAT_CASES) {
      const d = await detail(`fmt/${c.format}`);
      const extra = c.format === 'json' ? 1 : 0;
      // REST: 1 valid + 1 invalid; MQTT: QoS 1 + QoS 2 invalid, 1 valid, QoS 0 invalid (+ json: 3.1.1 invalid, one more valid)
      assert.deepEqual(d.schemaValidation, { schemaId: `fmt-${c.format}`, enforcement: 'reject', valid: 2 + extra, invalid: 4 + extra, rejected: 4 + extra }, c.format);
    }
    assert.equal(got.filter((t) => t === 'fmt/csv').length, 1, 'only the valid MQTT message was delivered');
  });

  test('schemas - $schema/<destination> is retained with the schema config, and the link-format lists destinations and artifacts', async () => {
    const c = await connect();
    const seen = new Map<string, Buffer>();
    c.on('message', (topic, payload) => seen.set(topic, payload));
    await c.subscribeAsync('$schema/fmt/#', { qos: 1 });
    await waitUntil(() => seen.has('$schema/fmt/protobuf') && seen.has('$schema/fmt/json'), 5000, '$schema retained messages');
    const dto = JSON.parse(seen.get('$schema/fmt/protobuf')!.toString());
    assert.equal(dto.uniqueId, 'fmt-protobuf');
    assert.equal(dto.format, 'protobuf');
    assert.equal(dto.schema.messageName, 'demo.Reading');

    // a filter context: a destination created later that matches gets its $schema topic too
    await restPublish('plant/north/temperature', Buffer.from('{"temperature": 3}'));
    await c.subscribeAsync('$schema/plant/#', { qos: 1 });
    await waitUntil(() => seen.has('$schema/plant/north/temperature'), 5000, '$schema for a filter-bound destination');
    assert.equal(JSON.parse(seen.get('$schema/plant/north/temperature')!.toString()).uniqueId, 'temp-v');

    const lf = await s.inject('/api/v1/server/schemas/link-format');
    assert.equal(lf.statusCode, 200);
    assert.match(String(lf.headers['content-type']), /^application\/link-format/);
    const links = lf.body.split(',');
    assert.ok(links.includes('</fmt/json>;rt="schema.destination";schema="fmt-json";format="json";anchor="$schema/fmt/json"'), lf.body);
    assert.ok(links.some((l) => l.startsWith('</plant/north/temperature>;rt="schema.destination";schema="temp-v"')), lf.body);
    assert.ok(links.some((l) => l.startsWith('</api/v1/server/schemas/impl/fmt-avro>;rt="schema";') && l.includes('type="application/avro+json"')), lf.body);
    // RFC 6690: every link-value is <URI> followed by ;-parameters
    for (const l of links) assert.match(l, /^<[^<>]+>(;[a-z-]+(=("[^"]*"|[^;,"]+))?)+$/i, l);

    // deleting the schema clears the retained message
    const before = seen.size;
    assert.deepEqual((await s.inject({ method: 'DELETE', url: '/api/v1/server/schemas/fmt-raw' })).json(), { status: 'Success' });
    await waitUntil(() => seen.get('$schema/fmt/raw')?.length === 0, 5000, 'retained $schema cleared');
    assert.ok(seen.size >= before);
    assert.equal((await restPublish('fmt/raw', Buffer.from('now anything goes, no schema'))).statusCode, 200);
  });

  test('schemas - enforcement warn delivers and counts; off does not check; DELETE with a filter; schemas survive a restart', async () => {
    await addSchema({ uniqueId: 'warned', format: 'native', schema: { type: 'integer' }, labels: { enforcement: 'warn' } }, 'soft/counter');
    assert.equal((await restPublish('soft/counter', Buffer.from('not a number'))).statusCode, 200);
    assert.deepEqual((await detail('soft/counter')).schemaValidation, { schemaId: 'warned', enforcement: 'warn', valid: 0, invalid: 1, rejected: 0 });
    await addSchema({ uniqueId: 'unchecked', format: 'native', schema: { type: 'integer' }, labels: { enforcement: 'off' } }, 'soft/off');
    assert.equal((await restPublish('soft/off', Buffer.from('x'))).statusCode, 200);
    assert.deepEqual((await detail('soft/off')).schemaValidation, { schemaId: 'unchecked', enforcement: 'off', valid: 0, invalid: 0, rejected: 0 });

    const del = await s.inject({ method: 'DELETE', url: "/api/v1/server/schemas?filter=uniqueId%20LIKE%20'soft%25'%20OR%20context%20LIKE%20'soft/%25'" });
    assert.deepEqual(del.json(), { status: 'Success' });
    assert.equal((await s.inject('/api/v1/server/schemas/warned')).statusCode, 404);

    await s.rt.restart();
    assert.equal((await s.inject('/api/v1/server/schemas/fmt-json')).json().versionId, '1');
    const bad = await restPublish('fmt/json', FORMAT_CASES[0]!.invalid);
    assert.equal(bad.statusCode, 400, 'the binding is back after the restart');
  });

  test('schemas - DELETE without a filter removes every schema and every binding', async () => {
    assert.deepEqual((await s.inject({ method: 'DELETE', url: '/api/v1/server/schemas' })).json(), { status: 'Success' });
    assert.deepEqual((await s.inject('/api/v1/server/schemas')).json(), []);
    assert.equal((await restPublish('fmt/json', Buffer.from('not json at all'))).statusCode, 200);
  });
});

describe('schemas switched off', () => {
  test('schemas - RestApi.enableSchemaManagement false: the schema routes are not there', async () => {
    const s = await startServer({ overrides: { RestApi: { enableSchemaManagement: false } } });
    try {
      assert.equal((await s.inject('/api/v1/server/schemas')).statusCode, 404);
      assert.equal((await s.inject('/api/v1/server/schemas/formats')).statusCode, 404);
    } finally {
      await s.close();
    }
  });

  test('schemas - DestinationManager.data[].schemaEnforcement overrides the schema label and the default', async () => {
    const s = await startServer({
      auth: false,
      overrides: { DestinationManager: { schemaEnforcement: 'warn', data: [{ name: 'declared/strict', schemaEnforcement: 'reject' }] } },
    });
    try {
      const add = await s.inject({ method: 'POST', url: '/api/v1/server/schemas', payload: schemaPost({ uniqueId: 'num', format: 'native', schema: { type: 'number' } }, 'declared/#') });
      assert.equal(add.statusCode, 200, add.body);
      const pub = (d: string) => s.inject({ method: 'POST', url: '/api/v1/messaging/publish', payload: { destinationName: d, message: { payload: b64(Buffer.from('NaN?')) } } });
      assert.equal((await pub('declared/strict')).statusCode, 400, 'the destination says reject');
      assert.equal((await pub('declared/other')).statusCode, 200, 'the section default says warn');
      const d = (await s.inject('/api/v1/server/destination/detail?destinationName=declared/other')).json();
      assert.deepEqual(d.schemaValidation, { schemaId: 'num', enforcement: 'warn', valid: 0, invalid: 1, rejected: 0 });
    } finally {
      await s.close();
    }
  });
});
