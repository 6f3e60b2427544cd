import { performance } from 'node:perf_hooks';
import { getHeapStatistics } from 'node:v8';

/** Helpers of the idle-reclaim tests (reclaim, reclaim-idle, reclaim-activity). */

export const MiB = 1048576;

/** Garbage of about `mib` MiB in small objects (old space once it survives a few scavenges). */
export function burst(mib: number): number {
  let keep: Array<{ i: number; s: string }> = [];
  for (let i = 0; i < mib * 12_000; i++) keep.push({ i, s: `x${i}` });
  const n = keep.length;
  keep = [];
  return n;
}

/**
 * What the idle reclaim looked at, every 100 ms (the committed and used heap, the event loop's utilisation and the
 * main thread's CPU time), and marks of the test's own steps: printed when a reclaim test fails.
 */
export function heapTrace(): { mark(text: string): void; text(): string; stop(): void } {
  const lines: string[] = [];
  const t0 = Date.now();
  const cpu = (): number => {
    const u = (process as unknown as { threadCpuUsage?: () => NodeJS.CpuUsage }).threadCpuUsage?.() ?? process.cpuUsage();
    return u.user + u.system;
  };
  let lastElu = performance.eventLoopUtilization();
  let lastCpu = cpu();
  const push = (text: string): void => {
    lines.push(`${String(Date.now() - t0).padStart(6)} ms ${text}`);
    if (lines.length > 400) lines.splice(0, lines.length - 400);
  };
  const timer = setInterval(() => {
    const elu = performance.eventLoopUtilization();
    const busy = performance.eventLoopUtilization(elu, lastElu).utilization;
    const c = cpu();
    const h = getHeapStatistics();
    push(
      `committed ${(h.total_heap_size / MiB).toFixed(1)} used ${(h.used_heap_size / MiB).toFixed(1)} MiB, ` +
        `event loop ${(busy * 100).toFixed(1)} %, CPU ${((c - lastCpu) / 1000).toFixed(1)} ms`,
    );
    lastElu = elu;
    lastCpu = c;
  }, 100);
  timer.unref();
  return { mark: (text) => push(`-- ${text}`), text: () => lines.join('\n'), stop: () => clearInterval(timer) };
}
