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

for (const [name, run] of reports) {
  process.stdout.write(`\n=== bench: ${name} ===\n`);
  const r = await run();
  printReport(r);
  if (name === 'rest-publish' && r.figures) summary.rest = { broker: r.figures.broker!, bare: r.figures.bare! };
  if (name === 'sse-fanout' && r.figures) summary.sse = { deliveries: r.figures.deliveries!, offered: r.figures.offered! };
}
process.stdout.write('\n=== bench: mqtt ===\n');
summary.mqtt = await runMqttBench();
process.stdout.write('\n=== bench: federation ===\n');
summary.federation = await runFederationBench();
process.stdout.write('\n=== bench: footprint ===\n');
await runFootprintBench();
process.stdout.write(`\n=== summary (load average at start: ${load}; node ${process.version}) ===\n`);
process.stdout.write(formatSummary(summary));
