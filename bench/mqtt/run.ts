/**
 * bench/mqtt: Switchyard, Aedes (its own process), Debian's Mosquitto and Debian's nats-server with its MQTT listener
 * (JetStream on, as NATS's MQTT requires) measured in one run with one load generator (this process, raw sockets):
 * QoS 0 and QoS 1 publisher→subscriber pairs (each pair its own topic), fan-out 1→100 at QoS 0 and at QoS 1, latency p50/p99 at a fixed
 * 5 000 msg/s, and memory per idle connection over 5 000 connections. Not a test: numbers vary with the machine.
 * `npm run bench` runs it; `tsx bench/mqtt/run.ts` alone too. `BENCH_MQTT_BROKERS=switchyard,nats` and
 * `BENCH_MQTT_SCENARIOS=qos0,qos1,fanout,fanout1,latency,latency20k,latency1,latency1at20k,memory` run some of them only
 * (latency1 and latency1at20k: QoS 1 publisher and subscriber, every PUBLISH and delivery acknowledged); `BENCH_MQTT_PAIRS` (8)
 * sets the number of publisher→subscriber pairs; `BENCH_SECONDS` (3) the length of a throughput window.
 *
 * The generator, the same for every broker: publishers on this process's main thread (pre-encoded batches; QoS 1
 * with a window of unacknowledged PUBLISHes, pumpQos1); the pairs' subscribers on the main thread too (LoadClient);
 * fan-out QoS 1's 100 subscribers in worker threads (bench/mqtt/fanout-subscribers.ts: framing in place, every
 * QoS 1 delivery acknowledged, a read's PUBACKs in one write, nothing allocated per message), deliveries counted
 * where the subscribers read them. Fan-out QoS 1: 1 publisher, window BENCH_FANOUT_WINDOW (100), 100 subscribers
 * over BENCH_FANOUT_THREADS workers (cores - 1, 1 to 4). Fan-out QoS 0 keeps its subscribers on the main thread.
 */
