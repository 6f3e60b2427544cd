import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Engine, QUOTA_EXCEEDED } from '../../src/engine/engine.js';
import { memoryEngineStore } from '../../src/engine/engine-store.js';
import type { Subscription } from '../../src/engine/index.js';
import { pullSink, pushSink, texts } from './helpers.js';

/**
 * Commanded lifecycles in the engine (issue 22 item 2): paused destinations and subscriptions survive a restart
 * with what they hold, purge drops and counts, delete leaves nothing to deliver, full is reported as edges.
 */

const qos1 = (text: string) => ({ payload: Buffer.from(text), qos: 1 as const });

test('engine lifecycle - a paused topic keeps its QoS 1 hold and its paused flag across a restart; resume routes them in order', async () => {
  const store = memoryEngineStore();
  const a = new Engine({ store });
  await a.recover();
  a.createDestination('plant/line1', 'Topic' as never);
  await a.pauseDestination('plant/line1');
  const sink = pushSink();
  a.subscribe({ sessionId: 'dev', filter: 'plant/#', qos: 1, durable: true, sink });
  for (let i = 1; i <= 3; i++) await a.publish('plant/line1', qos1(`m${i}`));
  await a.publish('plant/line1', { payload: Buffer.from('q0'), qos: 0 });
  assert.deepEqual(texts(sink.got), [], 'nothing is delivered while paused');
  assert.equal(a.destinationDto('plant/line1').delayedMessages, 4);
  // a "crash": the store as it is now, nothing else
  const b = new Engine({ store });
  const result = await b.recover();
  assert.equal(result.paused, 1);
  assert.equal(result.pausedHeld, 3, 'the QoS 1 messages were stored; the QoS 0 one was memory only');
  assert.equal(b.isPaused('plant/line1'), true);
  const again = pushSink();
  b.subscribe({ sessionId: 'dev', filter: 'plant/#', qos: 1, durable: true, sink: again });
  assert.deepEqual(texts(again.got), []);
  await b.resumeDestination('plant/line1');
  assert.deepEqual(texts(again.got), ['m1', 'm2', 'm3']);
  await b.flush();
  assert.deepEqual([...store.data.keys()].filter((k) => k.startsWith('pd!') || k.startsWith('h!')), [], 'resume deleted the flag and the hold');
  const c = new Engine({ store });
  await c.recover();
  assert.equal(c.hasDestination('plant/line1') && c.isPaused('plant/line1'), false);
});

test('engine lifecycle - a paused subscription keeps copies, delivers none, and drains them in order on resume; the flag survives a restart', async () => {
  const store = memoryEngineStore();
  const a = new Engine({ store });
  await a.recover();
  const sink = pushSink();
  a.subscribe({ sessionId: 's1', filter: 'x/#', qos: 1, durable: true, sink });
  await a.pauseSubscription('s1', 'x/#');
  for (let i = 1; i <= 3; i++) await a.publish('x/y', qos1(`m${i}`));
  assert.deepEqual(texts(sink.got), []);
  assert.equal(a.subscription('s1', 'x/#')!.state().isPaused, true);
  const b = new Engine({ store });
  await b.recover();
  const again = pushSink();
  const sub = b.subscribe({ sessionId: 's1', filter: 'x/#', qos: 1, durable: true, sink: again });
  assert.equal(sub.paused, true, 'paused again after the restart');
  assert.deepEqual(texts(again.got), []);
  await b.resumeSubscription('s1', 'x/#');
  assert.deepEqual(texts(again.got), ['m1', 'm2', 'm3']);
  // a pull (REST) subscription takes nothing while paused
  const pull = pullSink();
  b.subscribe({ sessionId: 'rest', filter: 'x/y', sink: pull });
  await b.pauseSubscription('rest', 'x/y');
  await b.publish('x/y', qos1('p'));
  assert.deepEqual(b.subscription('rest', 'x/y')!.take(10), []);
  await b.resumeSubscription('rest', 'x/y');
  assert.deepEqual(b.subscription('rest', 'x/y')!.take(10).map((d) => d.message.payload.toString()), ['p']);
  assert.throws(() => b.pauseSubscription('nobody', 'x/y'), /not found/);
});

