/**
 * `npm run bench`: every benchmark in sequence, then one summary table of Switchyard against its peers
 * (bench/summary.ts). Timing lives here, never in tests. A bench module exports `run(): Promise<BenchReport>` (see
 * report.ts); bench/mqtt and bench/federation print their own comparison tables and return their figures.
 * The load average at the start is printed with the summary (a busy machine moves every figure).
 *
 * Each section runs in a process of its own (`tsx bench/run.ts --section <name> --out <file>`): in one process the
 * in-process benches (engine routing, virtual actors' million topics) left a heap of about 1 GiB behind, whose
 * collections then ran inside the load generator of the sections after them and showed up as their latency (the
 * first broker measured, Switchyard, got p99 0.79-0.87 ms at 5 000 msg/s there against 0.14-0.28 ms with
 * bench/mqtt alone). `BENCH_SECTIONS=mqtt,federation` runs some sections only.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { printReport, type BenchReport } from './report.js';
import { formatSummary, type SummaryInput } from './summary.js';

/** The sections in the order they run; each loads its module only in its own process. */
const SECTIONS: Record<string, () => Promise<unknown>> = {
  'engine-routing': async () => (await import('./engine-routing.js')).run(),
  'persisted-queue': async () => (await import('./persisted-queue.js')).run(),
  'rest-publish': async () => (await import('./rest-publish.js')).run(),
  'sse-fanout': async () => (await import('./sse-fanout.js')).run(),
  'acl-fanout': async () => (await import('./acl-fanout.js')).run(),
  'schemas-models': async () => (await import('./schemas-models.js')).run(),
  'virtual-actors': async () => (await import('./virtual-actors.js')).run(),
  console: async () => (await import('./console.js')).run(),
  mqtt: async () => (await import('./mqtt/run.js')).runMqttBench(),
  federation: async () => (await import('./federation/run.js')).runFederationBench(),
  cluster: async () => (await import('./cluster/run.js')).runClusterBench(),
  footprint: async () => (await import('./footprint.js')).runFootprintBench(),
};
/** Sections whose result is a BenchReport to print (the others print their own tables). */
const REPORTS = new Set(['engine-routing', 'persisted-queue', 'rest-publish', 'sse-fanout', 'acl-fanout', 'schemas-models', 'virtual-actors', 'console']);

/** JSON keeps NaN (a scenario not run) and ±Infinity as strings, so the summary still shows '—' for them. */
const encode = (v: unknown) => JSON.stringify(v, (_k, x) => (typeof x === 'number' && !Number.isFinite(x) ? `__num:${x}` : x));
const decode = (s: string): unknown => JSON.parse(s, (_k, x) => (typeof x === 'string' && x.startsWith('__num:') ? Number(x.slice(6)) : x));

async function child(name: string, out: string): Promise<void> {
  const v = await SECTIONS[name]!();
  writeFileSync(out, encode(v));
}

/** Runs one section in a fresh process; its output goes straight to ours. A section that fails yields undefined. */
function section(name: string, dir: string): Promise<unknown> {
  const out = join(dir, `${name}.json`);
  process.stdout.write(`\n=== bench: ${name} ===\n`);
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url), '--section', name, '--out', out], { stdio: 'inherit' });
    p.on('exit', (code, signal) => {
      if (code === 0) {
        resolve(decode(readFileSync(out, 'utf8')));
        return;
      }
      process.stdout.write(`\nbench ${name} FAILED (exit ${code ?? signal})\n`);
      process.exitCode = 1;
      resolve(undefined);
    });
  });
}

async function main(): Promise<void> {
  const load = loadavg().map((x) => x.toFixed(2)).join(' ');
  const want = process.env.BENCH_SECTIONS?.split(',').map((x) => x.trim()).filter(Boolean);
  const unknownNames = want?.filter((x) => !(x in SECTIONS)) ?? [];
  if (unknownNames.length) throw new Error(`BENCH_SECTIONS: no section ${unknownNames.join(', ')} (sections: ${Object.keys(SECTIONS).join(', ')})`);
  const dir = mkdtempSync(join(tmpdir(), 'switchyard-bench-run-'));
  const summary: SummaryInput = {};
  try {
    for (const name of Object.keys(SECTIONS)) {
      if (want && !want.includes(name)) continue;
      const r = await section(name, dir);
      if (r === undefined) continue;
      if (REPORTS.has(name)) {
        const report = r as BenchReport;
        printReport(report);
        if (name === 'rest-publish' && report.figures) summary.rest = { broker: report.figures.broker!, bare: report.figures.bare! };
        if (name === 'sse-fanout' && report.figures) summary.sse = { deliveries: report.figures.deliveries!, offered: report.figures.offered! };
      }
      if (name === 'mqtt') summary.mqtt = r as SummaryInput['mqtt'];
      if (name === 'federation') summary.federation = r as SummaryInput['federation'];
      if (name === 'cluster') summary.cluster = r as SummaryInput['cluster'];
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  process.stdout.write(`\n=== summary (load average at start: ${load}; node ${process.version}; each section in its own process) ===\n`);
  process.stdout.write(formatSummary(summary));
}

const at = process.argv.indexOf('--section');
if (at >= 0) {
  const name = process.argv[at + 1]!;
  const out = process.argv[process.argv.indexOf('--out') + 1]!;
  if (!(name in SECTIONS)) throw new Error(`no bench section ${name}`);
  await child(name, out);
  // a section's brokers and clients are stopped by the section itself; what is left (timers of a library) must not
  // keep the child alive
  process.exit(0);
} else {
  await main();
}
