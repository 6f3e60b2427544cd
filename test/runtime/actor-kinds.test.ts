import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { allMachines } from '../../actors/index.js';
import { backoffDelay } from '../../actors/shared/backoff.js';
import { endpointMachine } from '../../actors/endpoints/endpoint.machine.js';
import { discoveryMachine } from '../../actors/discovery/discovery.machine.js';
import '../../src/compose.js'; // declares every kind, as the server does
import { actorKinds } from '../../src/runtime/actor-kind.js';
import { endpointKind, endpointsOf } from '../../src/endpoints/endpoints.service.js';
import { integrationKind, integrationsOf } from '../../src/links/integrations.service.js';
import { Runtime } from '../../src/runtime/runtime.js';
import { securityOf } from '../../src/security/service.js';
import { registerServices } from '../../src/compose.js';
import type { CommandRecord } from '../../src/runtime/events.js';
import { CONFIG_DIR, MQTT_TEST_ENV, removeDir, startServer, tempDir, type TestServer } from '../helpers.js';

/**
 * One pattern per actor kind (src/runtime/actor-kind.ts): every kind is declared once, and its spawn, look-up,
 * commands (400/404/409/503, 200 No change), guard-test routes and diagram come from that declaration.
 */

test('actor kinds - allMachines lists exactly the machines of the declared kinds (a new kind cannot miss its diagram)', () => {
  const kinds = [...actorKinds().values()].map((k) => k.machine.id).sort();
  assert.deepEqual([...new Set(allMachines.map((m) => m.id))].sort(), kinds);
  for (const k of ['server', 'supervisor', 'endpoint', 'integration', 'discovery', 'device', 'lora', 'lockout', 'destination', 'subscription']) {
    assert.ok(actorKinds().has(k), `kind ${k} is declared`);
  }
});

test('actor kinds - one backoff: initial, doubling, capped; jitter takes at most its fraction away', () => {
  assert.deepEqual([0, 1, 2, 3, 4, 5, 6].map((n) => backoffDelay(n, 100, 1000)), [100, 100, 200, 400, 800, 1000, 1000]);
  assert.equal(backoffDelay(1e9, 100, 1000), 1000, 'a long outage does not overflow');
  assert.equal(backoffDelay(3, 100, 1000, 0.5, () => 1), 200);
  assert.equal(backoffDelay(3, 100, 1000, 0.5, () => 0), 400);
});

test('actor kinds - endpoint and discovery share the failed → backoff → starting fragment', () => {
  for (const m of [endpointMachine, discoveryMachine]) {
    const failed = m.states.failed!;
    const backoff = m.states.backoff!;
    assert.deepEqual(failed.tags, ['degraded']);
    assert.deepEqual(backoff.tags, ['degraded']);
    const targets = (node: typeof failed) => [...node.transitions.values()].flat().map((t) => `${t.eventType.replace(/^xstate\.after\.([^.]+)\..*$/, 'after $1')}→${t.target?.map((x) => x.key).join(',')}`).sort();
    assert.deepEqual(targets(failed), ['after 0→backoff', `${m.id}.stop→stopped`]);
    assert.deepEqual(targets(backoff), ['after backoff→starting', `${m.id}.start→starting`, `${m.id}.stop→stopped`]);
  }
});

describe('actor kinds on a running server', () => {
  let s: TestServer;
  const commands: CommandRecord[] = [];
  before(async () => {
    s = await startServer({
      auth: false,
      overrides: { NetworkConnectionManager: { data: [{ name: 'Idle', url: 'mqtt://127.0.0.1:1', autoStart: false, linkConfigs: [] }] } },
    });
    s.rt.on('actor.command', (c) => commands.push(c));
  });
  after(async () => {
    await s?.close();
  });

  test('actor kinds - command: unknown word 400, no actor 404, same state "No change", impossible 409, otherwise sent and settled', async () => {
    const rt = s.rt;
    await assert.rejects(endpointKind.command(rt, 'MQTT Interface', 'explode'), (e: Error & { statusCode?: number }) => e.statusCode === 400 && /^Unknown action "explode"; expected started, stopped, paused or resumed$/.test(e.message));
    await assert.rejects(endpointKind.command(rt, 'nothing', 'paused'), (e: Error & { statusCode?: number }) => e.statusCode === 404 && /Endpoint "nothing" has no running actor/.test(e.message));
    assert.deepEqual(await endpointKind.command(rt, 'MQTT Interface', ' STARTED '), { changed: false, state: 'Started' });
    assert.deepEqual(await endpointKind.command(rt, 'MQTT Interface', 'paused'), { changed: true, state: 'Paused' });
    await assert.rejects(integrationKind.command(rt, 'Idle', 'paused'), (e: Error & { statusCode?: number }) => e.statusCode === 409 && /^Integration "Idle" is Stopped; it cannot be paused now \(it accepts: started, stopped\)$/.test(e.message));
    assert.deepEqual(await endpointKind.command(rt, 'MQTT Interface', 'resumed'), { changed: true, state: 'Started' });
    const mine = commands.map((c) => `${c.systemId} ${c.outcome}`);
    assert.deepEqual(mine, ['endpoint:nothing missing', 'endpoint:MQTT Interface no-change', 'endpoint:MQTT Interface sent', 'integration:Idle conflict', 'endpoint:MQTT Interface sent']);
    assert.equal(endpointKind.lookup(rt, 'MQTT Interface')?.getSnapshot().context.name, 'MQTT Interface', 'typed look-up');
  });
});

test('actor kinds - "not running" is one 503 everywhere: locators and commands before the server runs', async () => {
  const dataDir = tempDir();
  const rt = await Runtime.create({ configDir: CONFIG_DIR, env: MQTT_TEST_ENV, stdoutLogs: false, overrides: { MessageDaemon: { dataDirectory: dataDir } } });
  try {
    registerServices(rt);
    for (const f of [() => endpointsOf(rt), () => integrationsOf(rt), () => rt.requireEngine(), () => securityOf(rt)]) {
      assert.throws(f, (e: Error & { statusCode?: number }) => e.statusCode === 503 && e.name === 'ServiceUnavailableError' && /not running/.test(e.message));
    }
    await assert.rejects(endpointKind.command(rt, 'MQTT Interface', 'paused'), (e: Error & { statusCode?: number }) => e.statusCode === 503 && /The server is created; ask again when it is running/.test(e.message));
  } finally {
    await rt.stop();
    removeDir(dataDir);
  }
});
