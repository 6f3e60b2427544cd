/**
 * A real nats-server for the federation tests and bench: `nats-server -js -sd <dir> -a 127.0.0.1 -p <port>`, stopped
 * by its pid. `restart()` starts it again on the same port and store (the outage tests).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export { freePort } from '../links/helpers.js';
import { freePort } from '../links/helpers.js';

export interface NatsServer {
  port: number;
  url: string;
  storeDir: string;
  pid(): number | undefined;
  /** SIGKILL (default) or SIGTERM; resolves when the process has exited. */
  stop(signal?: NodeJS.Signals): Promise<void>;
  /** Start again on the same port and store. */
  restart(): Promise<void>;
  /** Stop and remove the store. */
  dispose(): Promise<void>;
  output(): string;
}

export async function startNats(opts: { args?: string[]; jetstream?: boolean; port?: number } = {}): Promise<NatsServer> {
  const storeDir = mkdtempSync(join(tmpdir(), 'switchyard-nats-'));
  const port = opts.port ?? (await freePort());
  let proc: ChildProcess | undefined;
  let out = '';
  const launch = async (): Promise<void> => {
    const args = [...(opts.jetstream === false ? [] : ['-js', '-sd', storeDir]), '-a', '127.0.0.1', '-p', String(port), ...(opts.args ?? [])];
    const p = spawn('nats-server', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    proc = p;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`nats-server did not start in 15 s:\n${out}`)), 15000);
      const onData = (d: Buffer) => {
        out += d.toString();
        if (out.includes('Server is ready')) {
          clearTimeout(timer);
          resolve();
        }
      };
      p.stdout!.on('data', onData);
      p.stderr!.on('data', onData);
      p.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`nats-server exited with ${code}:\n${out}`));
      });
    });
  };
  const stop = async (signal: NodeJS.Signals = 'SIGKILL'): Promise<void> => {
    const p = proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise<void>((r) => p.once('exit', () => r()));
    p.kill(signal);
    await exited;
  };
  await launch();
  return {
    port,
    url: `nats://127.0.0.1:${port}`,
    storeDir,
    pid: () => proc?.pid,
    stop,
    restart: async () => {
      await stop();
      out = '';
      // the port may take a moment to be free again
      for (let i = 0; ; i++) {
        try {
          await launch();
          return;
        } catch (err) {
          if (i >= 20) throw err;
          await new Promise((r) => setTimeout(r, 250));
        }
      }
    },
    dispose: async () => {
      await stop();
      rmSync(storeDir, { recursive: true, force: true });
    },
    output: () => out,
  };
}
