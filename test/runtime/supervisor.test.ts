import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createActor, fromCallback, setup } from 'xstate';
import { backoffFor, shardPath, supervisorMachine } from '../../actors/supervisor/supervisor.machine.js';
import { startServer, waitUntil } from '../helpers.js';

/** A child whose start throws: what a real actor does when its I/O cannot even begin. */
function throwingChild(starts: number[]) {
  return fromCallback(() => {
    starts.push(Date.now());
    throw new Error('cannot open device');
  });
}

describe('supervisor', () => {
  test('supervisor - backoff doubles from the initial value up to the maximum', () => {
    const ctx = { backoffInitial: 100, backoffMax: 1000 };
    assert.deepEqual([1, 2, 3, 4, 5, 6].map((a) => backoffFor(ctx, a)), [100, 200, 400, 800, 1000, 1000]);
  });

  test('supervisor - a crashed child is restarted with backoff; a healthy sibling is untouched (one-for-one)', async () => {
    let attempts = 0;
    const flaky = fromCallback(() => {
      attempts++;
      if (attempts <= 2) throw new Error(`boom ${attempts}`);
    });
    let siblingStarts = 0;
    const sibling = fromCallback(() => {
      siblingStarts++;
    });
    const sup = createActor(supervisorMachine, {
      input: {
        name: 'test',
        intensity: 5,
        period: 60000,
        backoffInitial: 30,
        backoffMax: 200,
        children: [
          { id: 'flaky', logic: flaky },
          { id: 'sibling', logic: sibling },
        ],
      },
    }).start();
    const t0 = Date.now();
    await waitUntil(() => attempts === 3, 5000, 'third start');
    const elapsed = Date.now() - t0;
    assert.ok(elapsed >= 30 + 60 - 5, `two backoffs (30 + 60 ms) passed, took ${elapsed} ms`);
    assert.equal(sup.getSnapshot().value, 'running');
    assert.equal(siblingStarts, 1, 'the sibling was never restarted');
    assert.ok((sup.getSnapshot().children as Record<string, unknown>).flaky, 'the restarted child is alive');
    sup.stop();
  });

  test('supervisor - a stopped supervisor cancels pending restarts', async () => {
    const starts: number[] = [];
    const sup = createActor(supervisorMachine, {
      input: { name: 't', intensity: 10, period: 60000, backoffInitial: 50, backoffMax: 50, children: [{ id: 'bad', logic: throwingChild(starts) }] },
    }).start();
    sup.stop();
    await new Promise((r) => setTimeout(r, 120));
    assert.equal(starts.length, 1);
  });

  test('supervisor - a child that throws on start exhausts the budget; the supervisor fails, /health reports it and REST still answers', async () => {
    const starts: number[] = [];
    const s = await startServer({
      overrides: { MessageDaemon: { supervisor: { intensity: 3, period: 60000, backoffInitial: 20, backoffMax: 80 } } },
      extraChildren: { devices: [{ id: 'device:broken', logic: throwingChild(starts) }] },
    });
    try {
      await waitUntil(async () => (await s.inject('/api/v1/server/health')).json().status === 'Error', 10000, 'supervisor failure');
      assert.equal(starts.length, 4, 'first start plus three restarts');
      const gaps = starts.slice(1).map((t, i) => t - starts[i]);
      assert.ok(gaps[0] >= 15 && gaps[1] >= 35 && gaps[2] >= 75, `backoff grows: ${gaps.join(', ')} ms`);

      const tree = (await s.inject('/api/v1/server/actors/tree')).json();
      const devices = tree.children.find((c: { id: string }) => c.id === 'devices');
      assert.equal(devices.state, 'failed');
      assert.deepEqual(devices.tags, ['failed']);
      assert.equal(devices.children.length, 0, 'the failed supervisor stopped its children');
      assert.equal(tree.state, 'running', 'the server keeps running');

      assert.equal((await s.inject('/health')).body, 'Error');
      const status = (await s.inject('/api/v1/server/status')).json() as Array<{ name: string; status: string; comment: string }>;
      const dev = status.find((x) => x.name === 'Devices')!;
      assert.equal(dev.status, 'ERROR');
      assert.match(dev.comment, /restart budget spent \(3 restarts within 60000 ms\); last crash: device:broken: cannot open device/);
      assert.deepEqual((await s.inject('/api/v1/server/health')).json(), { status: 'Error', issueCount: 1 });
      assert.deepEqual((await s.inject('/api/v1/ping')).json(), { status: 'Success' });
    } finally {
      await s.close();
    }
  });

  test('supervisor - while a child waits to be restarted, health is Warning', async () => {
    const starts: number[] = [];
    const s = await startServer({
      overrides: { MessageDaemon: { supervisor: { intensity: 5, period: 60000, backoffInitial: 5000, backoffMax: 5000 } } },
      extraChildren: { lora: [{ id: 'lora:radio0', logic: throwingChild(starts) }] },
    });
    try {
      await waitUntil(() => starts.length === 1, 5000, 'first start');
      const h = (await s.inject('/api/v1/server/health')).json();
      assert.deepEqual(h, { status: 'Warning', issueCount: 1 });
      assert.equal((await s.inject('/health')).body, 'Warning');
    } finally {
      await s.close();
    }
  });

  test('supervisor - a machine child in a state tagged degraded shows as Warning', async () => {
    const m = setup({}).createMachine({ id: 'fake', initial: 'backoff', states: { backoff: { tags: ['degraded'] } } });
    const s = await startServer({ extraChildren: { endpoints: [{ id: 'endpoint:mqtt', logic: m }] } });
    try {
      const status = (await s.inject('/api/v1/server/status')).json() as Array<{ name: string; status: string; comment: string }>;
      const ep = status.find((x) => x.name === 'Endpoints')!;
      assert.equal(ep.status, 'WARN');
      assert.match(ep.comment, /endpoint:mqtt backoff/);
    } finally {
      await s.close();
    }
  });
});

