import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Engine } from '../../src/engine/engine.js';
import { memoryEngineStore } from '../../src/engine/engine-store.js';
import { pushSink } from './helpers.js';

/**
 * Protocol state records (`s!`, used by MQTT for packet ids in flight) share the group commit with messages: a
 * record written in the same synchronous step as a publish lands in the same batch, and its promise is that batch's.
 */
test('engine state - a state record and the message it goes with are written in one batch (one promise)', async () => {
  const store = memoryEngineStore();
  const engine = new Engine({ store });
  await engine.recover();
  const offline = pushSink();
  const sub = engine.subscribe({ sessionId: 'mqtt:s', filter: 'a/b', qos: 2, durable: true, sink: offline });
  sub.hibernate();
  const before = store.batchCalls;
  const durable = engine.publish('a/b', { payload: 'x', qos: 2 });
  const id = engine.putState('mqtt%3Ap!i!00001', Buffer.from([1]));
  assert.equal(durable, id, 'the same batch promise');
  await id;
  assert.equal(store.batchCalls - before, 1, 'one batch');
  assert.ok([...store.data.keys()].some((k) => k.startsWith('d!')), 'the held copy is stored');
  assert.deepEqual(store.data.get('s!mqtt%3Ap!i!00001'), Buffer.from([1]));

  // a failed batch fails the message and its record together
  store.failNext = new Error('disk full');
  const p2 = engine.publish('a/b', { payload: 'y', qos: 2 });
  const id2 = engine.putState('mqtt%3Ap!i!00002', Buffer.from([1]));
  await assert.rejects(p2);
  await assert.rejects(id2);
  assert.equal(store.data.has('s!mqtt%3Ap!i!00002'), false);

  await engine.delState('mqtt%3Ap!i!00001');
  const left: string[] = [];
  for await (const [k] of engine.stateEntries()) left.push(k);
  assert.deepEqual(left, []);
});

test('engine state - records are listed by prefix after a restart, and a store-less engine resolves at once', async () => {
  const store = memoryEngineStore();
  const e1 = new Engine({ store });
  await e1.recover();
  await Promise.all([e1.putState('x!o!00007', Buffer.from('{"s":2}')), e1.putState('y!i!00001', Buffer.from([2]))]);
  const e2 = new Engine({ store });
  const r = await e2.recover();
  assert.equal(r.corrupt, 0, 'state records are not messages');
  const got: Array<[string, string]> = [];
  for await (const [k, v] of e2.stateEntries('x!')) got.push([k, v.toString()]);
  assert.deepEqual(got, [['x!o!00007', '{"s":2}']]);

  const bare = new Engine();
  assert.equal(bare.hasStore, false);
  await bare.putState('k', Buffer.from([1]));
  for await (const _ of bare.stateEntries()) assert.fail('no records without a store');
});
