import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { dirname, join } from 'node:path';
import mqtt, { type IClientOptions, type MqttClient } from 'mqtt';

/** A free TCP port on 127.0.0.1 (bound once and released). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => resolve(port));
    });
  });
}

function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createConnection({ port, host: '127.0.0.1' });
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

export interface Mosquitto {
  port: number;
  proc: ChildProcess;
  log: () => string;
  /** Stops it by pid (SIGTERM saves its persistence file; SIGKILL does not). */
  stop(signal?: NodeJS.Signals): Promise<void>;
}

/**
 * A real mosquitto on `port` of 127.0.0.1 with its own configuration and persistence directory under `dir` (the same
 * `dir` and port after a stop gives the same broker back, sessions and queued messages included). `listenerOptions`
 * are lines for its listener (certfile, keyfile for TLS).
 */
export async function startMosquitto(dir: string, port: number, listenerOptions: string[] = []): Promise<Mosquitto> {
  mkdirSync(dir, { recursive: true });
  // mosquitto started as root drops to the user mosquitto, which must reach this dir and write its persistence file
  chmodSync(dir, 0o777);
  chmodSync(dirname(dir), 0o755);
  const conf = join(dir, 'mosquitto.conf');
  writeFileSync(
    conf,
    [
      `listener ${port} 127.0.0.1`,
      ...listenerOptions,
      'allow_anonymous true',
      'persistence true',
      `persistence_location ${dir}/`,
      'persistence_file mosquitto.db',
      'autosave_interval 1',
      'max_queued_messages 100000',
      'max_inflight_messages 100',
      'persistent_client_expiration 1d',
      'log_dest stderr',
      'log_type error',
      'log_type warning',
      '',
    ].join('\n'),
  );
  const proc = spawn('mosquitto', ['-c', conf], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout!.on('data', (d) => (out += d));
  proc.stderr!.on('data', (d) => (out += d));
  const exited = new Promise<void>((res) => proc.once('exit', () => res()));
  const end = Date.now() + 10000;
  while (!(await portOpen(port))) {
    if (proc.exitCode !== null || Date.now() > end) throw new Error(`mosquitto did not start on ${port}: ${out}`);
    await new Promise((r) => setTimeout(r, 30));
  }
  return {
    port,
    proc,
    log: () => out,
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      await exited;
    },
  };
}

/** An mqtt.js client connected to 127.0.0.1:port (resolves on CONNACK). */
export function connectClient(port: number, opts: IClientOptions = {}): Promise<MqttClient> {
  return new Promise((resolve, reject) => {
    const c = mqtt.connect(`mqtt://127.0.0.1:${port}`, { reconnectPeriod: 0, protocolVersion: 5, connectTimeout: 5000, ...opts });
    c.once('connect', () => resolve(c));
    c.once('error', (e) => {
      c.end(true);
      reject(e);
    });
  });
}

/** Subscribe and collect payloads (as strings) per topic into `into`. */
export async function collect(client: MqttClient, filter: string, into: Array<{ topic: string; payload: string }>, qos: 0 | 1 | 2 = 1): Promise<void> {
  client.on('message', (topic, payload) => into.push({ topic, payload: payload.toString() }));
  await client.subscribeAsync(filter, { qos });
}

export async function publishMany(client: MqttClient, topic: (i: number) => string, n: number, qos: 0 | 1 | 2 = 1, prefix = 'm'): Promise<void> {
  const all: Array<Promise<unknown>> = [];
  for (let i = 0; i < n; i++) all.push(client.publishAsync(topic(i), `${prefix}-${i}`, { qos }));
  await Promise.all(all);
}

export async function until(pred: () => boolean | Promise<boolean>, timeoutMs = 15000, what = 'condition'): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await pred()) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out waiting for ${what}`);
}
