import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../src/api/app.js';
import type { SectionName } from '../src/config/schema.js';
import { Runtime, type RuntimeOptions } from '../src/runtime/runtime.js';
import { registerServices } from '../src/runtime/services.js';

export const ROOT = resolve(import.meta.dirname ?? new URL('..', import.meta.url).pathname, '..');
export const CONFIG_DIR = join(ROOT, 'config');

export function tempDir(prefix = 'switchyard-test-'): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

export function removeDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

export interface TestServer {
  rt: Runtime;
  app: FastifyInstance;
  dataDir: string;
  close(): Promise<void>;
}

/** An in-process broker on a temporary data dir; `app.inject()` or `listen()` as the test needs. */
export async function startServer(
  options: { overrides?: { [K in SectionName]?: Record<string, unknown> }; dataDir?: string } & Omit<RuntimeOptions, 'overrides'> = {},
): Promise<TestServer> {
  const dataDir = options.dataDir ?? tempDir();
  const ownsDir = !options.dataDir;
  const overrides = { ...(options.overrides ?? {}) };
  overrides.MessageDaemon = { dataDirectory: dataDir, ...(overrides.MessageDaemon ?? {}) };
  overrides.RestApi = { port: 0, hostnames: '127.0.0.1', ...(overrides.RestApi ?? {}) };
  const rt = await Runtime.create({ configDir: CONFIG_DIR, env: {}, stdoutLogs: false, ...options, overrides });
  registerServices(rt);
  await rt.start();
  const app = await buildApp(rt);
  return {
    rt,
    app,
    dataDir,
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
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** The broker as a child process (`node --import tsx src/main.ts`), REST on a random port of 127.0.0.1. */
export async function spawnBroker(env: Record<string, string>, opts: { waitReady?: boolean } = {}): Promise<BrokerProcess> {
  const proc = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'src/main.ts')], {
    cwd: ROOT,
    env: { ...process.env, SWITCHYARD_REST_PORT: '0', SWITCHYARD_REST_HOST: '127.0.0.1', ...env },
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
        const m = /SWITCHYARD_READY rest=(\d+)/.exec(out);
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
