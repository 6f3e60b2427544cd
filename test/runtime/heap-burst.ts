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
