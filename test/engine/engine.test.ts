import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DESTINATION_DTO_FIELDS } from '../dto-fields.js';
import { ConflictError, NotFoundError, ValidationError } from '../../src/errors.js';
import { Engine } from '../../src/engine/engine.js';
import type { DestinationType } from '../../src/engine/destination.js';
import { pullSink, pushSink, texts } from './helpers.js';

test('engine - topic publish reaches every matching subscription, with the physical destination name', async () => {
  const engine = new Engine();
  const exact = pushSink();
  const wild = pushSink();
  const other = pushSink();
  engine.subscribe({ sessionId: 's1', filter: 'home/kitchen/temp', sink: exact });
  engine.subscribe({ sessionId: 's2', filter: 'home/+/temp', sink: wild });
  engine.subscribe({ sessionId: 's3', filter: 'garden/#', sink: other });
  await engine.publish('home/kitchen/temp', { payload: '21.5' });
  await engine.publish('home/hall/temp', { payload: '19' });
  assert.deepEqual(texts(exact.got), ['21.5']);
  assert.deepEqual(texts(wild.got), ['21.5', '19']);
  assert.deepEqual(wild.got.map((r) => r.destinationName), ['home/kitchen/temp', 'home/hall/temp']);
  assert.equal(other.got.length, 0);
  const dto = engine.destinationDto('home/hall/temp');
  assert.equal(dto.type, 'Topic');
  assert.equal(dto.publishedMessages, 1);
  assert.equal(dto.deliveredMessages, 1);
});

test('engine - publish with no subscriber is counted as no interest; bad names are 400', async () => {
  const engine = new Engine();
  await engine.publish('nobody/listens', { payload: 'x' });
  assert.equal(engine.destinationDto('nobody/listens').noInterestMessages, 1);
  assert.equal(engine.stats().totalNoInterestMessages, 1);
  await assert.rejects(engine.publish('a/+/b', { payload: 'x' }), ValidationError);
  await assert.rejects(engine.publish('missing', { payload: 'x' }, { create: false }), NotFoundError);
  assert.throws(() => engine.destinationDto('missing'), NotFoundError);
});

test('engine - shared subscription group delivers each message to one member, round-robin', async () => {
  const engine = new Engine();
  const members = [pushSink(), pushSink(), pushSink()];
  members.forEach((sink, i) => engine.subscribe({ sessionId: `m${i}`, filter: '$share/workers/jobs/+', sink }));
  const plain = pushSink();
  engine.subscribe({ sessionId: 'watcher', filter: 'jobs/#', sink: plain });
  for (let i = 0; i < 9; i++) await engine.publish(`jobs/${i % 2 ? 'a' : 'b'}`, { payload: `j${i}` });
  assert.deepEqual(members.map((m) => m.got.length), [3, 3, 3]);
  const all = members.flatMap((m) => texts(m.got)).sort();
  assert.deepEqual(all, ['j0', 'j1', 'j2', 'j3', 'j4', 'j5', 'j6', 'j7', 'j8']);
  assert.equal(plain.got.length, 9); // a non-shared subscription still gets every message
  assert.deepEqual(texts(members[0]!.got), ['j0', 'j3', 'j6']);
});

test('engine - shared group skips a member without credit', async () => {
  const engine = new Engine();
  const full = pushSink(0);
  const free = pushSink();
  engine.subscribe({ sessionId: 'a', filter: '$share/g/t', sink: full });
  engine.subscribe({ sessionId: 'b', filter: '$share/g/t', sink: free });
  for (let i = 0; i < 4; i++) await engine.publish('t', { payload: String(i) });
  assert.deepEqual(texts(free.got), ['0', '1', '2', '3']);
});

test('engine - queue round-robin across 3 consumers, each message delivered exactly once', async () => {
  const engine = new Engine();
  const consumers = [pushSink(), pushSink(), pushSink()];
  consumers.forEach((sink, i) => engine.subscribe({ sessionId: `c${i}`, filter: 'queue/orders', sink }));
  for (let i = 0; i < 30; i++) await engine.publish('queue/orders', { payload: `o${i}` });
  assert.deepEqual(consumers.map((c) => c.got.length), [10, 10, 10]);
  const all = consumers.flatMap((c) => texts(c.got));
  assert.equal(new Set(all).size, 30);
  assert.deepEqual(texts(consumers[1]!.got).slice(0, 3), ['o1', 'o4', 'o7']);
  const dto = engine.destinationDto('queue/orders');
  assert.equal(dto.type, 'Queue');
  assert.equal(dto.deliveredMessages, 30);
  assert.equal(dto.storedMessages, 0);
  assert.equal(dto.noInterestMessages, 0);
});

