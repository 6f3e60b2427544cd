import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { startServer, waitUntil, type TestServer } from '../helpers.js';
import { b64, unb64 } from '../rest-client.js';
import { createUser, groupId } from '../security/helpers.js';
import { MAX_TOKENS_PER_USER } from '../../src/api/tokens.js';

/**
 * "The token replaces authentication for the stream": both SSE streams open with the token alone, as a browser
 * EventSource from another origin would (no Authorization header, no cookie), here with a real `curl -N`.
 */
describe('SSE stream tokens', () => {
  let s: TestServer;
  let base: string;
  const curls: ChildProcess[] = [];
  before(async () => {
    s = await startServer();
    await s.app.listen({ port: 0, host: '127.0.0.1' });
    base = `http://127.0.0.1:${(s.app.server.address() as { port: number }).port}`;
  });
  after(async () => {
    for (const c of curls) if (c.exitCode === null && c.signalCode === null) c.kill('SIGTERM');
    await s.close();
  });

  /** `curl -sN -D -` as a child process: everything it prints, and when the headers arrived. */
  function curl(url: string) {
    const started = performance.now();
    const proc = spawn('curl', ['-sN', '-D', '-', url], { stdio: ['ignore', 'pipe', 'pipe'] });
    curls.push(proc);
    const out = { text: '', headersAfterMs: -1, proc };
    proc.stdout!.on('data', (d: Buffer) => {
      out.text += d.toString();
      if (out.headersAfterMs < 0 && /\r\n\r\n/.test(out.text)) out.headersAfterMs = performance.now() - started;
    });
    return out;
  }
  const stop = async (p: ChildProcess) => {
    if (p.exitCode === null && p.signalCode === null) {
      const gone = new Promise((r) => p.once('exit', r));
      p.kill('SIGTERM');
      await gone;
    }
  };
  /** How long curl itself takes for a plain GET /api/v1/ping (process start included), to read the figures above against. */
  const curlBaseline = async () => {
    const c = curl(`${base}/api/v1/ping`);
    await new Promise((r) => c.proc.once('exit', r));
    return c.headersAfterMs;
  };
  /** curl's own time to the first byte (headers) of a stream it holds open for 1 s, in ms. */
  const curlTtfb = async (url: string) => {
    const proc = spawn('curl', ['-sN', '--max-time', '1', '-o', '/dev/null', '-w', '%{http_code} %{time_starttransfer}', url], { stdio: ['ignore', 'pipe', 'pipe'] });
    curls.push(proc);
    let out = '';
    proc.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    await new Promise((r) => proc.once('exit', r));
    const [code, seconds] = out.trim().split(' ');
    return { code: Number(code), ms: Number(seconds) * 1000 };
  };
  const tokenFor = async (path: string, headers: Record<string, string>) => {
    const r = await fetch(`${base}${path}`, { headers });
    assert.equal(r.status, 200, await r.clone().text());
    return r.text();
  };

  test('sse token - curl -N opens the log stream with the token alone; headers and a first comment arrive at once', async () => {
    const t = await tokenFor('/api/v1/server/log/sse', s.auth);
    const c = curl(`${base}/api/v1/server/log/sse/stream/${t}`);
    await waitUntil(() => c.text.includes(': connected'), 10000, 'log stream headers and first comment');
    console.log(`# log stream: headers after ${c.headersAfterMs.toFixed(1)} ms from curl's start; curl on /api/v1/ping: ${(await curlBaseline()).toFixed(1)} ms`);
    assert.match(c.text, /^HTTP\/1\.1 200/);
    assert.match(c.text, /content-type: text\/event-stream/i);
    s.rt.log.warn('entry for the curl stream');
    await waitUntil(() => c.text.includes('entry for the curl stream'), 10000, 'a live log entry');
    assert.match(c.text, /event: logEvent/);
    await stop(c.proc);
    const t2 = await tokenFor('/api/v1/server/log/sse', s.auth);
    const first = await curlTtfb(`${base}/api/v1/server/log/sse/stream/${t2}`);
    assert.equal(first.code, 200);
    console.log(`# log stream: curl time_starttransfer ${first.ms.toFixed(1)} ms (token alone)`);
  });

  test('sse token - curl -N opens the messaging stream with the token alone; headers arrive before any message', async () => {
    const t = await tokenFor('/api/v1/messaging/sse?destination=plant/%2B/temp', s.auth);
    const c = curl(`${base}/api/v1/messaging/sse/stream/${t}?destinationName=${encodeURIComponent('plant/+/temp')}`);
    await waitUntil(() => c.text.includes(': connected'), 10000, 'messaging stream headers and first comment');
    console.log(`# messaging stream: headers after ${c.headersAfterMs.toFixed(1)} ms from curl's start; curl on /api/v1/ping: ${(await curlBaseline()).toFixed(1)} ms`);
    assert.match(c.text, /^HTTP\/1\.1 200/);
    assert.match(c.text, /content-type: text\/event-stream/i);
    assert.doesNotMatch(c.text, /^event:/m, 'no message yet');
    await waitUntil(() => s.rt.engine!.subscriptionCount > 0, 5000, 'stream subscription');
    const pub = await s.inject({ method: 'POST', url: '/api/v1/messaging/publish', payload: { destinationName: 'plant/a/temp', message: { payload: b64('21.5') } } });
    assert.equal(pub.statusCode, 200);
    await waitUntil(() => /^data:/m.test(c.text), 10000, 'the message event');
    assert.match(c.text, /^event: plant\/\+\/temp$/m);
    const data = JSON.parse(/^data: (.*)$/m.exec(c.text)![1]!);
    assert.equal(unb64(data.payload), '21.5');
    assert.equal(data.destinationName, 'plant/a/temp');
    await stop(c.proc);
    await waitUntil(() => s.rt.engine!.subscriptionCount === 0, 5000, 'the subscription ends with curl');
    const t2 = await tokenFor('/api/v1/messaging/sse?destination=quiet/topic', s.auth);
    const first = await curlTtfb(`${base}/api/v1/messaging/sse/stream/${t2}?destinationName=quiet/topic`);
    assert.equal(first.code, 200);
    console.log(`# messaging stream: curl time_starttransfer ${first.ms.toFixed(1)} ms (token alone, no message published)`);
  });

  test('sse token - single use, and a wrong or missing token is a 403 JSON status without credentials', async () => {
    const t = await tokenFor('/api/v1/server/log/sse', s.auth);
    const first = curl(`${base}/api/v1/server/log/sse/stream/${t}`);
    await waitUntil(() => first.text.includes(': connected'), 10000, 'first use');
    await stop(first.proc);
    const again = await fetch(`${base}/api/v1/server/log/sse/stream/${t}`);
    assert.equal(again.status, 403);
    assert.deepEqual(await again.json(), { status: 'Token is unknown or has already been used' });
    const made = await fetch(`${base}/api/v1/messaging/sse/stream/not-a-token?destinationName=a`);
    assert.equal(made.status, 403);
    assert.deepEqual(await made.json(), { status: 'Token is unknown or has already been used' });
    const lt = await tokenFor('/api/v1/server/log/sse', s.auth);
    const wrongKind = await fetch(`${base}/api/v1/messaging/sse/stream/${lt}?destinationName=a`);
    assert.equal(wrongKind.status, 403);
    assert.deepEqual(await wrongKind.json(), { status: 'Token was issued for a log stream' });
  });

  test("sse token - the stream runs with the rights of the token's user, not of credentials sent with it", async () => {
    const bob = await createUser(s, 'sse-bob', 'correct-horse-battery', [await groupId(s, 'everyone')]);
    const t = await tokenFor('/api/v1/messaging/sse?destination=shared/x', bob.auth);
    // bob loses subscribe on shared/x before opening the stream; admin's credentials sent along change nothing
    const acl = await s.inject({
      method: 'PUT',
      url: '/api/v1/auth/resources/acl',
      payload: { resourceType: 'Topic', resourceKey: 'shared/x', entries: [{ principalType: 'IDENTITY', principalId: bob.uuid, effect: 'DENY', permissions: ['subscribe'] }] },
    });
    assert.equal(acl.statusCode, 200, acl.body);
    const r = await fetch(`${base}/api/v1/messaging/sse/stream/${t}?destinationName=shared/x`, { headers: s.auth });
    assert.equal(r.status, 403);
    assert.match((await r.json()).status, /sse-bob lacks subscribe on Topic shared\/x/);

    // a token whose user is deleted before it is used opens nothing
    const t2 = await tokenFor('/api/v1/messaging/sse?destination=other/y', bob.auth);
    const del = await s.inject({ method: 'DELETE', url: `/api/v1/auth/users/${bob.uuid}` });
    assert.equal(del.statusCode, 204, del.body);
    const gone = await fetch(`${base}/api/v1/messaging/sse/stream/${t2}?destinationName=other/y`);
    assert.equal(gone.status, 403);
    assert.deepEqual(await gone.json(), { status: 'The user this token was issued to no longer exists' });
  });

  test('sse token - outstanding tokens per user are capped (429), so token requests cannot grow memory', async () => {
    const carol = await createUser(s, 'sse-carol', 'correct-horse-battery', [await groupId(s, 'everyone')]);
    for (let i = 0; i < MAX_TOKENS_PER_USER; i++) {
      const r = await s.app.inject({ url: '/api/v1/messaging/sse?destination=c/d', headers: carol.auth });
      assert.equal(r.statusCode, 200);
    }
    const over = await s.app.inject({ url: '/api/v1/messaging/sse?destination=c/d', headers: carol.auth });
    assert.equal(over.statusCode, 429);
    assert.match(over.json().status, /Too many outstanding stream tokens for sse-carol/);
    const admin = await s.inject('/api/v1/server/log/sse');
    assert.equal(admin.statusCode, 200, 'another user is not affected');
  });
});
