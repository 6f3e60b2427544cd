import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { routeTable, startServer, type TestServer } from '../helpers.js';
import { b64 } from '../rest-client.js';
import { login } from '../security/helpers.js';

/**
 * Null means absent: Java clients send `null` for every unset field. Walks every route body of the live route table
 * through the OpenAPI document (so new routes are covered without editing this test): for every optional field at
 * any depth, the document allows null, and a request with that field null gets exactly the answer of the same
 * request without the field.
 */
type Json = Record<string, unknown>;
const FILLER = '00000000-0000-4000-8000-00000000abcd';

describe('null means absent', () => {
  let s: TestServer;
  let doc: Json;
  before(async () => {
    s = await startServer({ overrides: { AuthManager: { loginRateLimit: 100000 } } });
    doc = (await s.inject('/openapi.json')).json();
  });
  after(async () => s.close());

  const resolve = (node: Json): Json => {
    let n = node;
    for (let i = 0; i < 10 && typeof n.$ref === 'string'; i++) {
      const name = (n.$ref as string).replace('#/components/schemas/', '');
      n = ((doc.components as Json).schemas as Record<string, Json>)[name]!;
    }
    return n;
  };
  const allowsNull = (p: Json): boolean =>
    p.type === 'null' || (Array.isArray(p.type) && p.type.includes('null')) || Object.keys(p).length === 0 || [...((p.anyOf ?? p.oneOf ?? []) as Json[])].some((x) => allowsNull(resolve(x)));
  /** The object schemas a value may be (through anyOf / oneOf / $ref). */
  const objectsOf = (node: Json): Json[] => {
    const n = resolve(node);
    if (n.properties) return [n];
    return [...((n.anyOf ?? n.oneOf ?? []) as Json[])].flatMap(objectsOf);
  };
  const arrayItemOf = (node: Json): Json | undefined => {
    const n = resolve(node);
    if (n.type === 'array' && n.items) return n.items as Json;
    for (const x of (n.anyOf ?? n.oneOf ?? []) as Json[]) {
      const it = arrayItemOf(x);
      if (it) return it;
    }
    return undefined;
  };

  /** Every optional field: its path (keys, and 0 for an array element) and whether the document lets it be null. */
  function optionalFields(node: Json, path: Array<string | number> = [], depth = 0): Array<{ path: Array<string | number>; documented: boolean }> {
    if (depth > 6) return [];
    const out: Array<{ path: Array<string | number>; documented: boolean }> = [];
    const item = arrayItemOf(node);
    if (item) out.push(...optionalFields(item, [...path, 0], depth + 1));
    for (const o of objectsOf(node)) {
      const required = new Set((o.required ?? []) as string[]);
      for (const [k, p] of Object.entries(o.properties as Record<string, Json>)) {
        if (!required.has(k)) out.push({ path: [...path, k], documented: allowsNull(p) });
        out.push(...optionalFields(p, [...path, k], depth + 1));
      }
    }
    return out;
  }
  /** A body holding only the path, ending in `value` (undefined: the last key left out). */
  function bodyWith(path: Array<string | number>, value: unknown): unknown {
    if (path.length === 0) return value;
    const [head, ...rest] = path;
    const inner = rest.length === 0 ? value : bodyWith(rest, value);
    if (typeof head === 'number') return [inner === undefined ? {} : inner];
    return inner === undefined ? {} : { [head]: inner };
  }

  test('null fields - every optional field of every route body allows null in the OpenAPI document and answers as if absent', async () => {
    const paths = doc.paths as Record<string, Record<string, Json>>;
    let walked = 0;
    const fields: string[] = [];
    for (const r of routeTable(s.app)) {
      const op = paths[r.url.replace(/:([A-Za-z0-9_]+)/g, '{$1}')]?.[r.method.toLowerCase()];
      const schema = ((op?.requestBody as Json | undefined)?.content as Record<string, Json> | undefined)?.['application/json']?.schema as Json | undefined;
      if (!schema) continue;
      walked++;
      const url = r.url.replace(/:[A-Za-z0-9_]+/g, FILLER);
      for (const f of optionalFields(schema)) {
        const name = `${r.method} ${r.url} ${f.path.join('.')}`;
        fields.push(name);
        assert.ok(f.documented, `${name}: the OpenAPI document allows null`);
        const withNull = await s.inject({ method: r.method, url, payload: bodyWith(f.path, null) as object });
        const without = await s.inject({ method: r.method, url, payload: bodyWith(f.path, undefined) as object });
        assert.ok(withNull.statusCode < 500, `${name}: ${withNull.statusCode} ${withNull.body}`);
        assert.equal(withNull.statusCode, without.statusCode, `${name}: ${withNull.body} vs ${without.body}`);
        if (withNull.statusCode === 400) assert.equal(withNull.body, without.body, name);
      }
    }
    assert.ok(walked >= 15, `route bodies walked: ${walked}`);
    for (const expected of [
      'POST /api/v1/login sessionId',
      'POST /api/v1/messaging/publish message.contentType',
      'POST /api/v1/messaging/publish message.correlationData',
      'POST /api/v1/messaging/publish message.dataMap',
      'POST /api/v1/messaging/publish message.metaData',
      'POST /api/v1/messaging/publish message.creation',
    ]) {
      assert.ok(fields.includes(expected), `${expected} is walked (${fields.length} fields)`);
    }
    assert.ok(fields.some((f) => f.endsWith(' explain')), 'the ACL explain field is walked');
    for (const k of ['backlog', 'selectorTaskWait', 'schemaLoadingVersion']) assert.ok(fields.some((f) => f.endsWith(` ${k}`) || f.endsWith(`.${k}`)), `endpoint ${k} is walked`);
    console.log(`# ${walked} route bodies, ${fields.length} optional fields sent as null`);
  });

  test('null fields - a Java-style publish with nulls is accepted and the message arrives without them; a login with sessionId null works', async () => {
    const sub = await s.inject({ method: 'POST', url: '/api/v1/messaging/subscribe', payload: { destinationName: 'java/nulls', namedSubscription: null, filter: null, maxDepth: 10, transactional: null, retainMessage: null } });
    assert.equal(sub.statusCode, 200, sub.body);
    const pub = await s.inject({
      method: 'POST',
      url: '/api/v1/messaging/publish',
      payload: {
        destinationName: 'java/nulls',
        retain: null,
        message: { identifier: null, payload: b64('x'), contentType: null, correlationData: null, expiry: null, priority: null, qualityOfService: null, creation: null, dataMap: null, metaData: null },
      },
    });
    assert.equal(pub.statusCode, 200, pub.body);
    const got = await s.inject({ method: 'POST', url: '/api/v1/messaging/consume', payload: { destination: 'java/nulls', depth: null } });
    assert.equal(got.statusCode, 200, got.body);
    const [m] = got.json().consumedMessages;
    assert.equal(m.priority, 4, 'the default priority');
    assert.equal(m.expiry, -1);
    assert.deepEqual(m.dataMap, {});
    assert.equal('contentType' in m, false);
    const r = await login(s, 'admin', s.adminPassword, { sessionId: null, persistent: null, longLived: null });
    assert.equal(r.statusCode, 200, r.body);
  });
});