test('engine - queue holds messages until a consumer arrives, then delivers in order', async () => {
  const created: Array<[string, DestinationType]> = [];
  const engine = new Engine({ events: { onDestinationCreated: (n, t) => created.push([n, t]) } });
  for (let i = 0; i < 5; i++) await engine.publish('/queue/work', { payload: `w${i}` });
  assert.deepEqual(created, [['/queue/work', 'Queue']]);
  assert.equal(engine.destinationDto('/queue/work').storedMessages, 5);
  assert.equal(engine.destinationDto('/queue/work').pendingMessages, 5);
  const late = pushSink();
  engine.subscribe({ sessionId: 'late', filter: '/queue/work', sink: late });
  assert.deepEqual(texts(late.got), ['w0', 'w1', 'w2', 'w3', 'w4']);
  assert.equal(engine.destinationDto('/queue/work').storedMessages, 0);
});

test('engine - queue orders by priority (higher first), then arrival', async () => {
  const engine = new Engine();
  const order: Array<[string, number]> = [
    ['a', 4],
    ['b', 9],
    ['c', 0],
    ['d', 9],
    ['e', 4],
    ['f', 10],
  ];
  for (const [p, priority] of order) await engine.publish('queue/p', { payload: p, priority });
  assert.deepEqual(engine.browse('queue/p').map((m) => m.payload.toString()), ['f', 'b', 'd', 'a', 'e', 'c']);
  const sink = pushSink();
  engine.subscribe({ sessionId: 's', filter: 'queue/p', sink });
  assert.deepEqual(texts(sink.got), ['f', 'b', 'd', 'a', 'e', 'c']);
});

test('engine - declareQueue makes any name a queue; wildcard subscriptions cannot consume queues', async () => {
  const engine = new Engine();
  engine.declareQueue('jobs/email');
  assert.equal(engine.destinationDto('jobs/email').type, 'Queue');
  assert.throws(() => engine.createDestination('jobs/email', 'Topic'), ConflictError);
  assert.throws(() => engine.subscribe({ sessionId: 's', filter: 'queue/#', sink: pushSink() }), ValidationError);
  const a = pushSink();
  const b = pushSink();
  engine.subscribe({ sessionId: 'a', filter: 'jobs/email', sink: a });
  engine.subscribe({ sessionId: 'b', filter: 'jobs/email', sink: b });
  await engine.publish('jobs/email', { payload: '1' });
  await engine.publish('jobs/email', { payload: '2' });
  assert.deepEqual([texts(a.got), texts(b.got)], [['1'], ['2']]);
});

test('engine - queue QoS 1: unacknowledged messages go back to the queue when the consumer leaves', async () => {
  const engine = new Engine();
  const first = pushSink();
  const sub = engine.subscribe({ sessionId: 'first', filter: 'queue/q', qos: 1, sink: first });
  await engine.publish('queue/q', { payload: 'm1', qos: 1 });
  await engine.publish('queue/q', { payload: 'm2', qos: 1 });
  assert.equal(first.got.length, 2);
  assert.equal(sub.ack(first.got[0]!.msg.id), true);
  assert.equal(sub.ack(first.got[0]!.msg.id), false); // already acknowledged
  assert.equal(engine.destinationDto('queue/q').storedMessages, 1);
  engine.unsubscribe(sub);
  assert.equal(engine.destinationDto('queue/q').pendingMessages, 1);
  const second = pushSink();
  engine.subscribe({ sessionId: 'second', filter: 'queue/q', sink: second });
  assert.deepEqual(texts(second.got), ['m2']);
});

test('engine - push credit: a sink without credit keeps messages queued until resume()', async () => {
  const engine = new Engine();
  const sink = pushSink(1);
  const sub = engine.subscribe({ sessionId: 's', filter: 't/#', sink });
  for (let i = 0; i < 4; i++) await engine.publish('t/x', { payload: String(i) });
  assert.deepEqual(texts(sink.got), ['0']);
  assert.equal(sub.depth(), 3);
  assert.equal(sub.state().isPaused, true);
  sink.credit = 2;
  sub.resume();
  assert.deepEqual(texts(sink.got), ['0', '1', '2']);
  sink.credit = 10;
  sub.resume();
  assert.deepEqual(texts(sink.got), ['0', '1', '2', '3']);
  assert.equal(sub.depth(), 0);
});

