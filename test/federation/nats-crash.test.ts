/**
 * Crash of the sending broker over NATS: broker A (a child process) is killed with SIGKILL (1) while its outbox holds
 * QoS 1 messages it acknowledged while NATS was down, and (2) while it is sending to JetStream, so some messages are
 * stored in JetStream whose outbox entries were not yet removed. After each restart the outbox is sent again; B's
 * subscriber gets every message exactly once (JetStream drops the resends by their message id).
 */
import assert from 'node:assert/strict';
import { cpSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import type { MqttClient } from 'mqtt';
import { CONFIG_DIR, removeDir, spawnBroker, tempDir, waitUntil, type BrokerProcess } from '../helpers.js';
import { mqttClient, natsLink, startFederatedBroker, linkStatus, type FederatedBroker } from './brokers.js';
import { freePort, startNats, type NatsServer } from './nats-server.js';

describe('federation - crash of a broker that sends over NATS', () => {
  const dirs: string[] = [];
  const procs: BrokerProcess[] = [];
  const clients: MqttClient[] = [];
  let nats: NatsServer | undefined;
  let b: FederatedBroker | undefined;
  after(async () => {
    for (const c of clients) c.end(true);
    for (const p of procs) await p.stop('SIGKILL');
    await b?.close();
    await nats?.dispose();
    dirs.forEach(removeDir);
  });

  it('federation - QoS 1 messages acknowledged into the outbox survive SIGKILL of the sender, before and while sending, and arrive once', async () => {
    const natsPort = await freePort(); // NATS is not running yet: A's link backs off, its outbox fills
    const url = `nats://127.0.0.1:${natsPort}`;
    const cfg = tempDir('switchyard-cfg-');
    const data = tempDir();
    dirs.push(cfg, data);
    cpSync(CONFIG_DIR, cfg, { recursive: true });
    writeFileSync(join(cfg, 'AuthManager.yaml'), 'AuthManager:\n  authenticationEnabled: false\n');
    writeFileSync(join(cfg, 'NetworkConnectionManager.yaml'), `NetworkConnectionManager: ${JSON.stringify(natsLink(url, { backoff: { initial: 100, max: 500 } }))}\n`);
    const mqttPort = await freePort();
    const env = { SWITCHYARD_DATA_DIR: data, SWITCHYARD_CONFIG_DIR: cfg, SWITCHYARD_MQTT_PORT: String(mqttPort) };
    const status = async (port: number) => (await (await fetch(`http://127.0.0.1:${port}/api/v1/server/integration/fed/status`)).json()) as { state: string; outbox: number };
    const publish = async (from: number, to: number) => {
      const pub = await mqttClient(mqttPort, { clientId: `crash-pub-${from}` });
      const pending: Array<Promise<unknown>> = [];
      for (let i = from; i < to; i++) pending.push(pub.publishAsync(`fed/crash/${i % 7}`, String(i), { qos: 1 }));
      await Promise.all(pending); // every PUBACK received
      pub.end(true);
    };

    // 1. NATS down: 500 messages wait in A's outbox; SIGKILL
    const first = await spawnBroker(env);
    procs.push(first);
    await publish(0, 500);
    const st = await status(first.port);
    assert.equal(st.outbox, 500);
    assert.ok(['Delayed', 'Connecting', 'Disconnected'].includes(st.state), st.state);
    await first.stop('SIGKILL');

    // B with a persistent subscriber, NATS up
    nats = await startNats({ port: natsPort });
    b = await startFederatedBroker(natsLink(url));
    await waitUntil(async () => (await linkStatus(b!)).state === 'Established', 20000, 'B established');
    const sub = await mqttClient(b.mqttPort, { clientId: 'crash-sub', clean: false });
    clients.push(sub);
    const seen = new Map<string, number>();
    sub.on('message', (_t, p) => seen.set(p.toString(), (seen.get(p.toString()) ?? 0) + 1));
    await sub.subscribeAsync('fed/crash/#', { qos: 1 });

    // 2. A restarts, sends its outbox; more messages, and SIGKILL while they are being sent
    const second = await spawnBroker(env);
    procs.push(second);
    await publish(500, 3000);
    await waitUntil(() => seen.size >= 700, 30000, `sending under way (B has ${seen.size})`);
    const atKill = seen.size;
    await second.stop('SIGKILL');
    process.stdout.write(`# crash: A killed while B had ${atKill} of 3000\n`);
    const third = await spawnBroker(env);
    procs.push(third);
    await waitUntil(() => seen.size === 3000, 60000, `all 3 000 on B (got ${seen.size})`);
    await waitUntil(async () => (await status(third.port)).outbox === 0, 20000, 'the outbox empty');
    await new Promise((r) => setTimeout(r, 1000)); // a duplicate would arrive meanwhile
    for (let i = 0; i < 3000; i++) assert.equal(seen.get(String(i)), 1, `message ${i} once`);
    await third.stop('SIGTERM');
  });
});
