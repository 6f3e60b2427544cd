/** Pseudo-terminal pairs from socat for the serial tests: `a` for the broker, `b` for the test's end of the line. */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { SerialPort } from 'serialport';
import { waitUntil } from '../helpers.js';

export interface PtyPair {
  proc: ChildProcess;
  /** The link the broker opens. */
  a: string;
  /** The link the test writes and reads. */
  b: string;
  /** Kill socat (by pid) and wait until it has removed both links: the device is gone, as when a USB adapter is unplugged. */
  stop(): Promise<void>;
}

/** `socat -d -d pty,raw,echo=0,link=<a> pty,raw,echo=0,link=<b>`, resolved when both links exist. */
export async function ptyPair(a: string, b: string): Promise<PtyPair> {
  const proc = spawn('socat', ['-d', '-d', `pty,raw,echo=0,link=${a}`, `pty,raw,echo=0,link=${b}`], { stdio: ['ignore', 'ignore', 'pipe'] });
  proc.stderr!.resume();
  let exited = false;
  const done = new Promise<void>((resolve) => proc.once('exit', () => ((exited = true), resolve())));
  await waitUntil(() => exited || (existsSync(a) && existsSync(b)), 10000, 'socat links');
  if (exited) throw new Error('socat exited before creating its ptys');
  return {
    proc,
    a,
    b,
    async stop() {
      if (!exited && proc.pid !== undefined) process.kill(proc.pid, 'SIGTERM');
      await done;
      await waitUntil(() => !existsSync(a) && !existsSync(b), 5000, 'socat links removed');
    },
  };
}

/** The test's end of a pty pair, opened as a serial port. */
export async function openEnd(path: string): Promise<SerialPort> {
  const port = new SerialPort({ path, baudRate: 9600, autoOpen: false });
  await new Promise<void>((resolve, reject) => port.open((err) => (err ? reject(err) : resolve())));
  port.on('error', () => {
    /* the line went away: the test notices through what it asserts */
  });
  return port;
}

export function closeEnd(port: SerialPort | undefined): Promise<void> {
  if (!port || !port.isOpen) return Promise.resolve();
  return new Promise((resolve) => port.close(() => resolve()));
}