test('engine - retained message delivered to new subscribers; empty payload deletes it', async () => {
  const engine = new Engine();
  await engine.publish('status/door', { payload: 'open', retain: true });
  await engine.publish('status/window', { payload: 'shut', retain: true });
  const s1 = pushSink();
  engine.subscribe({ sessionId: 's1', filter: 'status/+', sink: s1 });
  assert.deepEqual(texts(s1.got).sort(), ['open', 'shut']);
  assert.ok(s1.got.every((r) => r.msg.retain), 'retained deliveries carry the retain flag [MQTT-3.3.1-8]');

  await engine.publish('status/door', { payload: 'closed', retain: true });
  assert.equal(s1.got.at(-1)!.text, 'closed');
  assert.equal(s1.got.at(-1)!.msg.retain, false, 'live delivery clears retain without retainAsPublished');
  assert.equal(engine.retained('status/door')!.payload.toString(), 'closed');

  await engine.publish('status/door', { payload: '', retain: true });
  assert.equal(engine.retained('status/door'), undefined);
  const s2 = pushSink();
  engine.subscribe({ sessionId: 's2', filter: 'status/#', sink: s2 });
  assert.deepEqual(texts(s2.got), ['shut']);
});

test('engine - retainHandling 0/1/2 and retainAsPublished', async () => {
  const engine = new Engine();
  await engine.publish('r/t', { payload: 'kept', retain: true });
  const rh2 = pushSink();
  engine.subscribe({ sessionId: 'a', filter: 'r/t', retainHandling: 2, sink: rh2 });
  assert.equal(rh2.got.length, 0);

  const rh1 = pushSink();
  engine.subscribe({ sessionId: 'b', filter: 'r/t', retainHandling: 1, sink: rh1 });
  engine.subscribe({ sessionId: 'b', filter: 'r/t', retainHandling: 1, sink: rh1 }); // existing: no resend
  assert.deepEqual(texts(rh1.got), ['kept']);

  const rh0 = pushSink();
  const sub = engine.subscribe({ sessionId: 'c', filter: 'r/t', retainHandling: 0, sink: rh0 });
  const again = engine.subscribe({ sessionId: 'c', filter: 'r/t', retainHandling: 0, sink: rh0 });
  assert.equal(again, sub, 'same session and filter replaces the subscription');
  assert.deepEqual(texts(rh0.got), ['kept', 'kept']);

  const rap = pushSink();
  engine.subscribe({ sessionId: 'd', filter: 'r/#', retainAsPublished: true, retainHandling: 2, sink: rap });
  await engine.publish('r/t', { payload: 'new', retain: true });
  assert.equal(rap.got[0]!.msg.retain, true);
  assert.equal(rh2.got[0]!.msg.retain, false);
  assert.equal(rh2.got[0]!.msg.id, rap.got[0]!.msg.id);
});

test('engine - shared subscriptions get no retained messages', async () => {
  const engine = new Engine();
  await engine.publish('r/x', { payload: 'kept', retain: true });
  const sink = pushSink();
  engine.subscribe({ sessionId: 's', filter: '$share/g/r/x', sink });
  assert.equal(sink.got.length, 0);
});

