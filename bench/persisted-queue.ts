/**
 * Persisted queue publish throughput with group commit against a real classic-level store in a temporary
 * directory. 1 000 concurrent publishers each publish 200 messages (128-byte payloads) to one queue, awaiting
 * durability (`await engine.publish(...)` resolves once the message is in the store) before the next one; all
 * writes in flight meanwhile share one `store.batch`. Afterwards the store is reopened and the queue recovered to
 * check that every message is there.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ClassicLevel } from 'classic-level';
import { Engine, levelEngineStore } from '../src/engine/index.js';
import { fmt, isMain, printReport, type BenchReport } from './report.js';

const PUBLISHERS = 1000;
const PER_PUBLISHER = 200;
const TARGET = 50_000;

async function openDb(dir: string): Promise<ClassicLevel<string, Buffer>> {
  const db = new ClassicLevel<string, Buffer>(dir, { valueEncoding: 'buffer' });
  await db.open();
  return db;
}

export async function run(): Promise<BenchReport> {
  const dir = await mkdtemp(join(tmpdir(), 'switchyard-bench-queue-'));
  try {
    let db = await openDb(dir);
    let engine = new Engine({ store: levelEngineStore(db), queueHighWater: Number.MAX_SAFE_INTEGER });
    await engine.recover();
    const payload = Buffer.alloc(128, 7);
    // warm-up (JIT, level's first compaction decisions), not counted
    await Promise.all(Array.from({ length: 5000 }, () => engine.publish('queue/warmup', { payload })));
    const before = engine.stats();

    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: PUBLISHERS }, async () => {
        for (let i = 0; i < PER_PUBLISHER; i++) await engine.publish('queue/bench', { payload, qos: 1 });
      }),
    );
    const secs = (performance.now() - t0) / 1000;
    const after = engine.stats();
    const total = PUBLISHERS * PER_PUBLISHER;
    const batches = after.storeBatches - before.storeBatches;
    await engine.close();
    await db.close();

    // durability check: every message is back after reopening
    db = await openDb(dir);
    engine = new Engine({ store: levelEngineStore(db), queueHighWater: Number.MAX_SAFE_INTEGER });
    const recovered = await engine.recover();
    const inQueue = engine.destinationDto('queue/bench').storedMessages;
    await engine.close();
    await db.close();

    const rate = total / secs;
    return {
      title: 'persisted queue publish (group commit, classic-level, 1 000 concurrent publishers awaiting durability)',
      rows: [
        ['messages', fmt(total)],
        ['payload (bytes)', '128'],
        ['elapsed (s)', fmt(secs, 2)],
        ['persisted messages/s', fmt(rate)],
        ['store batches', fmt(batches)],
        ['messages per batch (mean)', fmt(total / Math.max(1, batches), 1)],
        ['recovered after reopen', `${fmt(inQueue)} of ${fmt(total)} (${fmt(recovered.queued)} queued in all)`],
      ],
      target: `>= ${fmt(TARGET)} persisted messages/s`,
      met: rate >= TARGET && inQueue === total,
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

if (isMain(import.meta.url)) printReport(await run());