test('engine lifecycle - purge drops a queue\'s waiting messages and a topic\'s hold and waiting copies, and counts them', async () => {
  const store = memoryEngineStore();
  const e = new Engine({ store });
  await e.recover();
  for (let i = 0; i < 5; i++) await e.publish('queue/jobs', qos1(`j${i}`));
  assert.equal(e.purgeDestination('queue/jobs'), 5);
  await e.flush();
  assert.equal([...store.data.keys()].filter((k) => k.startsWith('q!')).length, 0);
  assert.equal(e.browse('queue/jobs').length, 0);

  const hibernating = pushSink();
  const sub = e.subscribe({ sessionId: 'h', filter: 't/#', qos: 1, durable: true, sink: hibernating });
  sub.hibernate();
  await e.publish('t/a', qos1('kept-for-h'));
  await e.publish('t/b', qos1('other topic'));
  e.createDestination('t/a', 'Topic' as never);
  await e.pauseDestination('t/a');
  await e.publish('t/a', qos1('held'));
  assert.equal(e.purgeDestination('t/a'), 2, 'one held while paused, one waiting in a subscription buffer');
  await e.resumeDestination('t/a');
  sub.attach(hibernating);
  assert.deepEqual(texts(hibernating.got), ['other topic'], 'the other topic\'s copy stays');
  await e.flush();
  assert.equal([...store.data.keys()].filter((k) => k.startsWith('h!')).length, 0);
});

test('engine lifecycle - deleting a destination leaves nothing of it to deliver', async () => {
  const e = new Engine({ store: memoryEngineStore() });
  await e.recover();
  const sink = pushSink();
  const sub = e.subscribe({ sessionId: 'h', filter: 'd/#', qos: 1, durable: true, sink });
  sub.hibernate();
  await e.publish('d/gone', qos1('a'));
  await e.publish('d/stays', qos1('b'));
  await e.deleteDestination('d/gone');
  sub.attach(sink);
  assert.deepEqual(texts(sink.got), ['b']);
});

test('engine lifecycle - a durable subscription reports full and room again as edges; a session expiry is reported as expired', async () => {
  const changes: string[] = [];
  const e = new Engine({
    events: {
      onSubscriptionFull: (s: Subscription, full: boolean) => changes.push(`${s.filter}:${full ? 'full' : 'room'}`),
      onDurableSubscription: (s: Subscription, change: string) => changes.push(`${s.filter}:${change}`),
    },
  });
  await e.recover();
  const sink = pushSink();
  const sub = e.subscribe({ sessionId: 'f', filter: 'f/#', qos: 1, durable: true, maxDepth: 2, sink });
  sub.hibernate();
  for (let i = 0; i < 4; i++) await e.publish('f/x', qos1(`m${i}`)).catch(() => {});
  sub.attach(sink);
  for (const r of sink.got) sub.ack(r.msg.id);
  e.closeSession('f', { expired: true });
  assert.deepEqual(changes, ['f/#:created', 'f/#:hibernated', 'f/#:full', 'f/#:attached', 'f/#:room', 'f/#:expired']);
});

test('engine lifecycle - a paused topic whose hold is full refuses QoS 1 publishes (never acknowledged and dropped) and drops QoS 0', async () => {
  const e = new Engine({ store: memoryEngineStore(), maxPausedHold: 2 });
  await e.recover();
  const sink = pushSink();
  e.subscribe({ sessionId: 'r', filter: 'cap/t', qos: 1, sink });
  e.createDestination('cap/t', 'Topic' as never);
  await e.pauseDestination('cap/t');
  await e.publish('cap/t', qos1('a'));
  await e.publish('cap/t', qos1('b'));
  assert.equal(e.publish('cap/t', qos1('c')), QUOTA_EXCEEDED);
  await e.publish('cap/t', { payload: Buffer.from('q0'), qos: 0 });
  assert.equal(e.destinationDto('cap/t').delayedMessages, 2);
  await e.resumeDestination('cap/t');
  assert.deepEqual(texts(sink.got), ['a', 'b']);
  await e.publish('cap/t', qos1('d'));
  assert.deepEqual(texts(sink.got), ['a', 'b', 'd']);
});

test('engine lifecycle - a paused member of a shared group: the other members take its share; with all paused it holds it', async () => {
  const e = new Engine();
  await e.recover();
  const a = pushSink();
  const b = pushSink(0); // no credit now: b holds what it is given
  e.subscribe({ sessionId: 'a', filter: '$share/g/work/#', qos: 1, sink: a });
  const subB = e.subscribe({ sessionId: 'b', filter: '$share/g/work/#', qos: 1, sink: b });
  await e.pauseSubscription('a', '$share/g/work/#');
  for (let i = 0; i < 4; i++) await e.publish('work/x', qos1(`w${i}`));
  b.credit = 100;
  subB.resume();
  await e.resumeSubscription('a', '$share/g/work/#');
  assert.deepEqual([texts(a.got), texts(b.got)], [[], ['w0', 'w1', 'w2', 'w3']], 'the member with room held them all, none for the paused one');
  await e.pauseSubscription('a', '$share/g/work/#');
  await e.pauseSubscription('b', '$share/g/work/#');
  await e.publish('work/x', qos1('held'));
  await e.resumeSubscription('a', '$share/g/work/#');
  await e.resumeSubscription('b', '$share/g/work/#');
  assert.deepEqual([...texts(a.got), ...texts(b.got)].filter((t) => t === 'held'), ['held'], 'kept by a paused member, delivered once on resume');
});