test('engine - expired messages are not delivered and are counted (injected clock)', async () => {
  let now = 1_000_000;
  const engine = new Engine({ now: () => now });
  // already expired at publish
  await engine.publish('queue/exp', { payload: 'dead', expiresAt: now - 1 });
  await engine.publish('queue/exp', { payload: 'short', expiresAt: now + 1000 });
  await engine.publish('queue/exp', { payload: 'long', expiresAt: now + 60_000 });
  await engine.publish('queue/exp', { payload: 'forever' });
  now += 5000;
  const sink = pushSink();
  engine.subscribe({ sessionId: 's', filter: 'queue/exp', sink });
  assert.deepEqual(texts(sink.got), ['long', 'forever']);
  assert.equal(engine.destinationDto('queue/exp').expiredMessages, 2);

  // topic copies held by a subscription without credit expire while waiting, found by the sweep
  const slow = pushSink(0);
  const sub = engine.subscribe({ sessionId: 'slow', filter: 'news', sink: slow });
  await engine.publish('news', { payload: 'a', expiresAt: now + 100 });
  await engine.publish('news', { payload: 'b' });
  assert.equal(sub.depth(), 2);
  now += 200;
  assert.equal(engine.sweepExpired(now), 1);
  assert.equal(sub.depth(), 1);
  assert.equal(sub.state().messagesExpired, 1);
  slow.credit = 5;
  sub.resume();
  assert.deepEqual(texts(slow.got), ['b']);

  // queue messages waiting for a consumer are swept too; retained messages expire
  await engine.publish('queue/sweep', { payload: 'x', expiresAt: now + 10 });
  await engine.publish('ret', { payload: 'r', retain: true, expiresAt: now + 10 });
  now += 20;
  assert.equal(engine.sweepExpired(now), 2);
  assert.equal(engine.destinationDto('queue/sweep').storedMessages, 0);
  assert.equal(engine.retained('ret'), undefined);
  assert.equal(engine.stats().totalExpiredMessages, 5);
});

test('engine - maxDepth: new messages are dropped when a subscription is full, and counted', async () => {
  const slowNotices: string[] = [];
  const engine = new Engine({ events: { onSlowConsumer: (sessionId) => slowNotices.push(sessionId) } });
  const sink = pullSink();
  const sub = engine.subscribe({ sessionId: 'rest', filter: 'feed', maxDepth: 3, sink });
  for (let i = 0; i < 10; i++) await engine.publish('feed', { payload: String(i) });
  assert.equal(sub.depth(), 3);
  assert.equal(sub.messagesDropped, 7);
  assert.equal(sub.state().messagesIgnored, 7);
  assert.deepEqual(slowNotices, ['rest'], 'one notice, not one per drop');
  assert.deepEqual(sub.take(10).map((d) => d.message.payload.toString()), ['0', '1', '2']);
  assert.equal(sink.notified, 1);
  assert.equal(engine.stats().totalDroppedMessages, 7);
});

test('engine - pull: take returns event ids and destination names; non-transactional take consumes', async () => {
  const engine = new Engine();
  const sub = engine.subscribe({ sessionId: 'rest', filter: 'q/#', maxDepth: 10, sink: pullSink() });
  await engine.publish('q/a', { payload: '1' });
  await engine.publish('q/b', { payload: '2' });
  await engine.publish('q/c', { payload: '3' });
  const first = sub.take(2);
  assert.deepEqual(first.map((d) => d.destinationName), ['q/a', 'q/b']);
  assert.ok(first[0]!.eventId < first[1]!.eventId);
  assert.equal(first[0]!.eventId, first[0]!.message.id);
  assert.equal(sub.depth(), 1);
  assert.equal(sub.take(5).length, 1);
  assert.equal(sub.take(5).length, 0);
  assert.equal(engine.destinationDto('q/a').retrievedMessages, 1);
  assert.equal(engine.stats().totalRetrievedMessages, 3);
});

test('engine - transactional take/commit/abort act on every id', async () => {
  const engine = new Engine();
  const sub = engine.subscribe({ sessionId: 'tx', filter: 'tx/t', maxDepth: 10, transactional: true, sink: pullSink() });
  for (let i = 0; i < 5; i++) await engine.publish('tx/t', { payload: `m${i}` });
  const taken = sub.take(5);
  assert.equal(taken.length, 5);
  assert.equal(sub.state().hasMessagesInFlight, true);
  assert.equal(sub.state().pending, 5);
  assert.equal(sub.commit([taken[0]!.eventId, taken[2]!.eventId]), 2);
  assert.equal(sub.abort([taken[1]!.eventId, taken[3]!.eventId, 999]), 2);
  assert.equal(sub.state().messagesAcked, 2);
  assert.equal(sub.state().messagesRolledBack, 2);
  // aborted messages are deliverable again, oldest first; m4 is still in flight
  const again = sub.take(10);
  assert.deepEqual(again.map((d) => d.message.payload.toString()), ['m1', 'm3']);
  assert.equal(sub.commit([taken[4]!.eventId, ...again.map((d) => d.eventId)]), 3);
  assert.equal(sub.state().size, 0);
});

