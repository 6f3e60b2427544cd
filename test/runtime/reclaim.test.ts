import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { getHeapSpaceStatistics, getHeapStatistics } from 'node:v8';
import { reclaimMemory, startIdleReclaim } from '../../src/runtime/reclaim.js';

const MiB = 1048576;

/** Garbage of about `mib` MiB in small objects (old space once it survives a few scavenges). */
function burst(mib: number): number {
  let keep: Array<{ i: number; s: string }> = [];
  for (let i = 0; i < mib * 12_000; i++) keep.push({ i, s: `x${i}` });
  const n = keep.length;
  keep = [];
  return n;
}

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

  test('runtime - once idle after a burst, the committed heap goes back down (and only once)', async () => {
    const reclaims: Array<[number, number]> = [];
    const stop = startIdleReclaim({ intervalMs: 100, youngDelayMs: 60_000, onReclaim: (before, after) => reclaims.push([before, after]) });
    try {
      burst(60);
      const grown = getHeapStatistics().total_heap_size;
      const deadline = Date.now() + 20_000;
      while (reclaims.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      assert.equal(reclaims.length, 1, 'one reclaim after the burst');
      const [before, after] = reclaims[0]!;
      assert.ok(before >= grown - 8 * MiB, `it saw the grown heap (${(before / MiB).toFixed(1)} MiB)`);
      assert.ok(after < before - 20 * MiB, `committed heap ${(before / MiB).toFixed(1)} -> ${(after / MiB).toFixed(1)} MiB`);
      await new Promise((r) => setTimeout(r, 600));
      assert.equal(reclaims.length, 1, 'nothing more while the heap does not grow again');
    } finally {
      stop();
    }
  });

  test('runtime - once quiet for a few seconds, the young generation is given back', async () => {
    const newSpace = () => getHeapSpaceStatistics().find((s) => s.space_name === 'new_space')!.space_size;
    const shrinks: Array<[number, number]> = [];
    const stop = startIdleReclaim({ intervalMs: 200, onShrinkYoung: (before, after) => shrinks.push([before, after]) });
    try {
      // short-lived garbage only: the scavenges grow the semi-spaces, nothing much reaches the old space
      let sink = 0;
      for (let round = 0; round < 200; round++) {
        const young = Array.from({ length: 20_000 }, (_, i) => ({ i, s: `y${i}` }));
        sink += young.length;
      }
      assert.ok(sink > 0);
      const grown = newSpace();
      assert.ok(grown >= 4 * MiB, `the new space grew (${(grown / MiB).toFixed(1)} MiB)`);
      const deadline = Date.now() + 30_000;
      while (shrinks.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      assert.equal(shrinks.length, 1, 'the young generation was shrunk once');
      const [before, after] = shrinks[0]!;
      assert.ok(after <= before / 2, `new space ${(before / MiB).toFixed(1)} -> ${(after / MiB).toFixed(1)} MiB`);
      assert.ok(newSpace() <= after, 'and it stays small while idle');
    } finally {
      stop();
    }
  });
});
