import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Engine, PUBLISHED, memoryEngineStore, type Message, type PushSink, type Subscription } from '../../src/engine/index.js';
import { pushSink, texts } from './helpers.js';

/**
 * A publish's result is what its own routing did (issue 22 item 6: an explicit per-publish result, not fields
 * saved and restored around the call): what it waits for, whatever a sink publishes while it is being routed.
 */

const tick = (ms: number) => new Promise((r) => setTimeout(r, ms));

test('engine - a retained QoS 1 publish to a write-behind subscription waits for that copy (delivered without the retain flag) to settle', async () => {
  const store = memoryEngineStore();
  const engine = new Engine({ store });
  await engine.recover();
  const sink = pushSink();
  const sub = engine.subscribe({ sessionId: 'link', filter: 'wb/#', qos: 1, durable: true, writeBehindMs: 60_000, sink });
  let done = false;
  const p = engine.publish('wb/r', { payload: 'kept', qos: 1, retain: true }).then(() => (done = true));
  await engine.flush(); // the retained record is written; the copy's write-behind window is a minute
  await tick(20);
  assert.equal(sink.got[0]!.msg.retain, false, 'a live delivery clears the retain flag [MQTT-3.3.1-12]');
  assert.equal(done, false, 'the publish waits until the subscription acknowledges (or the copy is written)');
  sub.ack(sink.got[0]!.msg.id);
  await p;
  assert.equal(done, true);
  await engine.close();
});

test('engine - a publish a sink makes while the engine routes another has its own result', async () => {
  const store = memoryEngineStore();
  const engine = new Engine({ store });
  await engine.recover();

  // the outer publish writes nothing; the inner one (to a persistent queue) writes: the outer is not made to wait
  let inner: Promise<void> | undefined;
  const relay: PushSink = {
    kind: 'push',
    deliver(_sub: Subscription, msg: Message): boolean {
      if (msg.payload.toString() === 'outer') inner = engine.publish('queue/relay', { payload: 'inner', qos: 1 });
      return true;
    },
  };
  engine.subscribe({ sessionId: 'relay', filter: 'plain/+', sink: relay });
  const outer = engine.publish('plain/a', { payload: 'outer' });
  assert.equal(outer, PUBLISHED, 'a QoS 0 publish to a non-durable subscription waits for nothing');
  assert.ok(inner !== undefined && inner !== PUBLISHED, 'the queue message made inside it waits for its write');
  await inner;
  assert.ok([...store.data.keys()].some((k) => k.startsWith('q!')), 'the queue message is stored when its publish resolves');

  // the outer publish writes a durable copy; the inner one writes nothing: the outer still waits for its write
  let innerQos0: Promise<void> | undefined;
  const durable: PushSink = {
    kind: 'push',
    deliver(_sub: Subscription, msg: Message): boolean {
      if (msg.payload.toString() === 'held') innerQos0 = engine.publish('plain/b', { payload: 'inner 0' });
      return true;
    },
  };
  engine.subscribe({ sessionId: 'keeper', filter: 'keep/+', qos: 1, durable: true, sink: durable });
  const stored = engine.publish('keep/a', { payload: 'held', qos: 1 });
  assert.equal(innerQos0, PUBLISHED);
  assert.notEqual(stored, PUBLISHED, 'the durable copy is written before the publish resolves');
  assert.equal([...store.data.keys()].some((k) => k.startsWith('d!')), false);
  await stored;
  assert.ok([...store.data.keys()].some((k) => k.startsWith('d!')), 'the durable copy is stored when its publish resolves');
  await engine.close();
});

test('engine - publishToGroup feeds only its group; a publish a member makes meanwhile routes to everyone', async () => {
  const engine = new Engine();
  const plain = pushSink();
  const other = pushSink();
  engine.subscribe({ sessionId: 'plain', filter: 'g/+', sink: plain });
  engine.subscribe({ sessionId: 'other', filter: 'echo/#', sink: other });
  const member: PushSink & { got: string[] } = {
    kind: 'push',
    got: [],
    deliver(_sub: Subscription, msg: Message, destinationName: string): boolean {
      member.got.push(`${destinationName}:${msg.payload.toString()}`);
      void engine.publish('echo/x', { payload: `echo of ${msg.payload.toString()}` });
      return true;
    },
  };
  engine.subscribe({ sessionId: 'm', filter: '$share/grp/g/+', sink: member });
  await engine.publishToGroup('grp', 'g/+', 'g/1', { payload: 'for the group' });
  assert.deepEqual(member.got, ['g/1:for the group']);
  assert.deepEqual(texts(plain.got), [], 'a plain subscription on the same topic gets nothing from publishToGroup');
  assert.deepEqual(texts(other.got), ['echo of for the group'], 'the member’s own publish is routed as usual');
  await engine.close();
});
