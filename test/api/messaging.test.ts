import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, type TestServer } from '../helpers.js';
import { b64, RestClient, unb64 } from '../rest-client.js';

describe('REST messaging', () => {
  let s: TestServer;
  before(async () => {
    // RestApi.maxEventsPerDestination (MAPS, default 10 per destination, oldest dropped) is tested in
    // rest-config-keys.test.ts; here it is raised so the depth tests can hold 15 messages of one topic
    s = await startServer({ auth: false, overrides: { RestApi: { maxEventsPerDestination: 1000 } } });
  });
  after(async () => s.close());
  const client = () => new RestClient(s.app);
  const publish = (c: RestClient, destinationName: string, text: string, extra: Record<string, unknown> = {}, retain?: boolean) =>
    c.post('/api/v1/messaging/publish', { destinationName, message: { payload: b64(text), ...extra }, ...(retain === undefined ? {} : { retain }) });
  const consume = async (c: RestClient, body?: unknown) => {
    const r = await c.post('/api/v1/messaging/consume', body);
    assert.equal(r.statusCode, 200, r.body);
    return r.json().consumedMessages as Array<Record<string, unknown> & { payload: string; identifier: number; destinationName: string }>;
  };

  test('messaging - publish then consume round trip carries every message field', async () => {
    const c = client();
    const sub = await c.post('/api/v1/messaging/subscribe', { destinationName: 'rt/a', maxDepth: 10 });
    assert.equal(sub.statusCode, 200);
    assert.deepEqual(sub.json(), { status: 'Successfully subscribed to rt/a' });
    const p = await publish(c, 'rt/a', 'hello', {
      contentType: 'text/plain',
      correlationData: b64('corr'),
      priority: 7,
      qualityOfService: 1,
      expiry: 60000,
      dataMap: { temp: 21.5, unit: 'C' },
      metaData: { source: 'test' },
    });
    assert.equal(p.statusCode, 200);
    assert.deepEqual(p.json(), { status: 'Message published successfully' });
    const got = await consume(c, { destination: 'rt/a' });
    assert.equal(got.length, 1);
    const m = got[0];
    assert.equal(unb64(m.payload), 'hello');
    assert.equal(m.contentType, 'text/plain');
    assert.equal(unb64(m.correlationData as string), 'corr');
    assert.equal(m.priority, 7);
    assert.equal(m.qualityOfService, 1);
    assert.equal(m.expiry, 60000);
    assert.deepEqual(m.dataMap, { temp: 21.5, unit: 'C' });
    assert.deepEqual(m.metaData, { source: 'test' });
    assert.equal(m.destinationName, 'rt/a');
    assert.equal(typeof m.identifier, 'number');
    assert.ok(!Number.isNaN(Date.parse(m.creation as string)));
    assert.deepEqual(await consume(c, { destination: 'rt/a' }), [], 'consumed messages are gone');
  });

  test('messaging - MAPS byte-array correlationData is accepted', async () => {
    const c = client();
    await c.post('/api/v1/messaging/subscribe', { destinationName: 'corr/bytes' });
    await publish(c, 'corr/bytes', 'x', { correlationData: [1, 2, -1] });
    const [m] = await consume(c, { destination: 'corr/bytes' });
    assert.deepEqual([...Buffer.from(m.correlationData as string, 'base64')], [1, 2, 255]);
  });

  test('messaging - a wildcard subscription with a selector gets exactly the matching messages, and consume-all includes it', async () => {
    const c = client();
    await c.post('/api/v1/messaging/subscribe', { destinationName: 'sensors/+/temp', filter: 'value > 20 AND unit = \'C\'', maxDepth: 100 });
    await publish(c, 'sensors/kitchen/temp', 'hot', { dataMap: { value: 25, unit: 'C' } });
    await publish(c, 'sensors/hall/temp', 'cold', { dataMap: { value: 15, unit: 'C' } });
    await publish(c, 'sensors/attic/temp', 'hotF', { dataMap: { value: 80, unit: 'F' } });
    await publish(c, 'sensors/hall/humidity', 'wet', { dataMap: { value: 90, unit: 'C' } });
    const got = await consume(c);
    assert.deepEqual(got.map((m) => unb64(m.payload)), ['hot']);
    assert.equal(got[0].destinationName, 'sensors/kitchen/temp');
  });

  test('messaging - maxDepth holds that many messages and drops newer ones', async () => {
    const c = client();
    await c.post('/api/v1/messaging/subscribe', { destinationName: 'depth/t', maxDepth: 2 });
    for (const t of ['1', '2', '3', '4']) await publish(c, 'depth/t', t);
    const d = await c.post('/api/v1/messaging/subscriptionDepth', { destination: 'depth/t' });
    assert.deepEqual(d.json(), { subscriptionDepths: [{ destination: 'depth/t', depth: 2 }] });
    assert.deepEqual((await consume(c, { destination: 'depth/t', depth: 10 })).map((m) => unb64(m.payload)), ['1', '2']);
  });

  test('messaging - the default maxDepth is 1', async () => {
    const c = client();
    await c.post('/api/v1/messaging/subscribe', { destinationName: 'depth/default' });
    await publish(c, 'depth/default', 'first');
    await publish(c, 'depth/default', 'second');
    assert.deepEqual((await consume(c)).map((m) => unb64(m.payload)), ['first']);
  });

  test('messaging - depth limits how many are returned', async () => {
    const c = client();
    await c.post('/api/v1/messaging/subscribe', { destinationName: 'depth/limit', maxDepth: 50 });
    for (let i = 0; i < 15; i++) await publish(c, 'depth/limit', `m${i}`);
    assert.equal((await consume(c, { destination: 'depth/limit', depth: 3 })).length, 3);
    assert.equal((await consume(c, { destination: 'depth/limit' })).length, 10, 'default depth 10');
    assert.equal((await consume(c, { destination: 'depth/limit', depth: 0 })).length, 2, 'depth 0 means the default');
  });

  test('messaging - retain is honoured: a later subscriber asking for it gets the retained message', async () => {
    const pub = client();
    await publish(pub, 'status/door', 'open', {}, true);
    const late = client();
    await late.post('/api/v1/messaging/subscribe', { destinationName: 'status/door', retainMessage: true });
    assert.deepEqual((await consume(late)).map((m) => unb64(m.payload)), ['open']);
    const noRetain = client();
    await noRetain.post('/api/v1/messaging/subscribe', { destinationName: 'status/door' });
    assert.deepEqual(await consume(noRetain), [], 'retainMessage false: no retained message');
  });

  test('messaging - a REST session receives its own publishes (no noLocal)', async () => {
    const c = client();
    await c.post('/api/v1/messaging/subscribe', { destinationName: 'self/echo' });
    await publish(c, 'self/echo', 'me');
    assert.equal((await consume(c)).length, 1);
  });

  test('messaging - sessions are separate: another session does not see my subscription', async () => {
    const a = client();
    const b = client();
    await a.post('/api/v1/messaging/subscribe', { destinationName: 'sep/x' });
    await publish(b, 'sep/x', 'hi');
    const r = await b.post('/api/v1/messaging/consume', { destination: 'sep/x' });
    assert.equal(r.statusCode, 404);
    assert.deepEqual(r.json(), { status: 'No subscription to sep/x in this session' });
    assert.equal((await consume(a)).length, 1);
  });

  test('messaging - transactional: consumed messages stay held until commit; abort makes them deliverable again; every id counts', async () => {
    const c = client();
    await c.post('/api/v1/messaging/subscribe', { destinationName: 'tx/q', transactional: true, maxDepth: 10 });
    for (const t of ['a', 'b', 'c']) await publish(c, 'tx/q', t);
    const first = await consume(c, { destination: 'tx/q' });
    assert.deepEqual(first.map((m) => unb64(m.payload)), ['a', 'b', 'c']);
    const ids = first.map((m) => m.identifier);
    const ab = await c.post('/api/v1/messaging/abort', { destinationName: 'tx/q', eventIds: [ids[0], ids[1]] });
    assert.deepEqual(ab.json(), { status: 'Successfully aborted messages' });
    const again = await consume(c, { destination: 'tx/q' });
    assert.deepEqual(again.map((m) => unb64(m.payload)).sort(), ['a', 'b']);
    const cm = await c.post('/api/v1/messaging/commit', { destinationName: 'tx/q', eventIds: [...again.map((m) => m.identifier), ids[2]] });
    assert.equal(cm.statusCode, 200);
    assert.deepEqual(cm.json(), { status: 'Successfully committed messages' });
    const twice = await c.post('/api/v1/messaging/commit', { destinationName: 'tx/q', eventIds: [ids[2]] });
    assert.equal(twice.statusCode, 400);
    assert.match(twice.json().status, new RegExp(`No such transaction: event ids ${ids[2]} are not in flight on tx/q`));
    assert.deepEqual(await consume(c, { destination: 'tx/q' }), []);
  });

  test('messaging - queues: each message goes to exactly one of the competing sessions and waits for a consumer', async () => {
    const pub = client();
    for (let i = 0; i < 6; i++) await publish(pub, 'queue/jobs', `job${i}`);
    const a = client();
    const b = client();
    await a.post('/api/v1/messaging/subscribe', { destinationName: 'queue/jobs', maxDepth: 1 });
    await b.post('/api/v1/messaging/subscribe', { destinationName: 'queue/jobs', maxDepth: 1 });
    const seen: string[] = [];
    for (let round = 0; round < 6; round++) {
      for (const c of [a, b]) seen.push(...(await consume(c, { destination: 'queue/jobs', depth: 1 })).map((m) => unb64(m.payload)));
    }
    assert.deepEqual(seen.sort(), ['job0', 'job1', 'job2', 'job3', 'job4', 'job5']);
  });

  test('messaging - a named subscription is shared: sessions with the same name split the messages', async () => {
    const a = client();
    const b = client();
    await a.post('/api/v1/messaging/subscribe', { destinationName: 'shared/t', namedSubscription: 'workers', maxDepth: 10 });
    await b.post('/api/v1/messaging/subscribe', { destinationName: 'shared/t', namedSubscription: 'workers', maxDepth: 10 });
    for (let i = 0; i < 4; i++) await publish(a, 'shared/t', `w${i}`);
    const fa = (await consume(a)).map((m) => unb64(m.payload));
    const fb = (await consume(b)).map((m) => unb64(m.payload));
    assert.equal(fa.length + fb.length, 4);
    assert.ok(fa.length > 0 && fb.length > 0, `both got some: ${fa} / ${fb}`);
  });

  test('messaging - unsubscribe ends the subscription', async () => {
    const c = client();
    await c.post('/api/v1/messaging/subscribe', { destinationName: 'unsub/t' });
    const u = await c.post('/api/v1/messaging/unsubscribe', { destinationName: 'unsub/t' });
    assert.deepEqual(u.json(), { status: 'Successfully unsubscribed to unsub/t' });
    await publish(c, 'unsub/t', 'x');
    assert.equal((await c.post('/api/v1/messaging/consume', { destination: 'unsub/t' })).statusCode, 404);
    const again = await c.post('/api/v1/messaging/unsubscribe', { destinationName: 'unsub/t' });
    assert.equal(again.statusCode, 404);
  });

  test('messaging - expired messages are not delivered', async () => {
    const c = client();
    await c.post('/api/v1/messaging/subscribe', { destinationName: 'exp/t', maxDepth: 10 });
    await publish(c, 'exp/t', 'short', { expiry: 1 });
    await publish(c, 'exp/t', 'long', { expiry: 60000 });
    await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual((await consume(c)).map((m) => unb64(m.payload)), ['long']);
  });

  test('messaging - stats count published, delivered and retrieved messages', async () => {
    const before = (await s.app.inject('/api/v1/server/details/stats')).json();
    await s.app.inject({ method: 'DELETE', url: '/api/v1/server/cache' });
    const c = client();
    await c.post('/api/v1/messaging/subscribe', { destinationName: 'stats/t' });
    await publish(c, 'stats/t', 'x');
    await consume(c);
    await publish(c, 'stats/nobody', 'y');
    const after = (await s.app.inject('/api/v1/server/details/stats')).json();
    assert.equal(after.totalPublishedMessages - before.totalPublishedMessages, 2);
    assert.ok(after.totalRetrievedMessages - before.totalRetrievedMessages >= 1);
    assert.ok(after.totalNoInterestMessages - before.totalNoInterestMessages >= 1);
  });

  test('messaging - bad input on publish: 400 with a clear message', async () => {
    const c = client();
    const cases: Array<[unknown, RegExp]> = [
      [{ message: { payload: b64('x') } }, /destinationName is required/],
      [{ destinationName: '  ', message: { payload: b64('x') } }, /destinationName must not be blank/],
      [{ destinationName: 'a/b' }, /body field 'message'/],
      [{ destinationName: 'a/b', message: {} }, /body field 'message\.payload'/],
      [{ destinationName: 'a/b', message: { payload: 'not base64!!' } }, /message\.payload is not valid standard Base64/],
      [{ destinationName: 'a/+', message: { payload: b64('x') } }, /wildcard/i],
      [{ destinationName: 'a/#', message: { payload: b64('x') } }, /wildcard/i],
      [{ destinationName: 'a/b', message: { payload: b64('x'), priority: 11 } }, /priority must be between 0 and 10/],
      [{ destinationName: 'a/b', message: { payload: b64('x'), qualityOfService: 3 } }, /qualityOfService must be 0, 1 or 2/],
      [{ destinationName: 'a/b', message: { payload: b64('x'), correlationData: '@@' } }, /correlationData is not valid standard Base64/],
      [{ destinationName: 'a/b', message: { payload: b64('x') }, retain: 'yes' }, /body field 'retain'/],
      [[1, 2], /body/],
    ];
    for (const [body, msg] of cases) {
      const r = await c.post('/api/v1/messaging/publish', body);
      assert.equal(r.statusCode, 400, `${JSON.stringify(body)} → ${r.body}`);
      assert.match(r.json().status, msg, JSON.stringify(body));
    }
  });

  test('messaging - bad input on subscribe, consume, commit and abort: 400/404/409 with a clear message', async () => {
    const c = client();
    const expect = async (url: string, body: unknown, code: number, msg: RegExp) => {
      const r = await c.post(url, body);
      assert.equal(r.statusCode, code, `${url} ${JSON.stringify(body)} → ${r.body}`);
      assert.match(r.json().status, msg);
    };
    await expect('/api/v1/messaging/subscribe', {}, 400, /destinationName is required/);
    await expect('/api/v1/messaging/subscribe', { destinationName: 'a/#/b' }, 400, /#/);
    await expect('/api/v1/messaging/subscribe', { destinationName: 'a', filter: 'x = ' }, 400, /Invalid selector at position 4/);
    await expect('/api/v1/messaging/subscribe', { destinationName: 'a', maxDepth: 0 }, 400, /maxDepth must be at least 1/);
    await expect('/api/v1/messaging/subscribe', { destinationName: 'a', transactional: 'no' }, 400, /transactional/);
    await expect('/api/v1/messaging/consume', { destination: 'never/subscribed' }, 404, /No subscription to never\/subscribed/);
    await expect('/api/v1/messaging/consume', { depth: 'ten' }, 400, /depth/);
    await expect('/api/v1/messaging/subscriptionDepth', { destination: 'nope' }, 404, /No subscription to nope/);
    await expect('/api/v1/messaging/commit', { destinationName: 'nope', eventIds: [1] }, 404, /No subscription to nope/);
    await expect('/api/v1/messaging/commit', { destinationName: 'nope', eventIds: [] }, 400, /eventIds must not be empty/);
    await expect('/api/v1/messaging/abort', { destinationName: 'nope' }, 400, /eventIds/);
    await c.post('/api/v1/messaging/subscribe', { destinationName: 'plain/t' });
    await expect('/api/v1/messaging/commit', { destinationName: 'plain/t', eventIds: [1] }, 409, /not transactional/);
    await expect('/api/v1/messaging/unsubscribe', { destinationName: 'x/y' }, 404, /No subscription to x\/y/);
  });

  test('messaging - consume with no body takes from every subscription', async () => {
    const c = client();
    await c.post('/api/v1/messaging/subscribe', { destinationName: 'all/one', maxDepth: 5 });
    await c.post('/api/v1/messaging/subscribe', { destinationName: 'all/+/two', maxDepth: 5 });
    await publish(c, 'all/one', '1');
    await publish(c, 'all/x/two', '2');
    const r = await c.post('/api/v1/messaging/consume');
    assert.equal(r.statusCode, 200);
    assert.deepEqual(r.json().consumedMessages.map((m: { payload: string }) => unb64(m.payload)).sort(), ['1', '2']);
    const depths = (await c.post('/api/v1/messaging/subscriptionDepth')).json().subscriptionDepths;
    assert.deepEqual(depths.map((d: { destination: string }) => d.destination).sort(), ['all/+/two', 'all/one']);
  });
});
