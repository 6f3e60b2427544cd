import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT, adminPasswordOf, basicAuth, removeDir, spawnBroker, startServer, tempDir, type BrokerProcess } from '../helpers.js';

/** The `switchyard` command as an operator runs it (bin/switchyard.js, from the sources here). */
function sy(args: string[], env: Record<string, string> = {}, input?: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [join(ROOT, 'bin/switchyard.js'), ...args], {
      cwd: ROOT,
      env: { ...process.env, SWITCHYARD_FROM_SOURCE: '1', ...env },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => (stdout += d));
    p.stderr.on('data', (d) => (stderr += d));
    p.stdin.end(input ?? '');
    p.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

/** The same command in this process (help and config output only: nothing that opens a store or starts a broker). */
async function inProcess(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const { cli } = await import('../../src/cli/main.js');
  const { CliError } = await import('../../src/cli/output.js');
  let stdout = '';
  const write = process.stdout.write;
  process.stdout.write = ((chunk: string) => ((stdout += chunk), true)) as typeof process.stdout.write;
  try {
    return { code: await cli(args), stdout, stderr: '' };
  } catch (err) {
    if (err instanceof CliError) return { code: err.code, stdout, stderr: err.message };
    throw err;
  } finally {
    process.stdout.write = write;
  }
}

async function login(port: number, username: string, password: string): Promise<number> {
  const r = await fetch(`http://127.0.0.1:${port}/api/v1/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username, password }) });
  return r.status;
}

describe('switchyard command', () => {
  const dirs: string[] = [];
  const procs: BrokerProcess[] = [];
  after(async () => {
    for (const p of procs) await p.stop('SIGKILL');
    dirs.forEach(removeDir);
  });
  const dir = () => {
    const d = tempDir();
    dirs.push(d);
    return d;
  };
  const broker = async (env: Record<string, string>) => {
    const b = await spawnBroker(env);
    procs.push(b);
    return b;
  };

  test('cli - add a user offline, start the broker, log in with it; offline changes are refused while it runs, online ones work', async () => {
    const data = dir();
    const added = await sy(['user', 'add', 'carol', '--password-stdin', '--data-dir', data], {}, 'carol-password-1\n');
    assert.equal(added.code, 0, added.stderr);
    assert.match(added.stdout, /user carol added \(offline\), groups: everyone/);
    const listed = await sy(['user', 'list', '--data-dir', data]);
    assert.match(listed.stdout, /^carol\s+everyone\s+no$/m);

    const b = await broker({ SWITCHYARD_DATA_DIR: data });
    assert.equal(await login(b.port, 'carol', 'carol-password-1'), 200);
    assert.equal(await login(b.port, 'carol', 'wrong-password-1'), 401);

    const refused = await sy(['user', 'add', 'dave', '--password', 'dave-password-1', '--data-dir', data]);
    assert.equal(refused.code, 3);
    assert.match(refused.stderr, /in use by another Switchyard process.*\n.*A broker is running on this data directory: stop it first, or work through it with --url/);

    const url = `http://127.0.0.1:${b.port}`;
    const auth = `admin:${adminPasswordOf(data)}`;
    const online = await sy(['user', 'add', 'dave', '--password', 'dave-password-1', '--url', url, '--auth', auth]);
    assert.equal(online.code, 0, online.stderr);
    assert.equal(await login(b.port, 'dave', 'dave-password-1'), 200);
    const check = await inProcess(['acl', 'check', 'dave', 'subscribe', 'Topic', 'test/nosubscribe', '--url', url, '--auth', auth]);
    assert.equal(check.code, 7, 'DENY');
    assert.match(check.stdout, /^DENY/);
    const st = await inProcess(['status', '--url', url, '--auth', auth]);
    assert.equal(st.code, 0, st.stderr);
    assert.match(st.stdout, /: ready \(health Ok\)/);
    const badAuth = await inProcess(['user', 'list', '--url', url, '--auth', 'admin:nope']);
    assert.equal(badAuth.code, 5);
    assert.match(badAuth.stderr, /HTTP 401/);
    assert.equal(await b.stop('SIGTERM'), 0);
    const unreachable = await inProcess(['status', '--url', url]);
    assert.equal(unreachable.code, 4);
    assert.match(unreachable.stderr, /cannot reach the broker/);
  });

  test('cli - a lost admin password is recovered offline; the first-boot file goes when the password changes', async () => {
    const data = dir();
    const first = await startServer({ dataDir: data }); // first boot (in process: the broker process is tested below)
    const lost = first.adminPassword;
    assert.ok(lost);
    await first.close();

    const recovered = await sy(['user', 'passwd', 'admin', '--generate', '--data-dir', data]);
    assert.equal(recovered.code, 0, recovered.stderr);
    assert.match(recovered.stdout, /password of admin changed \(offline\); the first-boot admin_password file was deleted/);
    const password = /^password: (\S+)$/m.exec(recovered.stdout)![1]!;
    assert.equal(existsSync(join(data, 'admin_password')), false);

    const again = await broker({ SWITCHYARD_DATA_DIR: data });
    assert.equal(await login(again.port, 'admin', password), 200);
    assert.equal(await login(again.port, 'admin', lost), 401);
    const r = await fetch(`http://127.0.0.1:${again.port}/api/v1/server/details/info`, { headers: basicAuth('admin', password) });
    assert.equal(r.status, 200);
    assert.equal(await again.stop('SIGTERM'), 0);
  });

  test('cli - SWITCHYARD_ADMIN_PASSWORD_FILE sets the first admin password (no file written); changing it over REST deletes a generated file and logs it', async () => {
    const secrets = dir();
    const secret = join(secrets, 'admin');
    writeFileSync(secret, 'given-admin-password-1\n');
    const data = dir();
    const b = await broker({ SWITCHYARD_DATA_DIR: data, SWITCHYARD_ADMIN_PASSWORD_FILE: secret });
    assert.equal(existsSync(join(data, 'admin_password')), false);
    assert.equal(await login(b.port, 'admin', 'given-admin-password-1'), 200);
    assert.match(b.stdout(), /created user admin with the password from SWITCHYARD_ADMIN_PASSWORD_FILE/);
    assert.doesNotMatch(b.stdout(), /given-admin-password-1/, 'the password is not printed');
    assert.equal(await b.stop('SIGTERM'), 0);

    const weak = await broker({ SWITCHYARD_DATA_DIR: dir(), SWITCHYARD_ADMIN_PASSWORD: 'short' }).catch((e: Error) => e);
    assert.ok(weak instanceof Error && /exited with 2/.test(weak.message), String(weak));
    assert.match(weak.message, /SWITCHYARD_ADMIN_PASSWORD: Password is too short/);

    const g = await startServer();
    const users = (await g.inject('/api/v1/auth/users')).json() as Array<{ username: string; uniqueId: string }>;
    const put = await g.inject({ method: 'PUT', url: `/api/v1/auth/users/${users.find((u) => u.username === 'admin')!.uniqueId}/password`, payload: { newPassword: 'changed-admin-password-1' } });
    assert.ok(put.statusCode < 300, put.body);
    assert.equal(existsSync(join(g.dataDir, 'admin_password')), false);
    assert.ok(g.rt.logs.monitor.entries().some((e) => /deleted the file of its first-boot password/.test(e.message)), 'log line');
    await g.close();
  });

  test('cli - config check prints the effective sections, or one line and exit 2; --help everywhere', async () => {
    const ok = await inProcess(['config', 'check', '--section', 'RestApi']);
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(ok.stdout, /valid/);
    assert.match(ok.stdout, /RestApi:\n {2}enabled: true/);
    const bad = dir();
    mkdirSync(join(bad, 'c'));
    writeFileSync(join(bad, 'c', 'RestApi.yaml'), 'RestApi:\n  prot: 8080\n');
    const r = await inProcess(['config', 'check', '--config-dir', join(bad, 'c')]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /configuration error: .*RestApi.yaml: section 'RestApi', unknown key 'prot'/);
    for (const args of [['--help'], ['user', 'add', '--help'], ['user', 'passwd', '--help'], ['user', 'delete', '--help'], ['user', 'list', '--help'], ['user', 'unlock', '--help'], ['acl', 'check', '--help'], ['config', 'check', '--help'], ['status', '--help'], ['start', '--help']]) {
      const h = await inProcess(args);
      assert.equal(h.code, 0, args.join(' '));
      assert.match(h.stdout, /^(switchyard - |Usage: switchyard )/, args.join(' '));
    }
    // a command group's --help is that group's, not the general help
    const userHelp = await inProcess(['user', '--help']);
    assert.equal(userHelp.code, 0);
    assert.match(userHelp.stdout, /^Usage: switchyard user <add\|passwd\|delete\|list\|unlock>/);
    assert.doesNotMatch(userHelp.stdout, /acl check|config check|status/);
    for (const [args, usage] of [[['acl', '--help'], /^Usage: switchyard acl check/], [['config', '--help'], /^Usage: switchyard config check/], [['reload', '--help'], /^Usage: switchyard reload/], [['user', 'add', '--help'], /^Usage: switchyard user add/]] as const) {
      const h = await inProcess([...args]);
      assert.match(h.stdout, usage, args.join(' '));
    }
    const unknown = await inProcess(['frobnicate']);
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /unknown command "frobnicate"/);
  });
});
