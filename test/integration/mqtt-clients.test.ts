import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { copyFileSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import mqtt, { type MqttClient } from 'mqtt';
import { CONFIG_DIR, adminPasswordOf, removeDir, spawnBroker, tempDir, type BrokerProcess } from '../helpers.js';
import { rest } from '../mqtt/helpers.js';

/**
 * Real MQTT clients against the broker as a child process: mosquitto_pub / mosquitto_sub and mqtt.js (3.1.1 and
 * 5) over tcp://, ssl://, ws:// and wss://, and a persistent session across a broker restart.
 */
describe('mqtt clients against the broker process', () => {
  const dirs: string[] = [];
  let broker: BrokerProcess;
  let configDir: string;
  let dataDir: string;
  let password: string;
  let auth: Record<string, string>;
  const ports: Record<string, number> = {};
  const clients: MqttClient[] = [];
  const children: Array<ReturnType<typeof spawn>> = [];

  async function boot(): Promise<void> {
    broker = await spawnBroker({ SWITCHYARD_DATA_DIR: dataDir, SWITCHYARD_CONFIG_DIR: configDir });
    password = adminPasswordOf(dataDir);
    auth = broker.auth();
    const list = (await rest(broker.port, auth, 'GET', '/api/v1/server/interfaces')).json as Array<{ name: string; port: number; state: string }>;
    for (const e of list) {
      assert.equal(e.state, 'Started', `${e.name} started`);
      ports[e.name] = e.port;
    }
  }

  before(async () => {
    configDir = tempDir();
    dataDir = tempDir();
    dirs.push(configDir, dataDir);
    for (const f of readdirSync(CONFIG_DIR)) if (f.endsWith('.yaml') && f !== 'NetworkManager.yaml') copyFileSync(join(CONFIG_DIR, f), join(configDir, f));
    const certDir = join(configDir, 'tls');
    mkdirSync(certDir);
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', join(certDir, 'key.pem'), '-out', join(certDir, 'cert.pem'), '-days', '2', '-subj', '/CN=localhost'], { stdio: 'ignore' });
    const ssl = `      endPointConfig:\n        sslConfig:\n          keyFile: ${join(certDir, 'key.pem')}\n          certFile: ${join(certDir, 'cert.pem')}\n`;
    writeFileSync(
      join(configDir, 'NetworkManager.yaml'),
      [
        'NetworkManager:',
        '  data:',
        '    - name: tcp',
        '      url: tcp://127.0.0.1:0/',
        '      protocolConfigs: [{ type: mqtt, serverReceiveMaximum: 100, serverMaximumTopicAlias: 10 }]',
        '    - name: ssl',
        '      url: ssl://127.0.0.1:0/',
        ssl + '      protocolConfigs: [{ type: mqtt }]',
        '    - name: ws',
        '      url: ws://127.0.0.1:0/mqtt',
        '      protocolConfigs: [{ type: mqtt }, { type: ws }]',
        '    - name: wss',
        '      url: wss://127.0.0.1:0/mqtt',
        ssl + '      protocolConfigs: [{ type: mqtt }, { type: ws }]',
        '',
      ].join('\n'),
    );
    await boot();
  });
  after(async () => {
    for (const c of clients) c.end(true);
    for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
    await broker?.stop('SIGKILL');
    dirs.forEach(removeDir);
  });

  const connect = async (url: string, opts: mqtt.IClientOptions = {}) => {
    const c = await mqtt.connectAsync(url, { username: 'admin', password, reconnectPeriod: 0, rejectUnauthorized: false, connectTimeout: 5000, ...opts });
    clients.push(c);
    return c;
  };
  const nextMessage = (c: MqttClient, topic: string) =>
    new Promise<{ payload: string; qos: number; retain: boolean }>((res) => {
      const on = (t: string, p: Buffer, pk: mqtt.IPublishPacket) => {
        if (t !== topic) return;
        c.off('message', on);
        res({ payload: p.toString(), qos: pk.qos, retain: pk.retain });
      };
      c.on('message', on);
    });

  /** mosquitto_sub for `count` messages; resolves with its output lines. */
  function mosquittoSub(topic: string, qos: number, count: number, extra: string[] = []): { lines: Promise<string[]>; ready: Promise<void> } {
    // stdbuf: mosquitto_sub's stdout is a pipe here, line-buffer it so the SUBACK debug line arrives at once
    const p = spawn('stdbuf', ['-oL', 'mosquitto_sub', '-h', '127.0.0.1', '-p', String(ports.tcp), '-u', 'admin', '-P', password, '-t', topic, '-q', String(qos), '-C', String(count), '-v', '-d', ...extra]);
    children.push(p);
    let out = '';
    let dbg = '';
    const ready = new Promise<void>((res) =>
      p.stdout.on('data', (d) => {
        dbg += d;
        if (/SUBACK/.test(dbg)) res();
        out += d;
      }),
    );
    const lines = new Promise<string[]>((res, rej) => {
      const t = setTimeout(() => rej(new Error(`mosquitto_sub timed out: ${out}`)), 15000);
      p.on('exit', () => {
        clearTimeout(t);
        res(out.split('\n').filter((l) => l && !l.startsWith('Client ') && !l.startsWith('Subscribed')));
      });
    });
    return { lines, ready };
  }
  function mosquittoPub(args: string[]): void {
    execFileSync('mosquitto_pub', ['-h', '127.0.0.1', '-p', String(ports.tcp), '-u', 'admin', '-P', password, ...args], { timeout: 10000 });
  }

  for (const qos of [0, 1, 2]) {
    test(`mosquitto_pub → mosquitto_sub at QoS ${qos}`, async () => {
      const sub = mosquittoSub(`mosq/q${qos}`, qos, 1);
      await sub.ready;
      mosquittoPub(['-t', `mosq/q${qos}`, '-m', `hello ${qos}`, '-q', String(qos)]);
      assert.deepEqual(await sub.lines, [`mosq/q${qos} hello ${qos}`]);
    });
  }

  test('mosquitto_pub -r: a retained message reaches a later mosquitto_sub', async () => {
    mosquittoPub(['-t', 'mosq/retained', '-m', 'kept', '-q', '1', '-r']);
    const sub = mosquittoSub('mosq/retained', 1, 1);
    assert.deepEqual(await sub.lines, ['mosq/retained kept']);
  });

  test('mosquitto_sub sees messages from an mqtt.js 5 publisher; mqtt.js 3.1.1 sees mosquitto_pub', async () => {
    const sub = mosquittoSub('mix/a', 1, 1);
    await sub.ready;
    const pub = await connect(`mqtt://127.0.0.1:${ports.tcp}`, { protocolVersion: 5 });
    await pub.publishAsync('mix/a', 'from mqtt.js', { qos: 1 });
    assert.deepEqual(await sub.lines, ['mix/a from mqtt.js']);
    const c = await connect(`mqtt://127.0.0.1:${ports.tcp}`, { protocolVersion: 4 });
    await c.subscribeAsync('mix/b', { qos: 2 });
    const got = nextMessage(c, 'mix/b');
    mosquittoPub(['-t', 'mix/b', '-m', 'from mosquitto', '-q', '2']);
    assert.deepEqual(await got, { payload: 'from mosquitto', qos: 2, retain: false });
  });

  for (const [name, scheme, path] of [
    ['ssl', 'mqtts', ''],
    ['ws', 'ws', '/mqtt'],
    ['wss', 'wss', '/mqtt'],
  ] as const) {
    for (const v of [4, 5] as const) {
      test(`mqtt.js ${v === 5 ? '5' : '3.1.1'} over ${name}:// round trip`, async () => {
        const c = await connect(`${scheme}://127.0.0.1:${ports[name]}${path}`, { protocolVersion: v });
        await c.subscribeAsync(`tr/${name}/${v}`, { qos: 1 });
        const got = nextMessage(c, `tr/${name}/${v}`);
        const p = await connect(`mqtt://127.0.0.1:${ports.tcp}`, { protocolVersion: v });
        await p.publishAsync(`tr/${name}/${v}`, `over ${name}`, { qos: 1 });
        assert.equal((await got).payload, `over ${name}`);
      });
    }
  }

  test('mosquitto_sub over TLS (--insecure) receives', async () => {
    const p = spawn('mosquitto_sub', ['-h', '127.0.0.1', '-p', String(ports.ssl), '--cafile', join(configDir, 'tls', 'cert.pem'), '--insecure', '-u', 'admin', '-P', password, '-t', 'tls/m', '-C', '1', '-q', '1']);
    children.push(p);
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    const done = new Promise<void>((res) => p.on('exit', () => res()));
    const c = await connect(`mqtt://127.0.0.1:${ports.tcp}`);
    // publish until the subscriber (connecting in parallel) has it
    for (let i = 0; i < 100 && p.exitCode === null; i++) {
      await c.publishAsync('tls/m', 'secret', { qos: 1 });
      await new Promise((r) => setTimeout(r, 50));
    }
    await done;
    assert.equal(out.trim(), 'secret');
  });

  test('a wrong password is refused (3.1.1 return code 4, 5 reason 0x86)', async () => {
    await assert.rejects(mqtt.connectAsync(`mqtt://127.0.0.1:${ports.tcp}`, { username: 'admin', password: 'wrong', reconnectPeriod: 0, protocolVersion: 4 }), /Bad username or password|code 4|Connection refused/i);
    await assert.rejects(mqtt.connectAsync(`mqtt://127.0.0.1:${ports.tcp}`, { username: 'admin', password: 'wrong', reconnectPeriod: 0, protocolVersion: 5 }), /134|Bad User Name or Password|bad user/i);
  });

  test('persistent session across a broker restart: queued QoS 1 and 2 messages are delivered after reconnect', async () => {
    for (const v of [4, 5] as const) {
      const opts: mqtt.IClientOptions = { protocolVersion: v, clientId: `durable-${v}`, clean: false, ...(v === 5 ? { properties: { sessionExpiryInterval: 3600 } } : {}) };
      const c = await connect(`mqtt://127.0.0.1:${ports.tcp}`, opts);
      await c.subscribeAsync(`dur/${v}/#`, { qos: 2 });
      await c.endAsync();
      const p = await connect(`mqtt://127.0.0.1:${ports.tcp}`, { protocolVersion: v });
      await p.publishAsync(`dur/${v}/one`, 'q1', { qos: 1 });
      await p.publishAsync(`dur/${v}/two`, 'q2', { qos: 2 });
      await p.endAsync();
    }
    assert.equal(await broker.stop('SIGTERM'), 0);
    await boot();
    for (const v of [4, 5] as const) {
      const got: string[] = [];
      const c = mqtt.connect(`mqtt://127.0.0.1:${ports.tcp}`, {
        username: 'admin',
        password,
        reconnectPeriod: 0,
        protocolVersion: v,
        clientId: `durable-${v}`,
        clean: false,
        ...(v === 5 ? { properties: { sessionExpiryInterval: 3600 } } : {}),
        manualConnect: true,
      } as mqtt.IClientOptions);
      clients.push(c);
      c.on('message', (t, pl, pk) => got.push(`${t}=${pl.toString()}@${pk.qos}`));
      const connack = new Promise<mqtt.IConnackPacket>((res) => c.once('connect', res));
      c.connect();
      assert.equal((await connack).sessionPresent, true, `session present for v${v}`);
      const end = Date.now() + 5000;
      while (got.length < 2 && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
      assert.deepEqual(got.sort(), [`dur/${v}/one=q1@1`, `dur/${v}/two=q2@2`]);
    }
  });

  test('a delayed will pending when the broker stops is published after it restarts', async () => {
    const watcher = await connect(`mqtt://127.0.0.1:${ports.tcp}`, { protocolVersion: 5 });
    await watcher.subscribeAsync('will/restart', { qos: 1 });
    const early: string[] = [];
    watcher.on('message', (t, p) => t === 'will/restart' && early.push(p.toString()));
    const c = await connect(`mqtt://127.0.0.1:${ports.tcp}`, {
      protocolVersion: 5,
      clientId: 'will-across-restart',
      clean: false,
      properties: { sessionExpiryInterval: 3600 },
      will: { topic: 'will/restart', payload: Buffer.from('gone'), qos: 1, retain: true, properties: { willDelayInterval: 3 } },
    });
    c.stream.destroy(); // abrupt: no DISCONNECT, so the will is due in 3 s
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(await broker.stop('SIGTERM'), 0);
    assert.deepEqual(early, [], 'not published before its delay');
    await boot();
    const late = await connect(`mqtt://127.0.0.1:${ports.tcp}`, { protocolVersion: 5 });
    const got = nextMessage(late, 'will/restart');
    await late.subscribeAsync('will/restart', { qos: 1 });
    const m = await Promise.race([got, new Promise<never>((_, rej) => setTimeout(() => rej(new Error('the will was lost across the restart')), 10000))]);
    assert.equal(m.payload, 'gone');
  });

  test('$SYS/broker/version is subscribable over MQTT', async () => {
    const c = await connect(`mqtt://127.0.0.1:${ports.tcp}`);
    const got = nextMessage(c, '$SYS/broker/version');
    await c.subscribeAsync('$SYS/broker/version', { qos: 0 });
    assert.ok((await got).payload.length > 0);
  });
});
