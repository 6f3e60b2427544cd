/**
 * The NATS link reads a received message's header block from its bytes (src/links/nats-transport.ts parseHeaderBlock):
 * every lookup answers what reading the block as one UTF-8 text answers (the reference below, the reading before), for
 * the link's own header blocks and for arbitrary bytes (fast-check): first value of a name, trimmed, empty = absent.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { encodeHeaders, H, parseHeaderBlock } from '../../src/links/nats-transport.js';

/** The block read as text: a Map of the first value of each name (what parseHeaderBlock did before). */
function reference(block: Uint8Array): (k: string) => string | undefined {
  const text = Buffer.from(block.buffer, block.byteOffset, block.byteLength).toString('utf8');
  const map = new Map<string, string>();
  let at = text.indexOf('\r\n');
  while (at >= 0 && at + 2 < text.length) {
    const end = text.indexOf('\r\n', at + 2);
    const line = text.slice(at + 2, end < 0 ? text.length : end);
    const colon = line.indexOf(':');
    if (colon > 0) {
      const k = line.slice(0, colon);
      if (!map.has(k)) map.set(k, line.slice(colon + 1).trim());
    }
    at = end;
  }
  return (k) => {
    const v = map.get(k);
    return v === '' ? undefined : v;
  };
}

const NAMES = [...Object.values(H), 'X-Other', 'naïve', 'Sy-Qo', 'Sy-Qos2', ''];

function same(block: Uint8Array, names: string[]): void {
  const got = parseHeaderBlock(block);
  const want = reference(block);
  for (const k of names) assert.equal(got(k), want(k), `${JSON.stringify(k)} in ${JSON.stringify(Buffer.from(block).toString('latin1'))}`);
}

test('links - the link headers of a message read back from their bytes, every value', () => {
  const block = encodeHeaders(
    {
      topic: 't',
      payload: Buffer.alloc(0),
      qos: 1,
      retain: true,
      originServer: 'srv-é',
      hops: 2,
      contentType: ' text/plain ',
      correlationData: Buffer.from('corr'),
      userProperties: { a: 'b', ü: ['1', '2'] },
      responseTopic: 'reply/to',
      payloadFormat: 1,
      priority: 7,
      expiresAt: 1790000000000,
    },
    'srv:fed:0:42',
  );
  const get = parseHeaderBlock(block);
  assert.equal(get(H.qos), '1');
  assert.equal(get(H.retain), '1');
  assert.equal(get(H.origin), 'srv-é');
  assert.equal(get(H.contentType), 'text/plain');
  assert.equal(get(H.userProps), JSON.stringify({ a: 'b', ü: ['1', '2'] }));
  assert.equal(get(H.msgId), 'srv:fed:0:42');
  assert.equal(get('Nope'), undefined);
  same(block, NAMES);
});

test('links - any header block reads as the text reading does (fast-check)', () => {
  const name = fc.oneof(fc.constantFrom(...NAMES), fc.string({ maxLength: 6 }));
  const value = fc.oneof(fc.string({ maxLength: 12 }), fc.constantFrom('', ' ', ' 1 ', 'a:b', '\u00e9\u4e2d', ' x\t'));
  const line = fc.oneof(
    fc.tuple(name, value).map(([k, v]) => `${k}:${v}`),
    fc.string({ maxLength: 10 }),
    fc.constantFrom('', ':', '\r', '\n', ':x'),
  );
  const textBlock = fc.array(line, { maxLength: 8 }).map((ls) => Buffer.from(['NATS/1.0', ...ls].join('\r\n') + '\r\n\r\n', 'utf8'));
  // raw bytes too: invalid UTF-8, lone CR or LF, no status line
  const rawBlock = fc.uint8Array({ maxLength: 64 }).map((u) => Buffer.from(u));
  const mixed = fc.tuple(textBlock, rawBlock).map(([a, r]) => Buffer.concat([a.subarray(0, a.length - 2), r, Buffer.from('\r\n')]));
  fc.assert(
    fc.property(fc.oneof(textBlock, rawBlock, mixed), fc.array(name, { maxLength: 4 }), (block, extra) => {
      // lookups of names that occur in the block as well as the fixed ones
      const text = block.toString('utf8');
      const inBlock = text.split('\r\n').map((l) => l.slice(0, Math.max(0, l.indexOf(':'))));
      same(block, [...NAMES, ...extra, ...inBlock]);
    }),
    { numRuns: 3000 },
  );
});
