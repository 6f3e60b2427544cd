import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { compileSelector } from '../../src/engine/selector/selector.js';
import { ModelFunctions, libraryForest, predictorOf, type ModelLease } from '../../src/models/functions.js';
import { ModelStore } from '../../src/models/store.js';
import { removeDir, startServer, tempDir, waitUntil, type TestServer } from '../helpers.js';
import { b64, RestClient } from '../rest-client.js';

/** A seeded generator, so the synthetic stream is the same on every run. */
function rng(seed: number): () => number {
  let x = seed >>> 0;
  return () => {
    x = (x * 1664525 + 1013904223) >>> 0;
    return x / 2 ** 32;
  };
}
function gaussian(r: () => number, mean: number, sd: number): number {
  return mean + sd * Math.sqrt(-2 * Math.log(r() || 1e-12)) * Math.cos(2 * Math.PI * r());
}

describe('selector model functions (unit)', () => {
  const dir = tempDir();
  let store: ModelStore;
  let fns: ModelFunctions;
  before(() => {
    store = new ModelStore({ dir: join(dir, 'models'), maxModelSize: 1 << 20, maxModels: 100 });
    fns = new ModelFunctions(store, 20);
    fns.register();
  });
  after(async () => {
    for (const l of leases.values()) l.release();
    await fns.loader.close();
    removeDir(dir);
  });

  // each selector is held as a subscription holds it, by a caller that may train (as the access check does for
  // a holder of train_model): a selector nobody holds answers unknown
  const leases = new Map<string, ModelLease>();
  const hold = (text: string) => {
    let l = leases.get(text);
    if (!l) leases.set(text, (l = fns.use(compileSelector(text), { train: true })));
    return l;
  };
  const trained = (name: string) => waitUntil(() => fns.describe(name)?.status === 'ready', 10000, `${name} trained`);
  const value = (text: string, obj: Record<string, unknown>) => {
    hold(text);
    return compileSelector(text).matches(obj);
  };

  test('models - a missing model trains from the first N samples, answers unknown meanwhile, then predicts and is saved', async () => {
    // linear_regression: y = 2x + 1, the last field is the target (only read while training)
    const sel = 'linear_regression(\'lin\', x, y) BETWEEN 40 AND 42';
    for (let i = 0; i < 20; i++) assert.equal(value(sel, { x: i, y: 2 * i + 1 }), false, 'unknown while training');
    await trained('lin'); // trained in the loader's worker
    assert.equal(value(sel, { x: 20 }), true, 'predicts 41 for x = 20 without the target');
    assert.equal(value(sel, { x: 30 }), false);
    // decision_tree and naive_bayes: labels may be strings
    for (let i = 0; i < 20; i++) {
      const hot = i % 2 === 0;
      const obj = { t: hot ? 30 + (i % 5) : 10 + (i % 5), h: hot ? 20 + (i % 3) : 80 - (i % 4), label: hot ? 'hot' : 'cold' };
      value("decision_tree('tree', t, h, label) = 'hot'", obj);
      value("naive_bayes('bayes', t, h, label) = 'hot'", obj);
    }
    await trained('tree');
    await trained('bayes');
    assert.equal(value("decision_tree('tree', t, h) = 'hot'", { t: 33, h: 22 }), false, 'a call must give the same fields: two features + label');
    assert.equal(value("decision_tree('tree', t, h, label) = 'hot'", { t: 33, h: 22 }), true);
    assert.equal(value("decision_tree('tree', t, h, label) = 'cold'", { t: 11, h: 79 }), true);
    assert.equal(value("naive_bayes('bayes', t, h, label) = 'hot'", { t: 32, h: 21 }), true);
    // k_means (3 clusters): points of one blob share a cluster
    const r = rng(7);
    const blobs = [0, 50, 100];
    for (let i = 0; i < 20; i++) value("k_means('km', a, b) >= 0", { a: gaussian(r, blobs[i % 3]!, 1), b: gaussian(r, blobs[i % 3]!, 1) });
    await trained('km');
    const cluster = (a: number) => [0, 1, 2].find((k) => value(`k_means('km', a, b) = ${k}`, { a, b: a }));
    assert.notEqual(cluster(0), undefined);
    assert.equal(cluster(1), cluster(0));
    assert.notEqual(cluster(50), cluster(0));
    assert.notEqual(cluster(100), cluster(50));
    // pca: the first component separates along the line the samples lie on
    for (let i = 0; i < 20; i++) value("pca('line', a, b) > 0", { a: i, b: i * 2 });
    await trained('line');
    const p = (a: number) => [-100, -10, 0, 10, 100].filter((t) => value(`pca('line', a, b) > ${t}`, { a, b: a * 2 })).length;
    assert.notEqual(p(-50), p(50), 'far apart on the line, different scores');

    await waitUntil(() => ['lin', 'tree', 'bayes', 'km', 'line'].every((n) => existsSync(join(store.dir, n))), 5000, 'trained models saved');
    const doc = JSON.parse(readFileSync(join(store.dir, 'lin'), 'utf8'));
    assert.equal(doc.format, 'switchyard-model');
    assert.equal(doc.kind, 'linear_regression');
    assert.equal(value("model_exists('lin')", {}), true);
    assert.equal(value("model_exists('nothing')", {}), false);
    assert.equal(value("NOT model_exists('nothing')", {}), true);
  });

  test('models - missing or non-numeric fields are unknown (never a throw); a stored model of another kind or a foreign file is unknown', async () => {
    for (const obj of [{}, { x: 'abc' }, { x: null }, { x: { nested: 1 } }, { x: Number.NaN }, { x: [1, 2] }]) {
      assert.equal(value("linear_regression('lin', x, y) > -1000000", obj), false, JSON.stringify(obj));
      assert.equal(value("NOT (linear_regression('lin', x, y) > -1000000)", obj), false, 'unknown, not false');
      assert.equal(value("linear_regression('lin', x, y) IS NULL", obj), true);
    }
    assert.equal(value("linear_regression('lin', x, y) > 0", { x: '3' }), true, 'a numeric string is a number');
    assert.equal(value("isolation_forest('lin', x) >= 0", { x: 1 }), false, 'a linear_regression model used as isolation_forest');
    await store.writeBuffer('foreign', Buffer.from([0x08, 0x01, 0x12, 0x00])); // e.g. an ONNX protobuf
    assert.equal(value("isolation_forest('foreign', x) >= 0", { x: 1 }), false);
    await waitUntil(() => fns.describe('foreign')?.status !== 'loading', 5000, 'foreign file read');
    assert.equal(value("isolation_forest('foreign', x) >= 0", { x: 1 }), false);
    assert.equal(fns.describe('foreign')?.status, 'unusable');
  });

  test('models - an uploaded model is used as is (no training)', async () => {
    const doc = { format: 'switchyard-model', kind: 'k_means', dims: 1, centroids: [[0], [1000]] };
    await store.writeBuffer('uploaded', Buffer.from(JSON.stringify(doc)));
    await hold("k_means('uploaded', v) = 1").ready; // loaded in the loader's worker
    assert.equal(value("k_means('uploaded', v) = 1", { v: 900 }), true, 'the first sample is already classified');
    assert.equal(value("k_means('uploaded', v) = 0", { v: 3 }), true);
    // a new upload replaces the cached model
    await store.writeBuffer('uploaded', Buffer.from(JSON.stringify({ ...doc, centroids: [[1000], [0]] })));
    await waitUntil(() => fns.describe('uploaded')?.status === 'ready', 5000, 'the new upload loaded');
    assert.equal(value("k_means('uploaded', v) = 1", { v: 3 }), true);
  });

  test('models - isolation_forest scores equal the ml-isolation-forest library scores of the same trees', async () => {
    const r = rng(3);
    for (let i = 0; i < 20; i++) value("isolation_forest('iso', a, b) > 0.5", { a: gaussian(r, 10, 1), b: gaussian(r, 5, 1) });
    await trained('iso');
    await waitUntil(() => existsSync(join(store.dir, 'iso')), 5000, 'iso saved');
    const doc = JSON.parse(readFileSync(join(store.dir, 'iso'), 'utf8'));
    const ours = predictorOf(doc);
    const lib = libraryForest(doc);
    for (let i = 0; i < 500; i++) {
      const x = [gaussian(r, 10, 4), gaussian(r, 5, 4)];
      assert.ok(Math.abs((ours(x) as number) - lib(x)) < 1e-12, `${x}: ${ours(x)} vs ${lib(x)}`);
    }
  });

  test('models - bad calls are refused when the selector is compiled, with the position', () => {
    assert.throws(() => compileSelector('isolation_forest(temperature, pressure) > 1'), /position 0 .*isolation_forest\(\): .*model name as a string literal/);
    assert.throws(() => compileSelector("isolation_forest('t') > 1"), /takes the model name and/);
    assert.throws(() => compileSelector("a = 1 AND nosuch('t', a) > 1"), /position 10 .*unknown function 'nosuch'/);
    assert.throws(() => compileSelector("isolation_forest('../x', a) > 1"), /Invalid model name/);
    assert.throws(() => compileSelector("model_exists('a', b)"), /takes 1 argument/);
  });
});

