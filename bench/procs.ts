/** Process helpers shared by the benches (bench/mqtt, bench/federation, bench/footprint). */
import type { ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';

/** A free TCP port on 127.0.0.1 (bound once and released). */
export async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** Resolves with the first match of `re` in the process's stdout/stderr; rejects after 30 s or when it exits first. */
export function waitLine(proc: ChildProcess, re: RegExp, what: string): Promise<RegExpExecArray> {
  return new Promise((res, rej) => {
    let out = '';
    const t = setTimeout(() => rej(new Error(`${what} did not start: ${out}`)), 30000);
    const on = (d: Buffer) => {
      out += d;
      const m = re.exec(out);
      if (m) {
        clearTimeout(t);
        res(m);
      }
    };
    proc.stdout?.on('data', on);
    proc.stderr?.on('data', on);
    proc.once('exit', (code) => {
      clearTimeout(t);
      rej(new Error(`${what} exited with ${code}: ${out}`));
    });
  });
}

/** A stop function for a child process: SIGTERM, SIGKILL after `graceMs` (5 s); resolves once it has exited. */
export const stopProc = (proc: ChildProcess, graceMs = 5000) => async (): Promise<void> => {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = new Promise((r) => proc.once('exit', r));
  proc.kill('SIGTERM');
  const t = setTimeout(() => proc.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(t);
};
