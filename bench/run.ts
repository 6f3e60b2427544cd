/**
 * `npm run bench`: every benchmark in sequence, then one summary table of Switchyard against its peers
 * (bench/summary.ts). Timing lives here, never in tests. A bench module exports `run(): Promise<BenchReport>` (see
 * report.ts); bench/mqtt and bench/federation print their own comparison tables and return their figures.
 * The load average at the start is printed with the summary (a busy machine moves every figure).
 */
import { loadavg } from 'node:os';
import { printReport, type BenchReport } from './report.js';
import { run as engineRouting } from './engine-routing.js';
import { run as persistedQueue } from './persisted-queue.js';
import { run as restPublish } from './rest-publish.js';
import { run as aclFanout } from './acl-fanout.js';
import { run as schemasModels } from './schemas-models.js';
import { run as virtualActors } from './virtual-actors.js';
import { run as consoleBench } from './console.js';
import { run as sseFanout } from './sse-fanout.js';
import { runMqttBench } from './mqtt/run.js';
import { runFootprintBench } from './footprint.js';
import { runFederationBench } from './federation/run.js';
import { runClusterBench } from './cluster/run.js';
import { formatSummary, type SummaryInput } from './summary.js';

const load = loadavg().map((x) => x.toFixed(2)).join(' ');
const summary: SummaryInput = {};
const reports: Array<[string, () => Promise<BenchReport>]> = [
  ['engine-routing', engineRouting],
  ['persisted-queue', persistedQueue],
  ['rest-publish', restPublish],
  ['sse-fanout', sseFanout],
  ['acl-fanout', aclFanout],
  ['schemas-models', schemasModels],
  ['virtual-actors', virtualActors],
  ['console', consoleBench],
];

/** A bench that fails is reported and the others still run (the summary shows '—' for what it would have given). */
async function attempt<T>(name: string, f: () => Promise<T>): Promise<T | undefined> {
  process.stdout.write(`\n=== bench: ${name} ===\n`);
  try {
    return await f();
  } catch (err) {
    process.stdout.write(`\nbench ${name} FAILED: ${(err as Error)?.stack ?? String(err)}\n`);
    process.exitCode = 1;
    return undefined;
  }
}

for (const [name, run] of reports) {
  const r = await attempt(name, run);
  if (r === undefined) continue;
  printReport(r);
  if (name === 'rest-publish' && r.figures) summary.rest = { broker: r.figures.broker!, bare: r.figures.bare! };
  if (name === 'sse-fanout' && r.figures) summary.sse = { deliveries: r.figures.deliveries!, offered: r.figures.offered! };
}
summary.mqtt = await attempt('mqtt', runMqttBench);
summary.federation = await attempt('federation', runFederationBench);
summary.cluster = await attempt('cluster', runClusterBench);
await attempt('footprint', runFootprintBench);
process.stdout.write(`\n=== summary (load average at start: ${load}; node ${process.version}) ===\n`);
process.stdout.write(formatSummary(summary));
