import assert from 'node:assert/strict';
import { test } from 'node:test';
import { getHeapStatistics } from 'node:v8';
import { startIdleReclaim } from '../../src/runtime/reclaim.js';
import { MiB, burst, heapTrace } from './heap-burst.js';

/**
 * The idle reclaim's timer (src/runtime/reclaim.ts) in a process of its own: V8's heap sizing depends on the GCs
 * that ran before, so the reclaim tests that call reclaimMemory directly (test/runtime/reclaim.test.ts) would change
 * what this one sees.
 *
 * On a loaded machine the burst itself can take seconds, and V8 may finish a collection of its own after it that
 * gives the pages back before the process has been idle long enough for ours: that round shows nothing about the
 * reclaim, and the burst is made again (at most 3 rounds). A failure prints the heap, the event loop and the main
 * thread's CPU time at every 100 ms.
 */
test('runtime - once idle after a burst, the committed heap goes back down (and only once)', async () => {
  const reclaims: Array<[number, number]> = [];
  const trace = heapTrace();
  const stop = startIdleReclaim({ intervalMs: 100, youngDelayMs: 60_000, onReclaim: (before, after) => reclaims.push([before, after]) });
  try {
    for (let round = 1; ; round++) {
      reclaims.length = 0;
      burst(60);
      const grown = getHeapStatistics().total_heap_size;
      trace.mark(`round ${round}: burst done, committed ${(grown / MiB).toFixed(1)} MiB`);
      const deadline = Date.now() + 20_000;
      while (reclaims.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      if (reclaims.length === 0 && getHeapStatistics().total_heap_size < grown - 20 * MiB && round < 3) {
        trace.mark(`round ${round}: no reclaim of ours; V8 had given the heap back itself`);
        continue;
      }
      assert.equal(reclaims.length, 1, `one reclaim after the burst\n${trace.text()}`);
      const [before, after] = reclaims[0]!;
      if (before < grown - 20 * MiB && round < 3) {
        trace.mark(`round ${round}: V8 had given the heap back itself (${(before / MiB).toFixed(1)} MiB at our reclaim)`);
        continue;
      }
      assert.ok(before >= grown - 20 * MiB, `it saw the grown heap (${(before / MiB).toFixed(1)} MiB)\n${trace.text()}`);
      assert.ok(after < before - 20 * MiB, `committed heap ${(before / MiB).toFixed(1)} -> ${(after / MiB).toFixed(1)} MiB\n${trace.text()}`);
      break;
    }
    await new Promise((r) => setTimeout(r, 600));
    assert.equal(reclaims.length, 1, `nothing more while the heap does not grow again\n${trace.text()}`);
  } finally {
    stop();
    trace.stop();
  }
});
