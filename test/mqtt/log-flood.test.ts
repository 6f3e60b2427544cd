import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { LogLimiter } from '../../src/log-limit.js';
import type { LogEntry } from '../../src/log.js';
import { startServer, type TestServer } from '../helpers.js';
import { RawClient, mqttPort } from './helpers.js';

/**
 * Log floods (issue 20 item 9): a client that reconnects in a loop and sends a malformed acknowledgement each time
 * wrote one WARN line per connection (20 330 in 10 minutes). Per-packet faults are now rate-limited
 * (src/log-limit.ts): a burst of lines per address and kind, then one line per interval carrying the count of the
 * lines not written.
 */

/** A pino logger whose lines land in `lines` (parsed). */
function memoryLogger(lines: Array<Record<string, unknown>>) {
  return pino({ level: 'debug', base: undefined }, { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) });
}

describe('log limit', () => {
  test('log limit - one line per key and interval, then a summary line with the count of the others', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const log = memoryLogger(lines);
    const limiter = new LogLimiter({ intervalMs: 1000 });
    try {
      for (let i = 0; i < 50; i++) limiter.warn(log, 'bad-ack', 'conn-1', { connection: 1, i }, `bad ack ${i}`);
      limiter.warn(log, 'bad-ack', 'conn-2', { connection: 2 }, 'bad ack from another connection');
      limiter.warn(log, 'other-kind', 'conn-1', { connection: 1 }, 'another kind of fault');
      assert.deepEqual(
        lines.map((l) => l.msg),
        ['bad ack 0', 'bad ack from another connection', 'another kind of fault'],
        'one line per connection and kind',
      );
      assert.equal(limiter.suppressed, 49);
      // the interval's timer writes the summary (waited for: a loaded machine runs timers late)
      const end = Date.now() + 5000;
      while (lines.length < 4 && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
      const summary = lines[3]!;
      assert.equal(summary.suppressed, 49, JSON.stringify(summary));
      assert.match(String(summary.msg), /^bad ack 49 \(and 49 more like it in the last 1 s/);
      assert.equal(lines.length, 4, 'nothing else');
      // the summary took the interval's line; once the key is quiet for an interval it may log again
      limiter.warn(log, 'bad-ack', 'conn-1', { connection: 1 }, 'suppressed again');
      assert.equal(lines.length, 4);
      // two intervals end (called here, so that a late timer cannot end only one of them before the next line): the
      // first writes the summary of the one suppressed line, the second gives the quiet key its line back
      limiter.endInterval();
      assert.equal(lines[4]?.suppressed, 1);
      limiter.endInterval();
      limiter.warn(log, 'bad-ack', 'conn-1', { connection: 1 }, 'logged again');
      assert.equal(lines.at(-1)?.msg, 'logged again');
    } finally {
      limiter.close();
    }
  });

  test('log limit - a burst per key, then one line per interval; keys beyond maxKeys share one budget per kind', () => {
    const lines: Array<Record<string, unknown>> = [];
    const log = memoryLogger(lines);
    const limiter = new LogLimiter({ intervalMs: 60_000, maxKeys: 3 });
    try {
      for (let i = 0; i < 100; i++) limiter.warn(log, 'k', '10.0.0.1', {}, `x${i}`, 5);
      assert.equal(lines.length, 5);
      for (let i = 0; i < 100; i++) limiter.warn(log, 'k', `10.0.1.${i}`, {}, `y${i}`, 5);
      // two more keys fit (3 in all, one line each), then the other 98 addresses share `k|*` and its 5 lines
      assert.equal(lines.length, 5 + 1 + 1 + 5, String(lines.length));
    } finally {
      limiter.close();
    }
    assert.deepEqual(
      lines.slice(12).map((l) => l.suppressed),
      [95, 93],
      'close() reports what was suppressed',
    );
  });
});

describe('mqtt log flood', () => {
  let server: TestServer;
  let port: number;
  const logs: LogEntry[] = [];
  before(async () => {
    server = await startServer({ auth: false });
    port = await mqttPort(server);
    server.rt.logs.monitor.subscribe((e) => logs.push(e));
  });
  after(async () => {
    await server?.close();
  });

  test('mqtt log flood - 300 connections each sending a malformed PUBACK write a bounded number of WARN lines, then a summary with the count', async () => {
    const N = 300;
    const t0 = Date.now();
    for (let i = 0; i < N; i += 20) {
      await Promise.all(
        Array.from({ length: Math.min(20, N - i) }, async (_, k) => {
          const c = await RawClient.open(port, 5);
          try {
            await c.connect({ clientId: `flood-${i + k}`, clean: true });
            c.write(Buffer.from('4000', 'hex')); // PUBACK without a packet id: malformed
            await c.waitClosed();
          } finally {
            c.destroy();
          }
        }),
      );
    }
    const floodMs = Date.now() - t0;
    await new Promise((r) => setTimeout(r, 100));
    const warns = () => logs.filter((e) => e.level === 30000 && e.message.includes('malformed acknowledgement'));
    const during = warns().length;
    // the interval (10 s) ends: one summary line with the count of the lines not written
    const deadline = Date.now() + 15_000;
    while (!warns().some((e) => /suppressed=/.test(e.message)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    const all = warns();
    const summary = all.find((e) => /suppressed=/.test(e.message));
    const suppressed = Number(/suppressed=(\d+)/.exec(summary?.message ?? '')?.[1] ?? NaN);
    console.log(
      `# ${N} connections with a malformed PUBACK in ${floodMs} ms: ${during} WARN lines during the flood (1 per connection before), ` +
        `${all.length} with the summary line; the summary counts ${suppressed} lines not written`,
    );
    assert.ok(during <= 35, `WARN lines during the flood: ${during}`);
    assert.ok(summary, 'a summary line');
    assert.equal(during + suppressed, N, 'every malformed acknowledgement is either logged or counted');
    assert.match(summary!.message, /more like it in the last 10 s/);
    const file = readFileSync(join(server.dataDir, 'log', 'messaging.log'), 'utf8');
    const fileLines = file.split('\n').filter((l) => l.includes('malformed acknowledgement')).length;
    assert.equal(fileLines, all.length, 'the log file has the same lines');
  });
});
