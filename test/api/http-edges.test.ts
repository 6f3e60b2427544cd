import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { MAX_REQUEST_HEAD_BYTES } from '../../src/api/limits.js';
import { startServer, type TestServer } from '../helpers.js';

/** Answers from below the router (the HTTP parser) are JSON too, and the WADL document's ids are unique. */
describe('HTTP edges and WADL', () => {
  let s: TestServer;
  let port: number;
  before(async () => {
    s = await startServer();
    await s.app.listen({ port: 0, host: '127.0.0.1' });
    port = (s.app.server.address() as { port: number }).port;
  });
  after(async () => s.close());

  /** Sends raw bytes, resolves with everything the server wrote before closing. */
  const raw = (bytes: string) =>
    new Promise<string>((resolve, reject) => {
      const sock = connect(port, '127.0.0.1');
      let out = '';
      sock.on('data', (d) => (out += d.toString()));
      sock.on('close', () => resolve(out));
      sock.on('error', (e) => (out ? resolve(out) : reject(e)));
      sock.write(bytes);
      setTimeout(() => sock.destroy(), 5000).unref();
    });
  const parse = (res: string) => {
    const [head, body] = res.split('\r\n\r\n');
    return { statusLine: head!.split('\r\n')[0]!, head: head!, body: body ?? '' };
  };

  test('http - headers over the limit answer 431 with a JSON status', async () => {
    const r = parse(await raw(`GET /api/v1/ping HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(MAX_REQUEST_HEAD_BYTES)}\r\n\r\n`));
    assert.match(r.statusLine, /^HTTP\/1\.1 431 /);
    assert.match(r.head, /content-type: application\/json/i);
    assert.match(JSON.parse(r.body).status, /Request headers are too large: the limit is \d+ bytes/);
  });

  test('http - a request the parser cannot read answers 400 with a JSON status', async () => {
    const r = parse(await raw('THIS IS NOT HTTP\r\n\r\n'));
    assert.match(r.statusLine, /^HTTP\/1\.1 400 /);
    assert.match(JSON.parse(r.body).status, /Malformed HTTP request/);
    const ok = await fetch(`http://127.0.0.1:${port}/api/v1/ping`);
    assert.equal(ok.status, 200, 'the server keeps serving');
  });

  test('wadl - every method id is unique and every response element exists once in the grammar', async () => {
    const wadl = (await s.inject('/application.wadl')).body;
    const xsd = (await s.inject('/application.wadl/xsd0.xsd')).body;
    const ids = [...wadl.matchAll(/<method name="[A-Z]+" id="([^"]+)"/g)].map((m) => m[1]!);
    assert.ok(ids.length > 60, `methods: ${ids.length}`);
    const dup = ids.filter((id, i) => ids.indexOf(id) !== i);
    assert.deepEqual(dup, [], 'no repeated method id');
    assert.ok(ids.includes('getAuthUsers') && ids.includes('getAuthUsersByUserUuid'), 'a path parameter is part of the id');
    const elements = [...xsd.matchAll(/^ {2}<xs:element name="([^"]+)"/gm)].map((m) => m[1]!);
    assert.deepEqual(elements.filter((e, i) => elements.indexOf(e) !== i), [], 'no repeated top-level element');
    for (const ref of wadl.matchAll(/element="sy:([^"]+)"/g)) assert.ok(elements.includes(ref[1]!), `${ref[1]} is in the grammar`);
  });
});
