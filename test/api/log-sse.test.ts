import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, type TestServer } from '../helpers.js';
import { SseClient } from '../sse-client.js';

describe('log SSE stream', () => {
  let s: TestServer;
  let base: string;
  before(async () => {
    s = await startServer({ overrides: { RestApi: { sseTokenLifetime: 1000 } } });
    await s.app.listen({ port: 0, host: '127.0.0.1' });
    const addr = s.app.server.address() as { port: number };
    base = `http://127.0.0.1:${addr.port}`;
  });
  after(async () => s.close());

  const token = async () => (await fetch(`${base}/api/v1/server/log/sse`, { headers: s.auth })).text();

  test('log - a stream receives stored entries, then each new entry as a logEvent', async () => {
    s.rt.log.info('before the stream opened');
    const t = await token();
    const c = new SseClient(`${base}/api/v1/server/log/sse/stream/${t}`, s.auth);
    await c.started;
    assert.equal(c.status, 200);
    assert.match(c.contentType, /^text\/event-stream/);
    await c.waitFor((ev) => ev.some((e) => e.data.includes('before the stream opened')));
    s.rt.log.warn({ queue: 'q1' }, 'live entry after subscribe');
    await c.waitFor((ev) => ev.some((e) => e.data.includes('live entry after subscribe')));
    const live = c.events.find((e) => e.data.includes('live entry'))!;
    assert.equal(live.event, 'logEvent');
    const entry = JSON.parse(live.data);
    assert.equal(entry.level, 30000);
    assert.equal(typeof entry.logNumber, 'number');
    assert.match(entry.message, /WARN live entry after subscribe \(server\) queue=q1/);
    c.close();
    await c.done;
  });

  test('log - the stream applies its filter to stored and live entries', async () => {
    const t = await token();
    const c = new SseClient(`${base}/api/v1/server/log/sse/stream/${t}?filter=${encodeURIComponent("message LIKE '%needle%'")}`, s.auth);
    await c.started;
    s.rt.log.info('hay');
    s.rt.log.info('a needle here');
    await c.waitFor((ev) => ev.some((e) => e.data.includes('a needle here')));
    assert.ok(c.events.every((e) => e.data.includes('needle')), 'only matching entries');
    c.close();
    await c.done;
  });

  test('log - a token is single use: the second use is refused with 403', async () => {
    const t = await token();
    const first = new SseClient(`${base}/api/v1/server/log/sse/stream/${t}`, s.auth);
    await first.started;
    assert.equal(first.status, 200);
    first.close();
    await first.done;
    const again = await fetch(`${base}/api/v1/server/log/sse/stream/${t}`, { headers: s.auth });
    assert.equal(again.status, 403);
    assert.deepEqual(await again.json(), { status: 'Token is unknown or has already been used' });
  });

  test('log - an expired token is refused with 403', async () => {
    const t = await token();
    await new Promise((r) => setTimeout(r, 1100));
    const r = await fetch(`${base}/api/v1/server/log/sse/stream/${t}`, { headers: s.auth });
    assert.equal(r.status, 403);
    assert.deepEqual(await r.json(), { status: 'Token has expired' });
  });

  test('log - a bad filter on the stream is a 400 and does not use the token up', async () => {
    const t = await token();
    const bad = await fetch(`${base}/api/v1/server/log/sse/stream/${t}?filter=${encodeURIComponent('level >')}`, { headers: s.auth });
    assert.equal(bad.status, 400);
    assert.match((await bad.json()).status, /Invalid selector at position 7/);
    const c = new SseClient(`${base}/api/v1/server/log/sse/stream/${t}`, s.auth);
    await c.started;
    assert.equal(c.status, 200);
    c.close();
    await c.done;
  });
});
