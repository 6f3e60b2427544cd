import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { registerServices } from '../../src/compose.js';
import { ServiceUnavailableError } from '../../src/errors.js';
import { Runtime } from '../../src/runtime/runtime.js';
import { CONFIG_DIR, MQTT_TEST_ENV, removeDir, tempDir } from '../helpers.js';

/**
 * Composition at the top (src/compose.ts): the services are given what they depend on as typed arguments, and their
 * start order follows from it; the kernel holds security and the engine only as slots the composition fills.
 */
describe('composition', () => {
  const dirs: string[] = [];
  const runtimes: Runtime[] = [];
  after(async () => {
    for (const rt of runtimes) await rt.stop();
    for (const d of dirs) removeDir(d);
  });

  async function runtime(): Promise<Runtime> {
    const dir = tempDir();
    dirs.push(dir);
    const rt = await Runtime.create({ configDir: CONFIG_DIR, env: MQTT_TEST_ENV, stdoutLogs: false, overrides: { MessageDaemon: { dataDirectory: dir } } });
    runtimes.push(rt);
    return rt;
  }

  test('composition - every service that uses the engine starts after the messaging service and stops before it (schemas included)', async () => {
    const rt = await runtime();
    registerServices(rt);
    const order = rt.serviceOrder();
    const at = new Map(order.map((svc, i) => [svc.name, i]));
    for (const name of ['schemas', 'restSessions', 'mqttBroker', 'subscriptions', 'destinations', 'integrations', 'sys-topics', 'devices', 'lora']) {
      const svc = order.find((s) => s.name === name)!;
      assert.ok(svc.dependsOn?.includes('messaging'), `${name} declares messaging`);
      assert.ok(at.get('messaging')! < at.get(name)!, `messaging starts before ${name}`);
    }
    assert.deepEqual(order.find((s) => s.name === 'messaging')!.dependsOn, ['security']);
    assert.deepEqual([...(order.find((s) => s.name === 'mqttBroker')!.dependsOn ?? [])].sort(), ['messaging', 'restSessions', 'security']);
    assert.deepEqual([...(order.find((s) => s.name === 'sys-topics')!.dependsOn ?? [])].sort(), ['endpoints', 'messaging']);
  });

  test('composition - a runtime composed without security answers 503 rather than letting everything through; the composition installs the open one', async () => {
    const bare = await runtime();
    assert.throws(() => bare.security, (err: unknown) => err instanceof ServiceUnavailableError && err.statusCode === 503);
    assert.throws(() => bare.requireEngine(), ServiceUnavailableError);
    const composed = await runtime();
    registerServices(composed);
    assert.equal(composed.security.enabled, false, 'open until the security service installs the real one at boot');
  });
});
