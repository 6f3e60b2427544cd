import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { ROOT, removeDir, tempDir, waitUntil } from '../helpers.js';

/** Free again: a fresh listener can bind the port. */
function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

/**
 * The README's start command, `npm start` (the compiled broker, dist/bundle built by `npm ci`), stopped the way systemd,
 * Docker and most supervisors stop it: SIGTERM to the process they started, which is npm.
 */
describe('start command', () => {
  const dirs: string[] = [];
  let npm: ChildProcess | undefined;
  before(() => {
    // `npm ci` builds dist/ (prepare); a checkout where it was not run yet builds it here once.
    if (!existsSync(join(ROOT, 'dist/bundle/main.js')) || !existsSync(join(ROOT, 'dist/src/main.js'))) execFileSync('npm', ['run', 'build'], { cwd: ROOT, stdio: 'ignore' });
  });
  after(() => {
    if (npm?.pid && npm.exitCode === null) npm.kill('SIGKILL');
    dirs.forEach(removeDir);
  });

  test('start - SIGTERM to the npm start process stops the broker (exit 0 within the shutdown timeout) and frees its ports', async () => {
    const data = tempDir();
    dirs.push(data);
    npm = spawn('npm', ['start', '--silent'], {
      cwd: ROOT,
      env: { ...process.env, SWITCHYARD_DATA_DIR: data, SWITCHYARD_REST_PORT: '0', SWITCHYARD_REST_HOST: '127.0.0.1', SWITCHYARD_MQTT_PORT: '0', SWITCHYARD_MQTT_WS_PORT: '0', SWITCHYARD_MQTT_HOST: '127.0.0.1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    npm.stdout!.on('data', (d) => (out += d));
    npm.stderr!.on('data', (d) => (out += d));
    const exited = new Promise<number | null>((res) => npm!.once('exit', (code) => res(code)));
    await waitUntil(() => /SWITCHYARD_READY rest=\d+/.test(out), 60000, `SWITCHYARD_READY from npm start:\n${out}`);
    const rest = Number(/SWITCHYARD_READY rest=(\d+)/.exec(out)![1]);
    const mqtt = Number(/endpoint MQTT Interface listening on tcp:\/\/127.0.0.1:(\d+)/.exec(out)?.[1]);
    assert.ok(mqtt > 0, out);
    assert.equal((await fetch(`http://127.0.0.1:${rest}/readyz`)).status, 200);

    npm.kill('SIGTERM'); // the npm process itself, by its pid
    // exit code 0: the broker shut down gracefully; 5 would mean it took longer than MessageDaemon.shutdownTimeout
    assert.equal(await exited, 0, out);
    assert.match(out, /shutting down .*reason=SIGTERM/);
    assert.match(out, /server stopped/);
    assert.equal(await portFree(rest), true, 'REST port free');
    assert.equal(await portFree(mqtt), true, 'MQTT port free');
    // and the data directory is free: a new broker could take the LevelDB lock
    const { Store } = await import('../../src/store/store.js');
    const store = await Store.open(data);
    await store.close();
  });
});
