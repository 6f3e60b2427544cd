import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startIdleReclaim } from '../../src/runtime/reclaim.js';
import { burst, heapTrace } from './heap-burst.js';

// In a process of its own, as test/runtime/reclaim-idle.test.ts: what V8 did before changes what the reclaim sees.
test('runtime - messages passing at a low rate keep the idle reclaim from forcing a full GC; once they stop, it runs', async () => {
  const reclaims: Array<[number, number]> = [];
  const trace = heapTrace();
  let messages = 0;
  const stop = startIdleReclaim({ intervalMs: 100, youngDelayMs: 60_000, activity: () => messages, onReclaim: (before, after) => reclaims.push([before, after]) });
  // a few messages every 50 ms: the event loop stays under 2 % busy, as a broker with light traffic
  const traffic = setInterval(() => (messages += 3), 50);
  try {
    burst(60);
    await new Promise((r) => setTimeout(r, 1500)); // 15 intervals: 4 quiet ones reclaim (the test above: within 0.5 s)
    assert.equal(reclaims.length, 0, `no forced full GC while messages pass\n${trace.text()}`);
    clearInterval(traffic);
    trace.mark('messages stopped');
    burst(60); // (V8 may have collected the first burst by itself meanwhile)
    const deadline = Date.now() + 20_000;
    while (reclaims.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    assert.equal(reclaims.length, 1, `one reclaim once the messages stopped\n${trace.text()}`);
  } finally {
    clearInterval(traffic);
    stop();
    trace.stop();
  }
});