describe('selector model functions in the broker', () => {
  const dataDir = tempDir();
  let s: TestServer;
  const TRAINING = 256;
  before(async () => {
    // the subscriber collects every outlier of one topic: RestApi.maxEventsPerDestination (MAPS: 10 per destination,
    // oldest dropped) is raised so the REST buffer keeps them all
    s = await startServer({ auth: false, dataDir, overrides: { MessageDaemon: { modelStore: { trainingSamples: TRAINING } }, RestApi: { maxEventsPerDestination: 100000 } } });
  });
  after(async () => {
    await s?.close();
    removeDir(dataDir);
  });

  const publish = (c: RestClient, dataMap: Record<string, unknown>) =>
    c.post('/api/v1/messaging/publish', { destinationName: 'plant/boiler', message: { payload: b64(JSON.stringify(dataMap)), dataMap } });
  const consumeAll = async (c: RestClient) => {
    const out: Array<Record<string, unknown>> = [];
    for (;;) {
      const r = await c.post('/api/v1/messaging/consume', { destination: 'plant/boiler', depth: 1000 });
      assert.equal(r.statusCode, 200, r.body);
      const got = r.json().consumedMessages as Array<{ dataMap: Record<string, unknown> }>;
      out.push(...got.map((m) => m.dataMap));
      if (got.length === 0) return out;
    }
  };

  test('models - an isolation_forest subscription receives the outliers of a synthetic stream and few normal readings (precision and recall printed)', async () => {
    const sub = new RestClient(s.app);
    const pub = new RestClient(s.app);
    const filter = "isolation_forest('boiler', temperature, pressure) > 0.63";
    const r = await sub.post('/api/v1/messaging/subscribe', { destinationName: 'plant/boiler', filter, maxDepth: 100000 });
    assert.equal(r.statusCode, 200, r.body);
    const rand = rng(42);
    const normal = () => ({ temperature: gaussian(rand, 70, 2), pressure: gaussian(rand, 3, 0.1), outlier: false });
    for (let i = 0; i < TRAINING; i++) assert.equal((await publish(pub, normal())).statusCode, 200);
    assert.deepEqual(await consumeAll(sub), [], 'nothing is delivered while the model trains');
    await waitUntil(async () => (await s.inject({ method: 'HEAD', url: '/api/v1/server/models/boiler' })).statusCode === 200, 5000, 'trained model in the store');
    assert.ok((await s.inject('/api/v1/server/models')).json().includes('boiler'));

    // 1000 readings, 3 % outliers (overheating, pressure drop, or both)
    let outliers = 0;
    for (let i = 0; i < 1000; i++) {
      if (rand() < 0.03) {
        outliers++;
        const kind = i % 3;
        await publish(pub, { temperature: kind === 1 ? gaussian(rand, 70, 2) : gaussian(rand, 95, 3), pressure: kind === 0 ? gaussian(rand, 3, 0.1) : gaussian(rand, 1.5, 0.2), outlier: true });
      } else await publish(pub, normal());
    }
    const got = await consumeAll(sub);
    const tp = got.filter((m) => m.outlier === true).length;
    const precision = got.length === 0 ? 0 : tp / got.length;
    const recall = tp / outliers;
    const normalsDelivered = (got.length - tp) / (1000 - outliers);
    process.stdout.write(
      `# isolation_forest > 0.63: ${outliers} outliers in 1000 readings, delivered ${got.length} (${tp} outliers), precision ${precision.toFixed(3)}, ` +
        `recall ${recall.toFixed(3)}, normal readings delivered ${(normalsDelivered * 100).toFixed(1)} %\n`,
    );
    // training is seeded (src/models/loader.ts), so the forest and these figures are the same on every run
    assert.ok(recall >= 0.85, `recall ${recall}`);
    assert.ok(normalsDelivered <= 0.05, `${(normalsDelivered * 100).toFixed(1)} % of the normal readings delivered`);
    assert.ok(precision >= 0.35, `precision ${precision}`);
  });

  test('models - the trained model is reused after a restart: readings are scored at once, without a new training window', async () => {
    const stored = readFileSync(join(dataDir, 'models', 'boiler'));
    await s.close();
    s = await startServer({ auth: false, dataDir, overrides: { MessageDaemon: { modelStore: { trainingSamples: TRAINING } } } });
    const sub = new RestClient(s.app);
    const pub = new RestClient(s.app);
    await sub.post('/api/v1/messaging/subscribe', { destinationName: 'plant/boiler', filter: "isolation_forest('boiler', temperature, pressure) > 0.6", maxDepth: 1000 });
    await publish(pub, { temperature: 120, pressure: 0.5, outlier: true });
    await publish(pub, { temperature: 70, pressure: 3, outlier: false });
    const got = await consumeAll(sub);
    assert.deepEqual(
      got.map((m) => m.outlier),
      [true],
      'the first outlier after the restart is delivered, the normal reading is not',
    );
    assert.deepEqual(readFileSync(join(dataDir, 'models', 'boiler')), stored, 'the stored model was not retrained');
  });
});

