/**
 * bench/mqtt/latency-gc: what the broker's garbage collector does during bench/mqtt's latency scenarios (issue 25,
 * p99). Starts Switchyard with `npm start`'s young generation (`--max-semi-space-size=4`, or BENCH_NODE_FLAGS) and
 * `--trace-gc`, runs `latency()` at 5 000 and 20 000 msg/s, QoS 0 and QoS 1 (a fresh broker for each), and prints per
 * load the scavenges per second, the bytes allocated per message (what the scavenges freed plus the heap's growth,
 * over the messages sent; the pauses between rounds are in the span, so it is approximate) and the scavenge pauses.
 * Structural, unlike p99: it hardly moves with the machine's load. `LATENCY_GC_ROOT=/tmp/old` measures another
 * checkout (a git worktree) with this one's load generator. `tsx bench/mqtt/latency-gc.ts`; not part of `npm run bench`.
 */
import { START_ENV, START_FLAGS } from '../start-flags.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { latency, startSwitchyard } from './run.js';

const FLAGS = START_FLAGS;
const ROOT = resolve(process.env.LATENCY_GC_ROOT ?? resolve(import.meta.dirname, '..', '..'));
const LOADS: Array<[string, number, 0 | 1]> = [
  ['QoS 0 @ 5 000', 5000, 0],
  ['QoS 0 @ 20 000', 20000, 0],
  ['QoS 1 @ 5 000', 5000, 1],
  ['QoS 1 @ 20 000', 20000, 1],
];

interface GcEvent {
  at: number;
  kind: string;
  before: number;
  after: number;
  pause: number;
}

/** `--trace-gc` lines: "<ms> ms: Scavenge 48.0 (54.9) -> 47.2 (57.9) MB, pooled: 4 MB, 0.30 / 0.00 ms ...". */
function parse(text: string): GcEvent[] {
  const out: GcEvent[] = [];
  const re = /\s(\d+) ms: (Scavenge|Mark-Compact|Minor Mark-Sweep)\S* ([\d.]+) \([\d.]+\) -> ([\d.]+) \([\d.]+\) MB.*?, ([\d.]+) \/ [\d.]+ ms/g;
  for (let m = re.exec(text); m !== null; m = re.exec(text)) out.push({ at: Number(m[1]), kind: m[2]!, before: Number(m[3]), after: Number(m[4]), pause: Number(m[5]) });
  return out;
}

const rows: string[] = [];
for (const [label, rate, qos] of LOADS) {
  const tmp = mkdtempSync(join(tmpdir(), 'switchyard-latency-gc-'));
  process.stdout.write(`${label} ...`);
  const b = await startSwitchyard(tmp, false, [...FLAGS, '--trace-gc'], START_ENV, ROOT);
  let trace = '';
  b.proc!.stdout!.on('data', (d: Buffer) => (trace += d));
  try {
    await new Promise((r) => setTimeout(r, 2000));
    const from = trace.length;
    const r = await latency(b.port, rate, qos);
    const ev = parse(trace.slice(from));
    const sc = ev.filter((e) => e.kind === 'Scavenge');
    const span = sc.length > 1 ? (sc.at(-1)!.at - sc[0]!.at) / 1000 : NaN;
    // allocated between the first and the last scavenge: what every later collection freed plus the heap's growth
    const freed = ev.filter((e) => e.at > sc[0]!.at && e.at <= sc.at(-1)!.at).reduce((a, e) => a + (e.before - e.after), 0);
    const allocated = (freed + (sc.at(-1)!.after - sc[0]!.after)) * 1e6;
    const majors = ev.filter((e) => e.kind !== 'Scavenge');
    const pauses = sc.map((e) => e.pause);
    rows.push(
      `| ${label} | ${(sc.length / span).toFixed(1)} | ${Math.round(allocated / span / rate).toLocaleString('en-US')} B | ${(pauses.reduce((a, x) => a + x, 0) / pauses.length).toFixed(2)} ms | ${Math.max(...pauses).toFixed(2)} ms | ${majors.length} (${majors.map((e) => e.pause.toFixed(1)).join(', ') || '—'}) | ${r.p99.toFixed(3)} ms |`,
    );
    process.stdout.write(' done\n');
  } finally {
    await b.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}
process.stdout.write(`\nBroker GC during the latency scenario (${ROOT}, ${FLAGS.join(' ')}, node ${process.version})\n\n`);
process.stdout.write('| load | scavenges / s | allocated per message | scavenge pause, average | longest | full GCs (ms) | p99 |\n|---|---:|---:|---:|---:|---:|---:|\n');
process.stdout.write(`${rows.join('\n')}\n`);
