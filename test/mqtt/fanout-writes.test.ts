import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import mqttPacket from 'mqtt-packet';
import { waitUntil } from '../helpers.js';
import { rawBroker, type RawClient } from './helpers.js';

/**
 * Subscribers that get the same PUBLISH buffers in one turn share one concatenated write (WriteBatch.join in
 * src/protocol/mqtt/outbound.ts). What a user sees must not change: every subscriber receives exactly its own
 * messages, in order, including one whose batch has the same number of packets and bytes as the others' but other
 * contents (a share decided on sizes alone would hand it the wrong messages).
 */
describe('mqtt fan-out writes', () => {
  const broker = rawBroker();

  const subscriber = async (version: number, topics: string[]) => {
    const r = await broker.open(version);
    await r.connect();
    r.send({ cmd: 'subscribe', messageId: 1, subscriptions: topics.map((topic) => ({ topic, qos: 0 })) });
    await r.next('suback');
    return r;
  };
  const received = (r: RawClient) => r.packets.filter((p) => p.cmd === 'publish').map((p) => `${p.topic} ${p.payload.toString()}`);

  test('mqtt - subscribers of one topic each receive every message of a burst in order, and others only their own', async () => {
    // subscribed in this order so that the twin's write comes right after the plain subscribers' (the order in which
    // connections first got bytes in the turn): its batch has their packet count and bytes, not their buffers
    const v5 = await subscriber(5, ['fan/t']);
    const both = await subscriber(4, ['fan/t', 'fan/o']);
    const same: RawClient[] = [];
    for (let i = 0; i < 4; i++) same.push(await subscriber(4, ['fan/t']));
    const twin = await subscriber(4, ['fan/u']); // same sizes as fan/t, other payloads
    const pub = await broker.open(4);
    await pub.connect();
    const N = 300;
    const packets: Buffer[] = [];
    const wantT: string[] = [];
    const wantU: string[] = [];
    const wantBoth: string[] = [];
    for (let i = 0; i < N; i++) {
      const t = `t-${String(i).padStart(4, '0')}`;
      const u = `u-${String(i).padStart(4, '0')}`;
      packets.push(mqttPacket.generate({ cmd: 'publish', topic: 'fan/t', payload: Buffer.from(t), qos: 0, retain: false, dup: false } as never));
      packets.push(mqttPacket.generate({ cmd: 'publish', topic: 'fan/u', payload: Buffer.from(u), qos: 0, retain: false, dup: false } as never));
      wantT.push(`fan/t ${t}`);
      wantU.push(`fan/u ${u}`);
      wantBoth.push(`fan/t ${t}`);
      if (i % 10 === 0) {
        packets.push(mqttPacket.generate({ cmd: 'publish', topic: 'fan/o', payload: Buffer.from(`o-${i}`), qos: 0, retain: false, dup: false } as never));
        wantBoth.push(`fan/o o-${i}`);
      }
    }
    pub.write(Buffer.concat(packets)); // one write: the broker reads the burst in few turns
    await waitUntil(() => [...same, v5].every((r) => received(r).length >= N) && received(both).length >= wantBoth.length && received(twin).length >= N, 15000);
    for (const r of [...same, v5]) assert.deepEqual(received(r), wantT);
    assert.deepEqual(received(both), wantBoth);
    assert.deepEqual(received(twin), wantU);
  });
});