describe('sharded supervisor', () => {
  test('supervisor - a sharded supervisor spreads children over lazily made shards and still restarts a crashed one', async () => {
    let crashes = 0;
    const crashOnce = fromCallback(() => {
      if (crashes++ === 0) throw new Error('first start fails');
    });
    const quiet = fromCallback(() => {});
    const sup = createActor(supervisorMachine, {
      input: { name: 'things', intensity: 5, period: 60000, backoffInitial: 10, backoffMax: 10, shards: [4, 4] },
    }).start();
    assert.equal(Object.keys(sup.getSnapshot().children).length, 0, 'no shard before the first child');
    for (let i = 0; i < 200; i++) sup.send({ type: 'child.start', spec: { id: `thing:${i}`, logic: quiet } });
    sup.send({ type: 'child.start', spec: { id: 'thing:crashy', logic: crashOnce } });
    const top = sup.getSnapshot().children as Record<string, { getSnapshot(): { children: Record<string, { getSnapshot(): { children: Record<string, unknown> } }> } }>;
    assert.equal(Object.keys(top).length, 4, 'four first-level shards');
    let leaves = 0;
    let maxLeaf = 0;
    for (const shard of Object.values(top)) {
      for (const leaf of Object.values(shard.getSnapshot().children)) {
        const n = Object.keys(leaf.getSnapshot().children).length;
        leaves++;
        maxLeaf = Math.max(maxLeaf, n);
      }
    }
    assert.equal(leaves, 16, 'sixteen leaf shards');
    assert.ok(maxLeaf < 40, `children spread over the leaves (largest leaf ${maxLeaf})`);
    await waitUntil(() => crashes === 2, 5000, 'the crashed child restarted inside its shard');
    assert.equal(sup.getSnapshot().value, 'running');
    sup.send({ type: 'child.stop', id: 'thing:3' });
    const path = shardPath('things', 'thing:3', [4, 4]);
    const leaf = (top[path[0]].getSnapshot().children as Record<string, { getSnapshot(): { children: Record<string, unknown> } }>)[path[1]];
    assert.equal(leaf.getSnapshot().children['thing:3'], undefined, 'stopped child gone from its shard');
    sup.stop();
  });
});

describe('supervisor and the registry', () => {
  test('supervisor - a child started again while its restart is pending replaces it (no second actor with its systemId)', async () => {
    let crashes = 0;
    const crashOnce = fromCallback(() => {
      if (crashes++ === 0) throw new Error('first start fails');
    });
    const quiet = fromCallback(() => {});
    const sup = createActor(supervisorMachine, {
      input: { name: 't', intensity: 5, period: 60000, backoffInitial: 50, backoffMax: 50, children: [{ id: 'thing:a', logic: crashOnce }] },
    }).start();
    await waitUntil(() => crashes === 1, 5000, 'first crash');
    sup.send({ type: 'child.start', spec: { id: 'thing:a', logic: quiet } });
    await new Promise((r) => setTimeout(r, 120));
    assert.equal(sup.getSnapshot().status, 'active', 'the supervisor did not crash on a duplicate systemId');
    assert.equal(sup.getSnapshot().value, 'running');
    assert.equal(crashes, 1, 'the pending restart of the old spec was cancelled');
    assert.ok(sup.system.get('thing:a'), 'the new child is registered');
    sup.stop();
  });
});
