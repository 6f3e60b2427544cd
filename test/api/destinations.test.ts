import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { DESTINATION_DTO_FIELDS } from '../dto-fields.js';
import { startServer, type TestServer } from '../helpers.js';

/**
 * Destination management routes: list (filter, sort, size), browse (prefix, paging, ETag) and detail, each with the
 * bad input a client can send. The response cache is off so every request sees the current destinations, except
 * in the test about caching.
 */
describe('destination routes', () => {
  let s: TestServer;
  before(async () => {
    s = await startServer({ overrides: { RestApi: { enableCache: false }, MessageDaemon: { enableSystemTopics: true, systemTopicInterval: 100 } } });
    const e = s.rt.engine!;
    // counters differ per destination so every sort key orders them differently
    for (let i = 0; i < 3; i++) await e.publish('sensors/a/temp', { payload: `t${i}` });
    await e.publish('sensors/a', { payload: 'both a topic and a folder' });
    await e.publish('sensors/b/temp', { payload: 'x' });
    await e.publish('sensors/b/temp', { payload: 'y' });
    await e.publish('/abs/one', { payload: 'absolute' });
    await e.publish('/abs/two', { payload: 'absolute' });
    await e.publish('queue/jobs', { payload: 'job1' });
    await e.publish('queue/jobs', { payload: 'job2' });
    await e.publish('zeta', { payload: 'z', retain: true });
    e.createDestination('tmp/t1', 'TemporaryTopic', { owner: 'nobody' });
    e.createDestination('tmp/q1', 'TemporaryQueue', { owner: 'nobody' });
    await e.publish('$SYS/test/hidden', { payload: 'system' });
  });
  after(async () => s.close());

  const get = async (url: string, headers: Record<string, string> = {}) => s.inject({ method: 'GET', url, headers });
  const names = (list: Array<{ name: string }>) => list.map((d) => d.name);

  // ----------------------------------------------------------------------------------------------- list

  test('destinations - list defaults to sortBy Published, descending, without system destinations', async () => {
    const r = await get('/api/v1/server/destination');
    assert.equal(r.statusCode, 200);
    const list = r.json() as Array<{ name: string; type: string; publishedMessages: number }>;
    assert.ok(!names(list).some((n) => n.startsWith('$')), 'no $SYS destinations');
    assert.equal(list[0]!.name, 'sensors/a/temp', 'three publishes: first');
    for (let i = 1; i < list.length; i++) assert.ok(list[i - 1]!.publishedMessages >= list[i]!.publishedMessages);
    assert.deepEqual(Object.keys(list[0]!).sort(), DESTINATION_DTO_FIELDS);
  });

  test('destinations - sortBy Name is ascending and case-insensitive (MAPS sorted names descending)', async () => {
    const r = await get('/api/v1/server/destination?sortBy=nAmE&size=0');
    assert.equal(r.statusCode, 200);
    assert.deepEqual(names(r.json()), ['/abs/one', '/abs/two', 'queue/jobs', 'sensors/a', 'sensors/a/temp', 'sensors/b/temp', 'tmp/q1', 'tmp/t1', 'zeta']);
  });

  test('destinations - sortBy Stored orders by stored messages, descending, ties by name', async () => {
    const r = await get('/api/v1/server/destination?sortBy=stored&size=3');
    assert.equal(r.statusCode, 200);
    const list = r.json() as Array<{ name: string; storedMessages: number }>;
    assert.deepEqual(
      list.map((d) => [d.name, d.storedMessages]),
      [
        ['queue/jobs', 2],
        ['zeta', 1],
        ['/abs/one', 0],
      ],
    );
  });

  test('destinations - size cuts the list; size <= 0 returns all', async () => {
    assert.equal((await get('/api/v1/server/destination?size=2')).json().length, 2);
    assert.equal((await get('/api/v1/server/destination?size=0')).json().length, 9);
    assert.equal((await get('/api/v1/server/destination?size=-5')).json().length, 9);
  });

  test('destinations - filter is a selector over DestinationDTO fields', async () => {
    let r = await get(`/api/v1/server/destination?filter=${encodeURIComponent("type = 'Queue' AND storedMessages > 1")}`);
    assert.equal(r.statusCode, 200);
    assert.deepEqual(names(r.json()), ['queue/jobs']);
    r = await get(`/api/v1/server/destination?sortBy=Name&filter=${encodeURIComponent("name LIKE 'sensors/%' AND publishedMessages >= 2")}`);
    assert.deepEqual(names(r.json()), ['sensors/a/temp', 'sensors/b/temp']);
    r = await get(`/api/v1/server/destination?filter=${encodeURIComponent("type = 'Topic' AND publishedMessages > 100")}`);
    assert.deepEqual(r.json(), []);
  });

  test('destinations - a bad filter is a 400 with the position of the error (MAPS answered 500)', async () => {
    const r = await get(`/api/v1/server/destination?filter=${encodeURIComponent('storedMessages >')}`);
    assert.equal(r.statusCode, 400);
    assert.match(r.json().status, /Invalid selector at position 16/);
    const blank = await get('/api/v1/server/destination?filter=%20');
    assert.equal(blank.statusCode, 400);
    assert.equal(blank.json().status, 'Filter must not be blank');
  });

  test('destinations - a bad sortBy is a 400 listing the allowed values', async () => {
    const r = await get('/api/v1/server/destination?sortBy=size');
    assert.equal(r.statusCode, 400);
    assert.equal(r.json().status, 'Invalid sortBy "size": use one of Name, Published, Delivered, Stored, Pending, Delayed, Expired (case-insensitive)');
  });

  test('destinations - a non-integer size is a 400', async () => {
    for (const bad of ['ten', '1.5', '', '99999999999']) {
      const r = await get(`/api/v1/server/destination?size=${encodeURIComponent(bad)}`);
      assert.equal(r.statusCode, 400, bad);
      assert.equal(r.json().status, `size must be an integer, got "${bad}"`);
    }
  });

  test('destinations - the routes need credentials when authentication is on', async () => {
    for (const url of ['/api/v1/server/destination', '/api/v1/server/destination/list', '/api/v1/server/destination/detail?destinationName=zeta']) {
      const r = await s.app.inject({ method: 'GET', url });
      assert.equal(r.statusCode, 401, url);
      assert.equal(typeof r.json().status, 'string');
    }
  });

  // ----------------------------------------------------------------------------------------------- browse

  test('destinations - browse the root: folders, destinations and the absolute-root folder, sorted by name', async () => {
    const r = await get('/api/v1/server/destination/list');
    assert.equal(r.statusCode, 200);
    assert.deepEqual(r.json(), {
      totalEntries: 5,
      totalPages: 1,
      pageNo: 0,
      entries: [
        { name: '', fullPath: '/', destinationType: 'FOLDER', childCount: 1 },
        { name: 'queue', fullPath: 'queue', destinationType: 'FOLDER', childCount: 1 },
        { name: 'sensors', fullPath: 'sensors', destinationType: 'FOLDER', childCount: 3 },
        { name: 'tmp', fullPath: 'tmp', destinationType: 'FOLDER', childCount: 2 },
        { name: 'zeta', fullPath: 'zeta', destinationType: 'TOPIC', childCount: 0 },
      ],
    });
  });

  test('destinations - browse "/" lists the absolute names; a name that is a topic and a folder gives two entries', async () => {
    const abs = await get('/api/v1/server/destination/list?prefix=/');
    assert.equal(abs.statusCode, 200);
    assert.deepEqual(abs.json().entries, [{ name: 'abs', fullPath: '/abs', destinationType: 'FOLDER', childCount: 2 }]);
    const absFolder = await get('/api/v1/server/destination/list?prefix=/abs');
    assert.deepEqual(
      absFolder.json().entries.map((e: { fullPath: string; destinationType: string }) => [e.fullPath, e.destinationType]),
      [
        ['/abs/one', 'TOPIC'],
        ['/abs/two', 'TOPIC'],
      ],
    );
    const sensors = await get('/api/v1/server/destination/list?prefix=sensors');
    assert.deepEqual(sensors.json().entries, [
      { name: 'a', fullPath: 'sensors/a', destinationType: 'FOLDER', childCount: 1 },
      { name: 'a', fullPath: 'sensors/a', destinationType: 'TOPIC', childCount: 0 },
      { name: 'b', fullPath: 'sensors/b', destinationType: 'FOLDER', childCount: 1 },
    ]);
    const tmp = await get('/api/v1/server/destination/list?prefix=tmp');
    assert.deepEqual(
      tmp.json().entries.map((e: { name: string; destinationType: string }) => [e.name, e.destinationType]),
      [
        ['q1', 'TEMP_QUEUE'],
        ['t1', 'TEMP_TOPIC'],
      ],
    );
  });

  test('destinations - the browse prefix is trimmed, unquoted, "//" collapsed and its trailing "/" removed', async () => {
    const plain = (await get('/api/v1/server/destination/list?prefix=sensors/a')).json();
    for (const p of ['  sensors/a  ', '"sensors/a"', 'sensors//a', 'sensors/a/', ' "sensors//a/" ']) {
      const r = await get(`/api/v1/server/destination/list?prefix=${encodeURIComponent(p)}`);
      assert.equal(r.statusCode, 200, p);
      assert.deepEqual(r.json(), plain, p);
    }
    assert.deepEqual(plain.entries, [{ name: 'temp', fullPath: 'sensors/a/temp', destinationType: 'TOPIC', childCount: 0 }]);
  });

  test('destinations - browse reflects destinations created after the first browse (MAPS froze the tree per session)', async () => {
    const before = (await get('/api/v1/server/destination/list?prefix=late')).statusCode;
    assert.equal(before, 404);
    await s.rt.engine!.publish('late/arrival', { payload: 'x' });
    const r = await get('/api/v1/server/destination/list?prefix=late');
    assert.equal(r.statusCode, 200);
    assert.equal(r.json().entries[0].fullPath, 'late/arrival');
    await s.rt.engine!.deleteDestination('late/arrival');
    assert.equal((await get('/api/v1/server/destination/list?prefix=late')).statusCode, 404);
  });

  test('destinations - browse paging: pageSize, pageNumber, totalPages is the ceiling', async () => {
    const e = s.rt.engine!;
    for (let i = 0; i < 25; i++) await e.publish(`paged/item${String(i).padStart(2, '0')}`, { payload: 'x' });
    const p0 = (await get('/api/v1/server/destination/list?prefix=paged&pageSize=10')).json();
    assert.deepEqual([p0.totalEntries, p0.totalPages, p0.pageNo, p0.entries.length], [25, 3, 0, 10]);
    assert.equal(p0.entries[0].name, 'item00');
    const p2 = (await get('/api/v1/server/destination/list?prefix=paged&pageSize=10&pageNumber=2')).json();
    assert.deepEqual([p2.pageNo, p2.entries.length, p2.entries[0].name], [2, 5, 'item20']);
    const past = (await get('/api/v1/server/destination/list?prefix=paged&pageSize=10&pageNumber=7')).json();
    assert.deepEqual([past.totalPages, past.pageNo, past.entries.length], [3, 7, 0]);
    for (let i = 25; i < 30; i++) await e.publish(`paged/item${i}`, { payload: 'x' });
    const exact = (await get('/api/v1/server/destination/list?prefix=paged&pageSize=10')).json();
    assert.deepEqual([exact.totalEntries, exact.totalPages], [30, 3], 'an exact multiple is not one page too many (MAPS: floor + 1)');
  });

  test('destinations - browse rejects a pageSize outside 10..1000 and a negative pageNumber', async () => {
    for (const size of ['9', '1001', '0', '-1']) {
      const r = await get(`/api/v1/server/destination/list?pageSize=${size}`);
      assert.equal(r.statusCode, 400, size);
      assert.equal(r.json().status, `pageSize must be between 10 and 1000, got ${size}`);
    }
    const neg = await get('/api/v1/server/destination/list?pageNumber=-1');
    assert.equal(neg.statusCode, 400);
    assert.equal(neg.json().status, 'pageNumber must be >= 0');
    const nan = await get('/api/v1/server/destination/list?pageNumber=first');
    assert.equal(nan.statusCode, 400);
    assert.equal(nan.json().status, 'pageNumber must be an integer, got "first"');
    const nanSize = await get('/api/v1/server/destination/list?pageSize=1e3');
    assert.equal(nanSize.statusCode, 400);
    assert.equal(nanSize.json().status, 'pageSize must be an integer, got "1e3"');
  });

  test('destinations - browse rejects wildcard and control-character prefixes', async () => {
    let r = await get(`/api/v1/server/destination/list?prefix=${encodeURIComponent('sensors/+')}`);
    assert.equal(r.statusCode, 400);
    assert.match(r.json().status, /^prefix is invalid: "sensors\/\+" contains a wildcard/);
    r = await get(`/api/v1/server/destination/list?prefix=${encodeURIComponent('#')}`);
    assert.equal(r.statusCode, 400);
    r = await get(`/api/v1/server/destination/list?prefix=${encodeURIComponent('a\u0001b')}`);
    assert.equal(r.statusCode, 400);
    assert.equal(r.json().status, 'prefix is invalid: it contains control characters');
    r = await get(`/api/v1/server/destination/list?prefix=${'x'.repeat(65536)}`);
    assert.equal(r.statusCode, 400);
    assert.equal(r.json().status, 'prefix is invalid: longer than 65535 characters');
  });

  test('destinations - browsing a namespace with nothing below it is a 404', async () => {
    for (const p of ['nowhere', 'zeta', 'sensors/a/temp', '$SYS']) {
      const r = await get(`/api/v1/server/destination/list?prefix=${encodeURIComponent(p)}`);
      assert.equal(r.statusCode, 404, p);
      assert.deepEqual(r.json(), { status: 'namespace not found' });
    }
  });

  test('destinations - browse sends an ETag; If-None-Match with it (also weak or in a list) is a 304 without a body', async () => {
    const r = await get('/api/v1/server/destination/list?prefix=sensors');
    const etag = r.headers.etag as string;
    assert.match(etag, /^"[A-Za-z0-9_-]+"$/);
    for (const inm of [etag, `W/${etag}`, `"other", ${etag}`, '*']) {
      const again = await get('/api/v1/server/destination/list?prefix=sensors', { 'if-none-match': inm });
      assert.equal(again.statusCode, 304, inm);
      assert.equal(again.body, '');
      assert.equal(again.headers.etag, etag);
    }
    const stale = await get('/api/v1/server/destination/list?prefix=sensors', { 'if-none-match': '"stale"' });
    assert.equal(stale.statusCode, 200);
    // the content changes → the ETag changes
    await s.rt.engine!.publish('sensors/c', { payload: 'new' });
    const changed = await get('/api/v1/server/destination/list?prefix=sensors', { 'if-none-match': etag });
    assert.equal(changed.statusCode, 200);
    assert.notEqual(changed.headers.etag, etag);
    await s.rt.engine!.deleteDestination('sensors/c');
    // another page of the same namespace has another ETag
    const other = await get('/api/v1/server/destination/list?prefix=sensors&pageNumber=1');
    assert.notEqual(other.headers.etag, etag);
  });

  // ----------------------------------------------------------------------------------------------- detail

  test('destinations - detail gives the DestinationDTO and its subscriptions', async () => {
    const e = s.rt.engine!;
    e.subscribe({ sessionId: 'watcher', filter: 'sensors/+/temp', sink: { kind: 'pull' } });
    const r = await get('/api/v1/server/destination/detail?destinationName=sensors/a/temp');
    assert.equal(r.statusCode, 200);
    const body = r.json();
    assert.equal(body.destination.name, 'sensors/a/temp');
    assert.equal(body.destination.publishedMessages, 3);
    assert.equal(body.subscriptionList.length, 1);
    assert.equal(body.subscriptionList[0].sessionId, 'watcher');
    assert.equal(body.subscriptionList[0].destinationName, 'sensors/+/temp');
    assert.equal(typeof body.subscriptionList[0].isPaused, 'boolean');
    e.unsubscribe('watcher', 'sensors/+/temp');
  });

  test("destinations - detail retries an unknown name with a leading '/'", async () => {
    const r = await get('/api/v1/server/destination/detail?destinationName=abs/one');
    assert.equal(r.statusCode, 200);
    assert.equal(r.json().destination.name, '/abs/one');
  });

  test('destinations - detail: missing name 400, unknown 404, system destinations 404', async () => {
    for (const url of ['/api/v1/server/destination/detail', '/api/v1/server/destination/detail?destinationName=', '/api/v1/server/destination/detail?destinationName=%20']) {
      const r = await get(url);
      assert.equal(r.statusCode, 400, url);
      assert.equal(r.json().status, 'destinationName is required');
    }
    const unknown = await get('/api/v1/server/destination/detail?destinationName=no/such');
    assert.equal(unknown.statusCode, 404);
    assert.deepEqual(unknown.json(), { status: 'Destination not found: no/such' });
    assert.ok(s.rt.engine!.hasDestination('$SYS/test/hidden'));
    const sys = await get(`/api/v1/server/destination/detail?destinationName=${encodeURIComponent('$SYS/test/hidden')}`);
    assert.equal(sys.statusCode, 404);
    assert.deepEqual(sys.json(), { status: 'Destination not found: $SYS/test/hidden' });
  });
});

