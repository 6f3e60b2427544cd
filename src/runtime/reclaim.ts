import { performance, type EventLoopUtilization } from 'node:perf_hooks';
import { getHeapSpaceStatistics, getHeapStatistics, setFlagsFromString } from 'node:v8';
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

/**
 * One young-generation GC (a scavenge, about 1 ms) now. V8 never gives back its new space by itself: once a burst
 * (or the start-up) has grown the semi-spaces to `--max-semi-space-size`, both stay committed (2 x 4 MiB under
 * `npm start`, 2 x 16 MiB with V8's defaults) however idle the process is. A scavenge shrinks them back to their
 * initial size, but only when V8 has seen a low allocation rate over the last seconds, so it is worth trying only
 * once the process has been quiet for a while. Returns false when no GC function could be had.
 */
export function shrinkYoungGeneration(): boolean {
  const gc = gcFunction();
  if (gc === null) return false;
  (gc as (opts?: { type: 'minor' | 'major' }) => void)({ type: 'minor' });
  return true;
}

/** One full GC now, V8 choosing which pages to compact. Returns false when no GC function could be had. */
export function collectGarbage(): boolean {
  const gc = gcFunction();
  if (gc === null) return false;
  gc();
  return true;
}

/** Committed bytes of the old generation that hold nothing live after a full GC (free space inside its pages). */
export function oldGenerationFree(): number {
  let free = 0;
  for (const s of getHeapSpaceStatistics()) {
    if (s.space_name !== 'new_space' && s.space_name !== 'new_large_object_space') free += s.space_size - s.space_used_size;
  }
  return free;
}

/**
 * One compacting, memory-reducing full GC now. Returns false when no GC function could be had (then nothing
 * happened). The `last-resort` flavour is V8's memory-reducing collection (CollectAllAvailableGarbage): besides
 * compacting, it gives back the pages V8 keeps pooled for reuse after a collection has emptied them. A plain full GC
 * leaves those pooled pages committed and resident though V8 no longer counts them in its heap: measured with the
 * engine alone (300 000 topics published once and swept), RSS 384 MiB after a plain compacting GC with 33 MiB of
 * heap committed, 104 MiB after this one (82 MiB fresh); bench/idle-destinations at 1 000 000 topics 1 653 MiB
 * after idle before this change, with the destinations service off as well (1 621 MiB): V8's page pool, not the
 * actor layer nor the engine's tables. A V8 without the option object runs its plain full GC.
 */
const V8_MAJOR = Number(process.versions.v8.split('.')[0]);

export function reclaimMemory(): boolean {
  const gc = gcFunction();
  if (gc === null) return false;
  setFlagsFromString('--compact-on-every-full-gc');
  try {
    // V8 11 (Node 20, out of support) takes the options object but collects nothing with it: measured, 190 MB of
    // garbage still used after gc({type: 'major', execution: 'sync'}), 3 MB after gc(); its plain call is its full GC
    if (V8_MAJOR < 12) gc();
    else (gc as (opts?: { type: 'major'; execution: 'sync'; flavor: 'last-resort' }) => void)({ type: 'major', execution: 'sync', flavor: 'last-resort' });
  } finally {
    setFlagsFromString('--no-compact-on-every-full-gc');
  }
  return true;
}

export interface IdleReclaimOptions {
  /** How often the event loop's utilisation is looked at (ms; 500). */
  intervalMs?: number;
  /**
   * Consecutive quiet intervals that make the broker idle (4, i.e. 2 s): the event loop utilised below 2 % of the
   * interval, or the main thread on a CPU below 2 % of it where that is less (see threadCpu).
   */
  quietIntervals?: number;
  /** Growth of V8's committed heap since the last reclaim (bytes) that is worth a collection. */
  minGrowth?: number;
  /**
   * Time (ms) since the last busy interval or GC of ours before a scavenge is tried to shrink the young generation
   * (see shrinkYoungGeneration): V8 shrinks it only when its allocation rate over about the last 5 s is low.
   */
  youngDelayMs?: number;
  /**
   * A counter of the work done for clients (main.ts: messages published and delivered). An interval in which it moved
   * is not quiet, however low the event loop's utilisation: a broker passing a few hundred messages a second uses
   * under 2 % of it, and a forced full GC there is a pause of tens of ms in the middle of its traffic (V8 collects
   * such a process incrementally by itself, since it allocates). Keep-alive pings do not count.
   */
  activity?: () => number;
  onReclaim?: (before: number, after: number) => void;
  /** Called when the young generation was shrunk: its committed size before and after (bytes). */
  onShrinkYoung?: (before: number, after: number) => void;
}

/**
 * The main thread's CPU time (µs), where this Node has it (process.threadCpuUsage: Node 23.9 and later). The event
 * loop's utilisation counts wall time: on a machine whose cores other processes keep busy, a callback of 50 µs that
 * is preempted takes milliseconds, and an idle process looks busy (measured with 6 processes at nice -19 spinning on
 * 2 cores: intervals of 500 ms with the event loop 100 % utilised and 1.4 ms of CPU time).
 */
const threadCpu: (() => number) | null =
  typeof (process as { threadCpuUsage?: unknown }).threadCpuUsage === 'function'
    ? () => {
        const u = (process as unknown as { threadCpuUsage(): NodeJS.CpuUsage }).threadCpuUsage();
        return u.user + u.system;
      }
    : null;

const newSpaceSize = (): number => getHeapSpaceStatistics().find((s) => s.space_name === 'new_space')?.space_size ?? 0;

