import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { removeDir, spawnBroker, tempDir, type BrokerProcess } from '../helpers.js';

const dirs: string[] = [];
const procs: BrokerProcess[] = [];
after(async () => {
  for (const p of procs) await p.stop('SIGKILL');
  dirs.forEach(removeDir);
});
function dir(): string {
  const d = tempDir();
  dirs.push(d);
  return d;
}
async function broker(env: Record<string, string>, waitReady = true): Promise<BrokerProcess> {
  const b = await spawnBroker(env, { waitReady });
  procs.push(b);
  return b;
}

describe('broker process', () => {
  test('process - SIGKILL then restart on the same data dir: same server name, store intact', async () => {
    const data = dir();
    const first = await broker({ SWITCHYARD_DATA_DIR: data });
    const name = await (await fetch(`http://127.0.0.1:${first.port}/api/v1/name`, { headers: first.auth() })).json();
    const info = await (await fetch(`http://127.0.0.1:${first.port}/api/v1/server/details/info`, { headers: first.auth() })).json();
    first.proc.kill('SIGKILL');
    assert.equal(await first.exited, null);
    const second = await broker({ SWITCHYARD_DATA_DIR: data });
    assert.equal(await (await fetch(`http://127.0.0.1:${second.port}/api/v1/name`, { headers: second.auth() })).json(), name);
    assert.equal(await (await fetch(`http://127.0.0.1:${second.port}/health`)).text(), 'Ok');
    const status = (await (await fetch(`http://127.0.0.1:${second.port}/api/v1/server/status`, { headers: second.auth() })).json()) as Array<{ name: string; status: string }>;
    assert.equal(status.find((x) => x.name === 'Store')!.status, 'OK');
    const info2 = await (await fetch(`http://127.0.0.1:${second.port}/api/v1/server/details/info`, { headers: second.auth() })).json();
    assert.equal(info2.serverName, info.serverName);
    assert.equal(await second.stop(), 0);
  });

  test('process - a second process on the same data dir stops with a clear message (exit 3)', async () => {
    const data = dir();
    const first = await broker({ SWITCHYARD_DATA_DIR: data });
    const second = await broker({ SWITCHYARD_DATA_DIR: data }, false);
    assert.equal(await second.exited, 3);
    assert.match(second.stderr(), /The data directory .* is in use by another Switchyard process/);
    assert.doesNotMatch(second.stderr(), /^\s+at /m, 'no stack trace');
    assert.equal((await fetch(`http://127.0.0.1:${first.port}/api/v1/ping`)).status, 200, 'the first keeps serving');
    await first.stop();
  });

  test('process - SIGTERM shuts down gracefully with exit code 0', async () => {
    const b = await broker({ SWITCHYARD_DATA_DIR: dir() });
    assert.equal(await b.stop('SIGTERM'), 0);
    assert.match(b.stdout(), /shutting down .*reason=SIGTERM/);
    assert.match(b.stdout(), /server stopped/);
  });

  test('process - SIGINT shuts down gracefully with exit code 0', async () => {
    const b = await broker({ SWITCHYARD_DATA_DIR: dir() });
    assert.equal(await b.stop('SIGINT'), 0);
  });

  test('process - PATCH /api/v1/server shutdown answers, then the process exits 0', async () => {
    const b = await broker({ SWITCHYARD_DATA_DIR: dir() });
    const r = await fetch(`http://127.0.0.1:${b.port}/api/v1/server`, {
      method: 'PATCH',
      headers: { 'content-type': 'application/json', ...b.auth() },
      body: JSON.stringify({ state: 'shutdown' }),
    });
    assert.equal(r.status, 200);
    assert.deepEqual(await r.json(), { status: 'Shutting down' });
    assert.equal(await b.exited, 0);
  });

  for (const [label, file, text, expected] of [
    ['a wrong type', 'RestApi.yaml', 'RestApi:\n  port: "abc"\n', /RestApi\.yaml: section 'RestApi', key 'port': .*expected number/],
    ['an unknown section name', 'Extra.yaml', 'Nonsense:\n  a: 1\n', /Extra\.yaml: unknown section 'Nonsense'/],
    ['a port out of range', 'RestApi.yaml', 'RestApi:\n  port: 99999\n', /key 'port': .*between 0 and 65535.*got 99999/],
  ] as const) {
    test(`process - ${label} in the config stops start-up with exit code 2 and one message`, async () => {
      const cfg = dir();
      mkdirSync(cfg, { recursive: true });
      writeFileSync(join(cfg, file), text);
      const b = await broker({ SWITCHYARD_DATA_DIR: dir(), SWITCHYARD_CONFIG_DIR: cfg, SWITCHYARD_REST_PORT: '' }, false);
      assert.equal(await b.exited, 2);
      const err = b.stderr().trim();
      assert.match(err, /^switchyard: configuration error: /);
      assert.match(err, expected);
      assert.equal(err.split('\n').length, 1, `one line, no stack trace: ${err}`);
    });
  }
});
