/**
 * NATS outage: while 5 000 QoS 1 messages are published on broker A, nats-server is killed (SIGKILL) and started
 * again on the same store. B's persistent subscriber gets all 5 000; both links go through Delayed / Connecting and
 * back to Established, which REST and /health show during the outage.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { MqttClient } from 'mqtt';
import { waitUntil } from '../helpers.js';
import { linkStatus, mqttClient, startFederatedPair, stopFederated, type FederatedBroker } from './brokers.js';
import type { NatsServer } from './nats-server.js';

const TOTAL = Number(process.env.FEDERATION_OUTAGE_MESSAGES ?? 5000);

describe('federation - NATS outage', () => {
  let nats: NatsServer;
  let a: FederatedBroker;
  let b: FederatedBroker;
  const clients: MqttClient[] = [];

  before(async () => {
    ({ nats, a, b } = await startFederatedPair({ backoff: { initial: 200, max: 800 } }));
  });
  after(() => stopFederated(clients, [a, b], nats));

  it(`federation - ${TOTAL} QoS 1 messages published on A across a nats-server kill and restart all reach B's persistent subscriber`, async () => {
    const sub = await mqttClient(b.mqttPort, { clientId: 'outage-sub', clean: false });
    clients.push(sub);
    const seen = new Set<string>();
    let deliveries = 0;
    sub.on('message', (_t, p) => {
      deliveries++;
      seen.add(p.toString());
    });
    await sub.subscribeAsync('fed/outage/#', { qos: 1 });
    const pub = await mqttClient(a.mqttPort, { clientId: 'outage-pub' });
    clients.push(pub);

    // watch A's link state and A's /health while everything runs
    const statesA = new Set<string>();
    const statesB = new Set<string>();
    const healthDuringOutage = new Set<string>();
    let outage = false;
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        const sa = await linkStatus(a);
        statesA.add(sa.state);
        statesB.add((await linkStatus(b)).state);
        if (outage) healthDuringOutage.add((await a.s.inject({ method: 'GET', url: '/health' })).body);
        await new Promise((r) => setTimeout(r, 25));
      }
    })();

    const window = 200;
    let next = 0;
    const publishRange = async (until: number) => {
      const pending = new Set<Promise<unknown>>();
      while (next < until) {
        const p = pub.publishAsync(`fed/outage/${next % 10}`, String(next), { qos: 1 });
        next++;
        pending.add(p);
        void p.finally(() => pending.delete(p));
        if (pending.size >= window) await Promise.race(pending);
      }
      await Promise.all(pending);
    };
    await publishRange(Math.floor(TOTAL * 0.3));
    // kill NATS while messages are still flowing
    outage = true;
    await nats.stop('SIGKILL');
    await publishRange(Math.floor(TOTAL * 0.7));
    await waitUntil(() => statesA.has('Delayed') || statesA.has('Connecting'), 10000, 'A shows the outage');
    await waitUntil(() => healthDuringOutage.has('Warning'), 10000, '/health Warning during the outage');
    await nats.restart();
    outage = false;
    await publishRange(TOTAL);
    await waitUntil(() => seen.size === TOTAL, 90000, `all ${TOTAL} on B (got ${seen.size})`);
    await waitUntil(async () => (await linkStatus(a)).state === 'Established', 10000, 'A established again');
    watching = false;
    await watcher;
    assert.equal(seen.size, TOTAL);
    for (let i = 0; i < TOTAL; i++) assert.ok(seen.has(String(i)), `message ${i}`);
    assert.ok(statesA.has('Delayed') || statesA.has('Connecting'), `A's link states: ${[...statesA].join(', ')}`);
    assert.ok(statesB.has('Delayed') || statesB.has('Connecting'), `B's link states: ${[...statesB].join(', ')}`);
    assert.ok(healthDuringOutage.has('Warning'), `A's /health during the outage: ${[...healthDuringOutage].join(', ')}`);
    assert.equal((await linkStatus(b)).state, 'Established');
    process.stdout.write(`# outage: ${TOTAL} messages, ${deliveries} deliveries (${deliveries - TOTAL} redelivered), A states ${[...statesA].join(' ')}\n`);
  });
});