test('engine - transactional queue consumer: abort returns messages to the queue, commit deletes them', async () => {
  const engine = new Engine();
  const a = engine.subscribe({ sessionId: 'a', filter: 'queue/tx', maxDepth: 2, transactional: true, sink: pullSink() });
  for (let i = 0; i < 3; i++) await engine.publish('queue/tx', { payload: `m${i}` });
  assert.equal(a.depth(), 2); // prefetch bounded by maxDepth
  assert.equal(engine.destinationDto('queue/tx').pendingMessages, 1);
  const taken = a.take(2);
  assert.equal(a.abort(taken.map((d) => d.eventId)), 2);
  const b = engine.subscribe({ sessionId: 'b', filter: 'queue/tx', maxDepth: 5, transactional: true, sink: pullSink() });
  const all = [...a.take(5), ...b.take(5)].map((d) => d.message.payload.toString()).sort();
  assert.deepEqual(all, ['m0', 'm1', 'm2']);
  assert.equal(engine.destinationDto('queue/tx').storedMessages, 3);
});

test('engine - noLocal: a session does not receive its own publishes [MQTT-3.8.3-3]', async () => {
  const engine = new Engine();
  const me = pushSink();
  const other = pushSink();
  engine.subscribe({ sessionId: 'me', filter: 'chat', noLocal: true, sink: me });
  engine.subscribe({ sessionId: 'other', filter: 'chat', sink: other });
  await engine.publish('chat', { payload: 'from me' }, { origin: 'me' });
  await engine.publish('chat', { payload: 'from other', origin: 'other' });
  assert.deepEqual(texts(me.got), ['from other']);
  assert.deepEqual(texts(other.got), ['from me', 'from other']);
});

test('engine - selector filters per subscription and sees the destination name', async () => {
  const engine = new Engine();
  const hot = pushSink();
  engine.subscribe({
    sessionId: 's',
    filter: 'sensors/#',
    selector: (m) => (m.dataMap.temp as number) > 30 && m.destinationName.endsWith('/roof'),
    sink: hot,
  });
  await engine.publish('sensors/roof', { payload: 'a', dataMap: { temp: 35 } });
  await engine.publish('sensors/roof', { payload: 'b', dataMap: { temp: 20 } });
  await engine.publish('sensors/cellar', { payload: 'c', dataMap: { temp: 40 } });
  assert.deepEqual(texts(hot.got), ['a']);
  assert.equal(engine.destinationDto('sensors/roof').noInterestMessages, 1);
});

test('engine - push QoS 1 stays in flight until ack; hibernate redelivers unacknowledged messages', async () => {
  const engine = new Engine();
  const online = pushSink();
  const sub = engine.subscribe({ sessionId: 'p', filter: 'x', qos: 1, durable: true, sink: online });
  await engine.publish('x', { payload: '1', qos: 1 });
  await engine.publish('x', { payload: '2', qos: 0 });
  assert.equal(sub.state().pending, 1, 'only the QoS 1 message waits for an ack');
  sub.hibernate();
  await engine.publish('x', { payload: '3', qos: 1 });
  assert.equal(sub.state().hibernating, true);
  assert.equal(sub.depth(), 2);
  const back = pushSink();
  sub.attach(back);
  assert.deepEqual(texts(back.got), ['1', '3']);
  assert.equal(sub.ack(back.got[0]!.msg.id), true);
  assert.equal(sub.ack(back.got[1]!.msg.id), true);
  assert.equal(sub.state().size, 0);
});

test('engine - paused destination accepts publishes and delivers on resume', async () => {
  const engine = new Engine();
  const topicSink = pushSink();
  const queueSink = pushSink();
  engine.subscribe({ sessionId: 't', filter: 'paused/topic', sink: topicSink });
  engine.subscribe({ sessionId: 'q', filter: 'queue/paused', sink: queueSink });
  engine.pauseDestination('paused/topic');
  engine.pauseDestination('queue/paused');
  await engine.publish('paused/topic', { payload: 'a' });
  await engine.publish('queue/paused', { payload: 'b' });
  assert.equal(topicSink.got.length + queueSink.got.length, 0);
  assert.equal(engine.destinationDto('paused/topic').delayedMessages, 1);
  assert.equal(engine.destinationDto('queue/paused').delayedMessages, 1);
  engine.resumeDestination('paused/topic');
  engine.resumeDestination('queue/paused');
  assert.deepEqual(texts(topicSink.got), ['a']);
  assert.deepEqual(texts(queueSink.got), ['b']);
  assert.equal(engine.destinationDto('paused/topic').delayedMessages, 0);
});