/**
 * Idle reclaim for the broker process (`npm start`, src/main.ts): V8's own memory reducer does not run in a process
 * that has stopped allocating, so after start-up or a burst of traffic the committed heap stays at its high-water
 * mark for as long as the broker is idle. Once the event loop has been quiet for `quietIntervals` intervals (2 s by
 * default; an interval in which `activity` moved, a message passed, is not quiet) and the committed heap has grown by `minGrowth` (4 MiB) since the last reclaim, one compacting full GC
 * gives the free pages back; then nothing more until the heap grows again. The young generation is given back
 * separately (V8 shrinks it only once its allocation rate over about the last 5 s is low): one scavenge at the
 * first quiet interval closes V8's sample of the busy period, then while the process stays quiet and the new space
 * is above 1 MiB a scavenge is tried once `youngDelayMs` (5.2 s) have passed since the last busy interval or scavenge
 * of ours (at most 4 tries per quiet period, about 1 ms each); the new space is back to 1 MiB about 6 s into the quiet
 * period. Measured on the idle broker (bench/footprint): the full GC after start-up leaves the new space at 8 MiB,
 * the scavenge a few seconds later takes it to 1 MiB, -7 MiB RSS (V8 itself would do it only about 8 s after its
 * last mark-compact, in its memory reducer).
 * A busy broker is never interrupted by either (V8 collects as usual while busy). Returns the function that stops it.
 */
export function startIdleReclaim(opts: IdleReclaimOptions = {}): () => void {
  const intervalMs = opts.intervalMs ?? 500;
  const quietNeeded = opts.quietIntervals ?? 4;
  const minGrowth = opts.minGrowth ?? 4 * 1048576;
  const youngDelayMs = opts.youngDelayMs ?? 5200;
  let lastGcAt = Date.now();
  let base = getHeapStatistics().total_heap_size;
  // V8's smallest new space (2 x 512 KiB); lower if this process was started with smaller semi-spaces
  let youngFloor = Math.min(newSpaceSize(), 1048576);
  let youngTries = 0;
  let last: EventLoopUtilization = performance.eventLoopUtilization();
  let lastCpu = threadCpu?.() ?? 0;
  let quiet = 0;
  let lastActivity = opts.activity?.() ?? 0;
  const timer = setInterval(() => {
    const now = performance.eventLoopUtilization();
    let busy = performance.eventLoopUtilization(now, last).utilization;
    if (threadCpu !== null) {
      // the smaller of the two: the main thread's CPU time over the interval is not inflated by waiting for a core
      const cpu = threadCpu();
      const wallUs = (now.idle + now.active - last.idle - last.active) * 1000;
      if (wallUs > 0) busy = Math.min(busy, (cpu - lastCpu) / wallUs);
      lastCpu = cpu;
    }
    last = now;
    const activity = opts.activity?.() ?? 0;
    const active = activity !== lastActivity;
    lastActivity = activity;
    quiet = busy < 0.02 && !active ? quiet + 1 : 0;
    if (quiet === 0) {
      youngTries = 0;
      lastGcAt = Date.now();
    }
    const committed = getHeapStatistics().total_heap_size;
    if (committed < base) base = committed;
    if (quiet === 1 && newSpaceSize() > youngFloor) {
      // the first quiet interval: one scavenge closes V8's allocation sample of the busy period, so that the
      // young generation can be shrunk youngDelayMs from now rather than from the first GC of the quiet period
      const young = newSpaceSize();
      if (!shrinkYoungGeneration()) return void clearInterval(timer);
      lastGcAt = Date.now();
      const after = newSpaceSize();
      if (after < young) {
        opts.onShrinkYoung?.(young, after);
        youngTries = 4;
      }
    }
    if (quiet < quietNeeded) return;
    if (committed - base >= minGrowth) {
      // A plain full GC first: it gives back the pages left with nothing live. Compacting every page moves all live
      // objects to new pages before the old ones go, so for a moment the process holds its live heap twice (+35-45 MB
      // of RSS after a burst of MQTT traffic, test/mqtt/nonreading-memory.test.ts): done only when the free space
      // left inside the old generation's pages is itself worth more than that moment costs.
      const youngBefore = newSpaceSize();
      if (!collectGarbage()) return void clearInterval(timer);
      const free = oldGenerationFree();
      if (free >= minGrowth && free >= getHeapStatistics().used_heap_size / 2 && !reclaimMemory()) return void clearInterval(timer);
      base = getHeapStatistics().total_heap_size;
      last = performance.eventLoopUtilization(); // our own GC pause does not make the next interval busy
      lastCpu = threadCpu?.() ?? 0;
      opts.onReclaim?.(committed, base); // (allocates nothing: V8's sample since the first quiet interval stays low)
      const youngAfter = newSpaceSize();
      if (youngAfter < youngBefore && youngAfter <= youngFloor) {
        // the full GC (the memory-reducing one above all) gave the young generation back too: nothing left to try
        opts.onShrinkYoung?.(youngBefore, youngAfter);
        youngTries = 4;
      }
      return;
    }
    const young = newSpaceSize();
    if (young < youngFloor) youngFloor = young;
    if (young > youngFloor && youngTries < 4 && Date.now() - lastGcAt >= youngDelayMs) {
      youngTries++;
      lastGcAt = Date.now();
      if (!shrinkYoungGeneration()) return void clearInterval(timer);
      const after = newSpaceSize();
      if (after < young) {
        opts.onShrinkYoung?.(young, after);
        youngTries = 4; // done for this quiet period
        base = Math.min(base, getHeapStatistics().total_heap_size);
      }
    }
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}
