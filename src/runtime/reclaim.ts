import { performance, type EventLoopUtilization } from 'node:perf_hooks';
import { getHeapStatistics, setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/**
 * Giving memory back after a large drop (bench/idle-destinations): when the idle-topic sweep has removed many
 * destinations at once, their objects are garbage, but an idle Node process allocates nothing, so V8 starts no
 * GC and keeps the old-space pages committed (measured: 40 s idle after 20 000 topics went, heap used 93 MiB of
 * 229 MiB committed, unchanged). `reclaimMemory()` runs one full, compacting GC right away: live objects are
 * moved off fragmented pages and the emptied pages are returned to the OS.
 *
 * The GC function comes from a separate V8 context (`--expose-gc` set at run time installs `gc` only in contexts
 * created afterwards), so no `gc` global appears in the broker's own context; `--compact-on-every-full-gc` is set
 * for that one collection only. Costs one full-GC pause (tens of ms for a heap of a few hundred MiB), taken only
 * after a sweep that removed at least `RECLAIM_MIN_REMOVED` destinations.
 */
export const RECLAIM_MIN_REMOVED = 1000;

let collect: (() => void) | null | undefined;

function gcFunction(): (() => void) | null {
  if (collect !== undefined) return collect;
  collect = null;
  try {
    const own = (globalThis as { gc?: () => void }).gc;
    if (typeof own === 'function') collect = own;
    else {
      setFlagsFromString('--expose-gc');
      const fn = runInNewContext('gc') as unknown;
      if (typeof fn === 'function') collect = fn as () => void;
    }
  } catch {
    collect = null;
  }
  return collect;
}

/** One compacting full GC now. Returns false when no GC function could be had (then nothing happened). */
export function reclaimMemory(): boolean {
  const gc = gcFunction();
  if (gc === null) return false;
  setFlagsFromString('--compact-on-every-full-gc');
  try {
    gc();
  } finally {
    setFlagsFromString('--no-compact-on-every-full-gc');
  }
  return true;
}

export interface IdleReclaimOptions {
  /** How often the event loop's utilisation is looked at (ms). */
  intervalMs?: number;
  /** Consecutive quiet intervals (utilisation below 2 %) that make the broker idle. */
  quietIntervals?: number;
  /** Growth of V8's committed heap since the last reclaim (bytes) that is worth a collection. */
  minGrowth?: number;
  onReclaim?: (before: number, after: number) => void;
}

/**
 * Idle reclaim for the broker process (`npm start`, src/main.ts): V8's own memory reducer does not run in a process
 * that has stopped allocating, so after start-up or a burst of traffic the committed heap stays at its high-water
 * mark for as long as the broker is idle. Once the event loop has been quiet for `quietIntervals` intervals (2 s by
 * default) and the committed heap has grown by `minGrowth` (4 MiB) since the last reclaim, one compacting full GC
 * gives the free pages back; then nothing more until the heap grows again. A busy broker is never interrupted by
 * it (V8 collects as usual while busy). Returns the function that stops it.
 */
export function startIdleReclaim(opts: IdleReclaimOptions = {}): () => void {
  const intervalMs = opts.intervalMs ?? 1000;
  const quietNeeded = opts.quietIntervals ?? 2;
  const minGrowth = opts.minGrowth ?? 4 * 1048576;
  let base = getHeapStatistics().total_heap_size;
  let last: EventLoopUtilization = performance.eventLoopUtilization();
  let quiet = 0;
  const timer = setInterval(() => {
    const now = performance.eventLoopUtilization();
    const busy = performance.eventLoopUtilization(now, last).utilization;
    last = now;
    quiet = busy < 0.02 ? quiet + 1 : 0;
    const committed = getHeapStatistics().total_heap_size;
    if (committed < base) base = committed;
    if (quiet < quietNeeded || committed - base < minGrowth) return;
    if (!reclaimMemory()) return void clearInterval(timer);
    base = getHeapStatistics().total_heap_size;
    opts.onReclaim?.(committed, base);
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}
