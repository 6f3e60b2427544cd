/**
 * bench/young-gen: what the young-generation size `npm start` ships (`--max-semi-space-size`, package.json
 * scripts.start) trades: tail latency against idle memory. For each size (`YOUNG_GEN_SIZES`, MiB, default 4 8 16 32),
 * in interleaved rounds (`YOUNG_GEN_ROUNDS`, default 2) on a fresh broker each time, with npm start's malloc
 * environment: idle RSS 10 s after ready, p50/p99 at 5 000 and 20 000 msg/s for QoS 0 and QoS 1 (bench/mqtt's
 * latency scenario: median of 3 rounds), and idle RSS 10 s after that traffic. Not a test: the numbers vary with the
 * machine. `tsx bench/young-gen.ts`.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { latency, startSwitchyard } from './mqtt/run.js';
import { START_ENV } from './start-flags.js';

const ROOT = resolve(import.meta.dirname, '..');
const SIZES = (process.env.YOUNG_GEN_SIZES ?? '4 8 16 32').split(' ').filter(Boolean).map(Number);
const ROUNDS = Number(process.env.YOUNG_GEN_ROUNDS ?? 2);
const ENV = START_ENV; // npm start's malloc environment (bench/start-flags.ts)

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const rssMiB = (pid: number) => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN) / 1024;

interface Sample {
  fresh: number;
  after: number;
  lat: Record<string, { p50: number; p99: number }>;
}

const LOADS: Array<[string, number, 0 | 1]> = [
  ['QoS 0 @ 5k', 5000, 0],
  ['QoS 1 @ 5k', 5000, 1],
  ['QoS 0 @ 20k', 20000, 0],
  ['QoS 1 @ 20k', 20000, 1],
];

export async function runYoungGenBench(): Promise<void> {
  const samples = new Map<number, Sample[]>();
  for (let round = 0; round < ROUNDS; round++) {
    for (const size of SIZES) {
      const tmp = mkdtempSync(join(tmpdir(), 'switchyard-younggen-'));
      process.stdout.write(`young-gen ${size} MiB, round ${round + 1}:`);
      const b = await startSwitchyard(tmp, false, [`--max-semi-space-size=${size}`], ENV);
      try {
        await sleep(10000);
        const fresh = rssMiB(b.pid);
        const lat: Sample['lat'] = {};
        for (const [label, rate, qos] of LOADS) {
          process.stdout.write(` ${label}`);
          lat[label] = await latency(b.port, rate, qos);
          await sleep(300);
        }
        await sleep(10000);
        const after = rssMiB(b.pid);
        samples.set(size, [...(samples.get(size) ?? []), { fresh, after, lat }]);
        process.stdout.write(' done\n');
      } finally {
        await b.stop();
        rmSync(tmp, { recursive: true, force: true });
      }
    }
  }
  const med = (xs: number[]) => {
    const s = [...xs].sort((a, b) => a - b);
    return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
  };
  const head = ['semi-space', 'idle RSS fresh', 'idle RSS after', ...LOADS.map(([l]) => `${l} p50/p99 ms`)];
  process.stdout.write(`\nYoung generation vs latency and idle RSS (median of ${ROUNDS} rounds; ${Object.entries(ENV).map(([k, v]) => `${k}=${v}`).join(' ')}; node ${process.version})\n\n`);
  process.stdout.write(`| ${head.join(' | ')} |\n|${head.map(() => '---:').join('|')}|\n`);
  for (const size of SIZES) {
    const ss = samples.get(size) ?? [];
    const cells = [
      `${size} MiB`,
      `${med(ss.map((x) => x.fresh)).toFixed(1)} MiB`,
      `${med(ss.map((x) => x.after)).toFixed(1)} MiB`,
      ...LOADS.map(([l]) => `${med(ss.map((x) => x.lat[l]!.p50)).toFixed(2)} / ${med(ss.map((x) => x.lat[l]!.p99)).toFixed(2)}`),
    ];
    process.stdout.write(`| ${cells.join(' | ')} |\n`);
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await runYoungGenBench();
