/**
 * bench/mqtt/latency-dist: the whole latency distribution behind bench/mqtt's p99 at a fixed rate (issue 25: p99 at
 * 5 000 msg/s), for Switchyard and its peers, each broker fresh, rounds on the same process. Per round: p50 … p99.9 and
 * max, and how the messages at or above the round's p99 are spread: in how many episodes (gaps under 2 ms join them)
 * and the largest ones. Many small episodes spread over the round are scheduling and system-call noise; a few large
 * ones are a stall (a GC pause, a timer's work, the machine). The generator is bench/mqtt's (a 1 ms tick writes the
 * PUBLISHes due, QoS 0, 64-byte payloads carrying their send time).
 *
 *   LAT_BROKERS=switchyard,nats,mosquitto LAT_RATE=5000 LAT_ROUNDS=3 LAT_SECONDS=5 npx tsx bench/mqtt/latency-dist.ts
 *
 * Not part of `npm run bench`; Switchyard runs as there (npm start's flags and bundle; BENCH_NODE_FLAGS replaces the
 * flags). `LAT_ROOT=/tmp/old` starts another checkout's build (a git worktree); `LAT_PORT=1883` measures a broker
 * already running there instead (one started by hand, e.g. with --trace-gc).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { LoadClient } from './loadgen.js';
import { pacedPublisher, startAedes, startMosquitto, startNatsMqtt, startSwitchyard, type Broker } from './run.js';
import { START_ENV, START_FLAGS } from '../start-flags.js';

const RATE = Number(process.env.LAT_RATE ?? 5000);
const ROUNDS = Number(process.env.LAT_ROUNDS ?? 3);
const SECONDS = Number(process.env.LAT_SECONDS ?? 5);
const BROKERS = (process.env.LAT_BROKERS ?? 'switchyard,nats').split(',');
const ROOT = process.env.LAT_ROOT === undefined ? undefined : resolve(process.env.LAT_ROOT);

async function round(port: number, seconds: number): Promise<string> {
  const sub = await LoadClient.connect(port, 'lat-sub');
  await sub.subscribe('bench/lat', 0);
  const pub = await LoadClient.connect(port, 'lat-pub');
  const at: number[] = [];
  const lat: number[] = [];
  let recording = false;
  sub.onPublish = (payload) => {
    if (!recording) return;
    const now = performance.now();
    at.push(now);
    lat.push(now - payload.readDoubleLE(0));
  };
  const timer = pacedPublisher(pub, RATE, 0);
  await new Promise((r) => setTimeout(r, 1000));
  recording = true;
  await new Promise((r) => setTimeout(r, seconds * 1000));
  recording = false;
  clearInterval(timer);
  sub.close();
  pub.close();
  const sorted = [...lat].sort((a, b) => a - b);
  const q = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? NaN;
  const p99 = q(0.99);
  const sizes: number[] = [];
  let last = -Infinity;
  for (let i = 0; i < lat.length; i++) {
    if (lat[i]! < p99) continue;
    if (at[i]! - last > 2) sizes.push(0);
    sizes[sizes.length - 1]!++;
    last = at[i]!;
  }
  sizes.sort((a, b) => b - a);
  const f = (p: number) => q(p).toFixed(3);
  return `n ${lat.length}: p50 ${f(0.5)}, p90 ${f(0.9)}, p95 ${f(0.95)}, p98 ${f(0.98)}, p99 ${f(0.99)}, p99.9 ${f(0.999)}, max ${(sorted[sorted.length - 1] ?? NaN).toFixed(3)} ms; the ${sizes.reduce((a, b) => a + b, 0)} at or above p99 in ${sizes.length} episodes, largest ${sizes.slice(0, 4).join(', ')}`;
}

const tmp = mkdtempSync(join(tmpdir(), 'switchyard-latdist-'));
try {
  if (process.env.LAT_PORT !== undefined) {
    for (let i = 1; i <= ROUNDS; i++) console.log(`port ${process.env.LAT_PORT} ${RATE} msg/s round ${i}: ${await round(Number(process.env.LAT_PORT), SECONDS)}`);
    BROKERS.length = 0;
  }
  for (const name of BROKERS) {
    let b: Broker;
    if (name === 'nats') b = await startNatsMqtt(tmp);
    else if (name === 'mosquitto') b = await startMosquitto(tmp);
    else if (name === 'aedes') b = await startAedes();
    else b = await startSwitchyard(join(tmp, name), false, START_FLAGS, START_ENV, ROOT);
    try {
      await round(b.port, 2); // warm-up, not counted
      for (let i = 1; i <= ROUNDS; i++) console.log(`${name} ${RATE} msg/s round ${i}: ${await round(b.port, SECONDS)}`);
    } finally {
      await b.stop();
    }
  }
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
