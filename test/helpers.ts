/**
 * Test helpers.
 *
 * HOW TESTS AUTHENTICATE. Authentication is on by default: every route except /health, /api/v1/ping,
 * /api/v1/login and /openapi.* answers 401 without credentials. On first boot the broker creates the user `admin`
 * (groups admins, everyone) and writes its password to {data_dir}/admin_password.
 *
 * - In-process (`startServer()`): use `s.inject({...})`, which is `app.inject` with admin's
 *   `Authorization: Basic` header added (a test's own `headers` win); `s.auth` is that header for `fetch`
 *   (`fetch(url, { headers: s.auth })`), `s.adminPassword` the password. Plain `s.app.inject` sends no
 *   credentials (use it to test 401s).
 * - A test that is not about security may switch authentication off: `startServer({ auth: false })`
 *   (AuthManager.authenticationEnabled = false; everyone is anonymous and allowed everything).
 * - Child-process broker (`spawnBroker(env)`): `b.auth()` reads {SWITCHYARD_DATA_DIR}/admin_password and returns the
 *   header; pass `SWITCHYARD_DATA_DIR` in env. `b.auth()` needs the broker to have booted once.
 * - Other users: `basicAuth(username, password)` gives the header; create users with
 *   `s.inject({ method: 'POST', url: '/api/v1/auth/users', payload: { username, password } })` (passwords need 12
 *   characters by default) and grant with `PUT /api/v1/auth/resources/acl` or group membership.
 * - MQTT clients: `{ username: 'admin', password: s.adminPassword }`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify';
import { buildApp } from '../src/api/app.js';
import type { SectionName } from '../src/config/schema.js';
import { Runtime, type RuntimeOptions } from '../src/runtime/runtime.js';
import { registerServices } from '../src/compose.js';
import type { ActorNode } from '../src/runtime/monitor.js';

export const ROOT = resolve(import.meta.dirname ?? new URL('..', import.meta.url).pathname, '..');
export const CONFIG_DIR = join(ROOT, 'config');

/**
 * A config folder: the shipped sections, and a NetworkManager with two MQTT endpoints, `main` on a free port and
 * `contested` on `port` (one the test holds), retrying the bind every 200-400 ms.
 */
export function writeContestedConfig(configDir: string, port: number): void {
  for (const f of readdirSync(CONFIG_DIR)) if (f.endsWith('.yaml') && f !== 'NetworkManager.yaml') copyFileSync(join(CONFIG_DIR, f), join(configDir, f));
  writeFileSync(
    join(configDir, 'NetworkManager.yaml'),
    [
      'NetworkManager:',
      '  retryInitial: 200',
      '  retryMax: 400',
      '  data:',
      '    - name: main',
      '      url: tcp://127.0.0.1:0/',
      '      protocolConfigs: [{ type: mqtt }]',
      '    - name: contested',
      `      url: tcp://127.0.0.1:${port}/`,
      '      protocolConfigs: [{ type: mqtt }]',
      '',
    ].join('\n'),
  );
}

export function tempDir(prefix = 'switchyard-test-'): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

export function removeDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

/** The default MQTT endpoints on random ports of 127.0.0.1 (their bound ports are in GET /api/v1/server/interfaces). */
export const MQTT_TEST_ENV = { SWITCHYARD_MQTT_PORT: '0', SWITCHYARD_MQTT_WS_PORT: '0', SWITCHYARD_MQTT_HOST: '127.0.0.1' };

/** `Authorization: Basic` header for a user. */
export function basicAuth(username: string, password: string): { authorization: string } {
  return { authorization: `Basic ${Buffer.from(`${username}:${password}`).toString('base64')}` };
}

/** admin's first-boot password from a data directory ('' when there is none, e.g. authentication off). */
export function adminPasswordOf(dataDir: string): string {
  const file = join(dataDir, 'admin_password');
  return existsSync(file) ? readFileSync(file, 'utf8').trim() : '';
}

export interface TestServer {
  rt: Runtime;
  app: FastifyInstance;
  dataDir: string;
  /** admin's password ('' when authentication is off). */
  adminPassword: string;
  /** admin's `Authorization: Basic` header, for fetch. */
  auth: { authorization: string };
  /** `app.inject` as admin (the test's own headers win). */
  inject(opts: InjectOptions | string): Promise<LightMyRequestResponse>;
  close(): Promise<void>;
}

/** An in-process broker on a temporary data dir; `app.inject()` or `listen()` as the test needs. */
export async function startServer(
  options: { overrides?: { [K in SectionName]?: Record<string, unknown> }; dataDir?: string; auth?: boolean } & Omit<RuntimeOptions, 'overrides'> = {},
): Promise<TestServer> {
  const dataDir = options.dataDir ?? tempDir();
  const ownsDir = !options.dataDir;
  const overrides = { ...(options.overrides ?? {}) };
  if (options.auth === false) overrides.AuthManager = { authenticationEnabled: false, ...(overrides.AuthManager ?? {}) };
  overrides.MessageDaemon = { dataDirectory: dataDir, ...(overrides.MessageDaemon ?? {}) };
  overrides.RestApi = { port: 0, hostnames: '127.0.0.1', ...(overrides.RestApi ?? {}) };
  // MQTT endpoints on random ports of 127.0.0.1 (read the bound ports from GET /api/v1/server/interfaces)
  const rt = await Runtime.create({ configDir: CONFIG_DIR, env: MQTT_TEST_ENV, stdoutLogs: false, ...options, overrides });
  registerServices(rt);
  await rt.start();
  const app = await buildApp(rt);
  const adminPassword = adminPasswordOf(dataDir);
  const auth = basicAuth('admin', adminPassword);
  return {
    rt,
    app,
    dataDir,
    adminPassword,
    auth,
    inject(opts) {
      const o: InjectOptions = typeof opts === 'string' ? { url: opts } : opts;
      return app.inject({ ...o, headers: { ...auth, ...(o.headers ?? {}) } });
    },
    async close() {
      await app.close();
      await rt.stop();
      if (ownsDir) removeDir(dataDir);
    },
  };
}

