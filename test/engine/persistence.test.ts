import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ClassicLevel } from 'classic-level';
import { Engine } from '../../src/engine/engine.js';
import { levelEngineStore, memoryEngineStore } from '../../src/engine/engine-store.js';
import type { EngineStore } from '../../src/engine/engine-store.js';
import { pullSink, pushSink, texts } from './helpers.js';

const dirs: string[] = [];
after(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

async function openDb(dir: string): Promise<ClassicLevel<string, Buffer>> {
  const db = new ClassicLevel<string, Buffer>(dir, { valueEncoding: 'buffer' });
  await db.open();
  return db;
}

test('engine - queue and retained messages survive a restart on a real classic-level store', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'switchyard-engine-'));
  dirs.push(dir);
  const binary = Buffer.from([0, 1, 2, 250, 255]);

  let db = await openDb(dir);
  let engine = new Engine({ store: levelEngineStore(db) });
  await engine.recover();
  await engine.publish('queue/jobs', { payload: 'low', priority: 1 });
  await engine.publish('queue/jobs', { payload: binary, priority: 4, contentType: 'application/octet-stream', dataMap: { n: 1 } });
  await engine.publish('queue/jobs', { payload: 'high', priority: 8, qos: 1 });
  await engine.publish('queue/jobs', { payload: 'consumed soon' });
  await engine.publish('status/a', { payload: 'retained-a', retain: true });
  await engine.publish('status/b', { payload: 'retained-b', retain: true });
  await engine.publish('status/b', { payload: '', retain: true }); // deleted again
  await engine.publish('plain/topic', { payload: 'not stored' });
  // consume one queue message: it must be deleted from the store
  const taker = engine.subscribe({ sessionId: 'taker', filter: 'queue/jobs', maxDepth: 1, transactional: true, sink: pullSink() });
  const [first] = taker.take(1);
  assert.equal(first!.message.payload.toString(), 'high');
  taker.commit([first!.eventId]);
  engine.unsubscribe(taker); // its prefetched message goes back to the queue
  const lastId = Math.max(...engine.browse('queue/jobs').map((m) => m.id));
  await engine.close();
  await db.close();

  db = await openDb(dir);
  engine = new Engine({ store: levelEngineStore(db) });
  const result = await engine.recover();
  assert.deepEqual({ queued: result.queued, retained: result.retained }, { queued: 3, retained: 1 });
  const recovered = engine.browse('queue/jobs');
  assert.deepEqual(
    recovered.map((m) => m.payload.toString('hex')),
    [binary.toString('hex'), Buffer.from('consumed soon').toString('hex'), Buffer.from('low').toString('hex')],
  );
  assert.deepEqual(recovered[0]!.payload, binary);
  assert.equal(recovered[0]!.contentType, 'application/octet-stream');
  assert.deepEqual(recovered[0]!.dataMap, { n: 1 });
  assert.equal(engine.destinationDto('queue/jobs').type, 'Queue');
  assert.equal(engine.destinationDto('queue/jobs').storedMessages, 3);
  assert.equal(engine.retained('status/a')!.payload.toString(), 'retained-a');
  assert.equal(engine.retained('status/b'), undefined);

  // new ids continue above the recovered ones
  await engine.publish('queue/jobs', { payload: 'after restart' });
  assert.ok(Math.max(...engine.browse('queue/jobs').map((m) => m.id)) > lastId);

  const sink = pushSink();
  engine.subscribe({ sessionId: 'late', filter: 'status/#', sink });
  assert.deepEqual(texts(sink.got), ['retained-a']);
  const consumer = pushSink();
  engine.subscribe({ sessionId: 'c', filter: 'queue/jobs', sink: consumer });
  assert.deepEqual(texts(consumer.got), [binary.toString(), 'consumed soon', 'after restart', 'low']);
  await engine.close();

  // everything consumed with QoS 0 push: the store holds only the retained message
  const keys: string[] = [];
  for await (const key of db.keys()) keys.push(key);
  assert.deepEqual(keys, ['r!status/a']);
  await db.close();
});

test('engine - durable subscription messages held while offline survive a restart', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'switchyard-engine-'));
  dirs.push(dir);
  let db = await openDb(dir);
  let engine = new Engine({ store: levelEngineStore(db) });
  await engine.recover();
  const sub = engine.subscribe({ sessionId: 'client!1', filter: 'alerts/+', qos: 1, durable: true, sink: pushSink() });
  sub.hibernate();
  await engine.publish('alerts/fire', { payload: 'f1', qos: 1 });
  await engine.publish('alerts/flood', { payload: 'f2', qos: 1 });
  await engine.close();
  await db.close();

  db = await openDb(dir);
  engine = new Engine({ store: levelEngineStore(db) });
  const result = await engine.recover();
  assert.equal(result.held, 2);
  const back = pushSink();
  const again = engine.subscribe({ sessionId: 'client!1', filter: 'alerts/+', qos: 1, durable: true, sink: back });
  assert.deepEqual(texts(back.got), ['f1', 'f2']);
  assert.deepEqual(back.got.map((r) => r.destinationName), ['alerts/fire', 'alerts/flood']);
  for (const r of back.got) again.ack(r.msg.id);
  await engine.close();
  const keys: string[] = [];
  for await (const key of db.keys()) keys.push(key);
  assert.deepEqual(keys, []);
  await db.close();
});