describe('destination routes with the response cache', () => {
  let s: TestServer;
  before(async () => {
    s = await startServer({ overrides: { RestApi: { enableCache: true, cacheLifetime: 60000 } } });
  });
  after(async () => s.close());

  test('destinations - the list is cached per filter, sortBy and size; browse is always current', async () => {
    const e = s.rt.engine!;
    await e.publish('cached/one', { payload: 'x' });
    const first = (await s.inject('/api/v1/server/destination?sortBy=Name')).json();
    await e.publish('cached/two', { payload: 'x' });
    const again = (await s.inject('/api/v1/server/destination?sortBy=Name')).json();
    assert.deepEqual(again, first, 'same key: served from the cache');
    const otherKey = (await s.inject('/api/v1/server/destination?sortBy=Name&size=0')).json();
    assert.ok(otherKey.some((d: { name: string }) => d.name === 'cached/two'), 'another size is another key');
    // filters differing only in letter case are different keys (the cache lower-cases its keys)
    const upper = (await s.inject(`/api/v1/server/destination?filter=${encodeURIComponent("name > 'Z'")}`)).json();
    const lower = (await s.inject(`/api/v1/server/destination?filter=${encodeURIComponent("name > 'z'")}`)).json();
    assert.equal(upper.length, 2);
    assert.equal(lower.length, 0);
    const browse = (await s.inject('/api/v1/server/destination/list?prefix=cached')).json();
    assert.equal(browse.totalEntries, 2);
  });
});
