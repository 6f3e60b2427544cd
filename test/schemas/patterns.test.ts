/**
 * Units of the linear-time pattern engine (src/schemas/patterns.ts) and the nesting scanners (src/schemas/depth.ts):
 * translated patterns answer as ECMAScript does, what RE2 cannot run is refused with the reason, the format checks
 * agree with ajv-formats' own, and the byte scanners agree with the decoded value's depth.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { encode as msgpackEncode } from '@msgpack/msgpack';
import { encode as cborEncode } from 'cbor-x';
import { PatternError, compilePattern, linearFormats, toRe2Syntax } from '../../src/schemas/patterns.js';
import { cborNestingExceeds, jsonNestingExceeds, msgpackNestingExceeds, valueNestingExceeds } from '../../src/schemas/depth.js';
import { compileChecker, MAX_PAYLOAD_DEPTH } from '../../src/schemas/formats.js';

const { fullFormats } = createRequire(import.meta.url)('ajv-formats/dist/formats.js') as { fullFormats: Record<string, unknown> };

describe('schema patterns on RE2', () => {
  test('schemas - patterns answer as ECMAScript (u flag) does: escapes, classes, white space, dot, surrogate pairs, Unicode properties', () => {
    const cases: Array<[string, string[]]> = [
      ['^[a-z]+\\d{2,3}$', ['abc12', 'abc1', 'ABC12', 'abc1234', 'abc123']],
      ['^\\u00e9t\\u00e9$', ['été', 'ete', 'étéé']],
      ['^\\u{1F600}+$', ['😀😀', '😀x', '']],
      ['^\\uD83D\\uDE00$', ['😀', '\uD83D', 'x']],
      ['^\\s+$', [' \t', '\u00a0\u2028\ufeff', '\u000b', 'x', '']],
      ['^\\S+$', ['ab', 'a\u00a0b', 'a b']],
      ['^[^\\s]+$', ['ab', 'a\u00a0b']],
      ['^.$', ['a', '😀', '\n', '\r', '\u2028', 'ab']],
      ['^[[:a]+$', ['[:a', 'a[', ':', 'b']],
      ['^\\p{L}+$', ['héllo', 'hello1']],
      ['^\\p{Script=Greek}+$', ['αβγ', 'abc']],
      ['^\\P{Lu}+$', ['abc', 'aBc']],
      ['^[\\b]$', ['\b', 'b']],
      ['\\bword\\b', ['a word here', 'swordfish']],
      ['^\\cJ$', ['\n', 'J']],
      ['^a\\0b$', ['a\u0000b', 'a0b']],
      ['^[^]$', ['x', '\n', '']],
      ['^a[]$', ['a', 'a]']],
      ['^(?<year>\\d{4})-(?:\\d{2})$', ['2024-01', '24-01']],
      ['^[\\-+]?\\d+(\\.\\d+)?$', ['-1.5', '+2', '1.', 'x']],
      ['^\\/path\\/\\w+$', ['/path/x_1', '/path/']],
      ['colou?r', ['my colour', 'my color', 'colr']],
      ['^$', ['', 'x']],
    ];
    for (const [p, inputs] of cases) {
      const es = new RegExp(p, 'u');
      const re2 = compilePattern(p);
      for (const s of inputs) assert.equal(re2.test(s), es.test(s), `${p} on ${JSON.stringify(s)} (RE2 syntax ${toRe2Syntax(p)})`);
    }
  });

  test('schemas - backreferences, lookaround, RE2-only syntax and huge repetitions are refused with the reason', () => {
    const refused: Array<[string, RegExp]> = [
      ['(a)\\1', /backreference \(\\1\)/],
      ['(?<x>a)\\k<x>', /named backreference/],
      ['a(?=b)', /lookahead/],
      ['a(?!b)', /lookahead/],
      ['(?<=a)b', /lookbehind/],
      ['(?<!a)b', /lookbehind/],
      ['(?i)abc', /not a valid regular expression/],
      ['\\Aabc\\z', /not a valid regular expression/],
      ['a{2000}', /cannot run on the linear-time engine \(RE2\): .*repeat count/],
      ['(', /not a valid regular expression/],
    ];
    for (const [p, why] of refused) {
      assert.throws(() => compilePattern(p), (err: Error) => {
        assert.ok(err instanceof PatternError, `${p}: ${err.constructor.name}`);
        assert.match(err.message, why, p);
        return true;
      });
    }
  });

  test('schemas - ^(a+)+$ and (a|a)*$ on a long non-matching input finish (linear time) and answer false', () => {
    const input = `${'a'.repeat(5000)}!`;
    assert.equal(compilePattern('^(a+)+$').test(input), false);
    assert.equal(compilePattern('^(a|a)*$').test(input), false);
    assert.equal(compilePattern('^(a|aa)+$').test('a'.repeat(5000)), true);
  });

  test('schemas - the formats on RE2 agree with ajv-formats (url private ranges, hostname length, duration look-aheads)', () => {
    const linear = linearFormats(fullFormats as never) as Record<string, unknown>;
    const run = (f: unknown, s: string): boolean => (f instanceof RegExp ? f.test(s) : typeof f === 'function' ? (f as (s: string) => boolean)(s) : (f as { validate: (s: string) => boolean }).validate(s));
    const samples: Record<string, string[]> = {
      url: [
        'http://example.com', 'https://example.com:8080/a?b#c', 'ftp://user:pw@host.example.org/', 'http://10.0.0.1/', 'http://127.0.0.1', 'http://169.254.1.1/',
        'http://169.253.1.1/', 'http://192.168.0.1', 'http://192.169.0.1', 'http://172.16.0.1', 'http://172.32.0.1', 'http://172.15.0.1', 'http://8.8.8.8',
        'http://224.0.0.1', 'http://1.2.3.255', 'http://100.1.1.1', 'http://exa mple.com', 'mailto:x@y', 'http://a', 'http://xn--bcher-kva.de', 'http://bücher.de',
      ],
      hostname: ['a.b', 'a'.repeat(63), `${'a.'.repeat(126)}a`, `${'a.'.repeat(126)}ab`, `${'a.'.repeat(126)}a.`, '-a', 'a-', 'a..b', ''],
      duration: ['P1D', 'P', 'PT1H', 'PT', 'P1DT', 'P1Y2M3DT4H5M6S', 'P2W', 'P1W1D', 'PT1H2'],
      email: ['a@b.c', 'a.b@c-d.e', 'a@', '@b', 'a@b..c'],
      ipv4: ['1.2.3.4', '256.1.1.1', '1.2.3'],
      ipv6: ['::1', '2001:db8::1', '1:2:3:4:5:6:7:8:9', 'g::1'],
      uuid: ['123e4567-e89b-12d3-a456-426614174000', 'urn:uuid:123e4567-e89b-12d3-a456-426614174000', '123'],
      'uri-reference': ['/a/b', 'http://x/y', '#frag', 'a b'],
      'json-pointer': ['', '/a/b', '/a~1b', 'a', '/~2'],
    };
    for (const [name, inputs] of Object.entries(samples)) {
      assert.ok(typeof linear[name] === 'function', `${name} is on RE2`);
      for (const s of inputs) assert.equal(run(linear[name], s), run(fullFormats[name], s), `${name}: ${JSON.stringify(s)}`);
    }
    // every format that was a RegExp is now a function (none left for V8's engine)
    for (const [name, f] of Object.entries(fullFormats)) if (f instanceof RegExp) assert.equal(typeof linear[name], 'function', name);
  });
});

describe('payload nesting', () => {
  /** A value nested `depth` levels: alternating arrays and objects. */
  const nested = (depth: number): unknown => {
    let v: unknown = 1;
    for (let i = 1; i <= depth; i++) v = i % 2 ? [v, 'x', { k: 2 }] : { a: v, b: [true, null] };
    return v;
  };
  /** The real depth of a value (recursive: small values only). */
  const depthOf = (v: unknown): number =>
    v !== null && typeof v === 'object' ? 1 + Math.max(0, ...(Array.isArray(v) ? v : Object.values(v as object)).map(depthOf)) : 0;

  test('schemas - the JSON, MessagePack and CBOR scanners and the value walk agree with the real depth at the limit', () => {
    for (const d of [1, 2, 10, MAX_PAYLOAD_DEPTH - 1, MAX_PAYLOAD_DEPTH, MAX_PAYLOAD_DEPTH + 1, 100]) {
      const v = nested(d);
      const real = depthOf(v);
      const over = real > MAX_PAYLOAD_DEPTH;
      assert.equal(jsonNestingExceeds(JSON.stringify(v), MAX_PAYLOAD_DEPTH), over, `json ${real}`);
      assert.equal(msgpackNestingExceeds(msgpackEncode(v, { maxDepth: 1000 }), MAX_PAYLOAD_DEPTH), over, `msgpack ${real}`);
      assert.equal(cborNestingExceeds(cborEncode(v), MAX_PAYLOAD_DEPTH), over, `cbor ${real}`);
      assert.equal(valueNestingExceeds(v, MAX_PAYLOAD_DEPTH), over, `value ${real}`);
    }
    // strings with brackets, big containers and scalars of every width do not count as nesting
    const wide = { s: '[[[[{{{{"\\"[', n: [1.5, -1, 2 ** 40, -(2 ** 40), 255, 65535, 2 ** 31], b: Buffer.alloc(300, 1), m: Object.fromEntries(Array.from({ length: 70000 }, (_, i) => [`k${i}`, i])) };
    assert.equal(jsonNestingExceeds(JSON.stringify({ ...wide, b: 'bytes' }), 2), false); // (a Buffer is {"type", "data": [...]} in JSON)
    assert.equal(msgpackNestingExceeds(msgpackEncode(wide), 2), false);
    assert.equal(cborNestingExceeds(cborEncode(wide), 2), false);
    assert.equal(msgpackNestingExceeds(msgpackEncode(wide), 1), true);
    // CBOR indefinite-length arrays (0x9f ... 0xff) nest too
    assert.equal(cborNestingExceeds(Buffer.concat([Buffer.alloc(70, 0x9f), Buffer.alloc(70, 0xff)]), MAX_PAYLOAD_DEPTH), true);
    assert.equal(cborNestingExceeds(Buffer.concat([Buffer.alloc(60, 0x9f), Buffer.alloc(60, 0xff)]), MAX_PAYLOAD_DEPTH), false);
  });

  test('schemas - every format\'s checker returns a problem, never throws, on deep, truncated and garbage payloads', () => {
    const RECURSIVE = { $defs: { n: { type: ['object', 'array'], properties: { a: { $ref: '#/$defs/n' } }, items: { $ref: '#/$defs/n' } } }, $ref: '#/$defs/n' };
    const checkers = {
      json: compileChecker('json', RECURSIVE),
      messagepack: compileChecker('messagepack', RECURSIVE),
      cbor: compileChecker('cbor', RECURSIVE),
      protobuf: compileChecker('protobuf', { proto: 'syntax = "proto3"; message N { N child = 1; }', messageName: 'N' }),
      avro: compileChecker('avro', { type: 'record', name: 'N', fields: [{ name: 'child', type: ['null', 'N'] }] }),
      xml: compileChecker('xml', { rootElement: 'a' }),
    };
    // 120 KB deep payloads for each
    let proto = Buffer.alloc(0);
    for (let i = 0; i < 30000; i++) proto = Buffer.concat([Buffer.from([0x0a, ...varint(proto.length)]), proto]);
    const payloads: Record<keyof typeof checkers, Buffer> = {
      json: Buffer.from(`${'['.repeat(60000)}${']'.repeat(60000)}`),
      messagepack: Buffer.concat([Buffer.alloc(120000, 0x91), Buffer.from([0x90])]),
      cbor: Buffer.concat([Buffer.alloc(120000, 0x81), Buffer.from([0x80])]),
      protobuf: proto,
      avro: Buffer.concat([Buffer.alloc(120000, 0x02), Buffer.from([0x00])]),
      xml: Buffer.from(`${'<a>'.repeat(40000)}${'</a>'.repeat(40000)}`),
    };
    for (const [name, check] of Object.entries(checkers)) {
      for (const payload of [payloads[name as keyof typeof checkers], Buffer.from([0xff, 0x00, 0xde, 0xad]), Buffer.alloc(0)]) {
        let problem: string | undefined;
        assert.doesNotThrow(() => (problem = check(payload)), name);
        if (payload.length > 1000 && name !== 'xml') assert.equal(typeof problem, 'string', `${name}: a deep payload is refused`);
        if (problem !== undefined) assert.doesNotMatch(problem, /\n\s+at /, `${name}: no stack trace in the problem`);
      }
    }
    assert.match(checkers.json(payloads.json)!, /nested deeper than 64 levels/);
    assert.match(checkers.messagepack(payloads.messagepack)!, /nested deeper than 64 levels/);
    assert.match(checkers.cbor(payloads.cbor)!, /nested deeper than 64 levels/);
  });
});

function varint(n: number): number[] {
  const out: number[] = [];
  do {
    let b = n & 0x7f;
    n >>>= 7;
    if (n) b |= 0x80;
    out.push(b);
  } while (n);
  return out;
}
