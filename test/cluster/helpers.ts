/**
 * What the cluster test files share to start their Switchyard brokers: the config directory with a `Cluster`
 * section, the wait for the MQTT endpoint's port, and (for the files that keep a broker record per node) starting a
 * broker until it is a member with its message link established, and mqtt.js clients on it.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import mqtt, { type MqttClient } from 'mqtt';
import { adminPasswordOf, spawnBroker, tempDir, waitUntil, type BrokerProcess } from '../helpers.js';
import type { RawClient } from '../mqtt/helpers.js';

/**
 * A new config directory (its name starts with `prefix`, pushed on `dirs` for the after hook) holding Cluster.yaml
 * with `cluster` turned on, and one `<Section>.yaml` per entry of `sections`. JSON is YAML.
 */
export function clusterConfigDir(prefix: string, dirs: string[], cluster: Record<string, unknown>, sections: Record<string, unknown> = {}): string {
  const dir = tempDir(prefix);
  dirs.push(dir);
  writeFileSync(join(dir, 'Cluster.yaml'), JSON.stringify({ Cluster: { enabled: true, ...cluster } }));
  for (const [name, value] of Object.entries(sections)) writeFileSync(join(dir, `${name}.yaml`), JSON.stringify({ [name]: value }));
  return dir;
}

/** GET `path` on a broker's REST listener as admin. */
export const restGet = (p: BrokerProcess, path: string): Promise<Response> => fetch(`http://127.0.0.1:${p.port}${path}`, { headers: p.auth() });

/** The port of the broker's `MQTT Interface` once the interfaces list shows it Started (`get` reaches its REST API). */
export async function mqttPortOf(get: (path: string) => Promise<Response>, what = 'the MQTT endpoint started'): Promise<number> {
  let port = 0;
  await waitUntil(async () => {
    const list = (await (await get('/api/v1/server/interfaces')).json()) as Array<{ name: string; port: number; state: string }>;
    const e = list.find((i) => i.name === 'MQTT Interface');
    port = e?.state === 'Started' ? e.port : 0;
    return port > 0;
  }, 30000, what);
  return port;
}

/** A broker of a cluster test: its directories, its process once launched, its MQTT port once started. */
export interface ClusterBroker {
  nodeId: string;
  dataDir: string;
  configDir: string;
  p?: BrokerProcess;
  mqttPort: number;
}

/**
 * A broker record with a new config directory (`<prefix>config-…`, `cluster` and `sections` as in clusterConfigDir)
 * and data directory (`<prefix>data-…`), both pushed on `dirs`; the record is pushed on `brokers` (the after hook
 * stops each one's process).
 */
export function newClusterBroker(prefix: string, dirs: string[], brokers: ClusterBroker[], cluster: Record<string, unknown> & { nodeId: string }, sections: Record<string, unknown> = {}): ClusterBroker {
  const configDir = clusterConfigDir(`${prefix}config-`, dirs, cluster, sections);
  const dataDir = tempDir(`${prefix}data-`);
  dirs.push(dataDir);
  const x: ClusterBroker = { nodeId: cluster.nodeId, dataDir, configDir, mqttPort: 0 };
  brokers.push(x);
  return x;
}

/** The JSON answer of GET `path` on a launched broker. */
export const api = async (x: ClusterBroker, path: string): Promise<unknown> => (await restGet(x.p!, path)).json();

/**
 * Starts the broker and waits until its MQTT endpoint listens, it is a cluster member (a node that is not refuses new
 * clients, docs/cluster.md "Partitions") and its `cluster` link is established (the message plane carries a publish
 * on one node to the others' subscribers).
 */
export async function launchClusterBroker(x: ClusterBroker): Promise<void> {
  x.p = await spawnBroker({ SWITCHYARD_DATA_DIR: x.dataDir, SWITCHYARD_CONFIG_DIR: x.configDir });
  x.mqttPort = await mqttPortOf((path) => restGet(x.p!, path), `${x.nodeId}: MQTT endpoint started`);
  await waitUntil(async () => ((await api(x, '/api/v1/server/cluster')) as { state?: string }).state === 'Member', 30000, `${x.nodeId}: member`);
  await waitUntil(async () => ((await api(x, '/api/v1/server/integration/cluster/status')) as { state?: string }).state === 'Established', 60000, `${x.nodeId}: cluster link established`);
}

