import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { closeSync, createReadStream, openSync, readdirSync, statSync, writeSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { modelFunctionsOf, modelStoreOf } from '../../src/models/models.service.js';
import { startServer, waitUntil, type TestServer } from '../helpers.js';
import { createUser } from '../security/helpers.js';
import { b64 } from '../rest-client.js';

const BOUNDARY = '----switchyard-limits-boundary';
function multipart(content: Buffer): { payload: Buffer; headers: Record<string, string> } {
  const head = Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="model.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`);
  const tail = Buffer.from(`\r\n--${BOUNDARY}--\r\n`);
  return { payload: Buffer.concat([head, content, tail]), headers: { 'content-type': `multipart/form-data; boundary=${BOUNDARY}` } };
}

const FIELDS = Array.from({ length: 8 }, (_, i) => `f${i}`);
const kMeansDoc = (k: number, d: number) => ({
  format: 'switchyard-model',
  kind: 'k_means',
  dims: d,
  centroids: Array.from({ length: k }, (_, i) => Array.from({ length: d }, (_, j) => i * 10 + j / 1000 + 0.123456789)),
});
const filesIn = (s: TestServer) => readdirSync(join(s.dataDir, 'models'));

describe('models under control: permissions, maxModels, cost, sharing', () => {
  let s: TestServer;
  let alice: { uuid: string; auth: { authorization: string } };
  before(async () => {
    s = await startServer({ overrides: { MessageDaemon: { modelStore: { maxModels: 20, trainingSamples: 3, maxEvaluationCost: 100000 } }, RestApi: { maxEventsPerDestination: 1000 } } });
    alice = await createUser(s, 'alice', 'alice-password-1');
  });
  after(async () => s.close());

  const upload = (name: string, content: Buffer, auth = s.auth) => s.app.inject({ method: 'POST', url: `/api/v1/server/models/${name}`, ...multipart(content), headers: { ...multipart(content).headers, ...auth } });
  const subscribe = (auth: { authorization: string }, destinationName: string, filter: string) =>
    s.app.inject({ method: 'POST', url: '/api/v1/messaging/subscribe', headers: auth, payload: { destinationName, filter, maxDepth: 100 } });
  const unsubscribe = (auth: { authorization: string }, destinationName: string) =>
    s.app.inject({ method: 'POST', url: '/api/v1/messaging/unsubscribe', headers: auth, payload: { destinationName } });
  const publish = (destinationName: string, dataMap: Record<string, unknown>) =>
    s.inject({ method: 'POST', url: '/api/v1/messaging/publish', payload: { destinationName, message: { payload: b64('x'), dataMap } } });

  test('models - a user in everyone may call a stored model but not train a new one, upload, delete or poison a name; an administrator may', async () => {
    assert.equal((await upload('shared', Buffer.from(JSON.stringify(kMeansDoc(3, 2))))).statusCode, 200);
    const ok = await subscribe(alice.auth, 'alice/a', "k_means('shared', x, y) = 0");
    assert.equal(ok.statusCode, 200, ok.body);
    const train = await subscribe(alice.auth, 'alice/b', "isolation_forest('grab', x, y) > 0.5");
    assert.equal(train.statusCode, 403, train.body);
    assert.match(train.json().status, /model grab is not in the store, so this selector would train it online, which needs train_model on Model grab/);
    assert.equal(modelFunctionsOf(s.rt)!.describe('grab'), undefined, 'nothing held for the refused selector');
    // list filters too (any `filter`)
    const list = await s.app.inject({ url: `/api/v1/server/destination?filter=${encodeURIComponent("k_means('grab2', storedMessages) = 0")}`, headers: alice.auth });
    assert.equal(list.statusCode, 403, list.body);
    const listOk = await s.app.inject({ url: `/api/v1/server/destination?filter=${encodeURIComponent("model_exists('shared')")}`, headers: alice.auth });
    assert.equal(listOk.statusCode, 200, listOk.body);
    assert.equal((await upload('grab', Buffer.from('{}'), alice.auth)).statusCode, 403, 'upload needs manage_config (and train_model)');
    assert.deepEqual(filesIn(s).sort(), ['shared'], 'no model was created under alice`s names');

    // use_model taken away on one model: alice cannot call it any more
    const everyone = (await s.inject('/api/v1/auth/groups')).json().find((g: { groupName?: string; name?: string }) => (g.groupName ?? g.name) === 'everyone');
    const put = await s.inject({
      method: 'PUT',
      url: '/api/v1/auth/resources/acl',
      payload: { resourceType: 'Model', resourceKey: 'shared', entries: [{ principalType: 'GROUP', principalId: everyone.uniqueId, effect: 'DENY', permissions: ['use_model'] }] },
    });
    assert.equal(put.statusCode, 200, put.body);
    const denied = await subscribe(alice.auth, 'alice/c', "k_means('shared', x, y) = 0");
    assert.equal(denied.statusCode, 403);
    assert.match(denied.json().status, /lacks use_model on Model shared/);
    const wrongScope = await s.inject({
      method: 'PUT',
      url: '/api/v1/auth/resources/acl',
      payload: { resourceType: 'Topic', resourceKey: '/x', entries: [{ principalType: 'GROUP', principalId: everyone.uniqueId, effect: 'ALLOW', permissions: ['train_model'] }] },
    });
    assert.equal(wrongScope.statusCode, 400, wrongScope.body);

    // the administrator trains a new model online from a subscription: it is saved and used
    const admin = await subscribe(s.auth, 'plant/a', "linear_regression('lin', x, y) > 10");
    assert.equal(admin.statusCode, 200, admin.body);
    for (let i = 0; i < 3; i++) await publish('plant/a', { x: i, y: 2 * i });
    await waitUntil(() => filesIn(s).includes('lin'), 5000, 'trained model saved');
    await unsubscribe(alice.auth, 'alice/a');
    await unsubscribe(s.auth, 'plant/a');
    await s.inject({ method: 'DELETE', url: '/api/v1/server/models/shared' });
    await s.inject({ method: 'DELETE', url: '/api/v1/server/models/lin' });
  });

  test('models - online trainings and uploads count against maxModels: files never exceed it, a subscription that leaves gives its place back', async () => {
    const store = modelStoreOf(s.rt)!;
    const start = filesIn(s).length;
    let accepted = 0;
    let refused = 0;
    // 200 subscriptions by an administrator, each naming two new models (400 names), as the attack did
    for (let i = 0; i < 200; i++) {
      const r = await subscribe(s.auth, `train/${i}`, `isolation_forest('t${i}a', x, y) > 0.5 OR k_means('t${i}b', x, y) = 1`);
      if (r.statusCode === 200) accepted++;
      else {
        assert.equal(r.statusCode, 409, r.body);
        assert.match(r.json().status, /maximum of 20 models/);
        refused++;
      }
    }
    for (let i = 0; i < 200; i++) for (let k = 0; k < 3; k++) await publish(`train/${i}`, { x: k, y: k * k });
    await waitUntil(() => filesIn(s).length >= 20 || store.count >= 20, 10000, 'trained models saved');
    await new Promise((r) => setTimeout(r, 300));
    const files = filesIn(s).length;
    process.stdout.write(`# online training: 200 subscriptions naming 400 new models with maxModels 20: ${accepted} accepted, ${refused} refused 409, ${files} model files written (was 7 071 files with maxModels 20)\n`);
    assert.ok(files <= 20, `${files} files`);
    assert.equal(files - start, accepted * 2);
    const up = await upload('admin-model', Buffer.from('x'));
    assert.equal(up.statusCode, 409, 'the store is full of models the administrator trained: the limit holds');

    // a subscription whose model has not been trained yet gives its place back when it ends
    for (let i = 0; i < 200; i++) await unsubscribe(s.auth, `train/${i}`);
    for (const f of filesIn(s)) assert.equal((await s.inject({ method: 'DELETE', url: `/api/v1/server/models/${f}` })).statusCode, 200);
    assert.equal(store.count, 0);
    for (let i = 0; i < 20; i++) assert.equal((await subscribe(s.auth, `pending/${i}`, `k_means('p${i}', x, y) = 1`)).statusCode, 200);
    assert.equal((await subscribe(s.auth, 'pending/x', "k_means('px', x, y) = 1")).statusCode, 409, '20 trainings under way fill the store');
    assert.equal((await upload('late', Buffer.from('x'))).statusCode, 409);
    for (let i = 0; i < 20; i++) await unsubscribe(s.auth, `pending/${i}`);
    assert.equal(store.count, 0, 'every place given back');
    assert.equal(modelFunctionsOf(s.rt)!.stats.models, 0);
    assert.equal((await upload('late', Buffer.from('x'))).statusCode, 200);
    await s.inject({ method: 'DELETE', url: '/api/v1/server/models/late' });
  });

  test('models - concurrent uploads by an administrator never overshoot maxModels (real sockets)', async () => {
    const address = await s.app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const body = multipart(Buffer.alloc(2048, 7));
      const results = await Promise.all(
        Array.from({ length: 60 }, (_, i) =>
          fetch(`${address}/api/v1/server/models/c${i}`, { method: 'POST', headers: { ...body.headers, ...s.auth }, body: new Uint8Array(body.payload) }).then((r) => r.status),
        ),
      );
      const ok = results.filter((c) => c === 200).length;
      const conflict = results.filter((c) => c === 409).length;
      const files = filesIn(s).length;
      process.stdout.write(`# concurrent uploads: 60 at once with maxModels 20: ${ok} stored, ${conflict} refused 409, ${files} files (was 35 with a limit of 20)\n`);
      assert.equal(ok, 20);
      assert.equal(conflict, 40);
      assert.equal(files, 20);
      assert.deepEqual(
        readdirSync(join(s.dataDir, 'models')).filter((f) => f.startsWith('.')),
        [],
        'no temp file left',
      );
    } finally {
      for (const f of filesIn(s)) await s.inject({ method: 'DELETE', url: `/api/v1/server/models/${f}` });
    }
  });

  test('models - a model too costly to evaluate is refused at upload and at subscribe (400)', async () => {
    const big = Buffer.from(JSON.stringify(kMeansDoc(2000, 64))); // 128 000 operations per message > 100 000
    const r = await upload('costly', big);
    assert.equal(r.statusCode, 400, r.body);
    assert.match(r.json().status, /Model costly is too costly to evaluate: a k_means model of 2000 centroids x 64 dimensions costs about 128000 operations per message \(limit 100000/);
    assert.deepEqual(filesIn(s), []);
    // one placed in the store another way (an older version, a copy) is refused when a selector names it
    await modelStoreOf(s.rt)!.writeBuffer('costly', big);
    const sub = await subscribe(s.auth, 'cost/a', `k_means('costly', ${FIELDS.join(', ')}) = 1`);
    assert.equal(sub.statusCode, 400, sub.body);
    assert.match(sub.json().status, /too costly to evaluate/);
    assert.equal(modelFunctionsOf(s.rt)!.stats.models, 0, 'nothing held');
    const fine = await upload('fine', Buffer.from(JSON.stringify(kMeansDoc(1000, 64))));
    assert.equal(fine.statusCode, 200, fine.body);
    await s.inject({ method: 'DELETE', url: '/api/v1/server/models/costly' });
    await s.inject({ method: 'DELETE', url: '/api/v1/server/models/fine' });
  });

  test('models - 100 subscriptions with a model-function selector share one loaded model, freed when they end', async () => {
    assert.equal((await upload('shared64', Buffer.from(JSON.stringify(kMeansDoc(1000, 8))))).statusCode, 200);
    const fns = modelFunctionsOf(s.rt)!;
    for (let i = 0; i < 100; i++) {
      // a different text each time: no sharing through the compiled-selector cache
      const r = await subscribe(s.auth, `share/${i}`, `k_means('shared64', ${FIELDS.join(', ')}) >= ${i % 7}`);
      assert.equal(r.statusCode, 200, r.body);
    }
    for (let i = 0; i < 100; i++) await publish(`share/${i}`, Object.fromEntries(FIELDS.map((f, j) => [f, i * 10 + j])));
    const held = fns.stats;
    process.stdout.write(`# 100 subscriptions on one model: ${held.models} model held, ${held.leases} uses, cost ${held.cost} operations per evaluation\n`);
    assert.equal(held.models, 1);
    assert.equal(held.leases, 100);
    for (let i = 0; i < 100; i++) await unsubscribe(s.auth, `share/${i}`);
    assert.equal(fns.stats.models, 0, 'freed when the last subscription ended');
    assert.equal(fns.stats.leases, 0);
    await s.inject({ method: 'DELETE', url: '/api/v1/server/models/shared64' });
  });

  test('models - a large model loads off the event loop (event-loop delay printed)', async () => {
    // a 59 MB-class k-means file (as in the report): parsed in the loader's worker, refused as too costly
    // written row by row, so the test itself holds no large object whose collection would show as delay
    const file = join(s.dataDir, 'huge.json');
    const fd = openSync(file, 'w');
    writeSync(fd, '{"format":"switchyard-model","kind":"k_means","dims":1000,"centroids":[');
    for (let i = 0; i < 3000; i++) writeSync(fd, `${i ? ',' : ''}[${Array.from({ length: 1000 }, (_, j) => i * 10 + j / 1000 + 0.123456789).join(',')}]`);
    writeSync(fd, ']}');
    closeSync(fd);
    const store = modelStoreOf(s.rt)!;
    const mb = (statSync(file).size / 1048576).toFixed(1);
    await store.write('huge', createReadStream(file));
    // and one that is used: an isolation forest of 400 trees (about 200 000 nodes)
    const tree = (t: number) => {
      const build = (depth: number, lo: number): unknown => (depth === 9 ? [1] : [depth % 2, lo + t / 1000 + 2 ** (8 - depth), build(depth + 1, lo), build(depth + 1, lo + 2 ** (8 - depth))]);
      return JSON.stringify(build(0, 0));
    };
    const forestFile = join(s.dataDir, 'forest.json');
    const ffd = openSync(forestFile, 'w');
    writeSync(ffd, '{"format":"switchyard-model","kind":"isolation_forest","dims":2,"n":256,"trees":[');
    for (let t = 0; t < 400; t++) writeSync(ffd, `${t ? ',' : ''}${tree(t)}`);
    writeSync(ffd, ']}');
    closeSync(ffd);
    await store.write('forest', createReadStream(forestFile));
    await new Promise((r) => setTimeout(r, 200));
    const h = monitorEventLoopDelay({ resolution: 5 });
    h.enable();
    // and the largest gap between ticks of a 2 ms interval (a long synchronous stretch shows there in any case)
    let last = performance.now();
    let gap = 0;
    const probe = setInterval(() => {
      const now = performance.now();
      gap = Math.max(gap, now - last);
      last = now;
    }, 2);
    const huge1 = await subscribe(s.auth, 'huge/a', `k_means('huge', ${FIELDS.join(', ')}) = 1`);
    const forest = await subscribe(s.auth, 'huge/b', "isolation_forest('forest', x, y) > 0.5");
    h.disable();
    clearInterval(probe);
    const maxMs = Math.max(h.max / 1e6, gap);
    process.stdout.write(
      `# event loop while a ${mb} MB k-means model and a 400-tree forest load: monitorEventLoopDelay max ${(h.max / 1e6).toFixed(1)} ms, ` +
        `largest gap of a 2 ms interval ${gap.toFixed(1)} ms (was 5.9 s blocked for 59 MB)\n`,
    );
    assert.equal(huge1.statusCode, 400, huge1.body);
    assert.equal(forest.statusCode, 200, forest.body);
    assert.equal(modelFunctionsOf(s.rt)!.describe('forest')?.status, 'ready');
    assert.ok(maxMs < 500, `event loop blocked ${maxMs} ms`);
    await unsubscribe(s.auth, 'huge/b');
    await s.inject({ method: 'DELETE', url: '/api/v1/server/models/huge' });
    await s.inject({ method: 'DELETE', url: '/api/v1/server/models/forest' });
  });

  test('models - malformed multipart on upload: 400 with the parser`s reason, nothing left behind', async () => {
    const store = modelStoreOf(s.rt)!;
    const part = (b: string) => `--${b}\r\nContent-Disposition: form-data; name="file"; filename="m"\r\nContent-Type: application/octet-stream\r\n\r\n${'z'.repeat(100000)}\r\n--${b}--\r\n`;
    const cases: Array<[string, string, string, RegExp]> = [
      ['no boundary', 'multipart/form-data', part('abc'), /Boundary not found/],
      ['wrong boundary', 'multipart/form-data; boundary=zzz', part('abc'), /Unexpected end of multipart data/],
      ['300-character boundary', `multipart/form-data; boundary=${'b'.repeat(300)}`, part('b'.repeat(300)), /Malformed multipart body: .*256/],
      ['garbage', 'multipart/form-data; boundary=abc', '\u0000\u0001 garbage garbage', /Unexpected end of multipart data/],
      ['truncated in the headers', 'multipart/form-data; boundary=abc', part('abc').slice(0, 60), /Unexpected end of multipart data/],
      ['truncated in the file', 'multipart/form-data; boundary=abc', part('abc').slice(0, 50000), /unexpected end of multipart data/i],
    ];
    const before = store.count;
    for (const [what, ct, payload, reason] of cases) {
      const r = await s.inject({ method: 'POST', url: '/api/v1/server/models/mp', headers: { 'content-type': ct }, payload });
      process.stdout.write(`# multipart ${what}: ${r.statusCode} ${r.body}\n`);
      assert.equal(r.statusCode, 400, `${what}: ${r.body}`);
      assert.match(r.json().status, /^Malformed multipart body: /);
      assert.match(r.json().status, reason, what);
      assert.deepEqual(readdirSync(join(s.dataDir, 'models')), [], `${what}: no model and no temp file`);
      assert.equal(store.count, before, `${what}: no place kept`);
    }
    // a client that goes away in the middle of the file (real socket): nothing kept either
    const address = await s.app.listen({ port: 0, host: '127.0.0.1' }).catch(() => `http://127.0.0.1:${(s.app.server.address() as net.AddressInfo).port}`);
    const port = Number(new URL(address).port);
    const sock = net.connect(port, '127.0.0.1');
    await new Promise<void>((r) => sock.once('connect', () => r()));
    const head = part('abc').slice(0, 80000);
    sock.write(
      `POST /api/v1/server/models/mp HTTP/1.1\r\nHost: x\r\nAuthorization: ${s.auth.authorization}\r\nContent-Type: multipart/form-data; boundary=abc\r\nContent-Length: ${part('abc').length}\r\n\r\n${head}`,
    );
    await waitUntil(() => readdirSync(join(s.dataDir, 'models')).length > 0, 5000, 'the upload reached the disk');
    sock.destroy();
    await waitUntil(() => readdirSync(join(s.dataDir, 'models')).length === 0, 5000, 'the temp file removed');
    assert.equal(store.count, before);
    const good = await upload('mp', Buffer.from('fine'));
    assert.equal(good.statusCode, 200, 'the next upload works');
    await s.inject({ method: 'DELETE', url: '/api/v1/server/models/mp' });
  });
});