export interface BrokerProcess {
  proc: ChildProcess;
  port: number;
  stdout(): string;
  stderr(): string;
  /** Resolves with the exit code. */
  exited: Promise<number | null>;
  /** admin's `Authorization: Basic` header from {SWITCHYARD_DATA_DIR}/admin_password. */
  auth(): { authorization: string };
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/**
 * The runtime settings `npm start` ships (package.json `scripts.start`: `exec env K=V ... node <flags> <entry>`): the
 * glibc allocator variables and the V8 flags. Child-process brokers run with them, so what a test measures (memory
 * above all) is what a user of `npm start` gets: without them, Node 24's larger default young generation and glibc's
 * default trim threshold made a 50 MiB model upload look like +86 MiB of RSS where the shipped settings give about 25.
 */
export const NPM_START_SETTINGS = ((): { env: Record<string, string>; flags: string[] } => {
  const start = String(JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).scripts.start);
  const m = /exec (?:env ((?:\w+=\S+ )+))?node((?: --\S+)*) /.exec(start);
  if (!m) throw new Error(`package.json scripts.start is not "exec env K=V ... node <flags> <entry>": ${start}`);
  const env = Object.fromEntries((m[1] ?? '').split(' ').filter(Boolean).map((kv) => kv.split('=', 2) as [string, string]));
  return { env, flags: (m[2] ?? '').split(' ').filter(Boolean) };
})();

/** The broker as a child process (`node <npm start's flags> --import tsx src/main.ts`), REST on a random port of 127.0.0.1. */
export async function spawnBroker(env: Record<string, string>, opts: { waitReady?: boolean } = {}): Promise<BrokerProcess> {
  const proc = spawn(process.execPath, [...NPM_START_SETTINGS.flags, '--import', 'tsx', join(ROOT, 'src/main.ts')], {
    cwd: ROOT,
    env: { ...process.env, ...NPM_START_SETTINGS.env, SWITCHYARD_REST_PORT: '0', SWITCHYARD_REST_HOST: '127.0.0.1', ...MQTT_TEST_ENV, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  proc.stdout!.on('data', (d) => (out += d));
  proc.stderr!.on('data', (d) => (err += d));
  const exited = new Promise<number | null>((res) => proc.once('exit', (code) => res(code)));
  let port = 0;
  if (opts.waitReady ?? true) {
    port = await new Promise<number>((res, rej) => {
      const timer = setTimeout(() => rej(new Error(`broker did not start in 30 s:\n${out}\n${err}`)), 30000);
      const check = () => {
        const m = /SWITCHYARD_(?:LISTENING|READY) rest=(\d+)/.exec(out); // LISTENING: REST is up (endpoints may still be retrying)
        if (m) {
          clearTimeout(timer);
          res(Number(m[1]));
        }
      };
      proc.stdout!.on('data', check);
      void exited.then((code) => {
        clearTimeout(timer);
        rej(new Error(`broker exited with ${code} before it was ready:\n${out}\n${err}`));
      });
    });
  }
  return {
    proc,
    port,
    stdout: () => out,
    stderr: () => err,
    exited,
    auth: () => {
      if (!env.SWITCHYARD_DATA_DIR) throw new Error('spawnBroker: pass SWITCHYARD_DATA_DIR to use auth()');
      return basicAuth('admin', adminPasswordOf(env.SWITCHYARD_DATA_DIR));
    },
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      return exited;
    },
  };
}

export async function waitUntil(pred: () => boolean | Promise<boolean>, timeoutMs = 10000, what = 'condition'): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await pred()) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** A node of GET /api/v1/server/actors (the monitor's ActorNode). */
export type ActorTreeNode = ActorNode;

/**
 * The actors a supervisor node supervises, looking through its shard supervisors (large supervisors are sharded:
 * `destinations#3` → `destinations#3#17` → `destination:a/b`).
 */
export function supervisedActors(node: ActorTreeNode): ActorTreeNode[] {
  return node.children.flatMap((c) => (c.machine === 'supervisor' && c.id.startsWith(`${node.id}#`) ? supervisedActors(c) : [c]));
}

/** Every (method, route) of the live route table once, without HEAD/OPTIONS, with the route's config. */
/** The methods the route table uses: a type every inject() accepts (Fastify's HTTPMethods also has TRACE, which
 * light-my-request's does not). */
export type RouteMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

export function routeTable(app: FastifyInstance): Array<{ method: RouteMethod; url: string; config: unknown }> {
  const seen = new Set<string>();
  const out: Array<{ method: RouteMethod; url: string; config: unknown }> = [];
  for (const r of app.apiContext.routes) {
    for (const m of Array.isArray(r.method) ? r.method : [r.method]) {
      if (m === 'HEAD' || m === 'OPTIONS' || seen.has(`${m} ${r.url}`)) continue;
      seen.add(`${m} ${r.url}`);
      out.push({ method: m as RouteMethod, url: r.url, config: r.config });
    }
  }
  return out;
}
