import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Engine } from '../../src/engine/index.js';
import { startServer, waitUntil, type TestServer } from '../helpers.js';

/**
 * Destinations that come and go: a topic with no subscription, no retained message and nothing stored is removed
 * (engine entry and actor) after DestinationManager.idleTimeout; queues, declared destinations, retained topics and
 * topics someone subscribes to stay.
 */
describe('idle destinations', () => {
  let s: TestServer;
  before(async () => {
    s = await startServer({
      auth: false,
      overrides: { DestinationManager: { idleTimeout: 400, data: [{ name: 'declared/t', type: 'Topic' }] } },
    });
  });
  after(async () => {
    await s?.close();
  });

  test('idle - an idle topic goes with its actor; queues, declared, retained and subscribed topics stay', async () => {
    const engine = s.rt.engine!;
    engine.subscribe({ sessionId: 'watcher', filter: 'idle/sub/#', sink: { kind: 'pull' } });
    await engine.publish('idle/a', { payload: Buffer.from('x') });
    await engine.publish('idle/retained', { payload: Buffer.from('x'), retain: true });
    await engine.publish('idle/sub/x', { payload: Buffer.from('x') });
    await engine.publish('queue/idle', { payload: Buffer.from('x') });
    for (const name of ['idle/a', 'idle/retained', 'idle/sub/x', 'queue/idle', 'declared/t']) {
      await waitUntil(() => s.rt.actor('destination', name) !== undefined, 5000, `actor of ${name}`);
    }
    await waitUntil(() => !engine.hasDestination('idle/a'), 10000, 'the idle topic removed');
    await waitUntil(() => s.rt.actor('destination', 'idle/a') === undefined, 5000, 'its actor removed');
    for (const name of ['idle/retained', 'idle/sub/x', 'queue/idle', 'declared/t']) {
      assert.ok(engine.hasDestination(name), `${name} stays`);
      assert.ok(s.rt.actor('destination', name), `the actor of ${name} stays`);
    }
    // a later publish makes it again
    await engine.publish('idle/a', { payload: Buffer.from('y') });
    assert.ok(engine.hasDestination('idle/a'));
    await waitUntil(() => s.rt.actor('destination', 'idle/a') !== undefined, 5000, 'a new actor');
    // the subscriber leaves: its topic becomes idle too
    engine.closeSession('watcher');
    await waitUntil(() => !engine.hasDestination('idle/sub/x'), 10000, 'the no-longer-subscribed topic removed');
  });

  test('idle - sweepIdle honours the timeout and 0 means never; closeSession finds owned temporary destinations by index', async () => {
    let now = 1_000_000;
    const engine = new Engine({ now: () => now });
    await engine.publish('t/1', { payload: Buffer.from('x') });
    engine.createDestination('tmp/1', 'TemporaryTopic', { owner: 'sess' });
    engine.createDestination('tmp/2', 'TemporaryQueue', { owner: 'sess' });
    engine.createDestination('tmp/3', 'TemporaryTopic', { owner: 'other' });
    now += 999;
    assert.deepEqual(engine.sweepIdle(1000, now), []);
    assert.deepEqual(engine.sweepIdle(0, now + 10_000), [], '0 = never');
    now += 1;
    assert.deepEqual(engine.sweepIdle(1000, now), ['t/1']);
    assert.equal(engine.hasDestination('t/1'), false);
    engine.closeSession('sess');
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(engine.destinationNames().sort(), ['tmp/3']);
    await engine.close();
  });
});
