import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ValidationError } from '../../src/errors.js';
import { MessageIdGenerator, createMessage, decodeMessage, encodeMessage } from '../../src/engine/message.js';

test('engine - message defaults and priority clamping', () => {
  const m = createMessage({ payload: 'hi' }, 7, 1000);
  assert.equal(m.id, 7);
  assert.equal(m.priority, 4);
  assert.equal(m.qos, 0);
  assert.equal(m.creation, 1000);
  assert.equal(m.expiresAt, 0);
  assert.equal(m.retain, false);
  assert.deepEqual(m.payload, Buffer.from('hi'));
  assert.equal(createMessage({ payload: '', priority: -3 }, 1, 0).priority, 0);
  assert.equal(createMessage({ payload: '', priority: 99 }, 1, 0).priority, 10);
  assert.equal(createMessage({ payload: '', expiresAt: -1 }, 1, 0).expiresAt, 0);
  assert.throws(() => createMessage({ payload: '', qos: 3 }, 1, 0), ValidationError);
});

test('engine - encodeMessage/decodeMessage round-trips every field and binary payloads exactly', () => {
  const payload = Buffer.alloc(256);
  for (let i = 0; i < 256; i++) payload[i] = i;
  const full = createMessage(
    {
      payload,
      contentType: 'application/octet-stream',
      correlationData: Buffer.from([0, 255, 1, 254]),
      expiresAt: 1_900_000_000_000,
      priority: 9,
      qos: 2,
      creation: 1_700_000_000_123,
      dataMap: { a: 1, b: 'x', c: [true, null], d: { e: 2.5 } },
      metaData: { time_ms: '1700000000123', 'x-y': 'z' },
      retain: true,
      userProperties: { k: 'v', multi: ['1', '2'] },
      responseTopic: 'reply/here',
      payloadFormat: 1,
      origin: 'session-ä',
    },
    1_745_000_000_000_001,
    0,
  );
  assert.deepEqual(decodeMessage(encodeMessage(full)), full);

  const bare = createMessage({ payload: Buffer.alloc(0) }, 42, 5);
  const back = decodeMessage(encodeMessage(bare));
  assert.equal(back.id, 42);
  assert.equal(back.payload.length, 0);
  assert.equal(back.correlationData, undefined);
  assert.equal(back.payloadFormat, undefined);
  assert.deepEqual(back.dataMap, {});
  assert.deepEqual(back.metaData, {});
});

test('engine - message ids are monotonic and start above the stored maximum', () => {
  const clock = 1_700_000_000_000;
  const g = new MessageIdGenerator(0, clock);
  const a = g.next();
  const b = g.next();
  assert.equal(a, clock * 1000);
  assert.equal(b, a + 1);
  const restarted = new MessageIdGenerator(b + 5000, clock); // clock went backwards, store is ahead
  assert.ok(restarted.next() > b + 5000);
  const later = new MessageIdGenerator(0, clock);
  later.observe(clock * 1000 + 10);
  assert.equal(later.next(), clock * 1000 + 11);
});
