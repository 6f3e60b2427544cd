/**
 * REST lists across the cluster (`scope=cluster`) and the cluster totals of `$SYS` and /metrics, against a real
 * three-node NATS cluster with JetStream and three Switchyard brokers as child processes (docs/cluster.md "REST
 * across the cluster", "Cluster totals"). Heartbeat 1 s, lease 4 s, $SYS every second.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { MqttClient } from 'mqtt';
import { adminPasswordOf, removeDir, spawnBroker, tempDir, waitUntil, type BrokerProcess } from '../helpers.js';
import { clusterConfigDir, connectMqtt } from './helpers.js';
import { startNatsCluster, type NatsCluster } from './nats-cluster.js';

interface Broker {
  nodeId: string;
  dataDir: string;
  p: BrokerProcess;
  mqttPort: number;
}
interface ClusterAnswer<T> {
  scope: 'cluster';
  nodes: string[];
  unreachableNodes: string[];
  truncatedNodes: string[];
  total: number;
  items: Array<T & { node: string }>;
}
interface Conn {
  clientId: string;
  protocolName: string;
}

describe('cluster scope - REST lists and totals across three brokers', { timeout: 150000 }, () => {
  let nats: NatsCluster;
  const brokers: Broker[] = [];
  const dirs: string[] = [];
  const clients: MqttClient[] = [];

  const start = async (nodeId: string): Promise<Broker> => {
    const dataDir = tempDir('switchyard-scope-data-');
    dirs.push(dataDir);
    const cluster = { servers: nats.urls, clusterName: 'scope', nodeId, replicas: 3, heartbeatSeconds: 1, leaseSeconds: 4 };
    const configDir = clusterConfigDir('switchyard-scope-config-', dirs, cluster, { MessageDaemon: { systemTopicInterval: 1000 } });
    const p = await spawnBroker({ SWITCHYARD_DATA_DIR: dataDir, SWITCHYARD_CONFIG_DIR: configDir });
    await waitUntil(() => /endpoint MQTT Interface listening on tcp:\/\/127\.0\.0\.1:(\d+)/.test(p.stdout()), 30000, `${nodeId}'s MQTT endpoint`);
    const mqttPort = Number(/endpoint MQTT Interface listening on tcp:\/\/127\.0\.0\.1:(\d+)/.exec(p.stdout())![1]);
    const b = { nodeId, dataDir, p, mqttPort };
    brokers.push(b);
    return b;
  };
  const get = (b: Broker, path: string): Promise<Response> => fetch(`http://127.0.0.1:${b.p.port}${path}`, { headers: b.p.auth() });
  const json = async <T>(b: Broker, path: string): Promise<T> => {
    const r = await get(b, path);
    assert.equal(r.status, 200, `${path} on ${b.nodeId}: ${r.status}`);
    return (await r.json()) as T;
  };
  const client = async (b: Broker, clientId: string): Promise<MqttClient> => {
    const c = await connectMqtt(`mqtt://127.0.0.1:${b.mqttPort}`, { clientId, username: 'admin', password: adminPasswordOf(b.dataDir), reconnectPeriod: 0, protocolVersion: 5 }, { nodeId: b.nodeId, log: () => b.p.stdout() });
    clients.push(c);
    return c;
  };
  const metric = (text: string, name: string): number | undefined => {
    const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
    return m ? Number(m[1]) : undefined;
  };
  const metrics = async (b: Broker): Promise<string> => (await fetch(`http://127.0.0.1:${b.p.port}/metrics`)).text();

  let a: Broker;
  let b: Broker;
  let c: Broker;

  before(async () => {
    nats = await startNatsCluster(3);
    [a, b, c] = await Promise.all([start('alpha'), start('beta'), start('gamma')]);
    for (const x of [a, b, c]) {
      await waitUntil(async () => {
        const v = (await json<{ state: string; nodes: Array<{ nodeId: string; state: string }> }>(x, '/api/v1/server/cluster'));
        return v.state === 'Member' && v.nodes.filter((n) => n.state === 'live').length === 3;
      }, 30000, `${x.nodeId} sees three live nodes`);
    }
  });

  after(async () => {
    for (const cl of clients) cl.end(true);
    for (const x of brokers) await x.p.stop('SIGKILL');
    await nats?.dispose();
    for (const d of dirs) removeDir(d);
  });

  test('cluster scope - connections scope=cluster lists the MQTT clients of every node, each naming its node', async () => {
    await client(a, 'client-on-alpha');
    await client(b, 'client-on-beta');
    await client(c, 'client-on-gamma');
    // this node only, as before (an array, MAPS' shape)
    const local = await json<Conn[]>(a, '/api/v1/server/connections');
    assert.ok(Array.isArray(local));
    assert.ok(local.some((x) => x.clientId === 'client-on-alpha'));
    assert.ok(!local.some((x) => x.clientId === 'client-on-beta'));

    const all = await json<ClusterAnswer<Conn>>(a, '/api/v1/server/connections?scope=cluster');
    assert.equal(all.scope, 'cluster');
    assert.deepEqual(all.nodes, ['alpha', 'beta', 'gamma']);
    assert.deepEqual(all.unreachableNodes, []);
    assert.deepEqual(all.truncatedNodes, []);
    const where = (id: string) => all.items.filter((x) => x.clientId === id).map((x) => x.node);
    assert.deepEqual(where('client-on-alpha'), ['alpha']);
    assert.deepEqual(where('client-on-beta'), ['beta']);
    assert.deepEqual(where('client-on-gamma'), ['gamma']);
    assert.equal(all.total, all.items.length);

    // the filter runs on every node; asked of another node the answer is the same
    const one = await json<ClusterAnswer<Conn>>(b, `/api/v1/server/connections?scope=cluster&filter=${encodeURIComponent("clientId = 'client-on-gamma'")}`);
    assert.deepEqual(one.items.map((x) => [x.clientId, x.node]), [['client-on-gamma', 'gamma']]);
    // a bad filter is the caller's 400, checked before any node is asked; a bad scope too
    const bad = await get(a, `/api/v1/server/connections?scope=cluster&filter=${encodeURIComponent('clientId = ')}`);
    assert.equal(bad.status, 400);
    assert.equal(typeof ((await bad.json()) as { status: string }).status, 'string');
    assert.equal((await get(a, '/api/v1/server/connections?scope=galaxy')).status, 400);

    // documented in the OpenAPI document: the parameter on both lists, and the cluster answer's schema
    const doc = (await (await get(a, '/openapi.json')).json()) as { paths: Record<string, { get: { parameters?: Array<{ name: string; schema?: { enum?: string[] } }> } }> };
    for (const path of ['/api/v1/server/connections', '/api/v1/server/actors']) {
      const scope = doc.paths[path]!.get.parameters?.find((x) => x.name === 'scope');
      assert.deepEqual(scope?.schema?.enum, ['node', 'cluster'], path);
    }
    assert.match(JSON.stringify(doc), /unreachableNodes/);
  });

  test('cluster scope - actors scope=cluster lists every node\'s actors with paging applied on each node', async () => {
    const page = await json<ClusterAnswer<{ systemId: string; state: string }> & { offset: number; limit: number }>(a, '/api/v1/server/actors?scope=cluster&kind=cluster');
    assert.deepEqual(page.items.map((x) => [x.node, x.systemId]), [['alpha', 'cluster'], ['beta', 'cluster'], ['gamma', 'cluster']]);
    assert.ok(page.items.every((x) => /member/i.test(x.state)), JSON.stringify(page.items));
    assert.equal(page.total, 3);
    const small = await json<ClusterAnswer<{ systemId: string }>>(a, '/api/v1/server/actors?scope=cluster&limit=2');
    assert.deepEqual([...new Set(small.items.map((x) => x.node))], ['alpha', 'beta', 'gamma']);
    for (const n of ['alpha', 'beta', 'gamma']) assert.equal(small.items.filter((x) => x.node === n).length, 2);
    assert.ok(small.total > small.items.length);
    assert.equal((await get(a, '/api/v1/server/actors?scope=cluster&limit=0')).status, 400);
  });

  test('cluster scope - $SYS/broker/cluster and switchyard_cluster_* sum the live nodes', async () => {
    const seen = new Map<string, string>();
    const sys = await client(a, 'sys-watcher');
    sys.on('message', (topic, payload) => seen.set(topic, payload.toString()));
    await sys.subscribeAsync('$SYS/broker/cluster/#');
    // the sum of what each node's own /metrics says
    const perNode = async () => {
      let sum = 0;
      for (const x of [a, b, c]) sum += metric(await metrics(x), 'switchyard_connections')!;
      return sum;
    };
    await waitUntil(async () => {
      const want = await perNode();
      return seen.get('$SYS/broker/cluster/nodes') === '3' && seen.get('$SYS/broker/cluster/clients/connected') === String(want);
    }, 20000, '$SYS/broker/cluster: 3 nodes, connections summed');
    assert.ok(Number(seen.get('$SYS/broker/cluster/clients/connected')) >= 4, 'the four MQTT clients of this file are counted');
    assert.ok(Number(seen.get('$SYS/broker/cluster/messages/received')) > 0);
    await waitUntil(async () => {
      const text = await metrics(a);
      return metric(text, 'switchyard_cluster_nodes') === 3 && metric(text, 'switchyard_cluster_connections') === (await perNode());
    }, 20000, '/metrics: switchyard_cluster_nodes 3 and the connections summed');
    const text = await metrics(b);
    for (const name of ['switchyard_cluster_connections_accepted', 'switchyard_cluster_messages_published', 'switchyard_cluster_messages_delivered', 'switchyard_cluster_bytes_received', 'switchyard_cluster_subscriptions']) {
      assert.ok(metric(text, name)! >= 0, `${name} on beta`);
    }
    assert.match(text, /# TYPE switchyard_cluster_connections gauge/);
  });

  test('cluster scope - a frozen broker and then a killed one are named unreachable, never a 500, and drop out of the totals', async () => {
    // SIGSTOP: its NATS subscription stays, nobody answers: the request waits its timeout
    process.kill(c.p.proc.pid!, 'SIGSTOP');
    const frozen = await get(a, '/api/v1/server/connections?scope=cluster');
    assert.equal(frozen.status, 200);
    const fa = (await frozen.json()) as ClusterAnswer<Conn>;
    assert.deepEqual(fa.unreachableNodes, ['gamma']);
    assert.deepEqual(fa.nodes, ['alpha', 'beta']);
    assert.ok(!fa.items.some((x) => x.node === 'gamma'));
    assert.ok(fa.items.some((x) => x.clientId === 'client-on-beta'));
    // SIGKILL: after a lease it is gone; the lists name it, the totals leave it out
    await c.p.stop('SIGKILL');
    await waitUntil(async () => {
      const v = await json<{ unreachable: string[] }>(a, '/api/v1/server/cluster');
      return v.unreachable.includes('gamma');
    }, 20000, 'alpha holds gamma unreachable');
    const gone = await json<ClusterAnswer<{ systemId: string }>>(a, '/api/v1/server/actors?scope=cluster&kind=cluster');
    assert.deepEqual(gone.unreachableNodes, ['gamma']);
    assert.deepEqual(gone.items.map((x) => x.node), ['alpha', 'beta']);
    await waitUntil(async () => metric(await metrics(a), 'switchyard_cluster_nodes') === 2, 20000, 'switchyard_cluster_nodes 2');
    await waitUntil(() => seen2(a), 20000, '$SYS/broker/cluster/nodes 2');
  });

  // a fresh watcher: the retained $SYS/broker/cluster/nodes is 2 once gamma left the sums
  const seen2 = async (x: Broker): Promise<boolean> => {
    const w = await client(x, `sys-watcher-${Date.now()}`);
    const got = new Promise<string>((resolve) => w.on('message', (_t, p) => resolve(p.toString())));
    await w.subscribeAsync('$SYS/broker/cluster/nodes');
    const v = await Promise.race([got, new Promise<string>((r) => setTimeout(() => r(''), 1500))]);
    w.end(true);
    return v === '2';
  };
});
