/**
 * `npm run bench`: every benchmark in sequence. Timing lives here, never in tests. A bench module exports
 * `run(): Promise<BenchReport>` (see report.ts); bench/mqtt prints its own comparison table.
 */
import { printReport, type BenchReport } from './report.js';
import { run as engineRouting } from './engine-routing.js';
import { run as persistedQueue } from './persisted-queue.js';
import { run as restPublish } from './rest-publish.js';
import { run as aclFanout } from './acl-fanout.js';
import { run as schemasModels } from './schemas-models.js';
import { run as virtualActors } from './virtual-actors.js';
import { run as consoleBench } from './console.js';
import { runMqttBench } from './mqtt/run.js';
import { runFootprintBench } from './footprint.js';
import { runFederationBench } from './federation/run.js';

const reports: Array<[string, () => Promise<BenchReport>]> = [
  ['engine-routing', engineRouting],
  ['persisted-queue', persistedQueue],
  ['rest-publish', restPublish],
  ['acl-fanout', aclFanout],
  ['schemas-models', schemasModels],
  ['virtual-actors', virtualActors],
  ['console', consoleBench],
];

for (const [name, run] of reports) {
  process.stdout.write(`\n=== bench: ${name} ===\n`);
  printReport(await run());
}
process.stdout.write('\n=== bench: mqtt ===\n');
await runMqttBench();
process.stdout.write('\n=== bench: federation ===\n');
await runFederationBench();
process.stdout.write('\n=== bench: footprint ===\n');
await runFootprintBench();
