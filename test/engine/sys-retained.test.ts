import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Engine } from '../../src/engine/engine.js';
import { encodeMessage, createMessage } from '../../src/engine/message.js';
import { memoryEngineStore, retainedKey } from '../../src/engine/engine-store.js';
import { pushSink, texts } from './helpers.js';

test('engine - retained $SYS messages are kept in memory and never written to the store', async () => {
  const store = memoryEngineStore();
  const engine = new Engine({ store });
  await engine.recover();
  await engine.publish('$SYS/broker/version', { payload: '0.1.0', retain: true });
  await engine.publish('$SYS/broker/uptime', { payload: '12', retain: true });
  await engine.publish('site/1/status', { payload: 'up', retain: true });
  await engine.flush();

  assert.equal(store.data.has(retainedKey('$SYS/broker/version')), false, 'no $SYS retained key in the store');
  assert.equal(store.data.has(retainedKey('$SYS/broker/uptime')), false);
  assert.equal(store.data.has(retainedKey('site/1/status')), true, 'ordinary retained messages are still persisted');

  // a late subscriber still gets the $SYS retained messages from memory
  const sink = pushSink();
  engine.subscribe({ sessionId: 'late', filter: '$SYS/#', sink });
  assert.deepEqual(texts(sink.got).sort(), ['0.1.0', '12']);
  assert.ok(sink.got.every((r) => r.msg.retain), 'delivered as retained');

  // clearing a $SYS retained message writes no delete either
  const before = store.opsWritten;
  await engine.publish('$SYS/broker/uptime', { payload: '', retain: true });
  await engine.flush();
  assert.equal(store.opsWritten, before);
  assert.equal(engine.retained('$SYS/broker/uptime'), undefined);
  await engine.close();
});

test('engine - a $SYS retained message left in the store by an older version is dropped at recovery', async () => {
  const store = memoryEngineStore();
  store.data.set(retainedKey('$SYS/broker/uptime'), encodeMessage(createMessage({ payload: '999', retain: true }, 1, Date.now())));
  store.data.set(retainedKey('site/2/status'), encodeMessage(createMessage({ payload: 'down', retain: true }, 2, Date.now())));
  const engine = new Engine({ store });
  const result = await engine.recover();
  await engine.flush();
  assert.equal(result.retained, 1);
  assert.equal(engine.retained('$SYS/broker/uptime'), undefined, 'the stale figure is not served');
  assert.equal(engine.retained('site/2/status')?.payload.toString(), 'down');
  assert.equal(store.data.has(retainedKey('$SYS/broker/uptime')), false, 'the stale key is deleted');
  await engine.close();
});
