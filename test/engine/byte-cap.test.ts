import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_MAX_BYTES, Engine, MESSAGE_OVERHEAD_BYTES, QUOTA_EXCEEDED, messageBytes } from '../../src/engine/index.js';
import { QuotaExceededError, ValidationError } from '../../src/errors.js';
import { pullSink, pushSink } from './helpers.js';

/**
 * The byte cap of a subscription (`maxBytes`, DestinationManager.maxQueuedBytes; docs/messaging.md "Flow control and
 * limits"): the messages held for it and in flight to it count their payload and properties + MESSAGE_OVERHEAD_BYTES,
 * and reaching the cap makes the subscription full exactly as reaching `maxDepth` does.
 */
const KIB16 = Buffer.alloc(16 * 1024, 0x61);
const COST16 = 16 * 1024 + MESSAGE_OVERHEAD_BYTES;

test('engine byte cap - a non-reading refuseWhenFull subscription is full at the default 8 MiB of 16 KiB messages: QoS 1 refused (429), QoS 0 dropped and counted', async () => {
  const engine = new Engine();
  const sink = pushSink(0); // never has credit: everything is held
  const sub = engine.subscribe({ sessionId: 's', filter: 'bc/t', qos: 1, maxDepth: 10_000, refuseWhenFull: true, sink });
  const other = engine.subscribe({ sessionId: 'o', filter: 'bc/#', qos: 1, maxDepth: 100_000, maxBytes: 1 << 30, sink: pullSink() });
  let accepted = 0;
  let refused: Promise<void> | undefined;
  for (let i = 0; i < 10_000; i++) {
    const p = engine.publish('bc/t', { payload: KIB16, qos: 1 });
    if (p === QUOTA_EXCEEDED) {
      refused = p;
      break;
    }
    await p;
    accepted++;
  }
  assert.equal(accepted, Math.ceil(DEFAULT_MAX_BYTES / COST16), 'messages are taken while the bytes held are below the cap');
  assert.ok(refused !== undefined, 'a QoS 1 publish that would reach the full subscription is refused');
  await assert.rejects(refused, QuotaExceededError);
  const st = engine.subscriptionQueues('bc/t').find((s) => s.sessionId === 's')!;
  assert.equal(st.maxQueuedBytes, DEFAULT_MAX_BYTES);
  assert.equal(st.queuedBytes, accepted * COST16);
  assert.ok(st.queuedBytes < DEFAULT_MAX_BYTES + COST16, 'at most one message beyond the cap');
  assert.equal(st.size, accepted, 'far below maxDepth: the bytes decided');
  assert.equal(st.messagesRefused, 1);
  assert.equal(other.depth(), accepted, 'the refused message reached nobody');
  // QoS 2 refused alike
  assert.equal(engine.publish('bc/t', { payload: KIB16, qos: 2 }), QUOTA_EXCEEDED);
  // QoS 0: accepted for everyone else, dropped for the full subscription (its held copies are QoS 1: never replaced)
  await engine.publish('bc/t', { payload: KIB16, qos: 0 });
  assert.equal(sub.depth(), accepted);
  assert.equal(sub.state().messagesDropped, 1);
  assert.equal(other.depth(), accepted + 1);
  assert.ok(engine.stats().totalDroppedMessages >= 1);
});

test('engine byte cap - QoS 0 copies replace the oldest QoS 0 copies: the bytes held stay below the cap plus one message whatever the sizes', async () => {
  const engine = new Engine({ defaultMaxBytes: 64 * 1024 });
  const sub = engine.subscribe({ sessionId: 's', filter: 'bc/q0', qos: 0, maxDepth: 10_000, refuseWhenFull: true, sink: pushSink(0) });
  // small copies first (the count cap is far away), then large ones: each large one must push out several small ones
  for (let i = 0; i < 200; i++) await engine.publish('bc/q0', { payload: Buffer.alloc(10, 0x30 + (i % 10)), qos: 0 });
  const small = messageBytes({ payload: Buffer.alloc(10) } as never);
  assert.equal(sub.depth(), Math.ceil((64 * 1024) / small));
  let maxSeen = 0;
  for (let i = 0; i < 100; i++) {
    await engine.publish('bc/q0', { payload: Buffer.alloc(1000 + ((i * 7919) % 15_000), 0x62), qos: 0 });
    maxSeen = Math.max(maxSeen, sub.queuedBytes());
  }
  assert.ok(maxSeen < 64 * 1024 + 16_000 + MESSAGE_OVERHEAD_BYTES, `held ${maxSeen} bytes: more than the cap plus one message`);
  const st = sub.queueState();
  assert.ok(st.messagesDropped >= 200, `the small copies were dropped and counted (${st.messagesDropped})`);
  assert.equal(st.messagesRefused, 0, 'QoS 0 is never refused');
  // what is held adds up: take it all and the count returns to 0
  sub.attach(pullSink());
  const taken = sub.take(10_000);
  assert.equal(taken.reduce((n, d) => n + messageBytes(d.message), 0), st.queuedBytes);
  assert.equal(sub.queuedBytes(), 0);
});

