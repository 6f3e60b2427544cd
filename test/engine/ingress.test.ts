import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import mqtt, { type MqttClient } from 'mqtt';
import { QUOTA_EXCEEDED } from '../../src/engine/index.js';
import { INGRESS_STEPS, IngressResult, ingress, ingressContext, type IngressEngine } from '../../src/engine/ingress.js';
import { ANONYMOUS } from '../../src/security/types.js';
import { endpointsOf } from '../../src/endpoints/endpoints.service.js';
import { basicAuth, removeDir, startServer, tempDir, waitUntil, type TestServer } from '../helpers.js';
import { freePort, startMosquitto, type Mosquitto } from '../links/helpers.js';
import { createUser, mqttClients } from '../security/helpers.js';
import { schemaPost } from '../schemas/helpers.js';

/**
 * One ingress path (src/engine/ingress.ts): the same refusal — a $SYS topic, the ACL, the payload schema, a full
 * subscription — gives the equivalent answer on MQTT 5, MQTT 3.1.1, REST and an integration link (pulling from a
 * real mosquitto), over real sockets. A protocol that published without the step list would accept one of these
 * and the refused payload would reach the watcher.
 */
describe('ingress', () => {
  const dir = tempDir('switchyard-ingress-');
  let s: TestServer;
  let url: string;
  let mosq: Mosquitto;
  let mport = 0;
  let alice: Awaited<ReturnType<typeof createUser>>;
  const mq = mqttClients(() => url);
  const extra: MqttClient[] = [];
  const watched: string[] = [];

  before(async () => {
    mport = await freePort();
    mosq = await startMosquitto(join(dir, 'mosq'), mport);
    s = await startServer({
      overrides: {
        NetworkManager: { data: [{ name: 'mqtt-test', url: 'tcp://127.0.0.1:0/', protocolConfigs: [{ type: 'mqtt' }] }] },
        // a subscription is full at 2 messages: the "full" row
        DestinationManager: { maxQueuedMessages: 2 },
        NetworkConnectionManager: {
          data: [
            {
              name: 'peer',
              url: `mqtt://127.0.0.1:${mport}`,
              backoff: { initial: 100, max: 1000, jitter: 0.2 },
              linkConfigs: [
                { direction: 'pull', localNamespace: 'ing/', remoteNamespace: 'fed/ing/#', qualityOfService: 1 },
                { direction: 'pull', localNamespace: '$SYS/ing/', remoteNamespace: 'fed/sys/#', qualityOfService: 1 },
              ],
            },
          ],
        },
      },
    });
    await waitUntil(() => !!endpointsOf(s.rt).entries.get('mqtt-test')?.handle, 10000, 'MQTT endpoint listening');
    url = `mqtt://127.0.0.1:${endpointsOf(s.rt).entries.get('mqtt-test')!.handle!.port}`;
    alice = await createUser(s, 'alice', 'alice-password-1');
    // ACL: alice may not publish on ing/denied
    const acl = await s.inject({
      method: 'PUT',
      url: '/api/v1/auth/resources/acl',
      payload: { resourceType: 'Topic', resourceKey: 'ing/denied', entries: [{ principalType: 'IDENTITY', principalId: alice.uuid, effect: 'DENY', permissions: ['publish'] }] },
    });
    assert.equal(acl.statusCode, 200, acl.body);
    // payload schema (enforcement reject, the default) on ing/schema
    const schema = await s.inject({
      method: 'POST',
      url: '/api/v1/server/schemas',
      payload: schemaPost({ uniqueId: 'ing-v', name: 'ing', format: 'json', schema: { type: 'object', properties: { t: { type: 'number' } }, required: ['t'] } }, 'ing/schema'),
    });
    assert.equal(schema.statusCode, 200, schema.body);
    // an offline persistent QoS 1 subscriber of ing/full, filled to its cap of 2
    const offline = (await mq.connect({ protocolVersion: 5, username: 'admin', password: s.adminPassword, clientId: 'ing-offline', clean: false, properties: { sessionExpiryInterval: 3600 } })).c;
    await offline.subscribeAsync('ing/full', { qos: 1 });
    await offline.endAsync();
    const filler = (await mq.connect({ protocolVersion: 5, username: 'admin', password: s.adminPassword })).c;
    await filler.publishAsync('ing/full', '{"t":1}', { qos: 1 });
    await filler.publishAsync('ing/full', '{"t":2}', { qos: 1 });
    // the watcher: QoS 0 (never full), every topic of the table
    const watcher = (await mq.connect({ protocolVersion: 5, username: 'admin', password: s.adminPassword })).c;
    watcher.on('message', (_t, p) => watched.push(p.toString()));
    await watcher.subscribeAsync(['ing/#', '$SYS/ing/#'], { qos: 0 });
    await waitUntil(async () => (await linkStatus()).state === 'Established', 15000, 'link established');
  });
  after(async () => {
    mq.endAll();
    for (const c of extra) c.end(true);
    await s?.close();
    await mosq?.stop('SIGKILL');
    removeDir(dir);
  });

  const linkStatus = async () => (await s.inject('/api/v1/server/integration/peer/status')).json() as { state: string; messagesReceived: number; rejected: number; errors: number; lastError: string };
  const reasonOf = async (p: Promise<unknown>): Promise<number> => {
    const r = await p.then(
      (v) => v,
      (err: Error & { code?: number }) => err,
    );
    return (r as { reasonCode?: number; code?: number } | undefined)?.reasonCode ?? (r as { code?: number } | undefined)?.code ?? 0;
  };

  // topic on this broker, topic the peer publishes on for the link, and the answer of each protocol
  const rows = [
    { refusal: 'none (control)', topic: 'ing/ok', remote: 'fed/ing/ok', payload: '{"t":0}', v5: 0x00, v311: 'acknowledged, delivered', rest: [200, 'Message published successfully'], link: 'received' },
    { refusal: '$SYS', topic: '$SYS/ing/x', remote: 'fed/sys/x', payload: '{"t":0}', v5: 0x87, v311: 'acknowledged, dropped', rest: [403, 'Access denied: $SYS/ing/x is a $SYS topic; only the server publishes there'], link: 'rejected' },
    { refusal: 'ACL', topic: 'ing/denied', remote: 'fed/ing/denied', payload: '{"t":0}', v5: 0x87, v311: 'acknowledged, dropped', rest: [403, 'Access denied: alice lacks publish on Topic ing/denied'], link: 'received' /* a link is configured by the operator: no ACL */ },
    { refusal: 'schema', topic: 'ing/schema', remote: 'fed/ing/schema', payload: 'not json', v5: 0x99, v311: 'acknowledged, dropped', rest: [400, 'Payload does not match the schema of ing/schema'], link: 'rejected' },
    { refusal: 'full', topic: 'ing/full', remote: 'fed/ing/full', payload: '{"t":3}', v5: 0x97, v311: 'disconnected', rest: [429, 'Quota exceeded'], link: 'not stored (error, left for redelivery)' },
  ] as const;

  const delivered = (payload: string) => watched.includes(payload);

  for (const row of rows) {
    test(`ingress - ${row.refusal}: MQTT 5 reason 0x${row.v5.toString(16)}, 3.1.1 ${row.v311}, REST ${row.rest[0]}, link ${row.link}`, async () => {
      const accepted = row.v5 === 0;
      const tag = (p: string) => (row.refusal === 'schema' ? `${row.payload} ${p}` : JSON.stringify({ t: 0, p: `${row.refusal} ${p}` }));
      // MQTT 5
      const v5 = (await mq.connect({ protocolVersion: 5, username: 'alice', password: alice.password })).c;
      assert.equal(await reasonOf(v5.publishAsync(row.topic, tag('v5'), { qos: 1 })), row.v5, 'MQTT 5 PUBACK reason code');
      // MQTT 3.1.1
      const v311 = (await mq.connect({ protocolVersion: 4, username: 'alice', password: alice.password })).c;
      if (row.v311 === 'disconnected') {
        const closed = new Promise<void>((resolve) => v311.once('close', () => resolve()));
        v311.publish(row.topic, tag('v311'), { qos: 1 });
        await closed; // no PUBACK: the client sends it again after reconnecting
      } else {
        await v311.publishAsync(row.topic, tag('v311'), { qos: 1 }); // 3.1.1 has no negative PUBACK
      }
      // REST
      const r = await s.app.inject({
        method: 'POST',
        url: '/api/v1/messaging/publish',
        headers: basicAuth('alice', alice.password),
        payload: { destinationName: row.topic, message: { payload: Buffer.from(tag('rest')).toString('base64'), qualityOfService: 1 } },
      });
      assert.equal(r.statusCode, row.rest[0], r.body);
      assert.ok((r.json() as { status: string }).status.startsWith(row.rest[1]), r.body);
      // the link: the peer publishes, the link pulls it in
      const before = await linkStatus();
      const peer = await mqtt.connectAsync(`mqtt://127.0.0.1:${mport}`, { reconnectPeriod: 0 });
      extra.push(peer);
      await peer.publishAsync(row.remote, tag('link'), { qos: 1 });
      if (row.link === 'received') await waitUntil(async () => (await linkStatus()).messagesReceived > before.messagesReceived, 10000, 'link received it');
      else if (row.link === 'rejected') {
        await waitUntil(async () => (await linkStatus()).rejected > before.rejected, 10000, 'link rejected it');
        assert.equal((await linkStatus()).messagesReceived, before.messagesReceived);
      } else {
        await waitUntil(async () => (await linkStatus()).errors > before.errors, 10000, 'link could not store it');
        assert.match((await linkStatus()).lastError, /Quota exceeded/);
      }
      // what reached the watcher
      if (accepted) {
        await waitUntil(() => ['v5', 'v311', 'rest', 'link'].every((p) => delivered(tag(p))), 10000, 'every accepted message delivered');
      } else {
        await new Promise((res) => setTimeout(res, 300));
        for (const p of ['v5', 'v311', 'rest']) assert.equal(delivered(tag(p)), false, `the ${p} message was refused, not delivered`);
        assert.equal(delivered(tag('link')), row.link === 'received', 'the link message');
      }
    });
  }

  test('ingress - the steps run in the documented order: with several faults at once, the earliest step answers', () => {
    assert.deepEqual(
      INGRESS_STEPS.map((f) => f.name),
      ['refuseSysTopic', 'authorize', 'decodeBody', 'checkPayloadFormat', 'checkPayloadSchema', 'route'],
    );
    const published: string[] = [];
    const engine = {
      publish: (topic: string) => {
        published.push(topic);
        return topic.endsWith('full') ? QUOTA_EXCEEDED : Promise.resolve();
      },
      publishToGroup: () => Promise.resolve(),
      checkSchema: (topic: string) => (topic.includes('schema') ? 'bad' : undefined),
      isQueueName: () => false,
    } as unknown as IngressEngine;
    const security = { enabled: true, isAllowed: (_p: unknown, _perm: string, _t: string, key: string) => !key.includes('denied') };
    const notUtf8 = Buffer.from([0xff, 0xfe]);
    let decoded = 0;
    const run = (topic: string, payloadFormat?: 1, configured = false) => {
      const cx = ingressContext(engine, security, configured ? undefined : ANONYMOUS, topic, { payload: notUtf8, payloadFormat, qos: 1 }, undefined, () => {
        decoded++;
      });
      return ingress(cx);
    };
    // every fault at once down to one: the answer is the first step's that finds one, and nothing is published
    assert.equal(run('$SYS/denied/schema/full', 1), IngressResult.SysTopic);
    assert.equal(decoded, 0, 'no body decoded for a $SYS topic');
    assert.equal(run('denied/schema/full', 1), IngressResult.NotAuthorized);
    assert.equal(decoded, 0, 'no body decoded for a publisher the ACL refuses');
    assert.equal(run('schema/full', 1), IngressResult.PayloadFormatInvalid);
    assert.equal(decoded, 1);
    assert.equal(run('schema/full'), IngressResult.SchemaRejected);
    assert.deepEqual(published, []);
    assert.equal(run('full'), IngressResult.QuotaExceeded);
    assert.equal(run('ok'), IngressResult.Accepted);
    assert.deepEqual(published, ['full', 'ok']);
    // a configured publisher (no principal) passes the ACL step only
    assert.equal(run('denied/x', undefined, true), IngressResult.Accepted);
    assert.equal(run('$SYS/x', undefined, true), IngressResult.SysTopic);
    // no engine: Unavailable, after the refusals
    const cx = ingressContext(undefined, security, ANONYMOUS, 'denied', { payload: 'x' }, undefined);
    assert.equal(ingress(cx), IngressResult.NotAuthorized);
    assert.equal(ingress(ingressContext(undefined, security, ANONYMOUS, 'ok', { payload: 'x' }, undefined)), IngressResult.Unavailable);
  });
});
