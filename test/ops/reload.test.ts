import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import mqtt from 'mqtt';
import { CONFIG_DIR, MQTT_TEST_ENV, ROOT, removeDir, spawnBroker, startServer, tempDir, waitUntil, type BrokerProcess, type TestServer } from '../helpers.js';
import { reloadConfig } from '../../src/runtime/reload.js';
import { endpointsOf } from '../../src/endpoints/endpoints.service.js';
import { integrationsOf } from '../../src/links/integrations.service.js';
import { freePort, startNats } from '../federation/nats-server.js';

/** The `switchyard` command as an operator runs it (bin/switchyard.js, from the sources here). */
function sy(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [join(ROOT, 'bin/switchyard.js'), ...args], { cwd: ROOT, env: { ...process.env, SWITCHYARD_FROM_SOURCE: '1', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => (stdout += d));
    p.stderr.on('data', (d) => (stderr += d));
    p.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

/** A copy of the shipped configuration folder the test can edit. */
function configCopy(dirs: string[]): string {
  const dir = tempDir('switchyard-config-');
  dirs.push(dir);
  mkdirSync(dir, { recursive: true });
  for (const f of readdirSync(CONFIG_DIR)) copyFileSync(join(CONFIG_DIR, f), join(dir, f));
  return dir;
}

function edit(file: string, from: RegExp, to: string): void {
  const text = readFileSync(file, 'utf8');
  assert.match(text, from, `${file} has ${from}`);
  writeFileSync(file, text.replace(from, to));
}

async function mqttConnect(port: number, password: string, clientId: string): Promise<void> {
  const c = await mqtt.connectAsync(`mqtt://127.0.0.1:${port}`, { clientId, username: 'admin', password, reconnectPeriod: 0 });
  await c.endAsync();
}

describe('configuration reload', () => {
  const dirs: string[] = [];
  const brokers: BrokerProcess[] = [];
  after(async () => {
    for (const b of brokers) await b.stop('SIGKILL');
    dirs.forEach(removeDir);
  });

  test('reload - logLevel changed in the YAML: SIGHUP (switchyard reload) applies it live and names the changed keys that need a restart', async () => {
    const data = tempDir();
    dirs.push(data);
    const config = configCopy(dirs);
    const b = await spawnBroker({ SWITCHYARD_DATA_DIR: data, SWITCHYARD_CONFIG_DIR: config });
    brokers.push(b);
    const env = { SWITCHYARD_DATA_DIR: data, SWITCHYARD_CONFIG_DIR: config };
    const password = readFileSync(join(data, 'admin_password'), 'utf8').trim();
    await waitUntil(() => /endpoint MQTT Interface listening on tcp:\/\/127\.0\.0\.1:\d+/.test(b.stdout()), 20000, 'MQTT endpoint');
    const mqttPort = Number(/endpoint MQTT Interface listening on tcp:\/\/127\.0\.0\.1:(\d+)/.exec(b.stdout())![1]);
    assert.equal(readFileSync(join(data, 'switchyard.pid'), 'utf8').trim(), String(b.proc.pid));

    const auth = { authorization: `Basic ${Buffer.from(`admin:${password}`).toString('base64')}` };
    const section = async (name: string) => ((await (await fetch(`http://127.0.0.1:${b.port}/api/v1/server/config/${name}`, { headers: auth })).json()) as { config: Record<string, unknown> }).config;
    assert.equal((await section('MessageDaemon')).logLevel, 'info'); // (and now in the REST response cache)

    // at info, a connection is not logged (it is DEBUG)
    await mqttConnect(mqttPort, password, 'before-reload');
    await new Promise((r) => setTimeout(r, 300));
    assert.doesNotMatch(b.stdout(), /MQTT client connected.*before-reload/);

    edit(join(config, 'MessageDaemon.yaml'), /logLevel: info/, 'logLevel: debug');
    edit(join(config, 'RestApi.yaml'), /bodyLimit: 1048576/, 'bodyLimit: 2097152');
    const r = await sy(['reload'], env);
    assert.equal(r.code, 0, r.stderr + r.stdout);
    assert.match(r.stdout, new RegExp(`configuration reloaded by pid ${b.proc.pid}`));
    assert.match(r.stdout, /applied: MessageDaemon\.logLevel: "info" -> "debug"/);
    assert.match(r.stdout, /needs a restart: RestApi\.bodyLimit: 1048576 -> 2097152/);
    assert.match(b.stdout(), /WARN configuration reload: 1 changed key\(s\) take effect only after a restart of the process: RestApi\.bodyLimit/);

    await mqttConnect(mqttPort, password, 'after-reload');
    await waitUntil(() => /DEBUG MQTT client connected.*clientId=after-reload/.test(b.stdout()), 5000, 'the DEBUG connection line after the reload');
    // and in messaging.log (the file logger, not only stdout)
    await waitUntil(() => readFileSync(join(data, 'log', 'messaging.log'), 'utf8').includes('"clientId":"after-reload"'), 5000, 'messaging.log line');

    // the running configuration is what the config API shows: debug applied, bodyLimit not
    assert.equal((await section('MessageDaemon')).logLevel, 'debug');
    assert.equal((await section('RestApi')).bodyLimit, 1048576);

    // a plain SIGHUP does the same (kill -HUP, docker kill --signal HUP): back to info
    edit(join(config, 'MessageDaemon.yaml'), /logLevel: debug/, 'logLevel: info');
    b.proc.kill('SIGHUP');
    await waitUntil(() => /applied=\[".*MessageDaemon\.logLevel \(\\"debug\\" -> \\"info\\"\)/.test(b.stdout()), 5000, 'second reload');
    const mark = b.stdout().length;
    await mqttConnect(mqttPort, password, 'back-at-info');
    await new Promise((r) => setTimeout(r, 300));
    assert.doesNotMatch(b.stdout().slice(mark), /MQTT client connected/);

    // an invalid file changes nothing and the broker goes on; the CLI says why, exit 2
    edit(join(config, 'MessageDaemon.yaml'), /logLevel: info/, 'logLevel: loud');
    const bad = await sy(['reload', '--data-dir', data], { SWITCHYARD_CONFIG_DIR: config });
    assert.equal(bad.code, 2, bad.stdout + bad.stderr);
    assert.match(bad.stdout, /reload refused by pid \d+, nothing changed: .*MessageDaemon\.yaml: section 'MessageDaemon', key 'logLevel'/);
    assert.equal((await fetch(`http://127.0.0.1:${b.port}/readyz`)).status, 200);
    assert.equal(await b.stop('SIGTERM'), 0);
    assert.equal(existsSync(join(data, 'switchyard.pid')), false, 'the pid file goes with the process');
    const none = await sy(['reload'], env);
    assert.equal(none.code, 4);
    assert.match(none.stderr, /no broker is running on/);
  });

  test('reload - an endpoint whose YAML changed is restarted through its actor with the new settings (v5 Server Keep Alive 60 -> 30); an added endpoint needs a restart', async () => {
    const config = configCopy(dirs);
    const data = tempDir();
    dirs.push(data);
    const s: TestServer = await startServer({ configDir: config, dataDir: data });
    try {
      const overrides = { MessageDaemon: { dataDirectory: data }, RestApi: { port: 0, hostnames: '127.0.0.1' } };
      const keepAlive = async () => {
        const port = endpointsOf(s.rt).entries.get('MQTT Interface')!.handle!.port;
        const c = mqtt.connect(`mqtt://127.0.0.1:${port}`, { protocolVersion: 5, keepalive: 600, username: 'admin', password: s.adminPassword, reconnectPeriod: 0 });
        const connack = await new Promise<{ properties?: { serverKeepAlive?: number } }>((res, rej) => {
          c.once('connect', res);
          c.once('error', rej);
        });
        await c.endAsync();
        return connack.properties?.serverKeepAlive;
      };
      assert.equal(await keepAlive(), 60);
      const nothing = await reloadConfig(s.rt, { env: MQTT_TEST_ENV, overrides });
      assert.deepEqual([nothing.applied, nothing.restartNeeded], [[], []], 'same files: nothing changed');

      const file = join(config, 'NetworkManager.yaml');
      writeFileSync(file, readFileSync(file, 'utf8').replace('maxServerKeepAlive: 60', 'maxServerKeepAlive: 30') + `    - name: Extra\n      url: tcp://127.0.0.1:0/\n      protocolConfigs:\n        - type: mqtt\n`);
      const r = await reloadConfig(s.rt, { env: MQTT_TEST_ENV, overrides });
      assert.deepEqual(r.applied.map((c) => c.key), ['NetworkManager.data[MQTT Interface]']);
      assert.deepEqual(r.restartNeeded, [{ key: 'NetworkManager.data[Extra]', to: 'added' }]);
      assert.equal(endpointsOf(s.rt).state(endpointsOf(s.rt).entries.get('MQTT Interface')!), 'Started');
      assert.equal(await keepAlive(), 30);
      // the file's change is not stored as a REST change: the next start reads the file again
      assert.equal(await s.rt.store.getJson('config', 'NetworkManager/endpoint/MQTT Interface'), undefined);
    } finally {
      await s.close();
    }
  });
  test('reload - links: a changed address is used at once (the link stopped and started through its actor), an added link starts; a changed outbox or a removed link needs a restart', async () => {
    const nats = await startNats({ jetstream: false });
    const config = configCopy(dirs);
    const data = tempDir();
    dirs.push(data);
    const dead = await freePort(); // nothing listens there
    const file = join(config, 'NetworkConnectionManager.yaml');
    const link = (name: string, port: number, local: string) =>
      `    - name: ${name}\n      url: nats://127.0.0.1:${port}\n      backoff: { initial: 200, max: 400, jitter: 0 }\n      linkConfigs:\n        - { direction: push, localNamespace: '${local}', remoteNamespace: 'fed.${name}', qualityOfService: 0 }\n`;
    const write = (links: string[]) => writeFileSync(file, `NetworkConnectionManager:\n  data:\n${links.join('')}`);
    write([link('site', dead, 'out/#')]);
    const s: TestServer = await startServer({ configDir: config, dataDir: data });
    try {
      const overrides = { MessageDaemon: { dataDirectory: data }, RestApi: { port: 0, hostnames: '127.0.0.1' } };
      const svc = integrationsOf(s.rt);
      const state = (name: string) => svc.connectionState(svc.find(name));
      await new Promise((r) => setTimeout(r, 500));
      assert.notEqual(state('site'), 'Established', 'nothing listens at the first address');

      write([link('site', nats.port, 'out/#'), link('extra', nats.port, 'extra/#')]);
      const r = await reloadConfig(s.rt, { env: MQTT_TEST_ENV, overrides });
      assert.deepEqual(r.applied.map((c) => c.key).sort(), ['NetworkConnectionManager.data[extra]', 'NetworkConnectionManager.data[site]']);
      assert.deepEqual(r.restartNeeded, []);
      await waitUntil(() => state('site') === 'Established' && state('extra') === 'Established', 10000, 'both links established with the reloaded configuration');
      assert.equal(svc.runState(svc.find('extra')), 'Started');
      assert.equal(s.rt.config.NetworkConnectionManager.data.find((l) => l.name === 'site')!.url, `nats://127.0.0.1:${nats.port}`, 'the running configuration shows the new address');

      // the outbox of a push direction holds acknowledged messages: a new local namespace needs a restart, as does removing a link
      write([link('site', nats.port, 'elsewhere/#')]);
      const r2 = await reloadConfig(s.rt, { env: MQTT_TEST_ENV, overrides });
      assert.deepEqual(r2.applied, []);
      assert.deepEqual(r2.restartNeeded.map((c) => c.key).sort(), ['NetworkConnectionManager.data[extra]', 'NetworkConnectionManager.data[site]']);
      assert.equal(state('site'), 'Established', 'not applied: the link runs as before');
      assert.equal(state('extra'), 'Established');
    } finally {
      await s.close();
      await nats.dispose();
    }
  });
  test('reload - login limits apply from the next login: addressFailureLimit lowered to 3 blocks an address after 3 wrong passwords', async () => {
    const config = configCopy(dirs);
    const data = tempDir();
    dirs.push(data);
    const s: TestServer = await startServer({ configDir: config, dataDir: data });
    try {
      const overrides = { MessageDaemon: { dataDirectory: data }, RestApi: { port: 0, hostnames: '127.0.0.1' } };
      const wrong = (n: number) =>
        s.app.inject({ method: 'POST', url: '/api/v1/login', remoteAddress: `10.9.8.${n}`, payload: { username: 'admin', password: 'not the password at all' } });
      // before: the default address limit (more than 3) lets a fourth wrong password be checked (401, not 429)
      for (let i = 0; i < 3; i++) assert.equal((await wrong(1)).statusCode, 401);
      assert.equal((await wrong(1)).statusCode, 401);

      edit(join(config, 'AuthManager.yaml'), /maxFailuresBeforeLock: 5/, 'maxFailuresBeforeLock: 5\n  addressFailureLimit: 3\n  addressBlockSeconds: 60');
      const r = await reloadConfig(s.rt, { env: MQTT_TEST_ENV, overrides });
      assert.deepEqual(r.applied.map((c) => c.key).sort(), ['AuthManager.addressBlockSeconds', 'AuthManager.addressFailureLimit']);
      assert.deepEqual(r.restartNeeded, []);
      for (let i = 0; i < 3; i++) assert.equal((await wrong(2)).statusCode, 401);
      const blocked = await wrong(2);
      assert.equal(blocked.statusCode, 429, blocked.body);
      assert.equal((await wrong(3)).statusCode, 401, 'another address is not blocked');
    } finally {
      await s.close();
    }
  });
});
