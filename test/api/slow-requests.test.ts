import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { startServer, type TestServer } from '../helpers.js';
import { SseClient } from '../sse-client.js';

/**
 * Slow REST requests (issue 20 item 10): bodies sent byte by byte were never cut (300 connections still open after
 * 321 s). Now a request must arrive whole within RestApi.requestTimeout (408, connection closed), and one address may
 * have at most RestApi.maxSlowRequestsPerAddress requests whose body is still arriving (one more: 429, closed).
 */
const TIMEOUT_MS = 2000;
const CAP = 4;

interface SlowRequest {
  socket: Socket;
  /** Everything the server sent. */
  received(): string;
  /** ms from the first byte until the server closed the connection (undefined: still open at `within`). */
  closed(within: number): Promise<number | undefined>;
  stop(): void;
}

/** POST /api/v1/login announcing a 1000-byte body and sending one byte every 200 ms (the socket is never idle). */
function slowRequest(port: number): Promise<SlowRequest> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let data = '';
    let closedAt: number | undefined;
    const t0 = Date.now();
    const waiters: Array<() => void> = [];
    socket.on('data', (b) => (data += b.toString('latin1')));
    socket.on('error', () => {});
    socket.on('close', () => {
      closedAt = Date.now() - t0;
      clearInterval(drip);
      waiters.splice(0).forEach((w) => w());
    });
    let drip: NodeJS.Timeout;
    socket.once('connect', () => {
      socket.write('POST /api/v1/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{');
      drip = setInterval(() => {
        if (!socket.destroyed) socket.write(' ');
      }, 200);
      resolve({
        socket,
        received: () => data,
        closed: (within) =>
          closedAt !== undefined
            ? Promise.resolve(closedAt)
            : new Promise((res) => {
                const t = setTimeout(() => res(undefined), within);
                waiters.push(() => {
                  clearTimeout(t);
                  res(closedAt);
                });
              }),
        stop: () => {
          clearInterval(drip);
          socket.destroy();
        },
      });
    });
    socket.once('error', reject);
  });
}

describe('REST slow requests', () => {
  let s: TestServer;
  let port: number;
  const open: SlowRequest[] = [];
  before(async () => {
    s = await startServer({ overrides: { RestApi: { requestTimeout: TIMEOUT_MS, maxSlowRequestsPerAddress: CAP } } });
    await s.app.listen({ port: 0, host: '127.0.0.1' });
    port = (s.app.server.address() as { port: number }).port;
  });
  after(async () => {
    for (const r of open) r.stop();
    await s?.close();
  });

  test('REST - bodies sent byte by byte are answered 408 and closed after RestApi.requestTimeout; a normal request meanwhile succeeds', async () => {
    const slow = await Promise.all(Array.from({ length: CAP - 1 }, () => slowRequest(port)));
    open.push(...slow);
    // meanwhile an ordinary request is answered
    const ping = await fetch(`http://127.0.0.1:${port}/api/v1/ping`);
    assert.equal(ping.status, 200);
    const login = await fetch(`http://127.0.0.1:${port}/api/v1/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username: 'admin', password: s.adminPassword }),
    });
    assert.equal(login.status, 200, await login.text());
    const times = await Promise.all(slow.map((r) => r.closed(TIMEOUT_MS * 5 + 10_000)));
    console.log(`# ${slow.length} byte-by-byte bodies with requestTimeout ${TIMEOUT_MS} ms: closed after ${times.join(', ')} ms`);
    for (const [i, r] of slow.entries()) {
      assert.notEqual(times[i], undefined, 'the slow request is cut');
      assert.ok(times[i]! >= TIMEOUT_MS - 100, `not before the timeout: ${times[i]} ms`);
      const text = r.received();
      assert.match(text, /^HTTP\/1\.1 408 /, `answered 408: ${JSON.stringify(text.slice(0, 200))}`);
      const body = JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4)) as { status: string };
      assert.equal(typeof body.status, 'string');
    }
  });

  test('REST - a server-sent event stream outlives RestApi.requestTimeout (only receiving the request is timed)', async () => {
    const base = `http://127.0.0.1:${port}`;
    const token = await (await fetch(`${base}/api/v1/server/log/sse`, { headers: s.auth })).text();
    const c = new SseClient(`${base}/api/v1/server/log/sse/stream/${token}`, s.auth);
    try {
      await c.started;
      assert.equal(c.status, 200);
      await new Promise((r) => setTimeout(r, TIMEOUT_MS * 2));
      s.rt.log.warn('slow-requests: a line after twice the request timeout');
      await c.waitFor((ev) => ev.some((e) => e.data.includes('a line after twice the request timeout')), 5000);
    } finally {
      c.close();
    }
  });

  test(`REST - one address has at most ${CAP} requests whose body is still arriving: one more is answered 429 and closed`, async () => {
    const slow = await Promise.all(Array.from({ length: CAP }, () => slowRequest(port)));
    open.push(...slow);
    await new Promise((r) => setTimeout(r, 300)); // their headers are in
    const extra = await slowRequest(port);
    open.push(extra);
    const closedAfter = await extra.closed(5000);
    const text = extra.received();
    console.log(`# request ${CAP + 1} with a body still arriving from one address: ${JSON.stringify(text.split('\r\n')[0])}, closed after ${closedAfter} ms`);
    assert.match(text, /^HTTP\/1\.1 429 /, JSON.stringify(text.slice(0, 200)));
    assert.match(JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4)).status as string, /body is still arriving/);
    assert.notEqual(closedAfter, undefined, 'its connection is closed');
    // requests without a body are not limited
    const ping = await fetch(`http://127.0.0.1:${port}/api/v1/ping`);
    assert.equal(ping.status, 200);
    // once the slow ones are cut, the address may send bodies again
    await Promise.all(slow.map((r) => r.closed(TIMEOUT_MS * 5 + 10_000)));
    const login = await fetch(`http://127.0.0.1:${port}/api/v1/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username: 'admin', password: s.adminPassword }),
    });
    assert.equal(login.status, 200);
  });
});
