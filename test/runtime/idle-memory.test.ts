import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { reclaimMemory } from '../../src/runtime/reclaim.js';
import { startServer, waitUntil, type TestServer } from '../helpers.js';

/**
 * Idle topics give their memory back: topics published once, their actors activated (an inspection each), and
 * removed by the idle sweep leave nothing behind that grows with the number of topics ever seen (the supervisors'
 * XState transition cache took one entry per finished actor, about 300 bytes a topic). The first round spawns the
 * destinations supervisor's shards (a fixed cost, kept); a second round of as many new topics must not raise the
 * heap left after a full GC.
 */
describe('idle destinations memory', () => {
  let s: TestServer;
  before(async () => {
    s = await startServer({ auth: false, overrides: { DestinationManager: { idleTimeout: 1500 }, MessageDaemon: { virtualActors: { maxActive: 20_000 } } } });
  });
  after(async () => {
    await s?.close();
  });

  async function round(prefix: string, n: number): Promise<number> {
    const engine = s.rt.engine!;
    const payload = Buffer.from('x');
    for (let i = 0; i < n; i++) {
      void engine.publish(`${prefix}/${i}`, { payload });
      if (i % 500 === 499) await new Promise((r) => setImmediate(r));
    }
    // activated (as an inspection does), so each finishes under the destinations supervisor when its topic goes
    for (let i = 0; i < n; i++) assert.ok(s.rt.actor('destination', `${prefix}/${i}`), `the actor of ${prefix}/${i}`);
    await waitUntil(() => s.rt.destinationCount() === 0 || engine.destinationNames().every((d) => d.startsWith('$')), 60_000, `the ${prefix} topics removed`);
    await waitUntil(() => s.rt.childActors('destinations').length === 0, 10_000, 'their actors removed');
    await new Promise((r) => setTimeout(r, 200));
    reclaimMemory();
    reclaimMemory();
    return process.memoryUsage().heapUsed;
  }

  test('idle - topics removed after idling leave no per-topic heap behind', async () => {
    const warm = await round('warm', 10_000); // nearly every one of the 1 024 shards gets a topic
    const again = await round('again', 10_000);
    const grewKiB = (again - warm) / 1024;
    // without the fix this grew by about 2 400 KiB (some 250 B a topic); with it 45-650 KiB in runs here
    assert.ok(grewKiB < 1200, `heap after GC grew by ${grewKiB.toFixed(0)} KiB over 10 000 more topics (${warm} -> ${again} bytes)`);
  });
});
