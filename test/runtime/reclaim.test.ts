import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { getHeapSpaceStatistics, getHeapStatistics } from 'node:v8';
import { reclaimMemory, startIdleReclaim } from '../../src/runtime/reclaim.js';
import { MiB, burst } from './heap-burst.js';

describe('runtime - idle reclaim', () => {
  test('runtime - reclaimMemory collects without --expose-gc and leaves no gc global behind', () => {
    assert.equal(typeof (globalThis as { gc?: unknown }).gc, 'undefined', 'this test runs without --expose-gc');
    assert.equal(reclaimMemory(), true);
    assert.equal(typeof (globalThis as { gc?: unknown }).gc, 'undefined');
  });

  test('runtime - reclaimMemory gives the emptied pages back to the OS (RSS), not only to V8', async () => {
    reclaimMemory();
    const fresh = process.memoryUsage().rss;
    // about 200 MiB of live small objects (old space), then dropped: V8 keeps emptied pages pooled, resident, after a
    // plain full GC (measured: RSS stayed about 250 MiB up); the memory-reducing one releases them
    let keep: Array<{ i: number; s: string }> | undefined = [];
    for (let i = 0; i < 2_400_000; i++) keep.push({ i, s: `x${i}` });
    const grown = process.memoryUsage().rss;
    assert.ok(grown > fresh + 100 * MiB, `the burst grew RSS (${(fresh / MiB).toFixed(0)} -> ${(grown / MiB).toFixed(0)} MiB)`);
    keep = undefined;
    assert.equal(reclaimMemory(), true);
    await new Promise((r) => setTimeout(r, 200));
    const after = process.memoryUsage().rss;
    assert.ok(after < fresh + 60 * MiB, `RSS ${(fresh / MiB).toFixed(0)} MiB fresh, ${(grown / MiB).toFixed(0)} MiB grown, ${(after / MiB).toFixed(0)} MiB after reclaimMemory`);
  });
});
