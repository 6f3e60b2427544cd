import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, supervisedActors, waitUntil, type ActorTreeNode } from '../helpers.js';

interface Node {
  id: string;
  machine: string;
  state: unknown;
  children: Node[];
  context: Record<string, unknown>;
}

test('subscriptions - a durable subscription is an actor that hibernates and wakes with its session; non-durable ones get none', async () => {
  const s = await startServer({ auth: false });
  try {
    const engine = s.rt.engine!;
    const actors = async () => {
      const tree = (await s.app.inject('/api/v1/server/actors/tree')).json() as Node;
      return supervisedActors(tree.children.find((c) => c.id === 'subscriptions')! as unknown as ActorTreeNode) as unknown as Node[];
    };
    const delivered: string[] = [];
    const sink = {
      kind: 'push' as const,
      deliver: (_s: unknown, m: { payload: Buffer }) => {
        delivered.push(m.payload.toString());
        return true;
      },
    };
    engine.subscribe({ sessionId: 'plain', filter: 'f/plain', sink });
    const sub = engine.subscribe({ sessionId: 'client-1', filter: 'f/durable/#', durable: true, qos: 1, sink });
    await waitUntil(async () => (await actors()).length === 1, 5000, 'one subscription actor');
    let [a] = await actors();
    assert.equal(a.machine, 'subscription');
    assert.equal(a.id, `subscription:${sub.key}`);
    assert.equal(a.state, 'active');
    assert.equal(a.context.filter, 'f/durable/#');

    sub.hibernate();
    await waitUntil(async () => (await actors())[0]?.state === 'hibernated', 5000, 'hibernated');
    await engine.publish('f/durable/x', { payload: 'while offline', qos: 1 });
    assert.deepEqual(delivered, [], 'nothing delivered while hibernated');
    sub.attach(sink);
    await waitUntil(async () => (await actors())[0]?.state === 'active', 5000, 'active again');
    assert.deepEqual(delivered, ['while offline']);
    [a] = await actors();
    assert.equal(a.context.hibernations, 1);

    engine.unsubscribe(sub);
    await waitUntil(async () => (await actors()).length === 0, 5000, 'closed actor removed');
  } finally {
    await s.close();
  }
});
