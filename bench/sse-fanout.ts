/**
 * SSE fan-out 1 → 1 000: one MQTT publisher (the raw-socket load generator of bench/mqtt, QoS 0, 64-byte payloads)
 * and 1 000 SSE streams (GET /api/v1/messaging/sse for a token, then GET /api/v1/messaging/sse/stream/:token) on
 * the same destination, against a broker in its own process (authentication off, the Node flags of bench/mqtt). The
 * publisher is paced at `SSE_RATE` messages/s (default 100, i.e. 100 000 deliveries/s asked for); the figure is the
 * events the streams received per second over a `BENCH_SECONDS` window (default 3) and how many of the published
 * messages an average stream got (a stream holds at most `maxDepth` = 1 message while its socket is full, so a
 * broker that cannot keep up drops rather than queues). Not a test: the numbers vary with the machine.
 * `tsx bench/sse-fanout.ts` alone, or part of `npm run bench`.
 */
import { START_ENV, START_FLAGS, switchyardArgs } from './start-flags.js';
import { spawn } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { request, Agent } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { LoadClient, publishPacket } from './mqtt/loadgen.js';
import { freePort, stopProc, waitLine } from './procs.js';
import { fmt, isMain, printReport, type BenchReport } from './report.js';

const ROOT = resolve(import.meta.dirname, '..');
const STREAMS = 1000;
const RATE = Number(process.env.SSE_RATE ?? 100);
const DURATION = Number(process.env.BENCH_SECONDS ?? 3) * 1000;
const NODE_FLAGS = START_FLAGS; // npm start's (bench/start-flags.ts)
const TOPIC = 'bench/sse';

const agent = new Agent({ keepAlive: false, maxSockets: Infinity });

function get(port: number, path: string): Promise<string> {
  return new Promise((res, rej) => {
    request({ host: '127.0.0.1', port, path, agent }, (r) => {
      let body = '';
      r.on('data', (d) => (body += d));
      r.on('end', () => (r.statusCode === 200 ? res(body) : rej(new Error(`${path}: ${r.statusCode} ${body}`))));
    })
      .on('error', rej)
      .end();
  });
}

/** An SSE stream counting its `event:` lines; resolves once the `: connected` comment arrived. */
function stream(port: number, token: string, counts: Int32Array, i: number): Promise<() => void> {
  return new Promise((res, rej) => {
    const req = request({ host: '127.0.0.1', port, path: `/api/v1/messaging/sse/stream/${token}?destinationName=${encodeURIComponent(TOPIC)}`, agent }, (r) => {
      if (r.statusCode !== 200) return rej(new Error(`stream: ${r.statusCode}`));
      let open = false;
      r.on('data', (d: Buffer) => {
        // an event starts with "event:" at the start of a line; count them (a chunk may hold several)
        let at = d.indexOf('event:');
        while (at !== -1) {
          counts[i]!++;
          at = d.indexOf('event:', at + 6);
        }
        if (!open) {
          open = true;
          res(() => req.destroy());
        }
      });
    });
    req.on('error', (e) => (req.destroyed ? undefined : rej(e)));
    req.end();
  });
}

export async function run(): Promise<BenchReport> {
  const tmp = mkdtempSync(join(tmpdir(), 'switchyard-bench-sse-'));
  const configDir = join(tmp, 'cfg');
  mkdirSync(configDir);
  for (const f of readdirSync(join(ROOT, 'config'))) if (f.endsWith('.yaml') && f !== 'AuthManager.yaml') copyFileSync(join(ROOT, 'config', f), join(configDir, f));
  writeFileSync(join(configDir, 'AuthManager.yaml'), 'AuthManager:\n  authenticationEnabled: false\n');
  const mqttPort = await freePort();
  const proc = spawn(process.execPath, [...NODE_FLAGS, ...switchyardArgs()], {
    cwd: ROOT,
    env: { ...process.env, ...START_ENV, SWITCHYARD_CONFIG_DIR: configDir, SWITCHYARD_DATA_DIR: join(tmp, 'data'), SWITCHYARD_REST_PORT: '0', SWITCHYARD_REST_HOST: '127.0.0.1', SWITCHYARD_MQTT_PORT: String(mqttPort), SWITCHYARD_MQTT_WS_PORT: '0', SWITCHYARD_MQTT_HOST: '127.0.0.1', SWITCHYARD_LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const stop = stopProc(proc);
  const closers: Array<() => void> = [];
  try {
    const rest = Number((await waitLine(proc, /SWITCHYARD_READY rest=(\d+)/, 'switchyard'))[1]);
    proc.stdout!.resume();
    proc.stderr!.resume();
    const counts = new Int32Array(STREAMS);
    for (let i = 0; i < STREAMS; i += 100) {
      const batch = await Promise.all(
        Array.from({ length: Math.min(100, STREAMS - i) }, async (_, k) => stream(rest, await get(rest, `/api/v1/messaging/sse?destination=${encodeURIComponent(TOPIC)}`), counts, i + k)),
      );
      closers.push(...batch);
    }
    const pub = await LoadClient.connect(mqttPort, 'sse-pub');
    closers.push(() => pub.close());
    const one = publishPacket(TOPIC, Buffer.alloc(64, 's'), 0);
    let published = 0;
    const t0 = performance.now();
    const timer = setInterval(() => {
      const due = Math.floor(((performance.now() - t0) / 1000) * RATE);
      if (due > published && pub.socket.writableLength < 64 * 1024) {
        pub.socket.write(Buffer.concat(Array(due - published).fill(one)));
        published = due;
      }
    }, 1);
    const sum = () => counts.reduce((a, b) => a + b, 0);
    await new Promise((r) => setTimeout(r, 1000)); // warm-up
    const c0 = sum();
    const p0 = published;
    const w0 = performance.now();
    await new Promise((r) => setTimeout(r, DURATION));
    const c1 = sum();
    const p1 = published;
    const secs = (performance.now() - w0) / 1000;
    clearInterval(timer);
    const rate = (c1 - c0) / secs;
    const offered = ((p1 - p0) * STREAMS) / secs;
    return {
      title: `SSE fan-out 1 → ${fmt(STREAMS)} streams (publisher paced at ${fmt(RATE)} msg/s over MQTT, ${DURATION / 1000} s window)`,
      rows: [
        ['deliveries asked for (msg/s × streams)', fmt(offered)],
        ['events received by the streams per second', fmt(rate)],
        ['share delivered', `${((rate / offered) * 100).toFixed(1)} %`],
      ],
      target: 'none set (measured and reported, issue 25 item 5)',
      figures: { deliveries: rate, offered },
    };
  } finally {
    for (const c of closers) c();
    await stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}

if (isMain(import.meta.url)) printReport(await run());
