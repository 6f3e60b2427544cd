import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import mqtt, { type MqttClient } from 'mqtt';
import mqttPacket from 'mqtt-packet';
import { startServer, waitUntil, type TestServer } from '../helpers.js';
import { RawClient, mqttPort } from './helpers.js';

/**
 * Flow control of subscription queues (docs/messaging.md "Flow control and limits"): an MQTT subscription holds at
 * most DestinationManager.maxQueuedMessages (10 000) messages; QoS 1/2 publishes that would go beyond are refused
 * to their publisher (v5 0x97, 3.1.1 per quotaExceededPolicy311, REST 429) rather than acknowledged and dropped;
 * QoS 0 copies replace the oldest QoS 0 copy.
 */
describe('mqtt flow control', () => {
  const CAP = 10_000;
  let s: TestServer;
  let port: number;
  let dropPort: number;
  const clients: MqttClient[] = [];
  const raws: RawClient[] = [];
  before(async () => {
    s = await startServer({
      auth: false,
      overrides: {
        NetworkManager: {
          data: [
            { name: 'MQTT Interface', url: 'tcp://127.0.0.1:0/', protocolConfigs: [{ type: 'mqtt', serverReceiveMaximum: 1000 }] },
            { name: 'drop 3.1.1', url: 'tcp://127.0.0.1:0/', protocolConfigs: [{ type: 'mqtt', quotaExceededPolicy311: 'drop' }] },
          ],
        },
      },
    });
    port = await mqttPort(s);
    dropPort = await mqttPort(s, 'drop 3.1.1');
  });
  after(async () => {
    for (const c of clients) c.end(true);
    for (const r of raws) r.destroy();
    await s.close();
  });
  const raw = async (v = 5, p = port) => {
    const r = await RawClient.open(p, v);
    raws.push(r);
    return r;
  };

  /** An offline persistent subscriber (v5, session kept an hour) of `topic` at `qos`. */
  const offlineSubscriber = async (clientId: string, topic: string, qos: 0 | 1 | 2) => {
    const c = await mqtt.connectAsync(`mqtt://127.0.0.1:${port}`, { protocolVersion: 5, clientId, clean: false, properties: { sessionExpiryInterval: 3600 }, reconnectPeriod: 0 });
    await c.subscribeAsync(topic, { qos });
    await c.endAsync();
  };

  /** The subscriber comes back and reads until `n` messages arrived (and 300 ms more for any extra). */
  const drainSubscriber = async (clientId: string, n: number): Promise<string[]> => {
    const got: string[] = [];
    // the handler is attached before CONNACK: held messages can arrive in the same read
    const c = mqtt.connect(`mqtt://127.0.0.1:${port}`, { protocolVersion: 5, clientId, clean: false, properties: { sessionExpiryInterval: 3600 }, reconnectPeriod: 0 });
    clients.push(c);
    c.on('message', (_t, p) => got.push(p.toString()));
    await waitUntil(() => got.length >= n, 60000, `${n} messages for ${clientId} (got ${got.length})`);
    await new Promise((r) => setTimeout(r, 300));
    return got;
  };

  /** Publish payloads `from..to-1` at QoS 1 or 2 over a raw v5 connection, `window` at a time; reason code per payload. */
  const publishWindowed = async (r: RawClient, topic: string, qos: 1 | 2, from: number, to: number, window = 200): Promise<Map<number, number>> => {
    const codes = new Map<number, number>();
    let pid = 0;
    for (let i = from; i < to; i += window) {
      const end = Math.min(to, i + window);
      const ids = new Map<number, number>();
      const bufs: Buffer[] = [];
      for (let k = i; k < end; k++) {
        pid = (pid % 65535) + 1;
        ids.set(pid, k);
        bufs.push(mqttPacket.generate({ cmd: 'publish', topic, payload: String(k), qos, messageId: pid, retain: false, dup: false } as never, { protocolVersion: 5 } as never));
      }
      r.write(Buffer.concat(bufs));
      for (let k = i; k < end; k++) {
        const ack = await r.next(qos === 1 ? 'puback' : 'pubrec', 20000);
        codes.set(ids.get(ack.messageId)!, ack.reasonCode ?? 0);
        if (qos === 2 && (ack.reasonCode ?? 0) < 0x80) r.send({ cmd: 'pubrel', messageId: ack.messageId });
      }
      if (qos === 2) for (let k = i; k < end; k++) if (codes.get(k) === 0) await r.next('pubcomp', 20000);
    }
    return codes;
  };

  const detail = async (topic: string) => {
    const d = await s.inject(`/api/v1/server/destination/detail?destinationName=${encodeURIComponent(topic)}`);
    assert.equal(d.statusCode, 200, d.body);
    return d.json().subscriptionList[0] as Record<string, any>;
  };

  for (const qos of [1, 2] as const) {
    test(`flow control - 12 000 QoS ${qos} publishes to a 10 000 cap: 10 000 acknowledged and delivered, 2 000 refused with 0x97 (MQTT 5), none acknowledged and lost`, async () => {
      const topic = `fc/q${qos}`;
      const clientId = `fc-sub-q${qos}`;
      await offlineSubscriber(clientId, topic, qos);
      const pub = await raw(5);
      await pub.connect({ protocolVersion: 5, clientId: `fc-pub-q${qos}` });
      const codes = await publishWindowed(pub, topic, qos, 0, 12_000);
      const accepted = [...codes].filter(([, c]) => c === 0).map(([k]) => k);
      const refused = [...codes].filter(([, c]) => c === 0x97).map(([k]) => k);
      console.log(`# QoS ${qos}: ${accepted.length} acknowledged (reason 0), ${refused.length} refused (0x97), ${codes.size - accepted.length - refused.length} other`);
      assert.equal(accepted.length, CAP);
      assert.equal(refused.length, 2_000);
      assert.ok(!pub.closed, 'the publisher stays connected');

      if (qos === 1) {
        // 3.1.1, default policy 'disconnect': closed without an acknowledgement (it resends after reconnecting)
        const v3 = await raw(4);
        await v3.connect({ clientId: 'fc-pub-311' });
        v3.send({ cmd: 'publish', topic, payload: 'v311', qos: 1, messageId: 7 });
        await v3.waitClosed(5000);
        assert.equal(v3.packets.filter((p) => p.cmd === 'puback').length, 0, 'no PUBACK for a refused 3.1.1 publish');
        // 3.1.1 on an endpoint with quotaExceededPolicy311 'drop': acknowledged, discarded, counted
        const drop = await raw(4, dropPort);
        await drop.connect({ clientId: 'fc-pub-311-drop' });
        drop.send({ cmd: 'publish', topic, payload: 'v311-drop', qos: 1, messageId: 8 });
        assert.equal((await drop.next('puback')).messageId, 8);
        // REST: 429 with a JSON status; nothing published
        const r = await s.inject({ method: 'POST', url: '/api/v1/messaging/publish', payload: { destinationName: topic, message: { payload: Buffer.from('rest').toString('base64'), qualityOfService: 1 } } });
        console.log(`# REST publish into the full queue: ${r.statusCode} ${r.body}`);
        assert.equal(r.statusCode, 429);
        assert.match(r.json().status, /Quota exceeded/);
        const st = await detail(topic);
        console.log(`# subscription detail: maxQueuedMessages ${st.maxQueuedMessages}, size ${st.size}, messagesRefused ${st.messagesRefused}, messagesDropped ${st.messagesDropped}`);
        assert.equal(st.maxQueuedMessages, CAP);
        assert.equal(st.size, CAP);
        assert.equal(st.messagesRefused, 2_003);
        const metrics = await s.inject('/metrics');
        const refusedTotal = Number(/^switchyard_messages_refused_total (\d+)/m.exec(metrics.body)?.[1]);
        assert.ok(refusedTotal >= 2_003, `switchyard_messages_refused_total ${refusedTotal}`);
      }

      const got = await drainSubscriber(clientId, CAP);
      assert.equal(got.length, CAP, 'exactly the acknowledged messages are delivered');
      assert.deepEqual(got, accepted.map(String), 'every acknowledged message, in order, nothing refused');
      // the queue has room again: the next publish is accepted
      const again = await publishWindowed(pub, topic, qos, 20_000, 20_001);
      assert.equal(again.get(20_000), 0);
    });
  }

  test('flow control - QoS 0 copies for a full subscription replace the oldest QoS 0 copies (counted)', async () => {
    const topic = 'fc/q0';
    const clientId = 'fc-sub-q0';
    await offlineSubscriber(clientId, topic, 0);
    const pub = await raw(4);
    await pub.connect({ clientId: 'fc-pub-q0' });
    const bufs: Buffer[] = [];
    for (let k = 0; k < CAP + 5; k++) bufs.push(mqttPacket.generate({ cmd: 'publish', topic, payload: String(k), qos: 0, retain: false, dup: false } as never));
    pub.write(Buffer.concat(bufs));
    await waitUntil(async () => (await detail(topic)).messagesDropped === 5, 20000, 'five drops');
    const st = await detail(topic);
    assert.equal(st.size, CAP);
    assert.equal(st.messagesRefused, 0);
    const got = await drainSubscriber(clientId, CAP);
    assert.equal(got.length, CAP);
    assert.equal(got[0], '5', 'the five oldest were dropped');
    assert.equal(got[got.length - 1], String(CAP + 4), 'the newest is kept');
  });
});
