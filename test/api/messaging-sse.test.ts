import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, waitUntil, type TestServer } from '../helpers.js';
import { b64, unb64 } from '../rest-client.js';
import { SseClient } from '../sse-client.js';

describe('messaging SSE stream', () => {
  let s: TestServer;
  let base: string;
  before(async () => {
    s = await startServer({ auth: false, overrides: { RestApi: { sseTokenLifetime: 1000 } } });
    await s.app.listen({ port: 0, host: '127.0.0.1' });
    base = `http://127.0.0.1:${(s.app.server.address() as { port: number }).port}`;
  });
  after(async () => s.close());

  /** A caller with its own cookie jar, over real HTTP. */
  function caller() {
    let cookie = '';
    return {
      get cookie() {
        return cookie;
      },
      async fetch(path: string, init: RequestInit = {}) {
        const r = await fetch(`${base}${path}`, { ...init, headers: { ...(init.headers ?? {}), ...(cookie ? { cookie } : {}) } });
        const set = r.headers.getSetCookie().map((c) => c.split(';')[0]);
        if (set.length) cookie = set.join('; ');
        return r;
      },
    };
  }
  const publish = (destinationName: string, text: string, dataMap: Record<string, unknown> = {}) =>
    fetch(`${base}/api/v1/messaging/publish`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ destinationName, message: { payload: b64(text), dataMap } }),
    }).then((r) => assert.equal(r.status, 200));

  test('sse - a wildcard stream with a selector receives exactly the matching messages as named events', async () => {
    const c = caller();
    const dest = 'plant/+/alarm';
    const token = await (await c.fetch(`/api/v1/messaging/sse?destination=${encodeURIComponent(dest)}`)).text();
    assert.match(token, /^[0-9a-f-]{36}$/);
    const q = new URLSearchParams({ destinationName: dest, filter: 'severity >= 3', maxDepth: '100' });
    const sse = new SseClient(`${base}/api/v1/messaging/sse/stream/${token}?${q}`, { cookie: c.cookie });
    await sse.started;
    assert.equal(sse.status, 200);
    assert.match(sse.contentType, /^text\/event-stream/);
    await waitUntil(() => s.rt.engine!.subscriptionCount > 0, 5000, 'stream subscription');
    await publish('plant/boiler/alarm', 'b-high', { severity: 5 });
    await publish('plant/boiler/alarm', 'b-low', { severity: 1 });
    await publish('plant/pump/alarm', 'p-high', { severity: 3 });
    await publish('plant/pump/status', 'ignored', { severity: 9 });
    await sse.waitFor((ev) => ev.length >= 2);
    await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(
      sse.events.map((e) => e.event),
      [dest, dest],
    );
    const msgs = sse.events.map((e) => JSON.parse(e.data));
    assert.deepEqual(msgs.map((m) => unb64(m.payload)), ['b-high', 'p-high']);
    assert.deepEqual(msgs.map((m) => m.destinationName), ['plant/boiler/alarm', 'plant/pump/alarm']);
    assert.equal(msgs[0].dataMap.severity, 5);
    sse.close();
    await sse.done;
    await waitUntil(() => s.rt.engine!.subscriptionCount === 0, 5000, 'the subscription is cleaned up when the client goes away');
  });

  test('sse - retainMessage=true delivers the retained message first', async () => {
    await fetch(`${base}/api/v1/messaging/publish`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ destinationName: 'lamp/state', message: { payload: b64('on') }, retain: true }),
    });
    const c = caller();
    const token = await (await c.fetch('/api/v1/messaging/sse?destination=lamp/state')).text();
    const sse = new SseClient(`${base}/api/v1/messaging/sse/stream/${token}?destinationName=lamp/state&retainMessage=true`, { cookie: c.cookie });
    await sse.waitFor((ev) => ev.length === 1);
    assert.equal(unb64(JSON.parse(sse.events[0].data).payload), 'on');
    sse.close();
    await sse.done;
  });

  test('sse - a reused token, an expired token and a token for another destination are refused with 403', async () => {
    const c = caller();
    const t1 = await (await c.fetch('/api/v1/messaging/sse?destination=a/b')).text();
    const first = new SseClient(`${base}/api/v1/messaging/sse/stream/${t1}?destinationName=a/b`, { cookie: c.cookie });
    await first.started;
    assert.equal(first.status, 200);
    first.close();
    await first.done;
    const reuse = await c.fetch(`/api/v1/messaging/sse/stream/${t1}?destinationName=a/b`);
    assert.equal(reuse.status, 403);
    assert.deepEqual(await reuse.json(), { status: 'Token is unknown or has already been used' });

    const t2 = await (await c.fetch('/api/v1/messaging/sse?destination=a/b')).text();
    await new Promise((r) => setTimeout(r, 1100));
    const expired = await c.fetch(`/api/v1/messaging/sse/stream/${t2}?destinationName=a/b`);
    assert.equal(expired.status, 403);
    assert.deepEqual(await expired.json(), { status: 'Token has expired' });

    const t3 = await (await c.fetch('/api/v1/messaging/sse?destination=a/b')).text();
    const wrong = await c.fetch(`/api/v1/messaging/sse/stream/${t3}?destinationName=a/%23`);
    assert.equal(wrong.status, 403);
    assert.match((await wrong.json()).status, /issued for destination a\/b, not a\/#/);

  });

  test('sse - the token alone opens the stream, from any session (it replaces authentication for the stream)', async () => {
    const c = caller();
    const t = await (await c.fetch('/api/v1/messaging/sse?destination=a/b')).text();
    const other = caller();
    await other.fetch('/api/v1/messaging/sse?destination=x'); // gets its own session cookie
    const sse = new SseClient(`${base}/api/v1/messaging/sse/stream/${t}?destinationName=a/b`, { cookie: other.cookie });
    await sse.started;
    assert.equal(sse.status, 200);
    sse.close();
    await sse.done;
  });

  test('sse - bad input: missing destination, bad filter, bad maxDepth are 400', async () => {
    const c = caller();
    const noDest = await c.fetch('/api/v1/messaging/sse');
    assert.equal(noDest.status, 400);
    assert.match((await noDest.json()).status, /destination is required/);
    const t = await (await c.fetch('/api/v1/messaging/sse?destination=a')).text();
    for (const [q, msg] of [
      ['', /destinationName is required/],
      ['destinationName=a&filter=x%20%3D', /Invalid selector/],
      ['destinationName=a&maxDepth=zero', /maxDepth/],
      ['destinationName=a&retainMessage=maybe', /retainMessage must be true or false/],
    ] as const) {
      const r = await c.fetch(`/api/v1/messaging/sse/stream/${t}?${q}`);
      assert.equal(r.status, 400, q);
      assert.match((await r.json()).status, msg);
    }
  });
});
