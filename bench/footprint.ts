/**
 * bench/footprint: what an operator sees in `ps` for an idle broker. Switchyard as `npm start` runs it (its
 * environment, Node flags and entry file read from package.json: `MALLOC_ARENA_MAX=2`, `--max-semi-space-size=4`,
 * the esbuild bundle dist/bundle/main.js, built by `npm ci`), tsc's one-module-per-file output dist/src/main.js with
 * the same flags (what npm start ran before the bundle), Switchyard through tsx (how it ran before that), Aedes
 * (plain node, in-memory persistence) and Debian's Mosquitto, each in its own process:
 * - start-up: spawn until the broker is ready (Switchyard: its SWITCHYARD_READY line; the others: the port accepts
 *   an MQTT CONNECT), median of 3 starts;
 * - idle RSS fresh: 10 s after ready;
 * - idle RSS after a standard light workload: 10 subscribers (QoS 1, one topic each), 10 publishers sending 500
 *   QoS 1 messages of 1 KiB each to them (5 000 messages, all received), 10 retained messages, then every client
 *   disconnects; sampled after 10 s idle. The bench forces no GC: this is the number `ps` shows (Switchyard's own
 *   idle reclaim, src/runtime/reclaim.ts, compacts the heap about 2 s into an idle period when it grew, and gives
 *   the young generation back about 6 s into it).
 * Each RSS is also given as its anonymous part (RssAnon: heap, stacks, malloc), i.e. without the pages of the
 * executable and libraries mapped from disk (RssFile), which are shared between processes running the same binary
 * and which the kernel can drop; for Node the binary alone is about 30-40 MiB of it.
 * Figures (2026-11-24, docs/operations.md "Footprint"): `npm start` 82-85 MiB fresh / 90-93 MiB after the workload,
 * from 98-100 / 103-110 MiB before the bundle, MALLOC_ARENA_MAX=2 and the young-generation reclaim; Aedes 59 / 66,
 * Mosquitto 8 / 9 MiB.
 * Not a test: figures vary with the machine (about ±3 MiB between runs). `npx tsx bench/footprint.ts` alone
 * (`FOOTPRINT_ONLY="npm start"` for the first row only), or part of `npm run bench`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import mqtt from 'mqtt';
import { freePort, stopProc } from './procs.js';

const ROOT = resolve(import.meta.dirname, '..');

interface Started {
  proc: ChildProcess;
  port: number;
  startupMs: number;
}
interface Subject {
  name: string;
  start(tmp: string): Promise<Started>;
}

/** VmRSS and RssAnon of a process, MiB. */
function rssMiB(pid: number): { rss: number; anon: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (key: string) => {
    const m = new RegExp(`${key}:\\s+(\\d+) kB`).exec(status);
    return m ? Number(m[1]) / 1024 : NaN;
  };
  return { rss: kb('VmRSS'), anon: kb('RssAnon') };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function untilConnects(port: number, t0: number, proc: ChildProcess): Promise<number> {
  for (;;) {
    if (proc.exitCode !== null) throw new Error('broker exited');
    try {
      const c = await mqtt.connectAsync(`mqtt://127.0.0.1:${port}`, { reconnectPeriod: 0, connectTimeout: 500, clientId: `probe-${Date.now()}` });
      await c.endAsync();
      return performance.now() - t0;
    } catch {
      await sleep(10);
    }
  }
}

/**
 * The environment, Node flags and entry file of `npm start` (package.json `scripts.start`:
 * `exec env MALLOC_ARENA_MAX=2 MALLOC_MMAP_THRESHOLD_=... MALLOC_TRIM_THRESHOLD_=... node <flags> dist/bundle/main.js`).
 */
const NPM_START = /exec (?:env ((?:\w+=\S+ )+))?node((?: --\S+)*) (dist\/\S+\.js)/.exec(JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).scripts.start);
const NPM_START_ENV: Record<string, string> = Object.fromEntries((NPM_START?.[1] ?? '').split(' ').filter(Boolean).map((kv) => kv.split('=', 2) as [string, string]));
const NPM_START_FLAGS = (NPM_START?.[2] ?? '').split(' ').filter(Boolean);
const NPM_START_ENTRY = NPM_START?.[3] ?? 'dist/bundle/main.js';

