import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Message, PushSink } from '../../src/engine/index.js';
import { destinationActor } from '../../src/messaging/destinations.service.js';
import { startServer, waitUntil, type TestServer, supervisedActors, type ActorTreeNode } from '../helpers.js';

interface ActorNode {
  id: string;
  machine: string;
  state: unknown;
  tags: string[];
  context: Record<string, unknown>;
  children: ActorNode[];
}

describe('destination actors', () => {
  let s: TestServer;
  before(async () => {
    s = await startServer({
      overrides: {
        RestApi: { enableCache: false },
        DestinationManager: { data: [{ name: 'configured/topic', type: 'Topic' }] },
      },
    });
  });
  after(async () => s.close());

  const destinationsNode = async (): Promise<ActorNode> => {
    const r = await s.inject('/api/v1/server/actors/tree');
    assert.equal(r.statusCode, 200);
    const node = (r.json() as ActorNode).children.find((c) => c.id === 'destinations');
    assert.ok(node, 'the destinations supervisor is in the tree');
    // the destinations supervisor is sharded: its actors are under shard supervisors
    return { ...node, children: supervisedActors(node as unknown as ActorTreeNode) as unknown as ActorNode[] };
  };
  const destinationsStatus = async () => {
    const r = await s.inject('/api/v1/server/status');
    assert.equal(r.statusCode, 200);
    return (r.json() as Array<{ name: string; status: string; comment: string }>).find((x) => x.name === 'Destinations')!;
  };

  test('destination actors - a configured destination has its actor from boot', async () => {
    const node = await destinationsNode();
    const child = node.children.find((c) => c.id === 'destination:configured/topic');
    assert.ok(child, 'destination:configured/topic is under destinations');
    assert.equal(child.machine, 'destination');
    assert.deepEqual(child.state, { live: { run: 'active', load: 'normal' } });
    assert.deepEqual(child.context, { name: 'configured/topic', type: 'Topic' });
  });

  test('destination actors - publishing to new topics and queues spawns one actor each under destinations', async () => {
    await s.rt.engine!.publish('plant/line1/speed', { payload: '12' });
    await s.rt.engine!.publish('queue/orders', { payload: 'order 1' });
    const node = await destinationsNode();
    const ids = node.children.map((c) => c.id);
    assert.ok(ids.includes('destination:plant/line1/speed'));
    const q = node.children.find((c) => c.id === 'destination:queue/orders');
    assert.ok(q);
    assert.equal(q.context.type, 'Queue');
    assert.ok(!ids.some((id) => id.startsWith('destination:$')), 'system destinations have no actor');
  });

  test('destination actors - pause holds delivery until resume', async () => {
    const e = s.rt.engine!;
    const got: string[] = [];
    const sink: PushSink = {
      kind: 'push',
      deliver: (_sub, msg: Message) => {
        got.push(msg.payload.toString());
        return true;
      },
    };
    e.subscribe({ sessionId: 'pause-test', filter: 'plant/line1/speed', sink });
    const actor = destinationActor(s.rt, 'plant/line1/speed');
    assert.ok(actor);

    actor.send({ type: 'destination.pause' });
    assert.deepEqual(actor.getSnapshot().value, { live: { run: 'paused', load: 'normal' } });
    assert.equal(e.isPaused('plant/line1/speed'), true);
    await e.publish('plant/line1/speed', { payload: 'held 1' });
    await e.publish('plant/line1/speed', { payload: 'held 2' });
    assert.deepEqual(got, [], 'nothing delivered while paused');
    assert.equal(e.destinationDto('plant/line1/speed').delayedMessages, 2);
    const paused = (await destinationsNode()).children.find((c) => c.id === 'destination:plant/line1/speed')!;
    assert.deepEqual(paused.state, { live: { run: 'paused', load: 'normal' } }, 'GET /api/v1/server/actors shows it paused');

    actor.send({ type: 'destination.resume' });
    assert.deepEqual(got, ['held 1', 'held 2'], 'held messages delivered on resume, in order');
    assert.equal(e.isPaused('plant/line1/speed'), false);
    await e.publish('plant/line1/speed', { payload: 'live' });
    assert.deepEqual(got, ['held 1', 'held 2', 'live']);
    e.closeSession('pause-test');
  });

  test('destination actors - a queue above its high-water mark is degraded and shows WARN in /api/v1/server/status', async () => {
    const e = s.rt.engine!;
    assert.equal((await destinationsStatus()).status, 'OK');
    const writes: Array<Promise<void>> = [];
    for (let i = 0; i < 10_000; i++) writes.push(e.publish('queue/backlog', { payload: `m${i}` }));
    await Promise.all(writes);
    const actor = destinationActor(s.rt, 'queue/backlog')!;
    assert.ok(actor.getSnapshot().hasTag('degraded'));
    const warn = await destinationsStatus();
    assert.equal(warn.status, 'WARN');
    assert.match(warn.comment, /destination:queue\/backlog/);
    const health = await s.inject('/api/v1/server/health');
    assert.equal(health.json().status, 'Warning');

    // a consumer drains it below half the mark: back to normal
    const consumer = e.subscribe({ sessionId: 'drain', filter: 'queue/backlog', maxDepth: 6000, sink: { kind: 'pull' } });
    consumer.take(6000);
    assert.equal(actor.getSnapshot().hasTag('degraded'), false);
    assert.equal((await destinationsStatus()).status, 'OK');
    e.closeSession('drain');
  });

  test('destination actors - deleting a destination stops its actor', async () => {
    const e = s.rt.engine!;
    await e.publish('doomed/topic', { payload: 'x' });
    assert.ok(destinationActor(s.rt, 'doomed/topic'));
    const doomed = destinationActor(s.rt, 'doomed/topic')!;
    await e.deleteDestination('doomed/topic');
    assert.equal(doomed.getSnapshot().status, 'done', 'it reached deleting (final)');
    assert.equal(destinationActor(s.rt, 'doomed/topic'), undefined);
    const ids = (await destinationsNode()).children.map((c) => c.id);
    assert.ok(!ids.includes('destination:doomed/topic'));
    // a new destination of the same name gets a fresh actor
    await e.publish('doomed/topic', { payload: 'again' });
    assert.deepEqual(destinationActor(s.rt, 'doomed/topic')?.getSnapshot().value, { live: { run: 'active', load: 'normal' } });
  });

  test('destination actors - after a server restart every recovered destination has its actor again', async () => {
    await s.rt.restart();
    await waitUntil(() => destinationActor(s.rt, 'queue/orders') !== undefined, 10000, 'actors after restart');
    // the engine was rebuilt from the store: the queue is back (its message was persisted)
    assert.deepEqual(destinationActor(s.rt, 'queue/orders')!.getSnapshot().value, { live: { run: 'active', load: 'normal' } });
    assert.ok(destinationActor(s.rt, 'configured/topic'));
    // the queue/backlog messages left after draining were persisted; it is below the mark
    assert.equal(destinationActor(s.rt, 'queue/backlog')!.getSnapshot().hasTag('degraded'), false);
  });
});