test('engine byte cap - in-flight messages count: unacknowledged deliveries fill the cap, acknowledgements free it', async () => {
  const engine = new Engine({ defaultMaxBytes: 4 * COST16 });
  const sink = pushSink(Infinity); // takes everything, acknowledges nothing
  const sub = engine.subscribe({ sessionId: 's', filter: 'bc/f', qos: 1, maxDepth: 1000, refuseWhenFull: true, sink });
  for (let i = 0; i < 4; i++) await engine.publish('bc/f', { payload: KIB16, qos: 1 });
  assert.equal(sink.got.length, 4);
  assert.equal(sub.state().pending, 4, 'all four in flight');
  assert.equal(sub.queuedBytes(), 4 * COST16);
  assert.equal(engine.publish('bc/f', { payload: KIB16, qos: 1 }), QUOTA_EXCEEDED, 'in-flight bytes alone make it full');
  assert.ok(sub.ack(sink.got[0]!.msg.id));
  assert.equal(sub.queuedBytes(), 3 * COST16);
  await engine.publish('bc/f', { payload: KIB16, qos: 1 }); // room again
  assert.equal(sink.got.length, 5);
  // offline: the in-flight messages go back to the held buffer with the same bytes
  sub.hibernate();
  assert.equal(sub.queuedBytes(), 4 * COST16);
  assert.equal(sub.depth(), 4);
  for (const d of sink.got.slice(1)) assert.equal(sub.ack(d.msg.id), false, 'no longer in flight');
  const again = pushSink(Infinity);
  sub.attach(again);
  assert.equal(again.got.length, 4);
  for (const d of again.got) sub.ack(d.msg.id);
  assert.equal(sub.queuedBytes(), 0);
});

test('engine byte cap - subscriptions that never refuse (REST, SSE) drop new messages at the byte cap whatever their maxDepth', async () => {
  const engine = new Engine({ defaultMaxBytes: 10 * COST16 });
  const rest = engine.subscribe({ sessionId: 'r', filter: 'bc/r', maxDepth: 100_000, sink: pullSink() });
  for (let i = 0; i < 50; i++) await engine.publish('bc/r', { payload: KIB16, qos: 1 });
  assert.equal(rest.depth(), 10);
  assert.equal(rest.state().messagesDropped, 40);
  assert.equal(rest.take(100).length, 10);
  assert.equal(rest.queuedBytes(), 0);
  // a message larger than the cap still gets through an empty subscription
  const big = Buffer.alloc(11 * COST16);
  await engine.publish('bc/r', { payload: big, qos: 1 });
  assert.equal(rest.take(1)[0]!.message.payload.length, big.length);
});

test('engine byte cap - queue consumers are handed messages only up to the byte cap; the rest waits in the queue', async () => {
  const engine = new Engine({ defaultMaxBytes: 3 * COST16 });
  for (let i = 0; i < 10; i++) await engine.publish('queue/bc', { payload: KIB16, qos: 1 });
  const c = engine.subscribe({ sessionId: 'c', filter: 'queue/bc', qos: 1, maxDepth: 1000, transactional: true, sink: pullSink() });
  assert.equal(c.depth(), 3);
  const got = c.take(100);
  assert.equal(got.length, 3);
  assert.equal(c.queuedBytes(), 3 * COST16, 'taken and uncommitted: still in flight');
  assert.equal(c.take(100).length, 0);
  c.commit(got.map((d) => d.eventId));
  assert.equal(c.depth(), 3, 'the next three handed over');
});

test('engine byte cap - properties count, a bad maxBytes is a ValidationError, a new subscribe updates the cap', () => {
  const bare = messageBytes({ payload: Buffer.alloc(100) } as never);
  assert.equal(bare, 100 + MESSAGE_OVERHEAD_BYTES);
  const props = messageBytes({ payload: Buffer.alloc(100), correlationData: Buffer.alloc(50), contentType: 'text/plain', responseTopic: 'r/t', userProperties: { k: 'v', list: ['ab', 'cd'] } } as never);
  assert.equal(props, bare + 50 + 'text/plain'.length + 'r/t'.length + 1 + 1 + 'list'.length + 4);
  const engine = new Engine();
  assert.throws(() => engine.subscribe({ sessionId: 's', filter: 'a', maxBytes: 0, sink: pullSink() }), ValidationError);
  assert.throws(() => engine.subscribe({ sessionId: 's', filter: 'a', maxBytes: 1.5, sink: pullSink() }), ValidationError);
  assert.throws(() => new Engine({ defaultMaxBytes: -1 }), ValidationError);
  const sub = engine.subscribe({ sessionId: 's', filter: 'a', sink: pullSink() });
  assert.equal(sub.maxBytes, DEFAULT_MAX_BYTES);
  engine.subscribe({ sessionId: 's', filter: 'a', maxBytes: 4096, sink: pullSink() });
  assert.equal(sub.maxBytes, 4096);
});
