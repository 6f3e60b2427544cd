/**
 * What the cluster test files share to start their Switchyard brokers: the config directory with a `Cluster`
 * section, the wait for the MQTT endpoint's port, and (for the files that keep a broker record per node) starting a
 * broker until it is a member with its message link established, and mqtt.js clients on it.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import mqtt, { type MqttClient } from 'mqtt';
import { adminPasswordOf, spawnBroker, tempDir, waitUntil, type BrokerProcess } from '../helpers.js';

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
