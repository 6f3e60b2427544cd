/**
 * REST publish throughput: autocannon against `POST /api/v1/messaging/publish` of a started broker (in-process
 * runtime, `buildApp(rt).listen` on 127.0.0.1:0, authentication off, a fresh data directory) and, in the same run,
 * against a bare Fastify route that parses the same JSON body and answers `{"status":"ok"}`. The figure is the
 * ratio of the two request rates, over alternating rounds. autocannon runs in a worker thread so it does not share the
 * servers' event loop. It also prints the server thread's CPU time per request on each side and their ratio: on a
 * loaded 2-core machine the request rates also measure autocannon and the neighbours, the CPU time per request much less.
 * After the rounds, one more short run per side under V8's sampling heap profiler (objects collected since counted
 * too) gives the bytes each request allocates on the server thread: what the young generation has to collect.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Session } from 'node:inspector/promises';
import { performance } from 'node:perf_hooks';
import autocannon from 'autocannon';
import Fastify from 'fastify';
import { buildApp } from '../src/api/app.js';
import { Runtime } from '../src/runtime/runtime.js';
import { registerServices } from '../src/compose.js';
import { fmt, isMain, printReport, type BenchReport } from './report.js';

const DURATION_S = Number(process.env.BENCH_DURATION ?? 10);
const CONNECTIONS = 50;
const ROUNDS = 2;
const TARGET_RATIO = 0.8; // issue 25 item 5
const CONFIG_DIR = resolve(import.meta.dirname ?? new URL('.', import.meta.url).pathname, '..', 'config');

const BODY = JSON.stringify({
  destinationName: 'bench/rest/topic',
  message: { payload: Buffer.from('{"temperature":21.5,"unit":"C"}').toString('base64'), contentType: 'application/json', qualityOfService: 0 },
});

/** CPU time of this thread (µs): process.threadCpuUsage (Node ≥ 23.9), else the event loop's active time. */
function threadCpu(): number {
  const p = process as unknown as { threadCpuUsage?: () => { user: number; system: number } };
  if (p.threadCpuUsage) {
    const u = p.threadCpuUsage();
    return u.user + u.system;
  }
  return performance.eventLoopUtilization().active * 1000;
}

/** A measured run and the server thread's CPU time per request in it (µs; this thread runs both servers). */
interface Measured {
  result: autocannon.Result;
  busyUsPerRequest: number;
}

async function load(url: string): Promise<Measured> {
  const opts = {
    url,
    method: 'POST' as const,
    headers: { 'content-type': 'application/json' },
    body: BODY,
    connections: CONNECTIONS,
    duration: DURATION_S,
    workers: 1,
  };
  // a short warm-up, then the measured run
  await autocannon({ ...opts, duration: 2 });
  const cpu0 = threadCpu();
  const result = await autocannon(opts);
  // CPU time of this thread per request does not depend on how much CPU the rest of the machine leaves it (a ratio
  // of request rates on a loaded 2-core machine also measures autocannon and the neighbours)
  return { result, busyUsPerRequest: (threadCpu() - cpu0) / Math.max(1, result.requests.total) };
}

/** Bytes allocated per request on this thread over a short run (sampling heap profiler, every 32 KiB on average). */
async function allocatedPerRequest(url: string): Promise<number> {
  const session = new Session();
  session.connect();
  try {
    await session.post('HeapProfiler.startSampling', { samplingInterval: 32768, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true });
    const result = await autocannon({ url, method: 'POST', headers: { 'content-type': 'application/json' }, body: BODY, connections: CONNECTIONS, duration: 3, workers: 1 });
    const { profile } = await session.post('HeapProfiler.stopSampling');
    let bytes = 0;
    const nodes = [profile.head];
    for (let n = nodes.pop(); n !== undefined; n = nodes.pop()) {
      bytes += n.selfSize;
      nodes.push(...n.children);
    }
    return bytes / Math.max(1, result.requests.total);
  } finally {
    session.disconnect();
  }
}

