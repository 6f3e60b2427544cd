/**
 * Two Switchyard brokers federated through one real nats-server (JetStream on, own store dir), by configuration:
 * MQTT clients on either side get what is published on the other, QoS 0 and QoS 1, exactly once, no loops;
 * retained messages cross.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { MqttClient } from 'mqtt';
import { waitUntil } from '../helpers.js';
import { linkStatus, mqttClient, natsLink, startFederatedBroker, startFederatedPair, stopFederated, type FederatedBroker } from './brokers.js';
import type { NatsServer } from './nats-server.js';

describe('federation - two brokers over NATS', () => {
  let nats: NatsServer;
  let a: FederatedBroker;
  let b: FederatedBroker;
  const clients: MqttClient[] = [];

  before(async () => {
    ({ nats, a, b } = await startFederatedPair());
  });
  after(() => stopFederated(clients, [a, b], nats));

  const client = async (br: FederatedBroker, opts = {}) => {
    const c = await mqttClient(br.mqttPort, opts);
    clients.push(c);
    return c;
  };

  it('federation - the two brokers have different server ids', () => {
    assert.notEqual(a.serverName, b.serverName);
  });

  it('federation - QoS 0 and QoS 1 published on one broker reach subscribers on the other, both ways, exactly once, no loops', async () => {
    const onA = await client(a);
    const onB = await client(b);
    const gotA: string[] = [];
    const gotB: string[] = [];
    onA.on('message', (t, p) => gotA.push(`${t}|${p}`));
    onB.on('message', (t, p) => gotB.push(`${t}|${p}`));
    await onA.subscribeAsync('fed/#', { qos: 1 });
    await onB.subscribeAsync('fed/#', { qos: 1 });
    const pubA = await client(a);
    const pubB = await client(b);
    const n = 50;
    for (let i = 0; i < n; i++) {
      await pubA.publishAsync(`fed/from-a/${i % 5}`, `a${i}`, { qos: (i % 2) as 0 | 1 });
      await pubB.publishAsync(`fed/from-b/${i % 5}`, `b${i}`, { qos: (i % 2) as 0 | 1 });
    }
    await waitUntil(() => gotA.length >= 2 * n && gotB.length >= 2 * n, 20000, `all messages on both sides (A ${gotA.length}, B ${gotB.length})`);
    // anything extra (a duplicate, a message looping back) would arrive within this pause
    await new Promise((r) => setTimeout(r, 1000));
    for (const got of [gotA, gotB]) {
      assert.equal(got.length, 2 * n, 'each message exactly once');
      assert.equal(new Set(got).size, 2 * n);
      for (let i = 0; i < n; i++) {
        assert.ok(got.includes(`fed/from-a/${i % 5}|a${i}`));
        assert.ok(got.includes(`fed/from-b/${i % 5}|b${i}`));
      }
    }
    // each broker saw its own messages come back from NATS and dropped them
    await waitUntil(
      async () => {
        const [x, y] = [await linkStatus(a), await linkStatus(b)];
        return x.loopsDropped === x.messagesSent && y.loopsDropped === y.messagesSent;
      },
      10000,
      'own messages back from NATS',
    );
    const sa = await linkStatus(a);
    const sb = await linkStatus(b);
    assert.equal(sa.loopsDropped, sa.messagesSent, `A dropped all of its own: ${JSON.stringify(sa)}`);
    assert.equal(sb.loopsDropped, sb.messagesSent, `B dropped all of its own: ${JSON.stringify(sb)}`);
    assert.equal(sa.messagesReceived, n);
    assert.equal(sb.messagesReceived, n);
  });

  it('federation - a broker that joins later gets the retained messages published before it started', async () => {
    const pub = await client(a);
    await pub.publishAsync('fed/ret/door', 'closed', { qos: 1, retain: true });
    await waitUntil(async () => {
      const c = await client(b);
      let ok = false;
      c.on('message', (t, p, pk) => (ok ||= pk.retain && t === 'fed/ret/door' && p.toString() === 'closed'));
      await c.subscribeAsync('fed/ret/door', { qos: 1 });
      await new Promise((r) => setTimeout(r, 200));
      c.end(true);
      return ok;
    }, 10000, 'the retained message stored on NATS (seen on B)');
    const late = await startFederatedBroker(natsLink(nats.url));
    try {
      await waitUntil(async () => (await linkStatus(late)).state === 'Established', 20000, 'the late link established');
      const c = await client(late);
      const got: string[] = [];
      c.on('message', (t, p, pk) => pk.retain && got.push(`${t}|${p}`));
      await c.subscribeAsync('fed/ret/door', { qos: 1 });
      await waitUntil(() => got.length > 0, 10000, 'the retained message on the late broker');
      assert.deepEqual(got, ['fed/ret/door|closed']);
      c.end(true);
    } finally {
      await late.close();
    }
  });

  it('federation - a retained message published on A is given to a later subscriber on B; an empty retained message clears it', async () => {
    const pub = await client(a);
    await pub.publishAsync('fed/ret/lamp', 'on', { qos: 1, retain: true });
    await waitUntil(async () => {
      const c = await client(b);
      const got: string[] = [];
      c.on('message', (t, p, pk) => pk.retain && got.push(`${t}|${p}`));
      await c.subscribeAsync('fed/ret/lamp', { qos: 1 });
      await new Promise((r) => setTimeout(r, 200));
      c.end(true);
      return got.includes('fed/ret/lamp|on');
    }, 10000, 'the retained message on B');
    await pub.publishAsync('fed/ret/lamp', '', { qos: 1, retain: true });
    await waitUntil(async () => {
      const c = await client(b);
      let retained = 0;
      c.on('message', (_t, _p, pk) => pk.retain && retained++);
      await c.subscribeAsync('fed/ret/lamp', { qos: 1 });
      await new Promise((r) => setTimeout(r, 200));
      c.end(true);
      return retained === 0;
    }, 10000, 'the retained message cleared on B');
  });
});
