/**
 * bench/mqtt/compare: Switchyard at several commits side by side, rounds interleaved (A, B, A, B, ...) so that every
 * version sees the same machine load, with one load generator (this checkout's) for all of them. For bisecting a
 * regression; not part of `npm run bench`.
 *
 *   git worktree add /tmp/b-09cce2a 09cce2a && ln -s /work/main/node_modules /tmp/b-09cce2a/node_modules
 *   (cd /tmp/b-09cce2a && npm run build) && npm run build
 *   BENCH_COMPARE=/tmp/b-09cce2a,. BENCH_ROUNDS=5 npx tsx bench/mqtt/compare.ts
 *
 * BENCH_COMPARE: checkouts (worktrees) whose builds (npm start's entry, dist/bundle/main.js) and config/ are started,
 * comma-separated; `.` is this one. `BENCH_ENTRY=tsx` starts their src/main.ts through tsx instead.
 * BENCH_COMPARE_SCENARIOS: qos0, latency (p99 at 5 000 msg/s), latency20k, latency1 and latency1at20k (QoS 1), latencyflood (at 5 000 msg/s beside 8
 * flooding QoS 0 pairs), qos1, fanout, fanout1 (default
 * qos0,latency); the throughput ones also give the broker's CPU µs per message (`qos0cpu`...). Each round starts a
 * fresh broker per checkout. Prints every round with the 1-minute load average at
 * its start, then the medians per checkout.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { execFileSync } from 'node:child_process';
import { fanout, latency, pairs, startSwitchyard, windowHooks } from './run.js';

const ROOT = resolve(import.meta.dirname, '..', '..');
const roots = (process.env.BENCH_COMPARE ?? '.').split(',').map((r) => resolve(ROOT, r.trim()));
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const scenarios = (process.env.BENCH_COMPARE_SCENARIOS ?? 'qos0,latency').split(',').map((s) => s.trim());

type Figures = Record<string, number>;

/** The broker's CPU time (user + system, µs) from /proc (clock ticks of 10 ms: windows of seconds keep it exact enough). */
function cpuMicros(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

/**
 * A throughput scenario with the broker's CPU per message received in its window (µs/msg, suffix `cpu`): less
 * sensitive than msg/s to what else runs on the machine, since a broker that waits for a core uses no CPU meanwhile.
 */
function withCpu(key: string, pid: number, f: () => Promise<number>): Promise<Figures> {
  let c0 = 0;
  let m0 = 0;
  let us = NaN;
  windowHooks.start = (received) => {
    c0 = cpuMicros(pid);
    m0 = received;
  };
  windowHooks.end = (received) => {
    us = (cpuMicros(pid) - c0) / Math.max(1, received - m0);
  };
  return f().then((rate) => {
    windowHooks.start = windowHooks.end = undefined;
    return { [key]: rate, [`${key}cpu`]: us };
  });
}

/**
 * Latency at 5 000 msg/s of one light publisher while 8 QoS 0 pairs flood the same broker (PAIRS of them, each pair
 * its own topic, pairs() over and over): how long a client waits for the turns of publishers that flood
 * (`readTurnBytes`, docs/messaging.md).
 */
async function latencyBesideFlood(port: number): Promise<Figures> {
  let flooding = true;
  const flood = (async () => {
    while (flooding) await pairs(port, 0);
  })();
  await new Promise((r) => setTimeout(r, 1500));
  const l = await latency(port, 5000);
  flooding = false;
  await flood;
  return { p50flood: l.p50, p99flood: l.p99 };
}

const run: Record<string, (port: number, pid: number) => Promise<Figures>> = {
  qos0: (port, pid) => withCpu('qos0', pid, () => pairs(port, 0)),
  qos1: (port, pid) => withCpu('qos1', pid, () => pairs(port, 1)),
  fanout: (port, pid) => withCpu('fanout', pid, () => fanout(port, 0)),
  fanout1: (port, pid) => withCpu('fanout1', pid, () => fanout(port, 1)),
  latency: async (port) => {
    const r = await latency(port, 5000);
    return { p50: r.p50, p99: r.p99 };
  },
  latencyflood: (port) => latencyBesideFlood(port),
  latency20k: async (port) => {
    const r = await latency(port, 20000);
    return { p50at20k: r.p50, p99at20k: r.p99 };
  },
  latency1: async (port) => {
    const r = await latency(port, 5000, 1);
    return { p50q1: r.p50, p99q1: r.p99 };
  },
  latency1at20k: async (port) => {
    const r = await latency(port, 20000, 1);
    return { p50q1at20k: r.p50, p99q1at20k: r.p99 };
  },
};

function label(root: string): string {
  try {
    return `${root === ROOT ? 'this' : root} (${execFileSync('git', ['-C', root, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim()})`;
  } catch {
    return root;
  }
}

const names = roots.map(label);
const all: Figures[][] = roots.map(() => []);
const tmp = mkdtempSync(join(tmpdir(), 'switchyard-compare-'));
const show = (k: string, v: number): string => (k.startsWith('p') || k.endsWith('cpu') ? v.toFixed(3) : Math.round(v).toLocaleString('en-US'));
try {
  for (let round = 0; round < ROUNDS; round++) {
    for (let i = 0; i < roots.length; i++) {
      const load = loadavg()[0]!.toFixed(2);
      const b = await startSwitchyard(join(tmp, String(i)), false, undefined, undefined, roots[i]);
      const fig: Figures = {};
      try {
        for (const s of scenarios) {
          const f = run[s];
          if (!f) throw new Error(`unknown scenario ${s}`);
          Object.assign(fig, await f(b.port, b.pid));
          await new Promise((r) => setTimeout(r, 300));
        }
      } finally {
        await b.stop();
      }
      all[i]!.push(fig);
      process.stdout.write(`round ${round + 1} ${names[i]} load ${load}: ${Object.entries(fig).map(([k, v]) => `${k} ${show(k, v)}`).join(', ')}\n`);
    }
  }
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
process.stdout.write(`\nmedians of ${ROUNDS} interleaved rounds (node ${process.version}):\n`);
for (let i = 0; i < roots.length; i++) {
  const keys = Object.keys(all[i]![0] ?? {});
  process.stdout.write(`${names[i]}: ${keys.map((k) => `${k} ${show(k, median(all[i]!.map((f) => f[k]!)))}`).join(', ')}\n`);
}
