/**
 * What a receiving link writes to its broker's store for the ids it handed over (src/links/received-ids.ts): the id of
 * a message the engine stored (here for an offline persistent session) goes into the same LevelDB batch as the
 * message, so a restart drops JetStream's redelivery of it; a message that only went to a connected client leaves no
 * record (before, every received message cost a store batch on the receiving broker, in the turn of its delivery).
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import type { MqttClient } from 'mqtt';
import { waitUntil } from '../helpers.js';
import { linkStatus, mqttClient, startFederatedPair, stopFederated, type FederatedBroker } from './brokers.js';
import type { NatsServer } from './nats-server.js';

const N = 30;

async function idRecords(b: FederatedBroker): Promise<number> {
  await b.s.rt.engine!.flush();
  let n = 0;
  for await (const _ of b.s.rt.engine!.stateEntries('link-ids!')) n++;
  return n;
}

describe('federation - received ids in the store', () => {
  const clients: MqttClient[] = [];
  let nats: NatsServer | undefined;
  let a: FederatedBroker | undefined;
  let b: FederatedBroker | undefined;
  after(() => stopFederated(clients, [a, b], nats));

  it('federation - a receiving broker stores the ids of the messages it stored, none for those only delivered live', async () => {
    ({ nats, a, b } = await startFederatedPair());
    const received = async () => Number((await linkStatus(b!)).messagesReceived);

    // a connected clean-session subscriber on B only: nothing stored, so no id record
    const live = await mqttClient(b.mqttPort, { clientId: 'ids-live' });
    clients.push(live);
    await live.subscribeAsync('fed/live/#', { qos: 1 });
    let got = 0;
    live.on('message', () => got++);
    const pub = await mqttClient(a.mqttPort, { clientId: 'ids-pub' });
    clients.push(pub);
    for (let i = 0; i < N; i++) await pub.publishAsync('fed/live/x', `m${i}`, { qos: 1 });
    await waitUntil(() => got === N, 20000, `the live subscriber on B gets ${N} messages`);
    assert.equal(await idRecords(b), 0, 'no id record for messages only delivered to a connected client');

    // an offline persistent session on B: each message is stored for it, and its id with it
    const kept = await mqttClient(b.mqttPort, { clientId: 'ids-kept', clean: false });
    await kept.subscribeAsync('fed/kept/#', { qos: 1 });
    kept.end(true);
    const before = await received();
    for (let i = 0; i < N; i++) await pub.publishAsync('fed/kept/x', `k${i}`, { qos: 1 });
    await waitUntil(async () => (await received()) >= before + N, 20000, `B's link receives ${N} more messages`);
    assert.equal(await idRecords(b), N, 'one id record per stored message');
  });
});
