import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { IPublishPacket } from 'mqtt';
import { endpointsOf } from '../../src/endpoints/endpoints.service.js';
import { startServer, waitUntil, type TestServer } from '../helpers.js';
import { b64, unb64 } from '../rest-client.js';
import { SseClient } from '../sse-client.js';
import { mqttClients } from '../security/helpers.js';

/** MQTT 5 publish properties cross the REST / SSE boundary both ways, with real mqtt.js clients. */
describe('MQTT 5 properties over REST and SSE', () => {
  let s: TestServer;
  let url: string;
  let base: string;
  const mq = mqttClients(() => url);
  before(async () => {
    s = await startServer({ overrides: { NetworkManager: { data: [{ name: 'mqtt5-rest', url: 'tcp://127.0.0.1:0/', protocolConfigs: [{ type: 'mqtt' }] }] } } });
    await waitUntil(() => !!endpointsOf(s.rt).entries.get('mqtt5-rest')?.handle, 10000, 'MQTT endpoint listening');
    url = `mqtt://127.0.0.1:${endpointsOf(s.rt).entries.get('mqtt5-rest')!.handle!.port}`;
    await s.app.listen({ port: 0, host: '127.0.0.1' });
    base = `http://127.0.0.1:${(s.app.server.address() as { port: number }).port}`;
  });
  after(async () => {
    mq.endAll();
    await s.close();
  });
  const admin = () => ({ protocolVersion: 5 as const, username: 'admin', password: s.adminPassword });

  test('mqtt5 rest - a REST publish reaches an MQTT 5 subscriber with user properties, response topic, payload format, content type, correlation data and expiry', async () => {
    const { c } = await mq.connect(admin());
    await mq.subAck(c, ['props/rest']);
    const got = new Promise<IPublishPacket>((r) => c.once('message', (_t, _p, packet) => r(packet)));
    const pub = await s.inject({
      method: 'POST',
      url: '/api/v1/messaging/publish',
      payload: {
        destinationName: 'props/rest',
        message: {
          payload: b64('{"t": 21.5}'),
          userProperties: { unit: 'celsius', tag: ['a', 'b'] },
          responseTopic: 'reply/rest',
          payloadFormatIndicator: 1,
          contentType: 'application/json',
          correlationData: b64('corr-1'),
          expiry: 60000,
        },
      },
    });
    assert.equal(pub.statusCode, 200, pub.body);
    const p = await got;
    const props = p.properties!;
    assert.deepEqual({ ...props.userProperties }, { unit: 'celsius', tag: ['a', 'b'] });
    assert.equal(props.responseTopic, 'reply/rest');
    assert.equal(props.payloadFormatIndicator, true, 'mqtt.js reports payload format 1 as true');
    assert.equal(props.contentType, 'application/json');
    assert.equal(Buffer.from(props.correlationData!).toString(), 'corr-1');
    assert.ok(props.messageExpiryInterval! > 0 && props.messageExpiryInterval! <= 60, `message expiry ${props.messageExpiryInterval}`);
    assert.equal(p.payload.toString(), '{"t": 21.5}');
  });

  test('mqtt5 rest - an MQTT 5 publish shows its properties to REST consume and on the SSE stream', async () => {
    const sub = await s.inject({ method: 'POST', url: '/api/v1/messaging/subscribe', payload: { destinationName: 'props/mqtt', maxDepth: 10 } });
    assert.equal(sub.statusCode, 200, sub.body);
    const token = await (await fetch(`${base}/api/v1/messaging/sse?destination=props/mqtt`, { headers: s.auth })).text();
    const sse = new SseClient(`${base}/api/v1/messaging/sse/stream/${token}?destinationName=props/mqtt`);
    await sse.started;
    assert.equal(sse.status, 200);
    await waitUntil(() => s.rt.engine!.subscriptionCount >= 2, 5000, 'both subscriptions');
    const { c } = await mq.connect(admin());
    await new Promise<void>((res, rej) =>
      c.publish(
        'props/mqtt',
        'hello',
        {
          qos: 1,
          properties: {
            userProperties: { source: 'mqtt', k: ['1', '2'] },
            responseTopic: 'reply/mqtt',
            payloadFormatIndicator: true,
            contentType: 'text/plain',
            correlationData: Buffer.from('corr-2'),
            messageExpiryInterval: 120,
          },
        },
        (err) => (err ? rej(err) : res()),
      ),
    );
    const check = (m: Record<string, unknown>, where: string) => {
      assert.equal(unb64(m.payload as string), 'hello', where);
      assert.deepEqual(m.userProperties, { source: 'mqtt', k: ['1', '2'] }, where);
      assert.equal(m.responseTopic, 'reply/mqtt', where);
      assert.equal(m.payloadFormatIndicator, 1, where);
      assert.equal(m.contentType, 'text/plain', where);
      assert.equal(unb64(m.correlationData as string), 'corr-2', where);
      // the time it has left to live, in ms: 120 s less the moments since the publish (a loaded machine takes some)
      const ttl = m.expiry as number;
      assert.ok(ttl > 110_000 && ttl <= 120_000, `${where}: the message expiry as a time to live in ms, got ${ttl}`);
    };
    const consumed = await s.inject({ method: 'POST', url: '/api/v1/messaging/consume', payload: { destination: 'props/mqtt' } });
    assert.equal(consumed.statusCode, 200, consumed.body);
    check(consumed.json().consumedMessages[0], 'REST consume');
    await sse.waitFor((ev) => ev.length >= 1);
    check(JSON.parse(sse.events[0]!.data), 'SSE');
    sse.close();
    await sse.done;
  });

  test('mqtt5 rest - properties MQTT cannot carry are a 400 naming the field', async () => {
    for (const [message, pattern] of [
      [{ payload: b64('x'), responseTopic: 'reply/#' }, /responseTopic must be a topic name without wildcards/],
      [{ payload: b64('x'), payloadFormatIndicator: 2 }, /payloadFormatIndicator must be 0 \(bytes\) or 1/],
      [{ payload: Buffer.from([0xff, 0xfe]).toString('base64'), payloadFormatIndicator: 1 }, /not UTF-8 text although payloadFormatIndicator is 1/],
      [{ payload: b64('x'), userProperties: { a: 5 } }, /userProperties/],
      [{ payload: b64('x'), userProperties: { 'a\u0000': 'b' } }, /message\.userProperties\.a.*Invalid key/],
      [{ payload: b64('x'), userProperties: { a: 'b\u0000' } }, /must not contain U\+0000/],
    ] as const) {
      const r = await s.inject({ method: 'POST', url: '/api/v1/messaging/publish', payload: { destinationName: 'props/bad', message } });
      assert.equal(r.statusCode, 400, JSON.stringify(message));
      assert.match(r.json().status, pattern);
    }
  });
});
