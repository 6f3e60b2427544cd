/**
 * Federation duplicates after a kill of the receiving broker (issue 20 item 8): QoS 1 messages flow from broker A to
 * broker B (a child process) over NATS; B is killed (SIGKILL) twice while it receives, and started again. Its link's
 * memory of the ids it handed over is in the store, so the messages JetStream redelivers after each restart (their
 * acks never left B) are dropped. A persistent MQTT session on B (offline while this happens, so MQTT itself redelivers
 * nothing) then gets every message; at most a handful twice.
 */
import assert from 'node:assert/strict';
import { cpSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import mqtt, { type MqttClient } from 'mqtt';
import { CONFIG_DIR, removeDir, spawnBroker, tempDir, waitUntil, type BrokerProcess } from '../helpers.js';
import { linkStatus, mqttClient, natsLink, startFederatedBroker, type FederatedBroker } from './brokers.js';
import { freePort, startNats, type NatsServer } from './nats-server.js';

const TOTAL = 6000;
const KILLS = 2;
const MAX_DUPLICATES = 20;

describe('federation - duplicates after kills of the receiving broker', () => {
  const dirs: string[] = [];
  const procs: BrokerProcess[] = [];
  const clients: MqttClient[] = [];
  let nats: NatsServer | undefined;
  let a: FederatedBroker | undefined;
  after(async () => {
    for (const c of clients) c.end(true);
    for (const p of procs) await p.stop('SIGKILL');
    await a?.close();
    await nats?.dispose();
    dirs.forEach(removeDir);
  });

  it(`federation - ${TOTAL} QoS 1 messages while the receiving broker is killed ${KILLS} times: none lost, at most ${MAX_DUPLICATES} twice`, async () => {
    nats = await startNats();
    const link = natsLink(nats.url, { backoff: { initial: 100, max: 500 } });
    a = await startFederatedBroker(link);
    const cfg = tempDir('switchyard-cfg-');
    const data = tempDir();
    dirs.push(cfg, data);
    cpSync(CONFIG_DIR, cfg, { recursive: true });
    writeFileSync(join(cfg, 'AuthManager.yaml'), 'AuthManager:\n  authenticationEnabled: false\n');
    writeFileSync(join(cfg, 'NetworkConnectionManager.yaml'), `NetworkConnectionManager: ${JSON.stringify(link)}\n`);
    const mqttPort = await freePort();
    const env = { SWITCHYARD_DATA_DIR: data, SWITCHYARD_CONFIG_DIR: cfg, SWITCHYARD_MQTT_PORT: String(mqttPort) };
    const status = async (p: BrokerProcess) => (await (await fetch(`http://127.0.0.1:${p.port}/api/v1/server/integration/fed/status`)).json()) as { state: string; messagesReceived: number };
    const startB = async () => {
      const p = await spawnBroker(env);
      procs.push(p);
      await waitUntil(async () => (await status(p)).state === 'Established', 30000, 'B established');
      return p;
    };
    let b = await startB();
    await waitUntil(async () => (await linkStatus(a!)).state === 'Established', 20000, 'A established');
    // a persistent session on B, offline from now on: B keeps what arrives for it
    const first = await mqttClient(mqttPort, { clientId: 'kill-sub', clean: false });
    await first.subscribeAsync('fed/kill/#', { qos: 1 });
    first.end(true);

    const pub = await mqttClient(a.mqttPort, { clientId: 'kill-pub' });
    clients.push(pub);
    let next = 0;
    const publishRange = async (until: number) => {
      const pending = new Set<Promise<unknown>>();
      while (next < until) {
        const p = pub.publishAsync(`fed/kill/${next % 10}`, String(next), { qos: 1 });
        next++;
        pending.add(p);
        void p.finally(() => pending.delete(p));
        if (pending.size >= 200) await Promise.race(pending);
      }
      await Promise.all(pending);
    };
    const step = Math.floor(TOTAL / (KILLS + 1));
    for (let k = 1; k <= KILLS; k++) {
      const publishing = publishRange(step * k);
      await waitUntil(async () => (await status(b)).messagesReceived > step / 3, 60000, 'B receiving');
      await b.stop('SIGKILL');
      await publishing;
      b = await startB();
    }
    await publishRange(TOTAL);

    const count = new Map<string, number>();
    let deliveries = 0;
    // the listener before CONNACK: the queued messages follow it at once
    const sub = mqtt.connect(`mqtt://127.0.0.1:${mqttPort}`, { clientId: 'kill-sub', clean: false, reconnectPeriod: 0 });
    clients.push(sub);
    sub.on('message', (_t, p) => {
      deliveries++;
      const k = p.toString();
      count.set(k, (count.get(k) ?? 0) + 1);
    });
    await waitUntil(() => count.size === TOTAL, 120000, `all ${TOTAL} on B (got ${count.size})`);
    await new Promise((r) => setTimeout(r, 2000));
    const twice = [...count.values()].filter((n) => n > 1).length;
    console.log(`# dedupe (receiving broker killed ${KILLS} times): ${TOTAL} messages, ${deliveries} deliveries, ${twice} messages delivered more than once`);
    for (let i = 0; i < TOTAL; i++) assert.ok(count.has(String(i)), `message ${i} arrived`);
    assert.ok(twice <= MAX_DUPLICATES, `${twice} messages delivered more than once`);
    await b.stop('SIGTERM');
  });
});