import { START_ENV, START_FLAGS, switchyardArgs } from '../start-flags.js';
import { spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { LoadClient, publishPacket } from './loadgen.js';
import { FanoutSubscribers } from './fanout-subscribers.js';
import { freePort, stopProc, waitLine } from '../procs.js';
import { startNats } from '../../test/federation/nats-server.js';
import { inspectorOf, type Collector } from './inspector.js';

const ROOT = resolve(import.meta.dirname, '..', '..');
const DURATION = Number(process.env.BENCH_SECONDS ?? 3) * 1000;
const WARMUP = 500;
const PAIRS = Number(process.env.BENCH_MQTT_PAIRS ?? 8);
/**
 * Fan-out QoS 0: PUBLISHes written per 1 ms tick (while less than 64 KiB is unsent). It was 20, which offers at most
 * 20 000 msg/s = 2 M deliveries/s: both Switchyard (1.85 M) and NATS (1.69 M) sat at that ceiling, so the ratio
 * measured the load generator. 100 offers 10 M deliveries/s, more than any broker here delivers.
 */
const FANOUT_BURST = Number(process.env.BENCH_FANOUT_BURST ?? 100);
/**
 * Worker threads fan-out QoS 1's 100 subscribers are spread over (bench/mqtt/fanout-subscribers.ts): one core
 * is left to the broker (Switchyard, Aedes and Mosquitto use one; on 2 cores two workers made Switchyard's fan-out
 * QoS 1 slower than one), the main thread's publisher is light.
 */
const FANOUT_THREADS = Number(process.env.BENCH_FANOUT_THREADS ?? Math.min(4, Math.max(1, availableParallelism() - 1)));
/**
 * Fan-out QoS 1: PUBLISHes the publisher keeps unacknowledged. It was 20: with at most 20 messages per round trip
 * Switchyard paid a socket write per subscriber for every few messages (1.18 µs of broker CPU per delivery, 0.65 µs
 * with 100), and every broker delivered more with 100 (one run: NATS 212,930 -> 287,191 deliveries/s).
 */
const FANOUT_WINDOW = Number(process.env.BENCH_FANOUT_WINDOW ?? 100);
/**
 * Node flags of both Node brokers: npm start's (bench/start-flags.ts, read from package.json: the young generation it
 * ships), so the figures are those of the broker as it runs; `BENCH_NODE_FLAGS` replaces them (space-separated; empty
 * for V8's defaults; `--max-semi-space-size=32` for the larger young generation earlier runs used). Aedes gets the
 * same flags, to be fair; Switchyard also gets npm start's malloc environment.
 */
const NODE_FLAGS = START_FLAGS;

export interface Broker {
  name: string;
  port: number;
  pid: number;
  proc?: ChildProcess;
  /** Node brokers started for the memory scenario: a full GC over the inspector. */
  collector?: Collector;
  stop(): Promise<void>;
}

/**
 * `flags` and `env`: Node flags (default NODE_FLAGS) and environment of the broker (bench/young-gen.ts). `root`: the
 * checkout whose build (npm start's entry, bench/start-flags.ts switchyardArgs) and config/ are started (bench/mqtt/compare.ts starts other commits' worktrees with this
 * checkout's load generator).
 */
export async function startSwitchyard(tmp: string, inspect = false, flags = NODE_FLAGS, env: Record<string, string> = START_ENV, root = ROOT): Promise<Broker> {
  const configDir = join(tmp, 'sy-config');
  const dataDir = join(tmp, 'sy-data');
  mkdir(configDir);
  for (const f of readdirSync(join(root, 'config'))) if (f.endsWith('.yaml') && f !== 'AuthManager.yaml') copyFileSync(join(root, 'config', f), join(configDir, f));
  writeFileSync(join(configDir, 'AuthManager.yaml'), 'AuthManager:\n  authenticationEnabled: false\n');
  const port = await freePort();
  const proc = spawn(process.execPath, [...flags, ...(inspect ? ['--inspect=127.0.0.1:0'] : []), ...switchyardArgs(root)], {
    cwd: root,
    env: { ...process.env, ...env, SWITCHYARD_CONFIG_DIR: configDir, SWITCHYARD_DATA_DIR: dataDir, SWITCHYARD_REST_PORT: '0', SWITCHYARD_REST_HOST: '127.0.0.1', SWITCHYARD_MQTT_PORT: String(port), SWITCHYARD_MQTT_WS_PORT: '0', SWITCHYARD_MQTT_HOST: '127.0.0.1', SWITCHYARD_LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const collector = inspect ? inspectorOf(proc) : undefined;
  await waitLine(proc, /SWITCHYARD_READY rest=(\d+)/, 'switchyard');
  return { name: 'Switchyard', port, pid: proc.pid!, proc, collector: await collector, stop: stopProc(proc) };
}

export async function startAedes(inspect = false): Promise<Broker> {
  const proc = spawn(process.execPath, [...NODE_FLAGS, ...(inspect ? ['--inspect=127.0.0.1:0'] : []), '--import', 'tsx', join(ROOT, 'bench/mqtt/aedes-server.ts'), '0'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  proc.stderr!.on('data', (d) => process.env.BENCH_DEBUG && process.stderr.write(d));
  const collector = inspect ? inspectorOf(proc) : undefined;
  const m = await waitLine(proc, /AEDES_READY (\d+)/, 'aedes');
  return { name: 'Aedes', port: Number(m[1]), pid: proc.pid!, proc, collector: await collector, stop: stopProc(proc) };
}

export async function startMosquitto(tmp: string): Promise<Broker> {
  const port = await freePort();
  const conf = join(tmp, 'mosquitto.conf');
  // Debian's defaults except: a loopback listener, anonymous clients, the same per-client queue depth as Switchyard,
  // and TCP_NODELAY (as Switchyard and Aedes here), so latency compares brokers, not Nagle's algorithm
  writeFileSync(conf, `listener ${port} 127.0.0.1\nallow_anonymous true\npersistence false\nmax_queued_messages 10000\nset_tcp_nodelay true\n`);
  // no -v: verbose logging into an undrained pipe would stall the broker
  const proc = spawn('mosquitto', ['-c', conf], { stdio: ['ignore', 'ignore', 'ignore'] });
  const end = Date.now() + 10000;
  for (;;) {
    try {
      (await LoadClient.connect(port, 'probe')).close();
      break;
    } catch (err) {
      if (Date.now() > end) throw err;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return { name: 'Mosquitto', port, pid: proc.pid!, proc, stop: stopProc(proc) };
}

/** nats-server with an MQTT listener (JetStream is required by it; a server name too). */
export async function startNatsMqtt(tmp: string): Promise<Broker> {
  const port = await freePort();
  const conf = join(tmp, `nats-${port}.conf`);
  writeFileSync(conf, `server_name: bench\nmqtt {\n  listen: 127.0.0.1:${port}\n}\n`);
  const nats = await startNats({ args: ['-c', conf] });
  const pid = nats.pid()!;
  return { name: 'NATS', port, pid, stop: () => nats.dispose() };
}

function mkdir(d: string): void {
  rmSync(d, { recursive: true, force: true });
  mkdirSync(d, { recursive: true });
}

/**
 * Called at the start and the end of every throughput window with the messages received so far (bench/mqtt/compare.ts
 * reads the broker's CPU time there: CPU per message stays comparable when other work shares the machine).
 */
export const windowHooks: { start?: (received: number) => void; end?: (received: number) => void } = {};

/** Messages received per second over a window of `ms` after the warm-up; `received()` counts them so far. */
async function measure(received: () => number, ms: number): Promise<number> {
  await new Promise((r) => setTimeout(r, WARMUP));
  const c0 = received();
  windowHooks.start?.(c0);
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, ms));
  const c1 = received();
  windowHooks.end?.(c1);
  return (c1 - c0) / ((performance.now() - t0) / 1000);
}

/** Keep a socket's send buffer full with pre-encoded batches (QoS 0). */
function pumpQos0(c: LoadClient, batch: Buffer): void {
  const pump = (): void => {
    if (c.stopped) return;
    while (c.socket.writableLength < 256 * 1024) c.socket.write(batch);
    c.socket.once('drain', pump);
  };
  pump();
}

/**
 * Keeps at most `window` QoS 1 PUBLISHes of `topic` unacknowledged on `c` (packet ids 1..65535 in turn, patched into
 * copies of one encoded packet); once fewer than half are in flight the window is topped up in one write.
 */
function pumpQos1(c: LoadClient, topic: string, payload: Buffer, window: number): void {
  const tmpl = publishPacket(topic, payload, 1, 1);
  const pidAt = tmpl.length - payload.length - 2;
  let pid = 0;
  let inflight = 0;
  const send = (n: number): void => {
    const bufs: Buffer[] = [];
    for (let k = 0; k < n; k++) {
      pid = pid === 65535 ? 1 : pid + 1;
      const b = Buffer.from(tmpl);
      b.writeUInt16BE(pid, pidAt);
      bufs.push(b);
    }
    inflight += n;
    c.socket.write(Buffer.concat(bufs));
  };
  c.onAck(() => {
    inflight--;
    if (inflight < window / 2 && !c.stopped) send(window - inflight);
  });
  send(window);
}

export async function pairs(port: number, qos: 0 | 1): Promise<number> {
  const subs: LoadClient[] = [];
  const pubs: LoadClient[] = [];
  const payload = Buffer.alloc(64, 'x');
  for (let i = 0; i < PAIRS; i++) {
    const s = await LoadClient.connect(port, `sub${qos}-${i}`);
    await s.subscribe(`bench/pair/${qos}/${i}`, qos);
    subs.push(s);
    pubs.push(await LoadClient.connect(port, `pub${qos}-${i}`));
  }
  if (qos === 0) {
    for (let i = 0; i < PAIRS; i++) {
      const one = publishPacket(`bench/pair/0/${i}`, payload, 0);
      pumpQos0(pubs[i]!, Buffer.concat(Array(100).fill(one)));
    }
  } else {
    for (let i = 0; i < PAIRS; i++) pumpQos1(pubs[i]!, `bench/pair/1/${i}`, payload, 200);
  }
  const rate = await measure(() => subs.reduce((a, s) => a + s.received, 0), DURATION);
  for (const c of [...pubs, ...subs]) c.close();
  return rate;
}

export async function fanout(port: number, qos: 0 | 1 = 0): Promise<number> {
  // QoS 1: the subscribers in worker threads; QoS 0: on this thread as before (its ceiling is the publisher's
  // FANOUT_BURST, and with the workers Aedes measured 8-13 % less in three interleaved rounds)
  const subs = qos === 1 ? await FanoutSubscribers.start(port, 'bench/fan/1', 1, 100, FANOUT_THREADS, 'fan1') : await mainThreadSubscribers(port);
  const pub = await LoadClient.connect(port, `fan${qos}-pub`);
  const payload = Buffer.alloc(64, 'f');
  let timer: NodeJS.Timeout | undefined;
  if (qos === 0) {
    const one = publishPacket('bench/fan/0', payload, 0);
    // paced so that the subscribers, not the publisher's buffer, set the pace: bursts of FANOUT_BURST per ms tick
    // while the publisher's socket has less than 64 KiB unsent
    const batch = Buffer.concat(Array(FANOUT_BURST).fill(one));
    timer = setInterval(() => {
      if (pub.socket.writableLength < 64 * 1024) pub.socket.write(batch);
    }, 1);
  } else {
    // QoS 1 both ways: the publisher keeps at most FANOUT_WINDOW PUBLISHes unacknowledged (the broker acknowledges
    // once the message is accepted), each subscriber acknowledges every delivery, all of a read's PUBACKs in one write
    pumpQos1(pub, 'bench/fan/1', payload, FANOUT_WINDOW);
  }
  try {
    // deliveries counted by the subscribers as they read them
    return await measure(() => subs.received(), DURATION);
  } finally {
    clearInterval(timer);
    pub.close();
    await subs.close();
  }
}

/** The fan-out QoS 0 subscribers: 100 LoadClients on this thread. */
async function mainThreadSubscribers(port: number): Promise<{ received(): number; close(): Promise<void> }> {
  const subs: LoadClient[] = [];
  for (let i = 0; i < 100; i++) {
    const s = await LoadClient.connect(port, `fan0-${i}`);
    await s.subscribe('bench/fan/0', 0);
    subs.push(s);
  }
  return {
    received: () => subs.reduce((a, s) => a + s.received, 0),
    close: async () => {
      for (const s of subs) s.close();
    },
  };
}

/**
 * Latency at a fixed rate (5 000 and 20 000 msg/s): one warm-up round, then three rounds of one window each; the median round's p50 and
 * p99. One round's p99 is at the mercy of a scheduler hiccup on a 2-core machine (it moves by several ms for every
 * broker, Mosquitto too).
 */
export async function latency(port: number, rate: number, qos: 0 | 1 = 0): Promise<{ p50: number; p99: number; n: number }> {
  const rounds: Array<{ p50: number; p99: number; n: number }> = [];
  await latencyRound(port, rate, qos); // warm-up round at this rate, not counted (the same for every broker)
  for (let i = 0; i < 3; i++) {
    rounds.push(await latencyRound(port, rate, qos));
    await new Promise((r) => setTimeout(r, 300));
  }
  const mid = <K extends 'p50' | 'p99'>(k: K) => rounds.map((x) => x[k]).sort((a, b) => a - b)[1]!;
  return { p50: mid('p50'), p99: mid('p99'), n: rounds.reduce((a, x) => a + x.n, 0) };
}

/**
 * Publishes to `bench/lat` at `rate` msg/s from a 1 ms tick (the PUBLISHes due in one write), 64-byte payloads
 * carrying their send time (performance.now(), a double at offset 0). Returns the tick's timer: clearInterval ends it.
 */
export function pacedPublisher(pub: LoadClient, rate: number, qos: 0 | 1): NodeJS.Timeout {
  const start = performance.now();
  let sent = 0;
  let pid = 0;
  const payload = Buffer.alloc(64);
  return setInterval(() => {
    const due = Math.floor(((performance.now() - start) / 1000) * rate);
    const bufs: Buffer[] = [];
    while (sent < due) {
      payload.writeDoubleLE(performance.now(), 0);
      pid = pid === 65535 ? 1 : pid + 1;
      bufs.push(publishPacket('bench/lat', payload, qos, pid));
      sent++;
    }
    if (bufs.length) pub.socket.write(bufs.length === 1 ? bufs[0]! : Buffer.concat(bufs));
  }, 1);
}

async function latencyRound(port: number, RATE: number, qos: 0 | 1): Promise<{ p50: number; p99: number; n: number }> {
  const sub = await LoadClient.connect(port, 'lat-sub');
  await sub.subscribe('bench/lat', qos);
  const pub = await LoadClient.connect(port, 'lat-pub');
  const samples: number[] = [];
  let recording = false;
  sub.onPublish = (payload) => {
    if (recording) samples.push(performance.now() - payload.readDoubleLE(0));
  };
  const timer = pacedPublisher(pub, RATE, qos);
  await new Promise((r) => setTimeout(r, WARMUP));
  recording = true;
  await new Promise((r) => setTimeout(r, DURATION));
  recording = false;
  clearInterval(timer);
  sub.close();
  pub.close();
  samples.sort((a, b) => a - b);
  const q = (p: number) => samples[Math.min(samples.length - 1, Math.floor(p * samples.length))] ?? NaN;
  return { p50: q(0.5), p99: q(0.99), n: samples.length };
}

function rssOf(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : NaN;
}

/**
 * Memory per idle connection: RSS growth of a fresh broker process after `n` clients connected and went idle,
 * divided by `n`. Two figures: `settled`, with a full GC before both samples for the Node brokers (what the
 * connections hold; Mosquitto has no GC and is sampled the same way), and `raw`, 2 s after the last connect
 * without a GC (which also counts the garbage of the connect burst and V8's grown young generation).
 */
async function idleMemory(broker: Broker, n = 5000): Promise<{ settled: number; raw: number }> {
  const settle = async () => {
    await broker.collector?.gc();
    await new Promise((r) => setTimeout(r, 500));
  };
  await new Promise((r) => setTimeout(r, 1500));
  await settle();
  const before = rssOf(broker.pid);
  const clients: LoadClient[] = [];
  for (let i = 0; i < n; i += 250) {
    const batch = await Promise.all(Array.from({ length: Math.min(250, n - i) }, (_, k) => LoadClient.connect(broker.port, `idle-${i + k}`)));
    clients.push(...batch);
  }
  await new Promise((r) => setTimeout(r, 2000));
  const raw = rssOf(broker.pid);
  await settle();
  const settled = rssOf(broker.pid);
  for (const c of clients) c.close();
  await new Promise((r) => setTimeout(r, 500));
  broker.collector?.close();
  return { settled: (settled - before) / n, raw: (raw - before) / n };
}

export interface MqttRow {
  qos0: number;
  qos1: number;
  fanout: number;
  /** Fan-out 1→100 with QoS 1 publisher and subscribers (deliveries/s). */
  fanout1: number;
  p50: number;
  p99: number;
  p50at20k: number;
  p99at20k: number;
  /** The same latency with a QoS 1 publisher (its PUBACKs read) and a QoS 1 subscriber (acknowledging every delivery). */
  p50q1: number;
  p99q1: number;
  p50q1at20k: number;
  p99q1at20k: number;
  memPerConn: number;
  memRaw: number;
}

export const MQTT_BROKERS = ['Switchyard', 'Aedes', 'Mosquitto', 'NATS'] as const;
const SCENARIOS = ['qos0', 'qos1', 'fanout', 'fanout1', 'latency', 'latency20k', 'latency1', 'latency1at20k', 'memory'] as const;

/** Names from a comma-separated environment variable (all when unset), matched case-insensitively. */
function picked<T extends string>(all: readonly T[], env: string | undefined): T[] {
  if (!env) return [...all];
  const want = env.toLowerCase().split(',').map((x) => x.trim());
  return all.filter((x) => want.includes(x.toLowerCase()));
}

/** Runs the comparison, prints its table and returns the figures per broker (NaN for a scenario not run). */
export async function runMqttBench(): Promise<Record<string, MqttRow>> {
  const tmp = mkdtempSync(join(tmpdir(), 'switchyard-bench-'));
  const results: Record<string, MqttRow> = {};
  const starters: Record<(typeof MQTT_BROKERS)[number], (inspect?: boolean) => Promise<Broker>> = {
    Switchyard: (inspect) => startSwitchyard(tmp, inspect),
    Aedes: (inspect) => startAedes(inspect),
    Mosquitto: () => startMosquitto(tmp),
    NATS: () => startNatsMqtt(tmp),
  };
  const brokers = picked(MQTT_BROKERS, process.env.BENCH_MQTT_BROKERS);
  const scenarios = new Set(picked(SCENARIOS, process.env.BENCH_MQTT_SCENARIOS));
  try {
    for (const name of brokers) {
      const start = starters[name];
      process.stdout.write(`bench/mqtt: ${name} ...`);
      const row: MqttRow = { qos0: NaN, qos1: NaN, fanout: NaN, fanout1: NaN, p50: NaN, p99: NaN, p50at20k: NaN, p99at20k: NaN, p50q1: NaN, p99q1: NaN, p50q1at20k: NaN, p99q1at20k: NaN, memPerConn: NaN, memRaw: NaN };
      const step = async <T>(label: string, f: () => Promise<T>): Promise<T> => {
        process.stdout.write(` ${label}`);
        const v = await f();
        await new Promise((r) => setTimeout(r, 300)); // let the broker settle between scenarios
        return v;
      };
      if ([...scenarios].some((x) => x !== 'memory')) {
        const b = await start();
        try {
          if (scenarios.has('qos0')) row.qos0 = await step('qos0', () => pairs(b.port, 0));
          if (scenarios.has('qos1')) row.qos1 = await step('qos1', () => pairs(b.port, 1));
          if (scenarios.has('fanout')) row.fanout = await step('fanout', () => fanout(b.port, 0));
          if (scenarios.has('fanout1')) row.fanout1 = await step('fanout1', () => fanout(b.port, 1));
          if (scenarios.has('latency')) ({ p50: row.p50, p99: row.p99 } = await step('latency', () => latency(b.port, 5000)));
          if (scenarios.has('latency20k')) ({ p50: row.p50at20k, p99: row.p99at20k } = await step('latency20k', () => latency(b.port, 20000)));
          if (scenarios.has('latency1')) ({ p50: row.p50q1, p99: row.p99q1 } = await step('latency1', () => latency(b.port, 5000, 1)));
          if (scenarios.has('latency1at20k')) ({ p50: row.p50q1at20k, p99: row.p99q1at20k } = await step('latency1at20k', () => latency(b.port, 20000, 1)));
        } finally {
          await b.stop();
        }
      }
      if (scenarios.has('memory')) {
        // memory on a fresh process, so garbage from the load scenarios does not blur the figure
        const fresh = await start(true);
        try {
          const mem = await step('memory', () => idleMemory(fresh));
          row.memPerConn = mem.settled;
          row.memRaw = mem.raw;
        } finally {
          await fresh.stop();
        }
      }
      results[name] = row;
      process.stdout.write(' done\n');
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  const names = Object.keys(results);
  const k = (x: number) => (Number.isNaN(x) ? '—' : `${Math.round(x).toLocaleString('en-US')}`);
  const ms = (x: number) => (Number.isNaN(x) ? '—' : x.toFixed(3));
  const kib = (x: number) => (Number.isNaN(x) ? '—' : (x / 1024).toFixed(2));
  const figures: Array<[string, (r: MqttRow) => number, (x: number) => string]> = [
    ['QoS 0 pairs (msg/s received)', (r) => r.qos0, k],
    ['QoS 1 pairs (msg/s received)', (r) => r.qos1, k],
    ['fan-out 1→100 (deliveries/s)', (r) => r.fanout, k],
    ['fan-out 1→100 QoS 1 (deliveries/s)', (r) => r.fanout1, k],
    ['latency p50 at 5 000 msg/s (ms, median of 3 rounds)', (r) => r.p50, ms],
    ['latency p99 at 5 000 msg/s (ms, median of 3 rounds)', (r) => r.p99, ms],
    ['latency p50 at 20 000 msg/s (ms, median of 3 rounds)', (r) => r.p50at20k, ms],
    ['latency p99 at 20 000 msg/s (ms, median of 3 rounds)', (r) => r.p99at20k, ms],
    ['latency p50 at 5 000 msg/s QoS 1 (ms, median of 3 rounds)', (r) => r.p50q1, ms],
    ['latency p99 at 5 000 msg/s QoS 1 (ms, median of 3 rounds)', (r) => r.p99q1, ms],
    ['latency p50 at 20 000 msg/s QoS 1 (ms, median of 3 rounds)', (r) => r.p50q1at20k, ms],
    ['latency p99 at 20 000 msg/s QoS 1 (ms, median of 3 rounds)', (r) => r.p99q1at20k, ms],
    ['memory per idle connection (KiB, 5 000 conns, after full GC)', (r) => r.memPerConn, kib],
    ['same, 2 s after connecting, no GC (KiB)', (r) => r.memRaw, kib],
  ];
  const lines = [
    '',
    `MQTT broker comparison (${PAIRS} pairs, 64-byte payloads, ${DURATION / 1000} s windows, one raw-socket load generator, node ${process.version})`,
    '',
    `| scenario | ${names.join(' | ')} |`,
    `|---|${names.map(() => '---:').join('|')}|`,
    ...figures.map(([label, f, show]) => `| ${label} | ${names.map((n) => show(f(results[n]!))).join(' | ')} |`),
    '',
  ];
  process.stdout.write(lines.join('\n'));
  return results;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  runMqttBench().catch((err) => {
    process.stderr.write(`bench/mqtt failed: ${err?.stack ?? err}\n`);
    process.exit(1);
  });
}
