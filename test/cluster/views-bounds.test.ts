/**
 * The bounds of the cluster views without a NATS server (src/cluster/rpc.ts, src/cluster/stats.ts): a node's reply
 * cut to its byte cap, a merged answer cut at its entry cap, a node without connection answering its own entries and
 * naming the others unreachable, and cluster totals that drop a node's sample after a lease and track a bounded
 * number of nodes. The same paths with real brokers: test/cluster/scope.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { Msg } from '@nats-io/transport-node';
import pino from 'pino';
import { boundedReply, ClusterList, ClusterRpc, MAX_CLUSTER_ITEMS, type LocalListFn } from '../../src/cluster/rpc.js';
import { ClusterStats, clusterSysTopics, MAX_TRACKED_NODES, type NodeFigures } from '../../src/cluster/stats.js';

const log = pino({ level: 'silent' });
const figures = (connections: number): NodeFigures => ({
  connections,
  connectionsAccepted: connections,
  subscriptions: 1,
  destinations: 2,
  messagesPublished: 10,
  messagesDelivered: 20,
  messagesDropped: 0,
  bytesReceived: 100,
  bytesSent: 200,
});

describe('cluster views - bounds', () => {
  test('cluster views - a node reply over its byte cap is cut from the end and says so', () => {
    const items = Array.from({ length: 5000 }, (_, i) => ({ id: i, name: `connection-${i}`.padEnd(80, '.') }));
    const body = boundedReply({ node: 'alpha', total: items.length, items }, 64 * 1024);
    assert.ok(body.length <= 64 * 1024, `${body.length} bytes`);
    const r = JSON.parse(new TextDecoder().decode(body)) as { total: number; items: Array<{ id: number }>; truncated?: boolean };
    assert.equal(r.truncated, true);
    assert.equal(r.total, 5000);
    assert.ok(r.items.length > 100 && r.items.length < 5000);
    assert.deepEqual(r.items.slice(0, 3).map((x) => x.id), [0, 1, 2]);
    // a reply that fits is sent whole
    const small = JSON.parse(new TextDecoder().decode(boundedReply({ node: 'a', total: 2, items: [1, 2] }, 1024))) as { items: number[]; truncated?: boolean };
    assert.deepEqual(small.items, [1, 2]);
    assert.equal(small.truncated, undefined);
  });

  test('cluster views - without a connection the answer holds this node\'s entries, every peer unreachable, at most the entry cap', async () => {
    const many: LocalListFn = (_q, cap) => {
      const n = MAX_CLUSTER_ITEMS + 500;
      return { total: n, items: Array.from({ length: Math.min(n, cap) }, (_, i) => ({ id: i })), truncated: n > cap };
    };
    const rpc = new ClusterRpc(log, new Map([[ClusterList.Connections, many]]));
    const a = await rpc.list(ClusterList.Connections, {}, { clusterName: 'c', nodeId: 'alpha', peers: () => ({ live: ['beta', 'gamma'], unreachable: ['delta'] }) });
    assert.deepEqual(a.nodes, ['alpha']);
    assert.deepEqual(a.unreachableNodes, ['beta', 'delta', 'gamma']);
    assert.deepEqual(a.truncatedNodes, ['alpha']);
    assert.ok(a.items.length <= MAX_CLUSTER_ITEMS);
    assert.ok(a.items.every((x) => x.node === 'alpha'));
    // a list this node does not serve is a 404 for the caller, not a 500
    await assert.rejects(rpc.list(ClusterList.Actors, {}, { clusterName: 'c', nodeId: 'alpha', peers: () => ({ live: [], unreachable: [] }) }), (e: Error & { statusCode?: number }) => e.statusCode === 404);
  });

  test('cluster views - totals count a node\'s sample for a lease, only while the membership holds it live, and track a bounded number of nodes', () => {
    let now = 1_000_000;
    const stats = new ClusterStats('c', log, 4000, () => now);
    // feed samples through the subscription callback, as NATS would
    let deliver: ((err: Error | null, msg: Msg) => void) | undefined;
    const fakeNc = {
      isClosed: () => false,
      subscribe: (_s: string, opts: { callback: (err: Error | null, msg: Msg) => void }) => ((deliver = opts.callback), { unsubscribe() {} }),
      publish() {},
    };
    stats.bind(fakeNc as never, 'alpha');
    const sample = (nodeId: string, f: NodeFigures, subject = `sy.c.stats.${nodeId}`) =>
      deliver!(null, { subject, json: () => ({ nodeId, figures: f }) } as unknown as Msg);
    sample('beta', figures(3));
    sample('gamma', figures(5));
    sample('mallory', figures(7), 'sy.c.stats.somebody-else'); // a sample naming another node than its subject: ignored
    sample('alpha', figures(100)); // its own id from the wire: ignored, this node counts its current figures
    const live = new Set(['alpha', 'beta', 'gamma', 'mallory']);
    let t = stats.totals('alpha', figures(1), (id) => live.has(id));
    assert.deepEqual(t.nodes, ['alpha', 'beta', 'gamma']);
    assert.equal(t.figures.connections, 1 + 3 + 5);
    assert.equal(t.figures.messagesPublished, 30);
    assert.deepEqual(clusterSysTopics(t).find(([k]) => k === '$SYS/broker/cluster/clients/connected'), ['$SYS/broker/cluster/clients/connected', '9']);
    // gamma gone in the membership: out at once
    live.delete('gamma');
    t = stats.totals('alpha', figures(1), (id) => live.has(id));
    assert.deepEqual(t.nodes, ['alpha', 'beta']);
    // beta silent for longer than a lease: out
    now += 4001;
    t = stats.totals('alpha', figures(1), () => true);
    assert.deepEqual(t.nodes, ['alpha']);
    assert.equal(t.figures.connections, 1);
    // a bad sample (a negative figure) is ignored
    sample('beta', { ...figures(3), connections: -1 });
    assert.deepEqual(stats.totals('alpha', figures(1), () => true).nodes, ['alpha']);
    // at most MAX_TRACKED_NODES nodes are kept
    for (let i = 0; i < MAX_TRACKED_NODES + 50; i++) sample(`n${i}`, figures(1));
    assert.equal(stats.totals('alpha', figures(0), () => true).nodes.length, MAX_TRACKED_NODES + 1);
  });
});