describe('schema and model routes in the OpenAPI document', () => {
  test('models - the 16 schema and model operations are in the OpenAPI document with their permission', async () => {
    const s = await startServer({ auth: false });
    try {
      const doc = (await s.app.inject('/openapi.json')).json();
      const ops: Array<[string, string, string]> = [
        ['get', '/api/v1/server/schemas', 'view_config'],
        ['post', '/api/v1/server/schemas', 'manage_config'],
        ['delete', '/api/v1/server/schemas', 'manage_config'],
        ['get', '/api/v1/server/schemas/{schemaId}', 'view_config'],
        ['delete', '/api/v1/server/schemas/{schemaId}', 'manage_config'],
        ['get', '/api/v1/server/schemas/context/{context}', 'view_config'],
        ['get', '/api/v1/server/schemas/type/{type}', 'view_config'],
        ['get', '/api/v1/server/schemas/impl/{schemaId}', 'view_config'],
        ['get', '/api/v1/server/schemas/formats', 'view_config'],
        ['get', '/api/v1/server/schemas/link-format', 'view_config'],
        ['get', '/api/v1/server/schemas/map', 'view_config'],
        ['post', '/api/v1/server/models/{modelName}', 'manage_config'],
        ['get', '/api/v1/server/models/{modelName}', 'view_config'],
        ['head', '/api/v1/server/models/{modelName}', 'view_config'],
        ['delete', '/api/v1/server/models/{modelName}', 'manage_config'],
        ['get', '/api/v1/server/models', 'view_config'],
      ];
      for (const [method, path, permission] of ops) {
        const op = doc.paths[path]?.[method];
        assert.ok(op, `${method.toUpperCase()} ${path} is in the document`);
        assert.deepEqual(op['x-required-permission'], { permission, resourceType: 'Server' }, `${method.toUpperCase()} ${path}`);
      }
    } finally {
      await s.close();
    }
  });
});
