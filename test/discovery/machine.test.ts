/**
 * The discovery machine with fake I/O on the simulated clock, the discovered-servers table (TTL, goodbye, caps),
 * the NATS target read from a NetworkConnectionManager section, and the committed diagram.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createActor, fromPromise, SimulatedClock } from 'xstate';
import { discoveryMachine, discoveryStateName, type DiscoveryAgentLike } from '../../actors/discovery/discovery.machine.js';
import { DiscoveryManagerSchema } from '../../src/discovery/config.js';
import { natsTargetOf } from '../../src/discovery/discovery.service.js';
import { instanceName, readTxt } from '../../src/discovery/records.js';
import { DiscoveredTable } from '../../src/discovery/table.js';
import { diagramMarkdown } from '../../src/runtime/diagrams.js';
import { ROOT } from '../helpers.js';

const flush = () => new Promise((r) => setImmediate(r));

test('discovery - machine: a failed start backs off (doubling) and comes back to running; an agent failure does the same; stop closes the agent', async () => {
  const clock = new SimulatedClock();
  let opens = 0;
  let closes = 0;
  let failAgent: ((e: Error) => void) | undefined;
  const results = [false, false, true, true];
  const logic = discoveryMachine.provide({
    actors: {
      openAgent: fromPromise<DiscoveryAgentLike>(async () => {
        const ok = results[opens++];
        if (!ok) throw new Error('EADDRINUSE 5353');
        return {
          close: async () => {
            closes++;
          },
          onError: (cb) => (failAgent = cb),
        };
      }),
    },
  });
  const a = createActor(logic, { clock, input: { autoStart: true, retryInitial: 1000, retryMax: 30000 } });
  a.start();
  await flush();
  assert.equal(discoveryStateName(a.getSnapshot().value), 'Failed');
  assert.equal(a.getSnapshot().context.lastError, 'EADDRINUSE 5353');
  assert.ok(a.getSnapshot().hasTag('degraded'));
  clock.increment(0); // failed → backoff
  await flush();
  clock.increment(999);
  await flush();
  assert.equal(opens, 1, 'no retry before the first backoff');
  clock.increment(1);
  await flush();
  assert.equal(opens, 2);
  clock.increment(0);
  await flush();
  assert.equal(a.getSnapshot().value, 'backoff');
  clock.increment(1999);
  await flush();
  assert.equal(opens, 2, 'the second wait doubles');
  clock.increment(1);
  await flush();
  assert.equal(opens, 3);
  assert.equal(a.getSnapshot().value, 'running');
  assert.equal(a.getSnapshot().context.attempts, 0);
  failAgent!(new Error('socket closed'));
  await flush();
  clock.increment(0);
  await flush();
  assert.equal(a.getSnapshot().value, 'backoff');
  assert.equal(closes, 1, 'the broken agent is closed');
  clock.increment(1000);
  await flush();
  assert.equal(a.getSnapshot().value, 'running');
  a.send({ type: 'discovery.stop' });
  await flush();
  assert.equal(a.getSnapshot().value, 'stopped');
  assert.ok(closes >= 2);
  a.send({ type: 'discovery.start' });
  assert.equal(discoveryStateName(a.getSnapshot().value), 'Starting');
  a.stop();
});

test('discovery - table: entries expire at their TTL, a goodbye drops them at once, the size is capped', () => {
  let now = 1_000_000;
  const t = new DiscoveredTable(3, 2, () => now);
  const svc = (port: number) => ({ protocol: 'http', port, transport: 'tcp', addresses: ['10.0.0.1'], properties: { k: 'v' } });
  assert.ok(t.upsert({ serverName: 'a', schemaSupport: true, version: '1.0.0' }, 'restApi', svc(8080), 'mdns', 10));
  t.upsert({ serverName: 'a' }, 'MQTT', svc(1883), 'nats', 100);
  t.upsert({ serverName: 'a' }, 'third', svc(1), 'nats', 100); // over maxServicesPerServer: ignored
  assert.deepEqual(Object.keys(t.list()[0]!.services).sort(), ['MQTT', 'restApi']);
  assert.deepEqual(t.list()[0]!.via, ['mdns', 'nats']);
  now += 10_001;
  assert.deepEqual(Object.keys(t.list()[0]!.services), ['MQTT'], 'the mDNS record expired at its TTL');
  t.removeServer('a', 'nats');
  assert.deepEqual(t.list(), [], 'goodbye');
  for (const n of ['s1', 's2', 's3', 's4', 's5']) t.upsert({ serverName: n }, 'restApi', svc(1), 'nats', 60);
  assert.deepEqual(t.list().map((s) => s.serverName), ['s1', 's2', 's3'], 'full: new servers are ignored, the known ones stay');
  assert.equal(t.refused, 2);
  t.upsert({ serverName: 'x'.repeat(1000) }, 'k', { ...svc(1), properties: Object.fromEntries(Array.from({ length: 100 }, (_, i) => [`p${i}`, 'y'.repeat(5000)])) }, 'nats', 60);
  t.removeServer('s1', 'nats');
  t.upsert({ serverName: 'x'.repeat(1000) }, 'k', { ...svc(1), properties: Object.fromEntries(Array.from({ length: 100 }, (_, i) => [`p${i}`, 'y'.repeat(5000)])) }, 'nats', 60);
  const big = t.list().find((s) => s.serverName.startsWith('x'))!;
  assert.equal(big.serverName.length, 255);
  assert.equal(Object.keys(big.services.k!.properties).length, 32);
  assert.equal(big.services.k!.properties.p0!.length, 255);
});

test('discovery - records: TXT read back; instance names fit a DNS label', () => {
  const r = readTxt('maps', 'srv', 8080, ['10.0.0.2'], { 'server name': 'srv', 'schema support': 'true', 'system topics': '$SYS', version: '1.2.3', date: '2026-11-24', restApi: 'true', protocol: 'http' });
  assert.deepEqual(r?.facts, { serverName: 'srv', systemTopicPrefix: '$SYS', schemaSupport: true, version: '1.2.3', buildDate: '2026-11-24' });
  assert.equal(r?.key, 'restApi');
  assert.equal(readTxt('mqtt', 'mosquitto', 1883, [], {}), undefined, 'an MQTT broker without MAPS keys is not a discovered server');
  assert.ok(Buffer.byteLength(instanceName('é'.repeat(100))) <= 63);
  assert.equal(instanceName('a.b'), 'a-b');
});

test('discovery - config: shipped default is disabled; the NATS URL comes from DiscoveryManager.nats.url or the first NATS link, tolerating an absent section', () => {
  const def = DiscoveryManagerSchema.parse({});
  assert.equal(def.enabled, false);
  assert.equal(DiscoveryManagerSchema.safeParse({ domain: 'example.com' }).success, false);
  assert.equal(natsTargetOf({}, def), undefined);
  assert.equal(natsTargetOf({ NetworkConnectionManager: { data: 'nonsense' } }, def), undefined);
  const nc = { NetworkConnectionManager: { data: [{ name: 'bridge', url: 'mqtt://h:1883' }, { name: 'fed', url: 'nats://n:4222', authConfig: { username: 'u', password: 'p' } }] } };
  assert.deepEqual(natsTargetOf(nc, def), { url: 'nats://n:4222', user: 'u', pass: 'p' });
  assert.deepEqual(natsTargetOf(nc, DiscoveryManagerSchema.parse({ nats: { url: 'nats://other:4222' } })), { url: 'nats://other:4222' });
  assert.equal(natsTargetOf(nc, DiscoveryManagerSchema.parse({ nats: { enabled: false } })), undefined);
  const shipped = readFileSync(join(ROOT, 'config', 'DiscoveryManager.yaml'), 'utf8');
  assert.match(shipped, /^\s+enabled: false/m);
});

test('discovery - the committed diagram matches the machine (npm run diagrams)', () => {
  assert.equal(readFileSync(join(ROOT, 'docs', 'machines', 'discovery.md'), 'utf8'), diagramMarkdown(discoveryMachine));
});