export async function run(): Promise<BenchReport> {
  const dataDir = await mkdtemp(join(tmpdir(), 'switchyard-bench-rest-'));
  const rt = await Runtime.create({
    configDir: CONFIG_DIR,
    env: {},
    stdoutLogs: false,
    overrides: {
      MessageDaemon: { dataDirectory: dataDir, logLevel: 'warn' },
      RestApi: { port: 0, hostnames: '127.0.0.1', enableAuthentication: false },
      AuthManager: { authenticationEnabled: false },
      NetworkManager: { data: [] },
    },
  });
  registerServices(rt);
  await rt.start();
  const app = await buildApp(rt);
  const bare = Fastify();
  bare.post('/publish', async () => ({ status: 'ok' }));
  try {
    const brokerUrl = await app.listen({ port: 0, host: '127.0.0.1' });
    const bareUrl = await bare.listen({ port: 0, host: '127.0.0.1' });

    // a sanity check: the broker accepts the body
    const check = await fetch(`${brokerUrl}/api/v1/messaging/publish`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: BODY });
    if (check.status !== 200) throw new Error(`publish answered ${check.status}: ${await check.text()}`);

    // alternating rounds (broker, bare, broker, bare), so a machine that speeds up or slows down during the run
    // (a shared 2-core VM does) does not favour one side
    const published0 = rt.engine!.stats().totalPublishedMessages;
    const brokers: Measured[] = [];
    const plains: Measured[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      brokers.push(await load(`${brokerUrl}/api/v1/messaging/publish`));
      plains.push(await load(`${bareUrl}/publish`));
    }
    const published = rt.engine!.stats().totalPublishedMessages - published0;
    const brokerBytes = await allocatedPerRequest(`${brokerUrl}/api/v1/messaging/publish`);
    const plainBytes = await allocatedPerRequest(`${bareUrl}/publish`);
    const mean = (rs: Measured[]) => rs.reduce((a, r) => a + r.result.requests.average, 0) / rs.length;
    const busy = (rs: Measured[]) => rs.reduce((a, r) => a + r.busyUsPerRequest, 0) / rs.length;
    const brokerRate = mean(brokers);
    const plainRate = mean(plains);
    const ratio = brokerRate / plainRate;
    const errors = [...brokers, ...plains].reduce((a, r) => a + r.result.errors + r.result.non2xx, 0);
    const broker = brokers[brokers.length - 1]!.result;
    const plain = plains[plains.length - 1]!.result;
    return {
      title: `REST publish vs bare Fastify (autocannon, ${CONNECTIONS} connections, ${ROUNDS} alternating rounds of ${DURATION_S} s each)`,
      rows: [
        ['broker POST /api/v1/messaging/publish req/s (mean of rounds)', fmt(brokerRate)],
        ['broker req/s per round', brokers.map((r) => fmt(r.result.requests.average)).join(' / ')],
        ['broker server-thread CPU µs per request (mean of rounds)', fmt(busy(brokers), 1)],
        ['broker bytes allocated per request (sampling heap profiler, 3 s)', fmt(brokerBytes)],
        ['broker latency p50 / p99 (ms, last round)', `${broker.latency.p50} / ${broker.latency.p99}`],
        ['messages published into the engine (measured runs + warm-ups)', fmt(published)],
        ['bare Fastify POST req/s (mean of rounds)', fmt(plainRate)],
        ['bare req/s per round', plains.map((r) => fmt(r.result.requests.average)).join(' / ')],
        ['bare server-thread CPU µs per request (mean of rounds)', fmt(busy(plains), 1)],
        ['ratio of CPU per request bare / broker', fmt(busy(plains) / busy(brokers), 2)],
        ['bare bytes allocated per request (sampling heap profiler, 3 s)', fmt(plainBytes)],
        ['bare latency p50 / p99 (ms, last round)', `${plain.latency.p50} / ${plain.latency.p99}`],
        ['errors + non-2xx', fmt(errors)],
        ['ratio broker / bare', fmt(ratio, 2)],
      ],
      target: `ratio >= ${TARGET_RATIO}`,
      met: ratio >= TARGET_RATIO && errors === 0,
      figures: { broker: brokerRate, bare: plainRate },
    };
  } finally {
    await bare.close();
    await app.close();
    await rt.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
}

if (isMain(import.meta.url)) printReport(await run());