/** An MQTT 5 client of mqtt.js on the broker as admin, pushed on `clients` for the after hook. */
export async function clusterClient(x: ClusterBroker, clients: MqttClient[], clientId: string, opts: mqtt.IClientOptions = {}): Promise<MqttClient> {
  const connecting = mqtt.connectAsync(`mqtt://127.0.0.1:${x.mqttPort}`, {
    clientId,
    protocolVersion: 5,
    username: 'admin',
    password: adminPasswordOf(x.dataDir),
    reconnectPeriod: 0,
    connectTimeout: 10000,
    ...opts,
  });
  // mqtt.js's connectAsync never settles when no CONNACK comes (reconnectPeriod 0): fail with the broker's log instead
  let timer: NodeJS.Timeout | undefined;
  const cl = await Promise.race([
    connecting,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${clientId}: no CONNACK from ${x.nodeId} in 15 s; its log ends:\n${x.p!.stdout().split('\n').slice(-15).join('\n')}`)), 15000);
    }),
  ]).finally(() => clearTimeout(timer));
  clients.push(cl);
  return cl;
}

/**
 * Warms the message plane between every two nodes before a test counts on it: on each node a raw MQTT 5 client
 * subscribes to `warm/#` and another publishes QoS 1 to `warm/<its node>` every 0.5 s until every node has received a
 * message from every node (60 s at most; the error names the pairs heard). A member's cluster link may still be
 * connecting (a hand-over then finds no consumer of that node to wait for), and on nats-server 2.9 a node's first pull
 * can go unanswered until it is renewed (src/links/nats-transport.ts), so a message published on one node would reach
 * another one only up to 30 s later. QoS 1: QoS 0 crosses nodes outside the stream, and the consumers are what is
 * warmed up. `open` makes a connected socket to a node's MQTT listener (the caller's after hook closes it as well);
 * the clients are closed here when done.
 */
export async function warmMessagePlane<N extends { nodeId: string }>(nodes: readonly N[], open: (node: N) => Promise<RawClient>): Promise<void> {
  const subs = await Promise.all(nodes.map(async (br) => {
    const cl = await open(br);
    assert.equal((await cl.connect({ clientId: `warm-${br.nodeId}`, clean: true })).reasonCode, 0);
    cl.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: 'warm/#', qos: 1 }] });
    await cl.next('suback');
    return cl;
  }));
  const pubs = await Promise.all(nodes.map(async (br) => {
    const cl = await open(br);
    assert.equal((await cl.connect({ clientId: `warm-pub-${br.nodeId}`, clean: true })).reasonCode, 0);
    return cl;
  }));
  const heard = new Set<string>(); // '<receiving node> <- <publishing node>'
  let pid = 0;
  await waitUntil(async () => {
    pid++;
    nodes.forEach((br, i) => pubs[i]!.send({ cmd: 'publish', topic: `warm/${br.nodeId}`, payload: Buffer.from('warm'), qos: 1, messageId: pid, retain: false, dup: false }));
    await new Promise((r) => setTimeout(r, 500));
    nodes.forEach((br, i) => {
      for (const p of subs[i]!.packets.splice(0)) {
        if (p.cmd !== 'publish') continue;
        heard.add(`${br.nodeId} <- ${String(p.topic).slice(5)}`);
        subs[i]!.send({ cmd: 'puback', messageId: p.messageId });
      }
    });
    return heard.size === nodes.length * nodes.length;
  }, 60000, 'the message plane carrying a message between every two nodes').catch((err: Error) => {
    throw new Error(`${err.message} (heard: ${[...heard].join(', ')})`);
  });
  for (const cl of [...subs, ...pubs]) cl.destroy();
}
