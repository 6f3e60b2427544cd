/**
 * Idle destinations (issue 11): N distinct topics (default 1 000 000, BENCH_TOPICS) are published once each with
 * nobody subscribed, then left idle. Each publish creates a topic in the engine (its `destination:<name>` actor is
 * virtual: publishing activates nothing); after DestinationManager.idleTimeout (BENCH_IDLE_MS, default 20 s) the
 * idle-topic sweep removes them, and after a sweep that removed many the broker runs one memory-reducing GC
 * (src/runtime/reclaim.ts). Reported: destination actors, engine destinations, RSS (and its anonymous part, i.e.
 * without the mapped node binary), V8 heap used and committed, external memory, before, at the peak (sampled every
 * 50 000 publishes and at the end of publishing) and after the idle period, the committed size of each heap space
 * that changed by 1 MiB or more, and RSS and heap used after one more full GC by the bench (live vs not collected
 * yet). "after idle" is what the broker does on its own: the bench forces no GC before it (it does one before the
 * "before" sample when run with --expose-gc), it only waits BENCH_SETTLE_MS (default 5 s) after the cleanup for freed
 * pages to be unmapped. BENCH_DESTINATIONS=off runs without the destinations service (what the engine alone holds);
 * BENCH_JSON=1 prints the figures as one JSON line (bench/virtual-actors.ts). Run with the Node flags of `npm start`:
 *   node --max-semi-space-size=4 --import tsx bench/idle-destinations.ts
 * A topic that expires while publishing is still going on is removed then, so the peak is the highest level seen.
 */
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { getHeapSpaceStatistics } from 'node:v8';
import { Runtime, type Service } from '../src/runtime/runtime.js';
import { registerServices } from '../src/compose.js';
import { reclaimMemory } from '../src/runtime/reclaim.js';
import { fmt, isMain, printReport, type BenchReport } from './report.js';

const TOPICS = Number(process.env.BENCH_TOPICS ?? 1_000_000);
const IDLE_MS = Number(process.env.BENCH_IDLE_MS ?? 20_000);
const SETTLE_MS = Number(process.env.BENCH_SETTLE_MS ?? 5_000);
/** BENCH_DESTINATIONS=off: the same run without the destinations service (what the engine alone holds). */
const WITH_DESTINATIONS = process.env.BENCH_DESTINATIONS !== 'off';
const CONFIG_DIR = resolve(import.meta.dirname ?? new URL('.', import.meta.url).pathname, '..', 'config');

const mib = (n: number) => `${fmt(n / 1048576, 1)} MiB`;

function gc(): void {
  const g = (globalThis as { gc?: () => void }).gc;
  if (g) {
    g();
    g();
  }
}

interface Sample {
  actors: number;
  destinations: number;
  rss: number;
  rssAnon: number;
  heap: number;
  heapTotal: number;
  /** Outside V8's heap: `external` of process.memoryUsage (ArrayBuffers and native objects that report to V8). */
  external: number;
  /** Committed bytes per V8 heap space (old_space, new_space, ...). */
  spaces: Record<string, number>;
}

/** RssAnon of /proc/self/status (Linux), bytes; NaN elsewhere. */
function rssAnon(): number {
  try {
    const m = /RssAnon:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'));
    return m ? Number(m[1]) * 1024 : NaN;
  } catch {
    return NaN;
  }
}

function sample(rt: Runtime): Sample {
  const m = process.memoryUsage();
  const spaces: Record<string, number> = {};
  for (const s of getHeapSpaceStatistics()) if (s.space_size > 0) spaces[s.space_name] = s.space_size;
  return { actors: rt.childActors('destinations').length, destinations: rt.destinationCount(), rss: m.rss, rssAnon: rssAnon(), heap: m.heapUsed, heapTotal: m.heapTotal, external: m.external, spaces };
}

