import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Engine } from '../../src/engine/engine.js';
import { memoryEngineStore } from '../../src/engine/engine-store.js';
import { ValidationError } from '../../src/errors.js';
import { pullSink } from './helpers.js';

const texts = (ds: Array<{ message: { payload: Buffer } }>) => ds.map((d) => d.message.payload.toString());

test('engine - maxPerDestination keeps the newest messages of each destination, dropping the oldest of that destination only', async () => {
  const engine = new Engine();
  const sub = engine.subscribe({ sessionId: 'rest:a', filter: 'per/#', maxDepth: 100, maxPerDestination: 3, sink: pullSink() });
  for (let i = 1; i <= 5; i++) await engine.publish('per/a', { payload: `a${i}` });
  await engine.publish('per/b', { payload: 'b1' });
  await engine.publish('per/a', { payload: 'a6' });
  assert.equal(sub.depth(), 4);
  assert.deepEqual(texts(sub.take(10)), ['a4', 'a5', 'b1', 'a6']);
  assert.equal(sub.state().messagesDropped, 3, 'a1, a2, a3 dropped');
  assert.equal(engine.destinationDto('per/a').pendingMessages, 0);
  assert.equal(engine.destinationDto('per/b').pendingMessages, 0);
});

test('engine - maxPerDestination and maxDepth together: the total cap still drops new messages', async () => {
  const engine = new Engine();
  const sub = engine.subscribe({ sessionId: 'rest:b', filter: 'cap/+', maxDepth: 2, maxPerDestination: 10, sink: pullSink() });
  for (const t of ['1', '2', '3']) await engine.publish('cap/x', { payload: t });
  assert.deepEqual(texts(sub.take(10)), ['1', '2']);
});

test('engine - maxPerDestination on a queue consumer hands out no more than that at a time and loses nothing', async () => {
  const engine = new Engine();
  const sub = engine.subscribe({ sessionId: 'rest:q', filter: 'queue/per', maxDepth: 100, maxPerDestination: 2, sink: pullSink() });
  for (let i = 1; i <= 5; i++) await engine.publish('queue/per', { payload: `q${i}` });
  assert.equal(sub.depth(), 2);
  assert.equal(engine.destinationDto('queue/per').pendingMessages, 3);
  const got: string[] = [];
  for (let i = 0; i < 3; i++) got.push(...texts(sub.take(10)));
  assert.deepEqual(got, ['q1', 'q2', 'q3', 'q4', 'q5']);
});

test('engine - a durable subscription with maxPerDestination deletes the dropped copy from the store', async () => {
  const store = memoryEngineStore();
  const engine = new Engine({ store });
  const sub = engine.subscribe({ sessionId: 'rest:d', filter: 'dur/t', durable: true, maxDepth: 100, maxPerDestination: 2, sink: pullSink() });
  for (let i = 1; i <= 4; i++) await engine.publish('dur/t', { payload: `d${i}` });
  await engine.flush();
  assert.equal(sub.depth(), 2);
  const kept: string[] = [];
  for await (const [key] of store.iterate('d!')) kept.push(key);
  assert.equal(kept.length, 2, 'only the two held copies are stored');
  await engine.close();
});

test('engine - maxPerDestination must be a non-negative integer', () => {
  const engine = new Engine();
  assert.throws(() => engine.subscribe({ sessionId: 's', filter: 'x', maxPerDestination: -1, sink: pullSink() }), ValidationError);
  assert.throws(() => engine.subscribe({ sessionId: 's', filter: 'x', maxPerDestination: 1.5, sink: pullSink() }), ValidationError);
});
