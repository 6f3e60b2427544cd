/**
 * Federation duplicates after faults (issue 20 item 8): QoS 1 messages flow from broker A to broker B over NATS while
 * nats-server is killed (SIGKILL) and started again, three times. B's receiving link remembers the ids it handed over
 * per durable consumer, across reconnects (and in the store, across restarts), so the redeliveries JetStream makes after
 * each kill (acks lost with the server) are dropped: B's persistent subscriber gets every message, at most a handful
 * twice. Printed: messages, deliveries, duplicates, and what B's link dropped as duplicates.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { MqttClient } from 'mqtt';
import { waitUntil } from '../helpers.js';
import { linkStatus, mqttClient, startFederatedPair, stopFederated, type FederatedBroker } from './brokers.js';
import type { NatsServer } from './nats-server.js';

const TOTAL = 8000;
const KILLS = 3;
/** "At most a handful": the messages B stored in the instant before a kill whose ids were not yet written. */
const MAX_DUPLICATES = 20;

describe('federation - duplicates after nats-server kills', () => {
  let nats: NatsServer;
  let a: FederatedBroker;
  let b: FederatedBroker;
  const clients: MqttClient[] = [];

  before(async () => {
    ({ nats, a, b } = await startFederatedPair({ backoff: { initial: 100, max: 500 } }));
  });
  after(() => stopFederated(clients, [a, b], nats));

  it(`federation - ${TOTAL} QoS 1 messages across ${KILLS} nats-server kills: none lost, at most ${MAX_DUPLICATES} delivered twice`, async () => {
    const sub = await mqttClient(b.mqttPort, { clientId: 'dedupe-sub', clean: false });
    clients.push(sub);
    const count = new Map<string, number>();
    let deliveries = 0;
    sub.on('message', (_t, p) => {
      deliveries++;
      const k = p.toString();
      count.set(k, (count.get(k) ?? 0) + 1);
    });
    await sub.subscribeAsync('fed/dedupe/#', { qos: 1 });
    const pub = await mqttClient(a.mqttPort, { clientId: 'dedupe-pub' });
    clients.push(pub);

    let next = 0;
    const publishRange = async (until: number) => {
      const pending = new Set<Promise<unknown>>();
      while (next < until) {
        const p = pub.publishAsync(`fed/dedupe/${next % 10}`, String(next), { qos: 1 });
        next++;
        pending.add(p);
        void p.finally(() => pending.delete(p));
        if (pending.size >= 200) await Promise.race(pending);
      }
      await Promise.all(pending);
    };
    const step = Math.floor(TOTAL / (KILLS + 1));
    for (let k = 1; k <= KILLS; k++) {
      await publishRange(step * k);
      // kill while B is receiving: wait until it has some of this range, not all of it
      await waitUntil(() => count.size > step * k - step / 2, 60000, `B receiving (${count.size})`);
      await nats.stop('SIGKILL');
      await new Promise((r) => setTimeout(r, 300));
      await nats.restart();
      await waitUntil(async () => (await linkStatus(b)).state === 'Established' && (await linkStatus(a)).state === 'Established', 30000, 'both links back');
    }
    await publishRange(TOTAL);
    await waitUntil(() => count.size === TOTAL, 120000, `all ${TOTAL} on B (got ${count.size})`);
    await new Promise((r) => setTimeout(r, 2000)); // late redeliveries would arrive meanwhile
    const twice = [...count.values()].filter((n) => n > 1).length;
    const st = (await linkStatus(b)) as { state: string; lastError: string };
    const dropped = (b.s.rt.service('integrations')!.manager!.entries.get('fed')!.transport as { counters?(): { duplicatesDropped: number } } | undefined)?.counters?.().duplicatesDropped;
    console.log(`# dedupe: ${TOTAL} messages, ${KILLS} nats-server kills: ${deliveries} deliveries, ${twice} messages delivered more than once (${deliveries - TOTAL} extra); B's link dropped ${dropped ?? '?'} redeliveries on its last connection; B ${st.state}, lastError ${JSON.stringify(st.lastError)}`);
    for (let i = 0; i < TOTAL; i++) assert.ok(count.has(String(i)), `message ${i} arrived`);
    assert.ok(twice <= MAX_DUPLICATES, `${twice} messages delivered more than once`);
  });
});
