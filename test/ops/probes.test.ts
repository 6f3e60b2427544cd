import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:net';
import { fromCallback } from 'xstate';
import { writeContestedConfig, removeDir, spawnBroker, startServer, tempDir, waitUntil, type BrokerProcess } from '../helpers.js';

/** /livez and /readyz as Kubernetes, Docker and load balancers see them (status codes, no credentials). */
describe('probes', () => {
  const dirs: string[] = [];
  const procs: BrokerProcess[] = [];
  let blocker: Server | undefined;
  after(async () => {
    for (const p of procs) await p.stop('SIGKILL');
    blocker?.close();
    dirs.forEach(removeDir);
  });

  test('probes - /readyz is 503 naming the endpoint whose port is taken, 200 once it frees and the endpoint retries; SWITCHYARD_READY waits for it', async () => {
    const configDir = tempDir();
    const dataDir = tempDir();
    dirs.push(configDir, dataDir);
    blocker = createServer();
    await new Promise<void>((res) => blocker!.listen(0, '127.0.0.1', res));
    const taken = (blocker.address() as { port: number }).port;
    writeContestedConfig(configDir, taken);
    const b = await spawnBroker({ SWITCHYARD_DATA_DIR: dataDir, SWITCHYARD_CONFIG_DIR: configDir });
    procs.push(b);
    const base = `http://127.0.0.1:${b.port}`;

    const live = await fetch(`${base}/livez`);
    assert.equal(live.status, 200, 'live without credentials');
    const notReady = await fetch(`${base}/readyz`);
    assert.equal(notReady.status, 503);
    const body = (await notReady.json()) as { status: string; reasons: string[] };
    assert.match(body.status, /^Not ready: /);
    assert.equal(body.reasons.length, 1, JSON.stringify(body));
    assert.match(body.reasons[0]!, new RegExp(`endpoint "contested" \\(tcp://127.0.0.1:${taken}/\\) is not listening: .*EADDRINUSE`));
    assert.equal(await (await fetch(`${base}/health`)).text(), 'Warning', '/health keeps its MAPS answer');
    assert.doesNotMatch(b.stdout(), /SWITCHYARD_READY/, 'not ready: no READY line');
    assert.match(b.stderr(), /switchyard: not ready: endpoint "contested" .*EADDRINUSE/);

    await new Promise<void>((res) => blocker!.close(() => res()));
    blocker = undefined;
    await waitUntil(async () => (await fetch(`${base}/readyz`)).status === 200, 15000, '/readyz 200');
    assert.deepEqual(await (await fetch(`${base}/readyz`)).json(), { status: 'Ready' });
    await waitUntil(() => /SWITCHYARD_READY rest=\d+/.test(b.stdout()), 5000, 'SWITCHYARD_READY');
    assert.equal(await b.stop('SIGTERM'), 0);
  });

  test('probes - a broker whose endpoints all bind prints SWITCHYARD_READY and answers /readyz 200', async () => {
    const dataDir = tempDir();
    dirs.push(dataDir);
    const b = await spawnBroker({ SWITCHYARD_DATA_DIR: dataDir });
    procs.push(b);
    await waitUntil(() => /SWITCHYARD_READY rest=\d+/.test(b.stdout()), 5000, 'SWITCHYARD_READY');
    const r = await fetch(`http://127.0.0.1:${b.port}/readyz`);
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('cache-control'), 'no-store');
    assert.equal(await b.stop('SIGTERM'), 0);
  });

  test('probes - /readyz is 503 naming a supervisor that spent its restart budget; /livez stays 200', async () => {
    const s = await startServer({
      overrides: { MessageDaemon: { supervisor: { intensity: 1, period: 60000, backoffInitial: 10, backoffMax: 20 } } },
      extraChildren: {
        devices: [
          {
            id: 'device:broken',
            logic: fromCallback(() => {
              throw new Error('cannot open device');
            }),
          },
        ],
      },
    });
    try {
      await waitUntil(async () => (await s.app.inject('/readyz')).statusCode === 503, 10000, '/readyz 503');
      const body = (await s.app.inject('/readyz')).json() as { reasons: string[] };
      assert.ok(body.reasons.some((r) => /devices/.test(r)), JSON.stringify(body));
      assert.equal((await s.app.inject('/livez')).statusCode, 200);
      assert.match((await s.app.inject('/metrics')).body, /^switchyard_ready 0$/m);
    } finally {
      await s.close();
    }
  });
});
