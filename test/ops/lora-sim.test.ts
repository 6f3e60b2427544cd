import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { ROOT, removeDir, startServer, tempDir, waitUntil, type TestServer } from '../helpers.js';

/** scripts/lora-sim.ts, the documented way to try LoRa without hardware, against a broker as an operator would run it. */
describe('LoRa simulator script', () => {
  const dirs: string[] = [];
  let script: ChildProcess | undefined;
  let s: TestServer | undefined;
  after(async () => {
    await s?.close();
    if (script?.pid && script.exitCode === null && script.signalCode === null) {
      const exited = new Promise((r) => script!.once('exit', r));
      process.kill(script.pid, 'SIGTERM'); // the script stops its socat by pid
      await exited;
    }
    dirs.forEach(removeDir);
  });

  test('lora - scripts/lora-sim.ts plays a node on a socat pty: its uplinks reach a configured radio, a downlink published to the node is printed', async () => {
    const dir = tempDir('switchyard-lora-');
    dirs.push(dir);
    script = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'scripts/lora-sim.ts'), dir, '--node', '7', '--every', '0.5'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    script.stdout!.on('data', (d) => (out += d));
    script.stderr!.on('data', (d) => (out += d));
    await waitUntil(() => out.includes("the broker's end is"), 30000, `the script's banner:\n${out}`);
    assert.match(out, new RegExp(`serialConfig: \\{ port: ${join(dir, 'radio').replace(/[/.]/g, '\\$&')} \\}`));

    s = await startServer({ overrides: { LoRaDeviceManager: { data: [{ name: 'gateway', type: 'loraSerial', serialConfig: { port: join(dir, 'radio') }, address: 1 }] } } });
    await waitUntil(async () => ((await s!.inject('/api/v1/device/lora/gateway/7')).statusCode === 200 ? ((await s!.inject('/api/v1/device/lora/gateway/7')).json() as Array<{ receivedPackets: number }>)[0]!.receivedPackets >= 2 : false), 20000, `uplinks from node 7:\n${out}`);
    const pub = await s.inject({ method: 'POST', url: '/api/v1/messaging/publish', payload: { destinationName: 'lora/gateway/7/down', message: { payload: Buffer.from('hello node').toString('base64') } } });
    assert.ok(pub.statusCode < 300, pub.body);
    await waitUntil(() => /downlink to node 7 from 1 id \d+ flags 0x0: "hello node"/.test(out), 15000, `the downlink printed by the script:\n${out}`);
  });
});
