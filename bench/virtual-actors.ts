/**
 * Virtual destination actors (issue 22 item 1), side by side in one run:
 * - new-topic publish rate: BENCH_NEW_TOPICS (default 50 000) distinct topics published once each, nobody
 *   subscribed, on a broker without the destinations service and on one with it (after one unmeasured warm-up
 *   round of each, best of BENCH_ROUNDS (5) rounds each, the order alternating; target: with ≥ 0.9 × without);
 * - heap per idle topic after a full GC, with and without the service (target: the service adds ≤ 200 bytes over
 *   the engine's own);
 * - at BENCH_TOPICS (default 100 000) topics: `GET /api/v1/server/status` and a page of 50 destination actors
 *   (`GET /api/v1/server/actors?kind=destination&limit=50&offset=50000`), median of 21 requests through
 *   `app.inject` (target: ≤ 2 ms each).
 * - BENCH_IDLE_TOPICS (default 1 000 000) topics published once and left idle (bench/idle-destinations.ts, idleTimeout
 *   20 s, in a child process with the Node flags and malloc environment of `npm start`), with and without the destinations service: RSS
 *   fresh and after idle (target: within 10 % of fresh), heap used after idle and after a full GC.
 * Each broker is a full in-process runtime (every service, authentication off, no MQTT endpoint, system topics
 * off, idle sweep off) on a fresh data directory. Run: `npx tsx bench/virtual-actors.ts` (or `npm run bench`).
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { buildApp } from '../src/api/app.js';
import { collectGarbage } from '../src/runtime/reclaim.js';
import { Runtime, type Service } from '../src/runtime/runtime.js';
import { registerServices } from '../src/compose.js';
import { fmt, isMain, printReport, type BenchReport } from './report.js';

const NEW_TOPICS = Number(process.env.BENCH_NEW_TOPICS ?? 50_000);
const TOPICS = Number(process.env.BENCH_TOPICS ?? 100_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
/** Topics of the idle run (bench/idle-destinations.ts in a child process each, with and without the service); 0 skips it. */
const IDLE_TOPICS = Number(process.env.BENCH_IDLE_TOPICS ?? 1_000_000);
const BENCH_DIR = resolve(import.meta.dirname ?? new URL('.', import.meta.url).pathname);
const CONFIG_DIR = resolve(import.meta.dirname ?? new URL('.', import.meta.url).pathname, '..', 'config');

async function broker(withDestinations: boolean): Promise<{ rt: Runtime; close(): Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'switchyard-bench-virtual-'));
  const rt = await Runtime.create({
    configDir: CONFIG_DIR,
    stdoutLogs: false,
    overrides: {
      MessageDaemon: { dataDirectory: dir, logLevel: 'warn', enableSystemTopics: false },
      NetworkManager: { data: [] },
      RestApi: { port: 0, hostnames: '127.0.0.1' },
      AuthManager: { authenticationEnabled: false },
      DestinationManager: { idleTimeout: 0 },
    },
  } as never);
  // every service, the destinations service left out for the comparison
  const use = rt.use.bind(rt);
  registerServices(Object.assign(Object.create(rt) as Runtime, { use: (s: Service) => (withDestinations || s.name !== 'destinations' ? use(s) : undefined) }));
  await rt.start();
  return {
    rt,
    close: async () => {
      await rt.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

function heap(): number {
  collectGarbage();
  collectGarbage();
  return process.memoryUsage().heapUsed;
}

/** Publishes `n` new topics; returns topics/s and heap bytes per topic after a full GC. */
async function newTopics(rt: Runtime, prefix: string, n: number): Promise<{ rate: number; perTopic: number }> {
  const engine = rt.engine!;
  const payload = Buffer.from('x');
  const h0 = heap();
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) {
    void engine.publish(`${prefix}/${i}`, { payload });
    if (i % 10_000 === 9_999) await new Promise((r) => setImmediate(r));
  }
  await new Promise((r) => setImmediate(r));
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  const h1 = heap();
  return { rate: n / s, perTopic: (h1 - h0) / n };
}

async function median(fn: () => Promise<void>, n = 21): Promise<number> {
  const times: number[] = [];
  await fn(); // warm
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    await fn();
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(n / 2)]!;
}

interface IdleFigures {
  rssBefore: number;
  rssAfter: number;
  rssLive: number;
  heapAfter: number;
  heapLive: number;
}

/**
 * The settings of `npm start` (package.json scripts.start: `exec env K=V ... node <flags> <entry>`): the young
 * generation's size and the glibc malloc variables, which decide how much freed memory goes back to the system.
 */
function npmStartSettings(): { env: Record<string, string>; flags: string[] } {
  const start = String((JSON.parse(readFileSync(join(BENCH_DIR, '..', 'package.json'), 'utf8')) as { scripts: { start: string } }).scripts.start);
  const m = /exec (?:env ((?:\w+=\S+ )+))?node((?: --\S+)*) /.exec(start);
  if (!m) throw new Error(`package.json scripts.start is not "exec env K=V ... node <flags> <entry>": ${start}`);
  const env = Object.fromEntries((m[1] ?? '').split(' ').filter(Boolean).map((kv) => kv.split('=', 2) as [string, string]));
  return { env, flags: (m[2] ?? '').split(' ').filter(Boolean) };
}