test('engine - group commit: 1000 concurrent publishes are written in far fewer batches', async () => {
  const store = memoryEngineStore();
  const engine = new Engine({ store });
  const writes: Array<Promise<void>> = [];
  for (let i = 0; i < 1000; i++) writes.push(engine.publish('queue/bulk', { payload: `m${i}` }));
  await Promise.all(writes);
  assert.ok(store.batchCalls <= 2, `expected at most 2 batches, got ${store.batchCalls}`);
  assert.equal(store.data.size, 1000);
  // publishes arriving while a batch is being written go into the next single batch
  const before = store.batchCalls;
  const first = engine.publish('queue/bulk', { payload: 'lead' });
  await Promise.resolve(); // first batch now in progress
  const rest: Array<Promise<void>> = [];
  for (let i = 0; i < 500; i++) rest.push(engine.publish('queue/bulk', { payload: `n${i}` }));
  await Promise.all([first, ...rest]);
  assert.equal(store.batchCalls - before, 2);
  assert.equal(store.data.size, 1501);
  await engine.close();
});

test('engine - publish is durable when it resolves; plain topic publishes return at once', async () => {
  let release: (() => void) | undefined;
  const inner = memoryEngineStore();
  const slowStore: EngineStore = {
    async batch(ops) {
      await new Promise<void>((resolve) => (release = resolve));
      return inner.batch(ops);
    },
    iterate: (prefix) => inner.iterate(prefix),
  };
  const engine = new Engine({ store: slowStore });
  let resolved = false;
  const p = engine.publish('queue/slow', { payload: 'x' }).then(() => (resolved = true));
  const plain = engine.publish('topic/fast', { payload: 'y' });
  assert.equal(plain, engine.publish('topic/fast', { payload: 'z' }), 'a shared resolved promise');
  await plain;
  await new Promise((r) => setImmediate(r));
  assert.equal(resolved, false);
  assert.equal(inner.data.size, 0);
  release!();
  await p;
  assert.equal(inner.data.size, 1);
});

test('engine - store failure rejects the publish and reports onStoreFailure', async () => {
  const failures: unknown[] = [];
  const store = memoryEngineStore();
  const engine = new Engine({ store, events: { onStoreFailure: (err) => failures.push(err) } });
  store.failNext = new Error('disk full');
  await assert.rejects(engine.publish('queue/f', { payload: 'x' }), /disk full/);
  assert.equal(failures.length, 1);
  await engine.publish('queue/f', { payload: 'y' });
  assert.equal(store.data.size, 1);
});

test('engine - acknowledged queue messages are deleted from the store in batches', async () => {
  const store = memoryEngineStore();
  const engine = new Engine({ store });
  const sink = pushSink();
  const sub = engine.subscribe({ sessionId: 'c', filter: 'queue/acks', qos: 1, sink });
  await Promise.all(Array.from({ length: 100 }, (_, i) => engine.publish('queue/acks', { payload: String(i), qos: 1 })));
  assert.equal(store.data.size, 100);
  const before = store.batchCalls;
  for (const r of sink.got) sub.ack(r.msg.id);
  await engine.flush();
  assert.equal(store.data.size, 0);
  assert.equal(store.batchCalls - before, 1);
  assert.ok(engine.destinationDto('queue/acks').writeTimeAveNs > 0);
  assert.ok(engine.destinationDto('queue/acks').deleteTimeAveNs > 0);
});

test('engine - publish after close is a conflict', async () => {
  const engine = new Engine({ store: memoryEngineStore() });
  await engine.close();
  await assert.rejects(engine.publish('queue/x', { payload: 'x' }), { statusCode: 409 });
});

test('engine - write-behind: a copy acknowledged in time is never written; an unacknowledged one is written and survives a restart; the publish waits for either', async () => {
  const store = memoryEngineStore();
  const puts: string[] = [];
  const batch = store.batch.bind(store);
  store.batch = async (ops) => {
    for (const op of ops) if (op.type === 'put' && op.key.startsWith('d!')) puts.push(op.key);
    return batch(ops);
  };
  let engine = new Engine({ store });
  await engine.recover();
  const sink = pushSink();
  const sub = engine.subscribe({ sessionId: 'link', filter: 'wb/#', qos: 1, durable: true, writeBehindMs: 40, sink });

  // acknowledged before its time: no store write, and the publish resolves at the acknowledgement
  let fastDone = false;
  const fast = engine.publish('wb/a', { payload: 'fast', qos: 1 }).then(() => (fastDone = true));
  await new Promise((r) => setTimeout(r, 10));
  assert.equal(fastDone, false, 'the publish waits until the copy is acknowledged or written');
  sub.ack(sink.got[0]!.msg.id);
  await fast;
  await new Promise((r) => setTimeout(r, 60));
  assert.deepEqual(puts, []);

  // not acknowledged in time: written, then the publish resolves
  await engine.publish('wb/b', { payload: 'slow', qos: 1 });
  assert.equal(puts.length, 1);
  // still unsettled when the engine closes: written at close
  void engine.publish('wb/c', { payload: 'at close', qos: 1 });
  await engine.close();
  assert.equal(puts.length, 2);

  engine = new Engine({ store });
  await engine.recover();
  const again = pushSink();
  const back = engine.subscribe({ sessionId: 'link', filter: 'wb/#', qos: 1, durable: true, writeBehindMs: 40, sink: again });
  assert.deepEqual(texts(again.got), ['slow', 'at close']);
  // acknowledged after they were written: deleted from the store
  for (const r of again.got) back.ack(r.msg.id);
  await engine.close();
  assert.deepEqual([...store.data.keys()].filter((k) => k.startsWith('d!')), []);
});
