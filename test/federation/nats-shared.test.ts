/**
 * Shared subscriptions across two brokers federated over NATS: `$share/g/<filter>` members on broker A and on broker
 * B together get each message once, wherever it was published; a plain subscriber still gets every message.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { MqttClient } from 'mqtt';
import { waitUntil } from '../helpers.js';
import { mqttClient, startFederatedPair, stopFederated, type FederatedBroker } from './brokers.js';
import type { NatsServer } from './nats-server.js';

describe('federation - shared subscriptions across brokers', () => {
  let nats: NatsServer;
  let a: FederatedBroker;
  let b: FederatedBroker;
  const clients: MqttClient[] = [];

  before(async () => {
    ({ nats, a, b } = await startFederatedPair());
  });
  after(() => stopFederated(clients, [a, b], nats));

  const client = async (br: FederatedBroker) => {
    const c = await mqttClient(br.mqttPort);
    clients.push(c);
    return c;
  };

  for (const qos of [0, 1] as const) {
    it(`federation - $share/g members on A and B get each QoS ${qos} message once across both brokers`, async () => {
      const group = `g${qos}`;
      const filter = `fed/jobs${qos}/#`;
      const members = [await client(a), await client(a), await client(b)];
      const got: string[][] = members.map(() => []);
      members.forEach((m, i) => m.on('message', (_t, p) => got[i]!.push(p.toString())));
      for (const m of members) await m.subscribeAsync(`$share/${group}/${filter}`, { qos: 1 });
      const plain = await client(b);
      const all: string[] = [];
      plain.on('message', (_t, p) => all.push(p.toString()));
      await plain.subscribeAsync(filter, { qos: 1 });
      // the group's NATS receivers start with the members: give them a moment, then check with a probe
      const probe = await client(a);
      await waitUntil(
        async () => {
          await probe.publishAsync(`fed/jobs${qos}/probe`, 'probe', { qos });
          await new Promise((r) => setTimeout(r, 200));
          return got.some((g) => g.includes('probe'));
        },
        15000,
        'the group receives over NATS',
      );
      await new Promise((r) => setTimeout(r, 500));
      for (const g of got) g.length = 0;
      all.length = 0;

      const pubA = await client(a);
      const pubB = await client(b);
      const n = 60;
      for (let i = 0; i < n; i++) {
        await pubA.publishAsync(`fed/jobs${qos}/${i % 3}`, `a${i}`, { qos });
        await pubB.publishAsync(`fed/jobs${qos}/${i % 3}`, `b${i}`, { qos });
      }
      await waitUntil(() => got.flat().filter((p) => p !== 'probe').length >= 2 * n && all.length >= 2 * n, 20000, `all messages (group ${got.flat().length}, plain ${all.length})`);
      await new Promise((r) => setTimeout(r, 1000)); // a duplicate would arrive meanwhile
      const delivered = got.flat().filter((p) => p !== 'probe');
      assert.equal(delivered.length, 2 * n, `each message once across the group: ${got.map((g) => g.length).join(' + ')}`);
      assert.equal(new Set(delivered).size, 2 * n);
      for (let i = 0; i < n; i++) assert.ok(delivered.includes(`a${i}`) && delivered.includes(`b${i}`), `message ${i}`);
      // a plain subscriber is not affected
      assert.equal(all.filter((p) => p !== 'probe').length, 2 * n);
      for (const m of members) await m.unsubscribeAsync(`$share/${group}/${filter}`);
    });
  }
});
