/**
 * bench/mqtt/alloc: where the broker allocates during one bench/mqtt scenario (issue 25: bytes per message drive the
 * scavenges, a share of the CPU at full rate and of the tail at a fixed rate). Starts Switchyard as bench/mqtt does
 * (npm start's flags and bundle) with the inspector, samples every allocation (V8's sampling heap profiler, objects
 * collected by the young and old generation included) over the scenario, and prints the bytes allocated per message
 * and the allocation sites that account for them (the top frame and its two callers).
 * `ALLOC_SCENARIO=qos0|qos1|latency|latency1` (default qos0); `ALLOC_ROOT=/tmp/old` measures another checkout (a built
 * git worktree) with this one's load generator. `npx tsx bench/mqtt/alloc.ts`; not part of `npm run bench`: structural,
 * it hardly moves with the machine's load.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { latency, pairs, startSwitchyard } from './run.js';
import { START_ENV, START_FLAGS } from '../start-flags.js';

const ROOT = resolve(process.env.ALLOC_ROOT ?? resolve(import.meta.dirname, '..', '..'));
const SCENARIO = process.env.ALLOC_SCENARIO ?? 'qos0';
const TOP = Number(process.env.ALLOC_TOP ?? 25);

interface Frame { functionName: string; url: string; lineNumber: number; columnNumber: number }
interface Node { callFrame: Frame; selfSize: number; id: number; children: Node[] }

async function main(): Promise<void> {
  const tmp = mkdtempSync(join(tmpdir(), 'switchyard-alloc-'));
  const b = await startSwitchyard(tmp, true, START_FLAGS, START_ENV, ROOT);
  const call = b.collector!.call;
  try {
    // warm up as the bench does (JIT, pools), then measure
    if (SCENARIO === 'qos0' || SCENARIO === 'qos1') await pairs(b.port, SCENARIO === 'qos0' ? 0 : 1);
    await call('HeapProfiler.enable');
    await call('HeapProfiler.startSampling', { samplingInterval: 256, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true });
    let messages: number;
    if (SCENARIO === 'qos0' || SCENARIO === 'qos1') messages = (await pairs(b.port, SCENARIO === 'qos0' ? 0 : 1)) * (Number(process.env.BENCH_SECONDS ?? 3));
    else {
      const r = await latency(b.port, 5000, SCENARIO === 'latency1' ? 1 : 0);
      messages = r.n;
    }
    const { profile } = (await call('HeapProfiler.stopSampling')) as { profile: { head: Node } };
    const sites = new Map<string, number>();
    let total = 0;
    const walk = (n: Node, stack: string[]) => {
      const f = n.callFrame;
      const here = [...stack, `${f.functionName || '(anon)'} ${f.url.split('/').slice(-1)[0]}:${f.lineNumber + 1}`];
      if (n.selfSize > 0) {
        total += n.selfSize;
        const k = here.slice(-3).reverse().join(' <- ');
        sites.set(k, (sites.get(k) ?? 0) + n.selfSize);
      }
      for (const c of n.children) walk(c, here);
    };
    walk(profile.head, []);
    console.log(`bench/mqtt/alloc: ${SCENARIO}, ${ROOT}, ${messages.toLocaleString('en-US')} messages, ${(total / messages).toFixed(0)} B allocated per message`);
    for (const [k, v] of [...sites].sort((a, c) => c[1] - a[1]).slice(0, TOP)) console.log(`${(v / messages).toFixed(1).padStart(7)} B  ${k}`);
  } finally {
    b.collector!.close();
    await b.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}

await main();
