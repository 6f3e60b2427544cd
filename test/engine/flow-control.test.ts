import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Engine, QUOTA_EXCEEDED, type PullSink } from '../../src/engine/index.js';
import { QuotaExceededError } from '../../src/errors.js';

/** Engine-level flow control (docs/messaging.md "Flow control and limits"): refuseWhenFull subscriptions. */
const pull = (): PullSink => ({ kind: 'pull' });
const payloads = (sub: { take(n: number): Array<{ message: { payload: Buffer } }> }) => sub.take(100).map((d) => d.message.payload.toString());

test('engine flow control - a full refuseWhenFull subscription refuses QoS 1/2 publishes: nobody gets them, the publisher sees 429', async () => {
  const engine = new Engine();
  const full = engine.subscribe({ sessionId: 'a', filter: 'fc/t', qos: 1, maxDepth: 3, refuseWhenFull: true, sink: pull() });
  const other = engine.subscribe({ sessionId: 'b', filter: 'fc/#', qos: 1, maxDepth: 100, sink: pull() });
  for (let i = 0; i < 3; i++) await engine.publish('fc/t', { payload: String(i), qos: 1 });
  const refused = engine.publish('fc/t', { payload: 'x', qos: 2 });
  assert.equal(refused, QUOTA_EXCEEDED, 'told apart without waiting');
  await assert.rejects(refused, (err: unknown) => err instanceof QuotaExceededError && err.statusCode === 429);
  assert.equal(engine.stats().totalRefusedMessages, 1);
  assert.equal(full.state().messagesRefused, 1);
  assert.equal(full.state().maxQueuedMessages, 3);
  assert.deepEqual(payloads(other), ['0', '1', '2'], 'the refused message reached nobody');
  // QoS 0 is never refused
  await engine.publish('fc/t', { payload: 'q0', qos: 0 });
  // room again after the subscriber takes its messages
  assert.deepEqual(payloads(full), ['0', '1', '2']);
  await engine.publish('fc/t', { payload: 'again', qos: 1 });
  assert.deepEqual(payloads(full), ['again']);
});

test('engine flow control - QoS 0 copies replace the oldest QoS 0 copy; over QoS 1 copies they are dropped', async () => {
  const engine = new Engine();
  const sub = engine.subscribe({ sessionId: 'a', filter: 'fc/q0', qos: 0, maxDepth: 3, refuseWhenFull: true, sink: pull() });
  for (let i = 0; i < 5; i++) await engine.publish('fc/q0', { payload: String(i), qos: 1 }); // effective QoS 0
  assert.deepEqual(payloads(sub), ['2', '3', '4']);
  assert.equal(sub.state().messagesDropped, 2);
  const q1 = engine.subscribe({ sessionId: 'b', filter: 'fc/q1', qos: 1, maxDepth: 2, refuseWhenFull: true, sink: pull() });
  await engine.publish('fc/q1', { payload: 'a', qos: 1 });
  await engine.publish('fc/q1', { payload: 'b', qos: 1 });
  await engine.publish('fc/q1', { payload: 'c', qos: 0 });
  assert.deepEqual(payloads(q1), ['a', 'b'], 'acknowledged QoS 1 copies are never dropped for a QoS 0 one');
});

test('engine flow control - only subscriptions the message would reach count: selector, noLocal, shared groups; REST-style subscriptions drop newest', async () => {
  const engine = new Engine();
  const sel = engine.subscribe({ sessionId: 'a', filter: 'fc/s', qos: 1, maxDepth: 1, refuseWhenFull: true, selector: (m) => m.payload.toString() === 'match', sink: pull() });
  await engine.publish('fc/s', { payload: 'match', qos: 1 });
  await engine.publish('fc/s', { payload: 'other', qos: 1 }); // the full subscription would not take it: accepted
  assert.equal(engine.publish('fc/s', { payload: 'match', qos: 1 }), QUOTA_EXCEEDED);
  assert.equal(sel.depth(), 1);
  const own = engine.subscribe({ sessionId: 'me', filter: 'fc/nl', qos: 1, maxDepth: 1, noLocal: true, refuseWhenFull: true, sink: pull() });
  await engine.publish('fc/nl', { payload: '1', qos: 1 });
  await engine.publish('fc/nl', { payload: 'mine', qos: 1 }, { origin: 'me' }); // not for it (noLocal): accepted
  assert.equal(own.depth(), 1);
  // shared group: refused only when every member that would take it is full
  const m1 = engine.subscribe({ sessionId: 'g1', filter: '$share/g/fc/sh', qos: 1, maxDepth: 1, refuseWhenFull: true, sink: pull() });
  const m2 = engine.subscribe({ sessionId: 'g2', filter: '$share/g/fc/sh', qos: 1, maxDepth: 2, refuseWhenFull: true, sink: pull() });
  await engine.publish('fc/sh', { payload: '1', qos: 1 });
  await engine.publish('fc/sh', { payload: '2', qos: 1 });
  await engine.publish('fc/sh', { payload: '3', qos: 1 });
  assert.equal(m1.depth() + m2.depth(), 3);
  assert.equal(engine.publish('fc/sh', { payload: '4', qos: 1 }), QUOTA_EXCEEDED);
  // without refuseWhenFull (REST maxDepth): drop newest, never refuse
  const rest = engine.subscribe({ sessionId: 'r', filter: 'fc/r', qos: 1, maxDepth: 1, sink: pull() });
  await engine.publish('fc/r', { payload: '1', qos: 1 });
  await engine.publish('fc/r', { payload: '2', qos: 1 });
  assert.deepEqual(payloads(rest), ['1']);
  assert.equal(rest.messagesDropped, 1);
});
