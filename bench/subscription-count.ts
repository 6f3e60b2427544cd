/**
 * What the number of subscription actors costs the views that show it: BENCH_SUBSCRIPTIONS (default 100 000) durable
 * subscriptions (pull sinks, 100 filters) on an in-process broker (every service, authentication off, no MQTT
 * endpoint, system topics off), then `GET /api/v1/server/status` and `GET /api/v1/server/actors?kind=subscription&limit=1`
 * through `app.inject`, median of 201 requests each after 20 unmeasured. Both read the subscription count
 * (src/runtime/monitor.ts, inspector.ts); it is the engine's counter (Engine.durableSubscriptionCount), so neither
 * grows with the number of subscriptions. Run: `npx tsx bench/subscription-count.ts`; not part of `npm run bench`.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { buildApp } from '../src/api/app.js';
import { registerServices } from '../src/compose.js';
import { Runtime } from '../src/runtime/runtime.js';

const SUBSCRIPTIONS = Number(process.env.BENCH_SUBSCRIPTIONS ?? 100_000);
const CONFIG_DIR = resolve(import.meta.dirname ?? new URL('.', import.meta.url).pathname, '..', 'config');

const dir = await mkdtemp(join(tmpdir(), 'switchyard-bench-subcount-'));
const rt = await Runtime.create({
  configDir: CONFIG_DIR,
  stdoutLogs: false,
  overrides: {
    MessageDaemon: { dataDirectory: dir, logLevel: 'warn', enableSystemTopics: false },
    NetworkManager: { data: [] },
    RestApi: { port: 0, hostnames: '127.0.0.1', enableCache: false },
    AuthManager: { authenticationEnabled: false },
  },
} as never);
registerServices(rt);
await rt.start();
const app = await buildApp(rt);
try {
  const engine = rt.engine!;
  for (let i = 0; i < SUBSCRIPTIONS; i++) engine.subscribe({ sessionId: `bench-${i}`, filter: `bench/${i % 100}`, durable: true, sink: { kind: 'pull' } });
  const median = async (url: string): Promise<number> => {
    for (let i = 0; i < 20; i++) await app.inject(url);
    const times: number[] = [];
    for (let i = 0; i < 201; i++) {
      const t0 = process.hrtime.bigint();
      const r = await app.inject(url);
      times.push(Number(process.hrtime.bigint() - t0) / 1e6);
      if (r.statusCode !== 200) throw new Error(`${url}: ${r.statusCode} ${r.body}`);
    }
    return times.sort((a, b) => a - b)[100]!;
  };
  for (const url of ['/api/v1/server/status', '/api/v1/server/actors?kind=subscription&limit=1']) {
    console.log(`${SUBSCRIPTIONS} durable subscriptions: GET ${url} median ${(await median(url)).toFixed(3)} ms`);
  }
} finally {
  await app.close();
  await rt.stop();
  await rm(dir, { recursive: true, force: true });
}
