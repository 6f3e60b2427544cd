/**
 * Engine routing throughput with 100 000 subscriptions: a realistic mix over the topic space
 * `site/<n>/device/<m>/temp` (1 000 sites × 100 devices = 100 000 topics):
 *   - 85 000 exact subscriptions on distinct topics,
 *   -  5 000 `site/<n>/device/+/temp` (5 per site), 5 000 `site/+/device/<m>/temp` (50 per device number),
 *   -  5 000 `site/<n>/#` (5 per site).
 * Each subscription is its own session with a push sink that accepts everything (QoS 0). Every topic is published
 * once to warm up (creates the destinations and their cached routes), then random topics are published and
 * timed: messages/s published and deliveries/s.
 */
import { Engine, type Message, type PushSink } from '../src/engine/index.js';
import { fmt, isMain, printReport, type BenchReport } from './report.js';

const SITES = 1000;
const DEVICES = 100;
const MESSAGES = 500_000;

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

export async function run(): Promise<BenchReport> {
  const engine = new Engine({ defaultMaxDepth: 10 });
  let delivered = 0;
  const sink: PushSink = {
    kind: 'push',
    deliver(_sub, _msg: Message) {
      delivered++;
      return true;
    },
  };
  const topic = (n: number, m: number) => `site/${n}/device/${m}/temp`;
  const rand = rng(42);
  const t0 = performance.now();
  let subs = 0;
  // 85 000 distinct exact topics (a random 85 % of the space)
  const all: Array<[number, number]> = [];
  for (let n = 0; n < SITES; n++) for (let m = 0; m < DEVICES; m++) all.push([n, m]);
  for (let i = all.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [all[i], all[j]] = [all[j]!, all[i]!];
  }
  for (let i = 0; i < 85_000; i++) engine.subscribe({ sessionId: `s${subs++}`, filter: topic(...all[i]!), sink });
  for (let i = 0; i < 5_000; i++) engine.subscribe({ sessionId: `s${subs++}`, filter: `site/${i % SITES}/device/+/temp`, sink });
  for (let i = 0; i < 5_000; i++) engine.subscribe({ sessionId: `s${subs++}`, filter: `site/+/device/${i % DEVICES}/temp`, sink });
  for (let i = 0; i < 5_000; i++) engine.subscribe({ sessionId: `s${subs++}`, filter: `site/${i % SITES}/#`, sink });
  const subscribeMs = performance.now() - t0;

  const payload = Buffer.alloc(32, 1);
  for (let n = 0; n < SITES; n++) for (let m = 0; m < DEVICES; m++) void engine.publish(topic(n, m), { payload });
  const warmDeliveries = delivered;

  const topics: string[] = new Array(MESSAGES);
  for (let i = 0; i < MESSAGES; i++) topics[i] = topic(Math.floor(rand() * SITES), Math.floor(rand() * DEVICES));
  delivered = 0;
  const t1 = performance.now();
  for (let i = 0; i < MESSAGES; i++) void engine.publish(topics[i]!, { payload });
  const secs = (performance.now() - t1) / 1000;

  return {
    title: 'engine routing, 100 000 subscriptions (exact, +, #) over site/<n>/device/<m>/temp',
    rows: [
      ['subscriptions', fmt(engine.subscriptionCount)],
      ['subscribe time (ms)', fmt(subscribeMs)],
      ['destinations', fmt(engine.stats().destinations)],
      ['deliveries per message (warm-up, every topic once)', fmt(warmDeliveries / (SITES * DEVICES), 1)],
      ['messages published (timed)', fmt(MESSAGES)],
      ['elapsed (s)', fmt(secs, 2)],
      ['messages/s', fmt(MESSAGES / secs)],
      ['deliveries/s', fmt(delivered / secs)],
    ],
    target: 'none set (reported for comparison)',
  };
}

if (isMain(import.meta.url)) printReport(await run());
