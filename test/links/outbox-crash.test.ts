import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CONFIG_DIR, removeDir, spawnBroker, tempDir, type BrokerProcess } from '../helpers.js';
import { collect, connectClient, freePort, publishMany, startMosquitto, until, type Mosquitto } from './helpers.js';

const dirs: string[] = [];
const procs: BrokerProcess[] = [];
const mosqs: Mosquitto[] = [];
after(async () => {
  for (const p of procs) await p.stop('SIGKILL');
  for (const m of mosqs) await m.stop('SIGKILL');
  dirs.forEach(removeDir);
});

test('links - crash: messages PUBACKed into the outbox while the bridge target is down survive SIGKILL and are sent after restart, in order', async () => {
  const mport = await freePort(); // mosquitto is not running yet: the link backs off, the outbox fills
  const cfg = tempDir('switchyard-cfg-');
  const data = tempDir();
  const mdir = tempDir('switchyard-mosq-');
  dirs.push(cfg, data, mdir);
  cpSync(CONFIG_DIR, cfg, { recursive: true });
  writeFileSync(join(cfg, 'AuthManager.yaml'), 'AuthManager:\n  authenticationEnabled: false\n  authorisationEnabled: false\n');
  writeFileSync(
    join(cfg, 'NetworkConnectionManager.yaml'),
    [
      'NetworkConnectionManager:',
      '  data:',
      '    - name: bridge',
      `      url: mqtt://127.0.0.1:${mport}`,
      '      backoff: { initial: 100, max: 500, jitter: 0 }',
      '      linkConfigs:',
      "        - { direction: push, localNamespace: 'site-a/#', remoteNamespace: 'fed/site-a/', qualityOfService: 1 }",
      '',
    ].join('\n'),
  );
  const bport = await freePort();
  const env = { SWITCHYARD_DATA_DIR: data, SWITCHYARD_CONFIG_DIR: cfg, SWITCHYARD_MQTT_PORT: String(bport) };
  const first = await spawnBroker(env);
  procs.push(first);
  const pub = await connectClient(bport, { clientId: 'crash-pub' });
  await publishMany(pub, () => 'site-a/c', 500, 1, 'c'); // every publishAsync resolved: PUBACK received
  pub.end(true);
  const status = async (port: number) =>
    (await (await fetch(`http://127.0.0.1:${port}/api/v1/server/integration/bridge/status`)).json()) as { state: string; outbox: number };
  const st = await status(first.port);
  assert.equal(st.outbox, 500);
  assert.ok(['Delayed', 'Connecting'].includes(st.state), st.state);
  await first.stop('SIGKILL');

  const mosq = await startMosquitto(join(mdir, 'm'), mport);
  mosqs.push(mosq);
  const got: Array<{ topic: string; payload: string }> = [];
  const sub = await connectClient(mport, { clientId: 'remote-sub' });
  await collect(sub, 'fed/site-a/#', got);

  const second = await spawnBroker(env);
  procs.push(second);
  await until(() => got.length >= 500, 30000, 'the recovered outbox sent');
  await new Promise((r) => setTimeout(r, 300));
  sub.end(true);
  assert.equal(got.length, 500);
  assert.deepEqual(got.map((m) => m.payload), Array.from({ length: 500 }, (_, i) => `c-${i}`));
  assert.ok(got.every((m) => m.topic === 'fed/site-a/c'));
  const after2 = await status(second.port);
  assert.equal(after2.state, 'Established');
  assert.equal(after2.outbox, 0);
});