test('engine - deleteDestination: 404 when missing, 409 for a queue with consumers unless forced', async () => {
  const deleted: string[] = [];
  const engine = new Engine({ events: { onDestinationDeleted: (n) => deleted.push(n) } });
  await assert.rejects(engine.deleteDestination('nope'), NotFoundError);
  let closedReason = '';
  const sink = { ...pushSink(0), closed: (_s: unknown, reason: string) => (closedReason = reason) };
  engine.subscribe({ sessionId: 'c', filter: 'queue/del', sink });
  await engine.publish('queue/del', { payload: 'x' });
  await assert.rejects(engine.deleteDestination('queue/del'), ConflictError);
  await engine.deleteDestination('queue/del', { force: true });
  assert.equal(closedReason, 'destination deleted');
  assert.equal(engine.hasDestination('queue/del'), false);
  assert.deepEqual(deleted, ['queue/del']);
  assert.equal(engine.subscriptionCount, 0);
});

test('engine - queue high-water notice fires once per crossing', async () => {
  const notices: Array<[string, string, number]> = [];
  const engine = new Engine({
    queueHighWater: 4,
    events: {
      onQueueHighWater: (n, d) => notices.push(['high', n, d]),
      onQueueLowWater: (n, d) => notices.push(['low', n, d]),
    },
  });
  for (let i = 0; i < 8; i++) await engine.publish('queue/hw', { payload: String(i) });
  assert.deepEqual(notices, [['high', 'queue/hw', 4]]);
  const sub = engine.subscribe({ sessionId: 's', filter: 'queue/hw', maxDepth: 6, sink: pullSink() });
  assert.deepEqual(notices, [['high', 'queue/hw', 4], ['low', 'queue/hw', 2]]);
  sub.take(6);
});

test('engine - DTOs carry the MAPS field names', async () => {
  const engine = new Engine();
  const sub = engine.subscribe({ sessionId: 'dto', filter: 'dto/+', maxDepth: 5, sink: pullSink() });
  await engine.publish('dto/a', { payload: 'x' });
  const dto = engine.destinationDto('dto/a');
  assert.deepEqual(Object.keys(dto).sort(), DESTINATION_DTO_FIELDS);
  assert.equal(dto.pendingMessages, 1);
  const [state] = engine.subscriptionStates('dto/a');
  assert.deepEqual(state, {
    destinationName: 'dto/+',
    sessionId: 'dto',
    hibernating: false,
    size: 1,
    pending: 0,
    sync: true,
    hasMessagesInFlight: false,
    hasAtRestMessages: true,
    isPaused: false,
    messagesIgnored: 0,
    messagesRegistered: 1,
    messagesSent: 0,
    messagesAcked: 0,
    messagesRolledBack: 0,
    messagesExpired: 0,
    maxQueuedMessages: 5,
    messagesDropped: 0,
    messagesRefused: 0,
  });
  sub.take(1);
  const stats = engine.stats();
  assert.equal(stats.totalPublishedMessages, 1);
  assert.equal(stats.totalSubscribedMessages, 1);
  assert.equal(stats.totalDeliveredMessages, 1);
  assert.equal(typeof stats.publishedPerSecond, 'number');
});

test('engine - per-second rates from the injected clock', async () => {
  let now = 0;
  const engine = new Engine({ now: () => now });
  for (let i = 0; i < 50; i++) await engine.publish('rate', { payload: '' });
  now = 2000;
  assert.equal(engine.stats().publishedPerSecond, 25);
  assert.equal(engine.stats().noInterestPerSecond, 25);
});

test('engine - closeSession removes its subscriptions and temporary destinations', async () => {
  const engine = new Engine();
  engine.createDestination('tmp/reply-1', 'TemporaryQueue', { owner: 'sess' });
  engine.subscribe({ sessionId: 'sess', filter: 'tmp/reply-1', sink: pushSink() });
  engine.subscribe({ sessionId: 'sess', filter: 'a/#', sink: pushSink() });
  assert.equal(engine.sessionSubscriptions('sess').length, 2);
  assert.equal(engine.closeSession('sess'), 2);
  await engine.flush();
  assert.equal(engine.hasDestination('tmp/reply-1'), false);
  assert.equal(engine.subscriptionCount, 0);
  await engine.publish('a/b', { payload: 'x' });
  assert.equal(engine.destinationDto('a/b').noInterestMessages, 1);
});

