/**
 * A link's state is honest across a NATS outage (issue 21 item 3): while it is not established `lastError` says why,
 * the drop of an established link is one WARN line, its return one INFO line, and `lastError` is cleared once it is
 * Established again.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { waitUntil } from '../helpers.js';
import { linkStatus, natsLink, startFederatedBroker, type FederatedBroker } from './brokers.js';
import { startNats, type NatsServer } from './nats-server.js';

describe('federation - link state across a NATS outage', () => {
  let nats: NatsServer | undefined;
  let a: FederatedBroker | undefined;
  after(async () => {
    await a?.close();
    await nats?.dispose();
  });

  it('links - lastError says why the link is down, a drop is one WARN, the return one INFO, and lastError clears when Established', async () => {
    nats = await startNats();
    a = await startFederatedBroker(natsLink(nats.url, { backoff: { initial: 100, max: 400 } }));
    const log = async () => ((await a!.s.inject('/api/v1/server/log')).json().logEntries as Array<{ message: string }>).map((e) => e.message);
    await waitUntil(async () => (await linkStatus(a!)).state === 'Established', 20000, 'established');
    assert.equal((await linkStatus(a)).lastError, '');

    await nats.stop('SIGKILL');
    await waitUntil(async () => (await linkStatus(a!)).state !== 'Established', 10000, 'the link notices the outage');
    // whatever state it is in while NATS is away (Delayed, Connecting), it says why
    const seen: Array<{ state: string; lastError: unknown }> = [];
    for (let i = 0; i < 20; i++) {
      const st = await linkStatus(a);
      seen.push({ state: st.state, lastError: st.lastError });
      await new Promise((r) => setTimeout(r, 50));
    }
    for (const st of seen) assert.ok(st.state !== 'Established' && typeof st.lastError === 'string' && st.lastError.length > 0, `not established without a reason: ${JSON.stringify(st)}`);
    const warns = (await log()).filter((l) => / WARN .*integration link fed lost its connection/.test(l));
    assert.equal(warns.length, 1, `one WARN for the drop: ${warns.join(' | ')}`);

    await nats.restart();
    await waitUntil(async () => (await linkStatus(a!)).state === 'Established', 20000, 'established again');
    const st = await linkStatus(a);
    assert.equal(st.lastError, '', 'lastError cleared once Established');
    const lines = await log();
    const infos = lines.filter((l) => / INFO .*integration link fed is established again/.test(l));
    assert.equal(infos.length, 1, `one INFO for the return: ${infos.join(' | ')}`);
    console.log(`# link state: down -> ${JSON.stringify(seen[0])}; back -> lastError ${JSON.stringify(st.lastError)}; log: ${warns[0]} / ${infos[0]}`);
  });

  it('links - a durable consumer deleted on the server does not leave the link Established and idle: it goes Delayed saying why, and comes back with the consumer', async () => {
    await waitUntil(async () => (await linkStatus(a!)).state === 'Established', 20000, 'established');
    const nc = await connect({ servers: nats!.url });
    try {
      const jsm = await jetstreamManager(nc);
      const durable = `${a!.serverName}-fed-1`.replace(/[^A-Za-z0-9_-]/g, '_');
      await jsm.consumers.info('SY_fed', durable);
      await jsm.consumers.delete('SY_fed', durable);
      const states: string[] = [];
      await waitUntil(async () => {
        const st = await linkStatus(a!);
        states.push(`${st.state}: ${st.lastError}`);
        return st.state !== 'Established';
      }, 20000, 'the link notices');
      const st = await linkStatus(a!);
      assert.match(String(st.lastError), new RegExp(`JetStream consumer ${durable} ended: consumer deleted`));
      await waitUntil(async () => (await linkStatus(a!)).state === 'Established', 20000, 'established again');
      const info = await jsm.consumers.info('SY_fed', durable);
      assert.equal(info.name, durable, 'the consumer is made again');
      assert.equal((await linkStatus(a!)).lastError, '');
      console.log(`# consumer deleted: link went ${st.state} (${st.lastError}), then Established with the consumer re-created`);
    } finally {
      await nc.close();
    }
  });
});