/** bench/idle-destinations.ts in a fresh process with the Node flags and environment of `npm start`, the service on or off. */
function idleRun(destinations: 'on' | 'off'): Promise<IdleFigures> {
  const start = npmStartSettings();
  return new Promise((done, fail) => {
    execFile(
      process.execPath,
      [...start.flags, '--import', 'tsx', join(BENCH_DIR, 'idle-destinations.ts')],
      { env: { ...process.env, ...start.env, BENCH_TOPICS: String(IDLE_TOPICS), BENCH_DESTINATIONS: destinations, BENCH_JSON: '1' }, maxBuffer: 1 << 20 },
      (err, stdout) => {
        if (err) return fail(err);
        const last = stdout.trim().split('\n').pop() ?? '';
        done(JSON.parse(last) as IdleFigures);
      },
    );
  });
}

export async function run(): Promise<BenchReport> {
  const best = { without: { rate: 0, perTopic: Infinity }, with: { rate: 0, perTopic: Infinity } };
  for (let round = -1; round < ROUNDS; round++) {
    for (const side of round % 2 === 0 ? (['with', 'without'] as const) : (['without', 'with'] as const)) {
      const b = await broker(side === 'with');
      try {
        const r = await newTopics(b.rt, `bench/new/${round}`, NEW_TOPICS);
        if (round < 0) continue; // warm-up: JIT and the first runtime's one-off costs
        best[side].rate = Math.max(best[side].rate, r.rate);
        best[side].perTopic = Math.min(best[side].perTopic, r.perTopic);
      } finally {
        await b.close();
      }
    }
  }

  const b = await broker(true);
  let statusMs = 0;
  let pageMs = 0;
  let firstPageMs = 0;
  let total = 0;
  let activated = 0;
  try {
    await newTopics(b.rt, 'bench/many', TOPICS);
    const app = await buildApp(b.rt);
    try {
      const get = async (url: string) => {
        const r = await app.inject(url);
        if (r.statusCode !== 200) throw new Error(`${url}: ${r.statusCode} ${r.body}`);
        return r;
      };
      statusMs = await median(async () => void (await get('/api/v1/server/status')));
      pageMs = await median(async () => void (await get(`/api/v1/server/actors?kind=destination&limit=50&offset=${Math.floor(TOPICS / 2)}`)));
      firstPageMs = await median(async () => void (await get('/api/v1/server/actors?limit=50')));
      total = (await get('/api/v1/server/actors?kind=destination&limit=1')).json().total;
      activated = b.rt.childActors('destinations').length;
    } finally {
      await app.close();
    }
  } finally {
    await b.close();
  }

  const idle = IDLE_TOPICS > 0 ? { with: await idleRun('on'), without: await idleRun('off') } : undefined;
  const mib = (n: number) => fmt(n / 1048576, 1);
  const idleRows = (side: 'with' | 'without'): Array<[string, string]> => {
    const f = idle![side];
    return [
      [`${fmt(IDLE_TOPICS)} idle topics ${side} the service: RSS fresh / after idle`, `${mib(f.rssBefore)} / ${mib(f.rssAfter)} MiB (${fmt(f.rssAfter / f.rssBefore, 2)}x)`],
      [`  ${side} the service: heap used after idle / after a full GC`, `${mib(f.heapAfter)} / ${mib(f.heapLive)} MiB`],
    ];
  };
  const idleMet = idle === undefined || idle.with.rssAfter <= idle.with.rssBefore * 1.1;
  const ratio = best.with.rate / best.without.rate;
  const overhead = Math.round(best.with.perTopic - best.without.perTopic) || 0; // never -0
  return {
    title: `Virtual destination actors: ${fmt(NEW_TOPICS)} new topics (best of ${ROUNDS}), then ${fmt(TOPICS)} topics for the views`,
    rows: [
      ['new topics/s without the destinations service', fmt(best.without.rate)],
      ['new topics/s with the destinations service', `${fmt(best.with.rate)} (${fmt(ratio, 2)}x)`],
      ['heap per idle topic without the service (engine)', `${fmt(best.without.perTopic)} B`],
      ['heap per idle topic with the service', `${fmt(best.with.perTopic)} B (${overhead >= 0 ? '+' : ''}${fmt(overhead)} B)`],
      [`destination actors listed / activated at ${fmt(TOPICS)}`, `${fmt(total)} / ${fmt(activated)}`],
      [`GET /api/v1/server/status at ${fmt(TOPICS)} topics (median)`, `${fmt(statusMs, 2)} ms`],
      [`GET /api/v1/server/actors?kind=destination&limit=50&offset=${Math.floor(TOPICS / 2)} (median)`, `${fmt(pageMs, 2)} ms`],
      ['GET /api/v1/server/actors?limit=50 (median)', `${fmt(firstPageMs, 2)} ms`],
      ...(idle !== undefined ? [...idleRows('with'), ...idleRows('without')] : []),
    ],
    target: `rate with ≥ 0.9x without; ≤ 200 B per idle topic over the engine; status and a page ≤ 2 ms${idle !== undefined ? `; ${fmt(IDLE_TOPICS)} idle topics: RSS after idle within 10 % of fresh` : ''}`,
    met: ratio >= 0.9 && overhead <= 200 && statusMs <= 2 && pageMs <= 2 && idleMet,
  };
}

if (isMain(import.meta.url)) printReport(await run());
