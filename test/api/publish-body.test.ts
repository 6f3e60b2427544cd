import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { validatorCompiler } from 'fastify-type-provider-zod';
import { startServer, type TestServer } from '../helpers.js';
import { b64, unb64 } from '../rest-client.js';
import { nullAwareCompiler } from '../../src/api/plugins/null-fields.js';
import { PublishRequest } from '../../src/api/routes/messaging/messaging.routes.js';
import { isPlainPublishBody } from '../../src/api/routes/messaging/publish-body.js';

/**
 * REST publish validates the common body with a plain check before zod (src/api/routes/messaging/publish-body.ts).
 * The check must never accept what zod refuses, nor leave a body other than zod's parse would give; every other
 * body must reach zod untouched, so its answers (and 400 messages) are zod's.
 */

/** The body validator the route had before the plain check: zod, with null optional fields deleted first. */
const slowValidate = nullAwareCompiler(validatorCompiler)({ schema: PublishRequest, method: 'POST', url: '/api/v1/messaging/publish', httpPart: 'body' });

const anyValue = fc.oneof(
  fc.constant(null),
  fc.boolean(),
  fc.integer({ min: -3, max: 12 }),
  fc.constant(-0),
  fc.double(),
  fc.constant(2 ** 53),
  fc.string({ maxLength: 6 }),
  fc.constant(' '.repeat(3)),
  fc.constant('x'.repeat(257)),
  fc.constant({}),
  fc.constant([1, 2]),
);
/** Mostly a valid value, sometimes anything. */
const mostly = <T>(valid: fc.Arbitrary<T>) => fc.oneof({ weight: 12, arbitrary: valid }, { weight: 1, arbitrary: anyValue });
/** Sometimes (1 in 4) a record of more keys merged in. */
const sometimes = (base: fc.Arbitrary<Record<string, unknown>>, more: fc.Arbitrary<Record<string, unknown>>) =>
  fc.tuple(base, fc.oneof({ weight: 3, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: more })).map(([b, m]) => (m ? { ...b, ...m } : b));
const messageArb = sometimes(
  fc.record(
  {
    payload: mostly(fc.constantFrom(b64('{"t":21.5}'), '', 'not base64 at all')),
    contentType: mostly(fc.oneof(fc.constant('application/json'), fc.string({ maxLength: 4 }), fc.constant(null))),
    qualityOfService: mostly(fc.oneof(fc.integer({ min: 0, max: 2 }), fc.constant(null))),
    priority: mostly(fc.integer({ min: 0, max: 10 })),
    expiry: mostly(fc.integer({ min: -1, max: 100000 })),
    identifier: mostly(fc.integer()),
    creation: mostly(fc.constant('2026-01-01T00:00:00Z')),
    payloadFormatIndicator: mostly(fc.constantFrom(0, 1)),
  },
  { requiredKeys: ['payload'] },
  ),
  fc.record({ correlationData: mostly(fc.constant(b64('c'))), dataMap: mostly(fc.constant({ a: 1 })), somethingElse: anyValue }, { requiredKeys: [] }),
);
const bodyArb = sometimes(
  fc.record(
    {
      destinationName: mostly(fc.constantFrom('a/b', '  padded/name  ', '\tq\n', 'x'.repeat(65535), ' '.repeat(2) + 'y'.repeat(65535), 'z'.repeat(65536))),
      message: fc.oneof({ weight: 12, arbitrary: messageArb }, { weight: 1, arbitrary: anyValue }),
      retain: mostly(fc.oneof(fc.boolean(), fc.constant(null))),
    },
    { requiredKeys: ['destinationName', 'message'] },
  ),
  fc.record({ extra: anyValue }),
);

