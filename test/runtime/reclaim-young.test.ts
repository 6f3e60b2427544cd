import assert from 'node:assert/strict';
import { test } from 'node:test';
import { getHeapSpaceStatistics } from 'node:v8';
import { startIdleReclaim } from '../../src/runtime/reclaim.js';

const MiB = 1048576;

/**
 * The young generation given back once quiet (src/runtime/reclaim.ts), in a process of its own: V8 shrinks the new
 * space only when its allocation rate over the last seconds is low, and the GCs of other tests in the same process
 * (reclaimMemory's memory-reducing GC) change its sizing.
 */
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
