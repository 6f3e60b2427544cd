import assert from 'node:assert/strict';
import { test } from 'node:test';
import { getHeapSpaceStatistics, getHeapStatistics } from 'node:v8';
import { startIdleReclaim } from '../../src/runtime/reclaim.js';
import { MiB, burst } from './heap-burst.js';

/**
 * The idle reclaim's timer (src/runtime/reclaim.ts) in a process of its own: V8's heap sizing depends on the GCs
 * that ran before, so the reclaim tests that call reclaimMemory directly (test/runtime/reclaim.test.ts) would change
 * what this one sees.
 */
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

