#!/usr/bin/env node
// Smoke run of an installed checkout on whatever Node runs this script (`npm run smoke`; .ci/run runs it on the
// machine's own Node before the suite runs on Node 24): `npm start` on a fresh data directory and random ports of
// 127.0.0.1, then one REST and one MQTT round trip:
//   1. REST:  GET /api/v1/server/details/info as admin answers 200;
//   2. MQTT:  an mqtt.js client subscribes to a topic, a message published there through REST
//      (POST /api/v1/messaging/publish) arrives over MQTT with its payload, and one published over MQTT QoS 1 is
//      acknowledged.
// Exit 0 when both hold, 1 otherwise (with what failed). The broker is stopped by its pid (SIGTERM) and must exit 0.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import mqtt from 'mqtt';

const root = resolve(import.meta.dirname, '..');
const dataDir = mkdtempSync(join(tmpdir(), 'switchyard-smoke-'));
const password = 'smoke-password-0123456789';
const started = Date.now();
const fail = (msg) => {
  process.stderr.write(`smoke: FAILED: ${msg}\n`);
  process.exitCode = 1;
};

const broker = spawn('npm', ['start', '--silent'], {
  cwd: root,
  stdio: ['ignore', 'pipe', 'pipe'],
  env: {
    ...process.env,
    SWITCHYARD_DATA_DIR: dataDir,
    SWITCHYARD_REST_PORT: '0',
    SWITCHYARD_REST_HOST: '127.0.0.1',
    SWITCHYARD_MQTT_PORT: '0',
    SWITCHYARD_MQTT_WS_PORT: '0',
    SWITCHYARD_MQTT_HOST: '127.0.0.1',
    SWITCHYARD_ADMIN_PASSWORD: password,
  },
});
let stderr = '';
broker.stderr.on('data', (d) => (stderr = (stderr + d).slice(-4000)));
const exited = new Promise((res) => broker.on('exit', (code, signal) => res({ code, signal })));

function withTimeout(p, ms, what) {
  return Promise.race([p, new Promise((_, rej) => setTimeout(() => rej(new Error(`${what}: no answer within ${ms} ms`)), ms).unref())]);
}

async function main() {
  const restPort = await withTimeout(
    new Promise((res, rej) => {
      let out = '';
      broker.stdout.on('data', (d) => {
        out += d;
        const m = /SWITCHYARD_READY rest=(\d+)/.exec(out);
        if (m) res(Number(m[1]));
      });
      broker.on('exit', () => rej(new Error(`the broker exited before it was ready:\n${stderr}`)));
    }),
    60_000,
    'start',
  );
  const base = `http://127.0.0.1:${restPort}`;
  const auth = { authorization: `Basic ${Buffer.from(`admin:${password}`).toString('base64')}` };

  const info = await fetch(`${base}/api/v1/server/details/info`, { headers: auth });
  if (info.status !== 200) throw new Error(`GET /api/v1/server/details/info answered ${info.status}`);
  console.log(`smoke: REST ok (GET /api/v1/server/details/info 200, Node ${process.version})`);

  const ifaces = await (await fetch(`${base}/api/v1/server/interfaces`, { headers: auth })).json();
  const list = Array.isArray(ifaces) ? ifaces : (ifaces.data ?? ifaces.interfaces ?? []);
  const port = list.find((i) => String(i.host ?? '').startsWith('tcp://'))?.port;
  if (!Number.isInteger(port) || port <= 0) throw new Error(`no bound MQTT tcp port in GET /api/v1/server/interfaces: ${JSON.stringify(ifaces).slice(0, 400)}`);

  const client = mqtt.connect(`mqtt://127.0.0.1:${port}`, { username: 'admin', password, reconnectPeriod: 0, protocolVersion: 5 });
  try {
    await withTimeout(new Promise((res, rej) => (client.once('connect', res), client.once('error', rej))), 10_000, 'MQTT CONNECT');
    await withTimeout(client.subscribeAsync('smoke/#', { qos: 1 }), 10_000, 'SUBSCRIBE');
    const arrived = new Promise((res) => client.on('message', (topic, payload) => res({ topic, payload: payload.toString() })));
    const pub = await fetch(`${base}/api/v1/messaging/publish`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ destinationName: 'smoke/rest', message: { payload: Buffer.from('hello from REST').toString('base64') } }),
    });
    if (pub.status !== 200) throw new Error(`POST /api/v1/messaging/publish answered ${pub.status}: ${await pub.text()}`);
    const got = await withTimeout(arrived, 10_000, 'REST-published message over MQTT');
    if (got.topic !== 'smoke/rest' || got.payload !== 'hello from REST') throw new Error(`received ${JSON.stringify(got)}`);
    await withTimeout(client.publishAsync('smoke/mqtt', 'hello from MQTT', { qos: 1 }), 10_000, 'PUBACK');
    console.log(`smoke: MQTT ok (REST publish delivered over MQTT, QoS 1 publish acknowledged) on port ${port}`);
  } finally {
    client.end(true);
  }
}

try {
  await main();
} catch (e) {
  fail(e instanceof Error ? e.message : String(e));
}
broker.kill('SIGTERM');
const end = await withTimeout(exited, 20_000, 'shutdown').catch((e) => {
  broker.kill('SIGKILL');
  return { code: null, signal: String(e) };
});
if (end.code !== 0) fail(`the broker did not exit cleanly on SIGTERM (${JSON.stringify(end)})\n${stderr}`);
rmSync(dataDir, { recursive: true, force: true });
console.log(`smoke: ${process.exitCode ? 'FAILED' : 'passed'} in ${Date.now() - started} ms`);