describe('REST publish body', () => {
  test('rest publish - the plain body check accepts only what zod accepts and leaves the body as zod parses it', (t) => {
    let plain = 0;
    let runs = 0;
    fc.assert(
      fc.property(bodyArb, (generated) => {
        runs++;
        const body: unknown = JSON.parse(JSON.stringify(generated)); // as the route gets it
        const fast = structuredClone(body);
        const slow = slowValidate(structuredClone(body)) as { value?: unknown; error?: unknown };
        if (isPlainPublishBody(fast)) {
          plain++;
          assert.equal(slow.error, undefined, `zod refuses a body the plain check accepted: ${JSON.stringify(body).slice(0, 300)}`);
          assert.deepStrictEqual(fast, slow.value);
        } else {
          assert.deepStrictEqual(fast, body, 'a body left to zod is untouched');
        }
      }),
      { numRuns: 3000 },
    );
    t.diagnostic(`${plain} of ${runs} generated bodies took the plain check`);
    // the common body really takes the plain check (else the route is back to zod's cost for every publish)
    assert.ok(plain > runs / 20, `only ${plain} of ${runs} bodies took the plain check`);
    assert.equal(isPlainPublishBody({ destinationName: 't', message: { payload: b64('x'), contentType: 'application/json', qualityOfService: 0 } }), true);
  });

  describe('over HTTP', () => {
    let s: TestServer;
    let base: string;
    before(async () => {
      s = await startServer();
      base = await s.app.listen({ port: 0, host: '127.0.0.1' });
    });
    after(async () => s.close());

    const post = async (path: string, body: unknown) => {
      const r = await fetch(`${base}${path}`, { method: 'POST', headers: { ...s.auth, 'content-type': 'application/json' }, body: JSON.stringify(body) });
      return { status: r.status, json: (await r.json()) as Record<string, unknown> };
    };

    test('rest publish - plain and zod-checked bodies publish alike: trimmed name, nulls absent, queue writes awaited, same 400s', async () => {
      assert.equal((await post('/api/v1/messaging/subscribe', { destinationName: 'pb/#', maxDepth: 100 })).status, 200);
      // plain: padded name, null fields; zod: a dataMap; a queue message (QoS 1, stored before the answer)
      const plainBody = { destinationName: '  pb/one  ', message: { payload: b64('one'), contentType: null, qualityOfService: 1, priority: null }, retain: null };
      assert.equal(isPlainPublishBody(structuredClone(plainBody)), true);
      assert.deepEqual(await post('/api/v1/messaging/publish', plainBody), { status: 200, json: { status: 'Message published successfully' } });
      assert.deepEqual(await post('/api/v1/messaging/publish', { destinationName: 'pb/two', message: { payload: b64('two'), dataMap: { k: 'v' } } }), {
        status: 200,
        json: { status: 'Message published successfully' },
      });
      assert.deepEqual(await post('/api/v1/messaging/publish', { destinationName: '/queue/pb-q', message: { payload: b64('q'), qualityOfService: 1 } }), {
        status: 200,
        json: { status: 'Message published successfully' },
      });
      const consumed = (await post('/api/v1/messaging/consume', { destination: 'pb/#' })).json.consumedMessages as Array<Record<string, unknown>>;
      assert.deepEqual(
        consumed.map((m) => [m.destinationName, unb64(m.payload as string), m.qualityOfService, m.priority, m.contentType, m.dataMap]),
        [
          ['pb/one', 'one', 1, 4, undefined, {}],
          ['pb/two', 'two', 0, 4, undefined, { k: 'v' }],
        ],
      );
      // refusals are zod's, word for word
      for (const [body, status] of [
        [{ destinationName: '   ', message: { payload: b64('x') } }, "Invalid request: body field 'destinationName': destinationName must not be blank"],
        [{ destinationName: 'pb/x', message: { payload: b64('x'), qualityOfService: 3 } }, "Invalid request: body field 'message.qualityOfService': qualityOfService must be 0, 1 or 2"],
        [{ destinationName: 'pb/x', message: { payload: b64('x'), priority: 11 } }, "Invalid request: body field 'message.priority': priority must be between 0 and 10"],
        [{ destinationName: 'pb/x', message: { payload: b64('x'), payloadFormatIndicator: 2 } }, "Invalid request: body field 'message.payloadFormatIndicator': payloadFormatIndicator must be 0 (bytes) or 1 (UTF-8 text)"],
      ] as const) {
        assert.deepEqual(await post('/api/v1/messaging/publish', body), { status: 400, json: { status } });
      }
      const noPayload = await post('/api/v1/messaging/publish', { destinationName: 'pb/x', message: { payload: null } });
      assert.equal(noPayload.status, 400);
      assert.match(String(noPayload.json.status), /^Invalid request: body field 'message.payload': /);
    });
  });
});