/** `entry`: a compiled entry file (relative to the checkout), or null for src/main.ts through tsx. */
function switchyard(entry: string | null, flags: string[], label: string, env: Record<string, string> = {}): Subject {
  const compiled = entry !== null;
  return {
    name: `Switchyard (${label})`,
    async start(tmp) {
      const configDir = join(tmp, 'sy-config');
      mkdirSync(configDir, { recursive: true });
      for (const f of readdirSync(join(ROOT, 'config'))) if (f.endsWith('.yaml') && f !== 'AuthManager.yaml') copyFileSync(join(ROOT, 'config', f), join(configDir, f));
      writeFileSync(join(configDir, 'AuthManager.yaml'), 'AuthManager:\n  authenticationEnabled: false\n');
      const port = await freePort();
      const args = compiled ? [...flags, join(ROOT, entry)] : ['--import', 'tsx', join(ROOT, 'src/main.ts')];
      const t0 = performance.now();
      const proc = spawn(process.execPath, args, {
        cwd: ROOT,
        env: { ...process.env, ...env, SWITCHYARD_CONFIG_DIR: configDir, SWITCHYARD_DATA_DIR: join(tmp, 'sy-data'), SWITCHYARD_REST_PORT: '0', SWITCHYARD_REST_HOST: '127.0.0.1', SWITCHYARD_MQTT_PORT: String(port), SWITCHYARD_MQTT_WS_PORT: '0', SWITCHYARD_MQTT_HOST: '127.0.0.1' },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      const ready = await new Promise<number>((res, rej) => {
        const on = (d: Buffer) => {
          out += d;
          if (/SWITCHYARD_READY/.test(out)) res(performance.now() - t0);
        };
        proc.stdout!.on('data', on);
        proc.stderr!.on('data', (d) => (out += d));
        proc.once('exit', () => rej(new Error(`switchyard exited: ${out}`)));
      });
      proc.stdout!.removeAllListeners('data');
      proc.stdout!.resume();
      proc.stderr!.resume();
      return { proc, port, startupMs: ready };
    },
  };
}

const aedes: Subject = {
  name: 'Aedes (node, in-memory)',
  async start(tmp) {
    const script = join(tmp, 'aedes.mjs');
    const aedesUrl = new URL('../node_modules/aedes/aedes.js', import.meta.url).href;
    writeFileSync(script, `import { Aedes } from ${JSON.stringify(aedesUrl)};\nimport { createServer } from 'node:net';\nconst broker = await Aedes.createBroker();\ncreateServer({ noDelay: true }, broker.handle).listen(Number(process.argv[2]), '127.0.0.1');\nprocess.on('SIGTERM', () => process.exit(0));\n`);
    const port = await freePort();
    const t0 = performance.now();
    const proc = spawn(process.execPath, [script, String(port)], { cwd: ROOT, stdio: ['ignore', 'ignore', 'inherit'] });
    return { proc, port, startupMs: await untilConnects(port, t0, proc) };
  },
};

const mosquitto: Subject = {
  name: 'Mosquitto (Debian)',
  async start(tmp) {
    const port = await freePort();
    const conf = join(tmp, 'mosquitto.conf');
    writeFileSync(conf, `listener ${port} 127.0.0.1\nallow_anonymous true\npersistence false\n`);
    const t0 = performance.now();
    const proc = spawn('mosquitto', ['-c', conf], { stdio: ['ignore', 'ignore', 'ignore'] });
    return { proc, port, startupMs: await untilConnects(port, t0, proc) };
  },
};

/** The standard light workload (see the header). */
async function lightWorkload(port: number): Promise<void> {
  const url = `mqtt://127.0.0.1:${port}`;
  const subs = await Promise.all(Array.from({ length: 10 }, (_, i) => mqtt.connectAsync(url, { clientId: `sub-${i}`, reconnectPeriod: 0 })));
  let received = 0;
  for (const [i, s] of subs.entries()) {
    s.on('message', () => received++);
    await s.subscribeAsync(`light/${i}`, { qos: 1 });
  }
  const pubs = await Promise.all(Array.from({ length: 10 }, (_, i) => mqtt.connectAsync(url, { clientId: `pub-${i}`, reconnectPeriod: 0 })));
  const payload = Buffer.alloc(1024, 'x');
  await Promise.all(
    pubs.map(async (p, i) => {
      await p.publishAsync(`retained/${i}`, payload, { qos: 1, retain: true });
      for (let n = 0; n < 500; n++) await p.publishAsync(`light/${i}`, payload, { qos: 1 });
    }),
  );
  const end = Date.now() + 30000;
  while (received < 5000 && Date.now() < end) await sleep(20);
  if (received < 5000) throw new Error(`only ${received} of 5000 messages arrived`);
  await Promise.all([...subs, ...pubs].map((c) => c.endAsync()));
}

export interface FootprintRow {
  name: string;
  startupMs: number;
  freshMiB: number;
  afterMiB: number;
  /** The anonymous part of each (RssAnon). */
  freshAnonMiB: number;
  afterAnonMiB: number;
}

export async function runFootprintBench(): Promise<FootprintRow[]> {
  if (!existsSync(join(ROOT, NPM_START_ENTRY)) || !existsSync(join(ROOT, 'dist/src/main.js'))) throw new Error('dist/ is missing: run npm run build (npm ci does) first');
  const envText = Object.entries(NPM_START_ENV).map(([k, v]) => `${k}=${v} `).join('');
  const flags = NPM_START_FLAGS.join(' ');
  const all = [
    switchyard(NPM_START_ENTRY, NPM_START_FLAGS, `npm start: ${envText}${NPM_START_ENTRY} ${flags}`.trim(), NPM_START_ENV),
    // tsc's output, one module per source file, with the same flags and no environment (what npm start ran before)
    switchyard('dist/src/main.js', NPM_START_FLAGS, `tsc output: dist/src/main.js ${flags}`.trim()),
    switchyard(null, [], 'tsx, before'),
    aedes,
    mosquitto,
  ];
  const only = process.env.FOOTPRINT_ONLY;
  const subjects = only ? all.filter((s) => s.name.toLowerCase().includes(only.toLowerCase())) : all;
  const rows: FootprintRow[] = [];
  for (const s of subjects) {
    const starts: number[] = [];
    let fresh = { rss: NaN, anon: NaN };
    let after = { rss: NaN, anon: NaN };
    for (let round = 0; round < 3; round++) {
      const tmp = mkdtempSync(join(tmpdir(), 'sy-footprint-'));
      try {
        const b = await s.start(tmp);
        starts.push(b.startupMs);
        try {
          if (round === 0) {
            await sleep(10000);
            fresh = rssMiB(b.proc.pid!);
            await lightWorkload(b.port);
            await sleep(10000);
            after = rssMiB(b.proc.pid!);
          }
        } finally {
          await stopProc(b.proc, 10000)();
        }
      } finally {
        rmSync(tmp, { recursive: true, force: true });
      }
    }
    starts.sort((a, b) => a - b);
    rows.push({ name: s.name, startupMs: starts[1]!, freshMiB: fresh.rss, afterMiB: after.rss, freshAnonMiB: fresh.anon, afterAnonMiB: after.anon });
  }
  const w = Math.max(...rows.map((r) => r.name.length));
  const both = (rss: number, anon: number) => `${rss.toFixed(1)} MiB (${anon.toFixed(1)})`;
  process.stdout.write(`${'broker'.padEnd(w)}  start-up (median of 3)  idle RSS fresh (anon)  idle RSS after light workload (anon)\n`);
  for (const r of rows) {
    process.stdout.write(`${r.name.padEnd(w)}  ${`${r.startupMs.toFixed(0)} ms`.padStart(22)}  ${both(r.freshMiB, r.freshAnonMiB).padStart(21)}  ${both(r.afterMiB, r.afterAnonMiB).padStart(36)}\n`);
  }
  return rows;
}

if (import.meta.url === `file://${process.argv[1]}`) await runFootprintBench();
