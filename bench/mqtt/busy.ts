/**
 * bench/mqtt/busy: which side sets the pace of a throughput scenario, the broker or this load generator. For each
 * broker and round: the scenario's rate, then over its measuring window the CPU of the broker process and of the
 * generator (all its threads; % of one core and µs per message received) and the share of the window the broker's
 * main thread was runnable but waiting for a core (from /proc/<pid>/schedstat: a busy machine, not the generator).
 * Not part of `npm run bench`.
 *
 *   BENCH_BUSY_BROKERS=switchyard,nats BENCH_BUSY_SCENARIO=fanout1 BENCH_ROUNDS=3 npx tsx bench/mqtt/busy.ts
 *
 * BENCH_BUSY_BROKERS: switchyard, aedes, mosquitto, nats (default switchyard); BENCH_BUSY_SCENARIO: qos0, qos1,
 * fanout, fanout1 (default fanout1); BENCH_ROUNDS (2): rounds on the same broker process.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fanout, pairs, startAedes, startMosquitto, startNatsMqtt, startSwitchyard, windowHooks } from './run.js';

/** CPU time (user + system, ms) of a process, all threads, from /proc (10 ms ticks). */
function cpuMs(pid: number | 'self'): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const x = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return (Number(x[11]) + Number(x[12])) * 10;
}

/** Time (ms) the process's main thread spent runnable on a run queue without a core. */
function waitMs(pid: number): number {
  return Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[1]) / 1e6;
}

const tmp = mkdtempSync(join(tmpdir(), 'switchyard-busy-'));
const starters: Record<string, () => Promise<{ pid: number; port: number; stop(): Promise<void> }>> = {
  switchyard: () => startSwitchyard(join(tmp, 'sy')),
  aedes: () => startAedes(),
  mosquitto: () => startMosquitto(tmp),
  nats: () => startNatsMqtt(tmp),
};
const scenarios: Record<string, (port: number) => Promise<number>> = {
  qos0: (port) => pairs(port, 0),
  qos1: (port) => pairs(port, 1),
  fanout: (port) => fanout(port, 0),
  fanout1: (port) => fanout(port, 1),
};
const scenario = process.env.BENCH_BUSY_SCENARIO ?? 'fanout1';
const run = scenarios[scenario];
if (!run) throw new Error(`unknown scenario ${scenario}`);
const rounds = Number(process.env.BENCH_ROUNDS ?? 2);
try {
  for (const name of (process.env.BENCH_BUSY_BROKERS ?? 'switchyard').split(',').map((s) => s.trim().toLowerCase())) {
    const start = starters[name];
    if (!start) throw new Error(`unknown broker ${name}`);
    const b = await start();
    try {
      for (let r = 0; r < rounds; r++) {
        let line = '';
        let t0 = 0;
        let m0 = 0;
        let b0 = 0;
        let g0 = 0;
        let w0 = 0;
        windowHooks.start = (m) => {
          [t0, m0, b0, g0, w0] = [performance.now(), m, cpuMs(b.pid), cpuMs('self'), waitMs(b.pid)];
        };
        windowHooks.end = (m) => {
          const ms = performance.now() - t0;
          const n = Math.max(1, m - m0);
          const [bc, gc] = [cpuMs(b.pid) - b0, cpuMs('self') - g0];
          line =
            `broker ${((100 * bc) / ms).toFixed(0)} % of a core (${((1000 * bc) / n).toFixed(3)} µs/msg), ` +
            `generator ${((100 * gc) / ms).toFixed(0)} % (${((1000 * gc) / n).toFixed(3)} µs/msg), ` +
            `broker runnable without a core ${((100 * (waitMs(b.pid) - w0)) / ms).toFixed(0)} %`;
        };
        const load = loadavg()[0]!.toFixed(2);
        const rate = await run(b.port);
        windowHooks.start = windowHooks.end = undefined;
        process.stdout.write(`${name} ${scenario} round ${r + 1}, load ${load}: ${Math.round(rate).toLocaleString('en-US')} msg/s; ${line}\n`);
        await new Promise((res) => setTimeout(res, 300));
      }
    } finally {
      await b.stop();
    }
  }
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
