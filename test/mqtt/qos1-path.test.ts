import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import mqttPacket from 'mqtt-packet';
import { waitUntil } from '../helpers.js';
import { rawBroker, type RawClient } from './helpers.js';

/**
 * The QoS 1 path without promises (src/protocol/mqtt): a PUBACK with nothing to wait for goes at once, behind the
 * ones still waiting for the store; the first delivery of a message sends the bytes encoded for it with its own packet
 * id, the others a copy with theirs. What a client sees must not change.
 */
describe('mqtt QoS 1 path', () => {
  const broker = rawBroker();

  const publishes = (r: RawClient) => r.packets.filter((p) => p.cmd === 'publish');

  /** Acknowledges every PUBLISH it reads, with the packet id it read. */
  const acking = (r: RawClient, version: number): void => {
    r.socket.on('data', () => {
      // the RawClient's parser ran first (its listener was added first): the packets of this read are in the list
      for (const p of r.packets) {
        if (p.cmd === 'publish' && p.qos === 1 && !p.acked) {
          p.acked = true;
          r.socket.write(mqttPacket.generate({ cmd: 'puback', messageId: p.messageId } as never, { protocolVersion: version } as never));
        }
      }
    });
  };

  test('mqtt - QoS 1 fan-out: each subscriber gets the message with its own packet ids, and its PUBACKs free them', async () => {
    // `small` may have 3 QoS 1 PUBLISHes unacknowledged (Receive Maximum): a PUBACK with another subscriber's id frees
    // nothing, so it would stall after 3. `offset` has 5 unacknowledged ids from another topic first, so its ids on
    // the shared topic differ from `small`'s for the same message.
    const small = await broker.open(5);
    await small.connect({ properties: { receiveMaximum: 3 } });
    small.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: 'q1path/t', qos: 1 }] });
    await small.next('suback');
    const offset = await broker.open(5); // the protocol class of `small`: both get the bytes of one encoding
    await offset.connect();
    offset.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: 'q1path/t', qos: 1 }, { topic: 'q1path/first', qos: 1 }] });
    await offset.next('suback');
    const plain = await broker.open(4);
    await plain.connect();
    plain.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: 'q1path/t', qos: 0 }] });
    await plain.next('suback');
    const pub = await broker.open(4);
    await pub.connect();
    for (let i = 1; i <= 5; i++) pub.send({ cmd: 'publish', topic: 'q1path/first', payload: Buffer.from(`f${i}`), qos: 1, messageId: i, retain: false, dup: false });
    await waitUntil(() => publishes(offset).length === 5, 5000);
    acking(small, 5);
    acking(offset, 5);
    const N = 40;
    const packets: Buffer[] = [];
    for (let i = 0; i < N; i++) packets.push(mqttPacket.generate({ cmd: 'publish', topic: 'q1path/t', payload: Buffer.from(`m${i}`), qos: 1, messageId: 100 + i, retain: false, dup: false } as never));
    pub.write(Buffer.concat(packets));
    await waitUntil(() => publishes(small).length >= N && publishes(offset).length >= 5 + N && publishes(plain).length >= N, 10000);
    const want = Array.from({ length: N }, (_, i) => `m${i}`);
    const got = (r: RawClient, skip = 0) => publishes(r).slice(skip);
    assert.deepEqual(got(small).map((p) => p.payload.toString()), want);
    assert.deepEqual(got(offset, 5).map((p) => p.payload.toString()), want);
    assert.deepEqual(got(plain).map((p) => p.payload.toString()), want);
    // the ids each session gave: consecutive from its own start (1 for small, 6 for offset, after its 5 unacknowledged)
    assert.deepEqual(got(small).map((p) => p.messageId), Array.from({ length: N }, (_, i) => (i % 65535) + 1));
    assert.deepEqual(got(offset, 5).map((p) => p.messageId), Array.from({ length: N }, (_, i) => i + 6));
    assert.ok(got(plain).every((p) => p.qos === 0 && p.messageId === undefined));
    assert.ok(got(small).every((p) => p.qos === 1 && !p.dup) && got(offset, 5).every((p) => p.qos === 1 && !p.dup));
  });

  test('mqtt - PUBACKs keep the order of the PUBLISHes when some wait for the store (a persistent subscriber) and some do not [MQTT-4.6.0-2]', async () => {
    const keeper = await broker.open(4);
    await keeper.connect({ clean: false, clientId: 'q1path-keeper' });
    keeper.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: 'q1path/stored', qos: 1 }] });
    await keeper.next('suback');
    const pub = await broker.open(4);
    await pub.connect();
    const N = 60;
    const packets: Buffer[] = [];
    // alternating: a message a persistent session holds (written to the store before its PUBACK) and one nobody
    // persistent reads (nothing to wait for)
    for (let i = 1; i <= N; i++) packets.push(mqttPacket.generate({ cmd: 'publish', topic: i % 2 ? 'q1path/stored' : 'q1path/loose', payload: Buffer.from(`p${i}`), qos: 1, messageId: i, retain: false, dup: false } as never));
    pub.write(Buffer.concat(packets));
    await waitUntil(() => pub.packets.filter((p) => p.cmd === 'puback').length >= N, 10000);
    assert.deepEqual(
      pub.packets.filter((p) => p.cmd === 'puback').map((p) => p.messageId),
      Array.from({ length: N }, (_, i) => i + 1),
    );
    await waitUntil(() => publishes(keeper).length >= N / 2, 10000);
  });
});
