import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, utimesSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { MQTT_TEST_ENV, ROOT, removeDir, tempDir, waitUntil } from '../helpers.js';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

describe('npx and npm exec', () => {
  const dirs: string[] = [];
  const pids: number[] = [];
  const procs: ChildProcess[] = [];
  after(() => {
    for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
    for (const pid of pids) if (alive(pid)) process.kill(pid, 'SIGKILL');
    dirs.forEach(removeDir);
  });

  test('npx - SIGTERM to the npm process of `npx switchyard start` stops the broker: npm passes it to its shell only, the broker sees its parent go and shuts down, freeing its ports and the data-dir lock', async () => {
    const data = tempDir();
    dirs.push(data);
    // what npm exec runs: `sh -c 'switchyard start'` with npm_command set; npm forwards SIGTERM to that shell, which
    // dies without passing it on (seen with npm 11: the broker stayed, ppid 1, ports and lock held)
    const sh = spawn('sh', ['-c', `"${process.execPath}" "${join(ROOT, 'bin/switchyard.js')}" start; exit $?`], {
      cwd: ROOT,
      env: { ...process.env, npm_command: 'exec', SWITCHYARD_FROM_SOURCE: '1', SWITCHYARD_DATA_DIR: data, SWITCHYARD_REST_PORT: '0', SWITCHYARD_REST_HOST: '127.0.0.1', ...MQTT_TEST_ENV },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    procs.push(sh);
    let out = '';
    sh.stdout!.on('data', (d) => (out += d));
    sh.stderr!.on('data', (d) => (out += d));
    await waitUntil(() => /SWITCHYARD_READY rest=\d+/.test(out), 60000, `SWITCHYARD_READY:\n${out}`);
    const rest = Number(/SWITCHYARD_READY rest=(\d+)/.exec(out)![1]);
    const mqtt = Number(/endpoint MQTT Interface listening on tcp:\/\/127.0.0.1:(\d+)/.exec(out)?.[1]);
    const pid = Number(readFileSync(join(data, 'switchyard.pid'), 'utf8'));
    pids.push(pid);
    assert.notEqual(pid, sh.pid, 'the broker runs under the shell, as under npx');

    sh.kill('SIGTERM');
    await waitUntil(() => !alive(pid), 20000, `the broker (pid ${pid}) to exit after its parent shell went:\n${out}`);
    assert.match(out, /the process that started this broker \(npm, pid \d+\) is gone; shutting down/);
    assert.match(out, /shutting down .*reason=SIGTERM/);
    assert.match(out, /server stopped/);
    assert.equal(await portFree(rest), true, 'REST port free');
    assert.equal(await portFree(mqtt), true, 'MQTT port free');
    const { Store } = await import('../../src/store/store.js');
    const store = await Store.open(data); // the LevelDB lock is free
    await store.close();
  });

  test('npx - prepare (npm ci, and npx installing the checkout) builds dist/ only when it is missing or older than the sources', () => {
    const project = tempDir('switchyard-prepare-');
    dirs.push(project);
    const file = (p: string, text = 'x') => {
      mkdirSync(dirname(join(project, p)), { recursive: true });
      writeFileSync(join(project, p), text);
    };
    // a project whose build only leaves a mark
    file('package.json', JSON.stringify({ name: 'p', private: true, scripts: { build: 'node -e "require(\'fs\').appendFileSync(\'built\', \'1\')"' } }));
    file('src/main.ts');
    const prepare = () => execFileSync(process.execPath, [join(ROOT, 'scripts/prepare.mjs')], { cwd: project, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, SWITCHYARD_BUILD: '' } });
    const builds = () => (existsSync(join(project, 'built')) ? readFileSync(join(project, 'built'), 'utf8').length : 0);

    prepare(); // no dist/: built
    assert.equal(builds(), 1);
    for (const f of ['dist/src/cli/main.js', 'dist/src/main.js', 'dist/bundle/main.js', 'dist/console/index.html']) file(f);
    const old = new Date(Date.now() - 60_000);
    for (const f of ['package.json', 'src/main.ts']) utimesSync(join(project, f), old, old);
    prepare(); // dist/ newer than every source: not rebuilt (what the first npx in a fresh checkout does after npm ci)
    prepare();
    assert.equal(builds(), 1, 'dist/ up to date: no build');
    file('src/main.ts', 'changed'); // a source newer than dist/
    prepare();
    assert.equal(builds(), 2, 'a newer source: built');
  });
});