test('engine - a sink may re-enter the engine (ack and publish) during delivery', async () => {
  const engine = new Engine();
  const got: string[] = [];
  engine.subscribe({
    sessionId: 'echo',
    filter: 'queue/in',
    qos: 1,
    sink: {
      kind: 'push',
      deliver(sub, msg) {
        got.push(msg.payload.toString());
        sub.ack(msg.id);
        void engine.publish('out', { payload: `echo ${msg.payload.toString()}` });
        return true;
      },
    },
  });
  const out = pushSink();
  engine.subscribe({ sessionId: 'o', filter: 'out', sink: out });
  await engine.publish('queue/in', { payload: 'a', qos: 1 });
  await engine.publish('queue/in', { payload: 'b', qos: 1 });
  assert.deepEqual(got, ['a', 'b']);
  assert.deepEqual(texts(out.got), ['echo a', 'echo b']);
  assert.equal(engine.destinationDto('queue/in').storedMessages, 0);
});

test('engine - a leaving shared member hands its undelivered messages to the rest of the group', async () => {
  const engine = new Engine();
  const leaving = engine.subscribe({ sessionId: 'leaving', filter: '$share/g/w', maxDepth: 100, sink: pullSink() });
  const other = engine.subscribe({ sessionId: 'other', filter: '$share/g/w', maxDepth: 100, sink: pullSink() });
  for (let i = 0; i < 4; i++) await engine.publish('w', { payload: String(i) });
  assert.deepEqual([leaving.depth(), other.depth()], [2, 2]);
  assert.equal(engine.unsubscribe('leaving', '$share/g/w'), true);
  assert.deepEqual(other.take(10).map((d) => d.message.payload.toString()).sort(), ['0', '1', '2', '3']);
});

test('engine - a hibernating queue consumer gives its messages to the other consumers', async () => {
  const engine = new Engine();
  const a = pushSink();
  const subA = engine.subscribe({ sessionId: 'a', filter: 'queue/h', qos: 1, sink: a });
  await engine.publish('queue/h', { payload: 'm1', qos: 1 });
  assert.equal(a.got.length, 1);
  const b = pushSink();
  engine.subscribe({ sessionId: 'b', filter: 'queue/h', qos: 1, sink: b });
  subA.hibernate();
  assert.deepEqual(texts(b.got), ['m1']);
  await engine.publish('queue/h', { payload: 'm2', qos: 1 });
  assert.deepEqual(texts(b.got), ['m1', 'm2']);
});

test('engine - oneCopyPerSession: overlapping subscriptions of a session get one copy, at the highest QoS, with every subscription id [MQTT-3.3.4-2, MQTT-3.3.4-4]', async () => {
  const engine = new Engine();
  const sink = pushSink();
  const plain = pushSink();
  const one = { oneCopyPerSession: true, sink };
  engine.subscribe({ sessionId: 'm', filter: 'o/#', qos: 1, subscriptionId: 3, ...one });
  engine.subscribe({ sessionId: 'm', filter: 'o/+', qos: 2, subscriptionId: 2, ...one });
  engine.subscribe({ sessionId: 'm', filter: 'o/x', qos: 0, noLocal: true, subscriptionId: 7, ...one });
  // a session without the flag (e.g. REST) keeps one copy per subscription
  engine.subscribe({ sessionId: 'r', filter: 'o/#', sink: plain });
  engine.subscribe({ sessionId: 'r', filter: 'o/x', sink: plain });
  await engine.publish('o/x', { payload: 'a', qos: 2 });
  assert.equal(sink.got.length, 1);
  assert.equal(sink.got[0]!.sub.filter, 'o/+', 'through the subscription with the highest QoS');
  assert.deepEqual([...sink.got[0]!.msg.subscriptionIds!].sort(), [2, 3, 7]);
  assert.equal(plain.got.length, 2);
  // no local leaves out o/x for the session's own message; a message matching one subscription goes as it is
  await engine.publish('o/x', { payload: 'b', qos: 1 }, { origin: 'm' });
  await engine.publish('o/y/z', { payload: 'c', qos: 1 });
  assert.deepEqual(
    sink.got.slice(1).map((r) => [r.text, r.sub.filter, r.msg.subscriptionIds?.slice().sort()]),
    [
      ['b', 'o/+', [2, 3]],
      ['c', 'o/#', undefined],
    ],
  );
});