export async function run(): Promise<BenchReport> {
  const dir = await mkdtemp(join(tmpdir(), 'switchyard-bench-idle-'));
  const rt = await Runtime.create({
    configDir: CONFIG_DIR,
    stdoutLogs: false,
    overrides: {
      MessageDaemon: { dataDirectory: dir, logLevel: 'warn', enableSystemTopics: false },
      NetworkManager: { data: [] },
      RestApi: { port: 0, hostnames: '127.0.0.1' },
      DestinationManager: { idleTimeout: IDLE_MS },
    },
  } as never);
  const use = rt.use.bind(rt);
  registerServices(Object.assign(Object.create(rt) as Runtime, { use: (s: Service) => (WITH_DESTINATIONS || s.name !== 'destinations' ? use(s) : undefined) }));
  await rt.start();
  try {
    const engine = rt.engine!;
    gc();
    const before = sample(rt);
    const peak: Sample = { ...before, spaces: { ...before.spaces } };
    const note = (s: Sample) => {
      peak.actors = Math.max(peak.actors, s.actors);
      peak.destinations = Math.max(peak.destinations, s.destinations);
      peak.rss = Math.max(peak.rss, s.rss);
      peak.heap = Math.max(peak.heap, s.heap);
      peak.rssAnon = Math.max(peak.rssAnon, s.rssAnon);
      peak.heapTotal = Math.max(peak.heapTotal, s.heapTotal);
      peak.external = Math.max(peak.external, s.external);
    };
    const payload = Buffer.from('x');
    const t0 = Date.now();
    for (let i = 0; i < TOPICS; i++) {
      void engine.publish(`bench/idle/${i}`, { payload });
      if (i % 10_000 === 9_999) await new Promise((r) => setImmediate(r));
      if (i % 50_000 === 49_999) note(sample(rt));
    }
    const publishMs = Date.now() - t0;
    note(sample(rt));
    const t1 = Date.now();
    const deadline = t1 + IDLE_MS * 3 + 120_000;
    while (Date.now() < deadline) {
      const s = sample(rt);
      if (s.actors <= before.actors && s.destinations <= before.destinations) break;
      await new Promise((r) => setTimeout(r, 1000));
    }
    const cleanupMs = Date.now() - t1;
    await new Promise((r) => setTimeout(r, SETTLE_MS)); // the broker's reclaim runs 1 s after the sweep
    const after = sample(rt);
    // not part of what the broker does: one memory-reducing GC here tells what is live from what is garbage not
    // collected yet (heap used) and what is still held outside the heap
    reclaimMemory();
    await new Promise((r) => setTimeout(r, 500));
    const live = sample(rt);
    const row = (label: string, s: Sample): Array<[string, string]> => [
      [`${label}: destination actors`, fmt(s.actors)],
      [`${label}: engine destinations`, fmt(s.destinations)],
      [`${label}: RSS`, mib(s.rss)],
      [`${label}: RSS anonymous`, mib(s.rssAnon)],
      [`${label}: V8 heap used / committed`, `${mib(s.heap)} / ${mib(s.heapTotal)}`],
      [`${label}: external (ArrayBuffers, native)`, mib(s.external)],
    ];
    const spaces = Object.keys(after.spaces).filter((k) => Math.abs((after.spaces[k] ?? 0) - (before.spaces[k] ?? 0)) >= 1048576);
    return {
      title: `Idle destinations: ${fmt(TOPICS)} distinct topics published once, then idle (idleTimeout ${fmt(IDLE_MS)} ms, destinations service ${WITH_DESTINATIONS ? 'on' : 'off'}${(globalThis as { gc?: unknown }).gc ? '' : ', no --expose-gc: no GC before the first sample'})`,
      rows: [
        ...row('before', before),
        ...row('peak', peak),
        ...row('after idle', after),
        ['after idle + a full GC by the bench: RSS / V8 heap used', `${mib(live.rss)} / ${mib(live.heap)}`],
        ...spaces.map((k): [string, string] => [`committed ${k}: before / after idle`, `${mib(before.spaces[k] ?? 0)} / ${mib(after.spaces[k] ?? 0)}`]),
        ['publish time', `${fmt(publishMs)} ms (${fmt((TOPICS / publishMs) * 1000)} topics/s)`],
        ['time from last publish to cleanup', `${fmt(cleanupMs)} ms`],
        ['node flags', process.execArgv.filter((a) => a.startsWith('--') && a !== '--import').join(' ') || '(none)'],
      ],
      target: 'actor count back to the start after the idle period; RSS back near the start',
      met: after.actors <= before.actors && after.destinations <= before.destinations,
      figures: { rssBefore: before.rss, rssPeak: peak.rss, rssAfter: after.rss, heapAfter: after.heap, heapLive: live.heap, rssLive: live.rss, heapTotalAfter: after.heapTotal, publishMs, cleanupMs },
    };
  } finally {
    await rt.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

if (isMain(import.meta.url)) {
  const report = await run();
  // BENCH_JSON=1: the figures as one JSON line (bench/virtual-actors.ts runs this file in child processes)
  if (process.env.BENCH_JSON === '1') console.log(JSON.stringify(report.figures));
  else printReport(report);
}
