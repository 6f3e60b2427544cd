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

/** A node's name and log, for the diagnostics of a CONNECT it refused. */
export interface LoggedNode {
  nodeId: string;
  log: () => string;
}

/** CONNECT attempts of connectMqtt at most (the first and its retries). */
const CONNECT_ATTEMPTS = 5;

/** One CONNECT attempt's failure: the CONNACK's reason code and Reason String, or how the connection ended without one. */
class ConnectFailure extends Error {
  constructor(
    message: string,
    readonly retry: boolean,
  ) {
    super(message);
  }
}

/** One CONNECT: the client once CONNACK 0; otherwise a ConnectFailure, `retry` when the broker said "try again". */
function connectOnce(url: string, opts: mqtt.IClientOptions): Promise<MqttClient> {
  const cl = mqtt.connect(url, opts);
  let reason: string | undefined;
  cl.on('packetreceive', (p) => {
    if (p.cmd === 'connack' && p.properties?.reasonString !== undefined) reason = p.properties.reasonString;
  });
  return new Promise<MqttClient>((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    let settled = false;
    const done = () => {
      settled = true;
      clearTimeout(timer);
      cl.off('connect', connected);
      cl.off('error', failed);
      cl.off('close', closed);
    };
    const connected = () => {
      done();
      resolve(cl);
    };
    const failed = (err: Error & { code?: number }, retry = err.code === 0x88 || err.code === 0x89 || err.code === 3) => {
      done();
      cl.end(true);
      // 0x88 Server unavailable: the cluster could not settle the session in the connect timeout ("try again"); 0x89
      // Server busy: the connect timeout came while the broker was still on the CONNECT (its password check); 3.1.1: 3
      reject(new ConnectFailure(`${err.message}${reason !== undefined ? ` (${reason})` : ''}`, retry));
    };
    // closed without CONNACK: the broker's connect timeout ran out before it could answer (a loaded machine)
    // (a turn later: a refusing CONNACK's error, which may follow its socket's close, says more)
    const closed = () =>
      setImmediate(() => {
        if (!settled) failed(new Error('connection closed without CONNACK'), true);
      });
    cl.once('connect', connected);
    cl.once('error', failed);
    cl.once('close', closed);
    // mqtt.js never settles when no CONNACK comes and the socket stays open (reconnectPeriod 0)
    timer = setTimeout(() => {
      done();
      cl.end(true);
      reject(new ConnectFailure('no CONNACK in 15 s', false));
    }, 15000);
  });
}

/**
 * An MQTT client connected to `node` at `url`, retrying as docs/cluster.md tells a client to: a CONNECT the broker
 * refuses with CONNACK 0x88 Server unavailable (the cluster did not settle the session within the connect timeout,
 * e.g. JetStream slow to answer on a loaded machine) or 0x89 Server busy (the connect timeout came during its password
 * check), or closes without CONNACK, is made again, CONNECT_ATTEMPTS times
 * at most. Every refusal is printed with its Reason String; the error after the last names them all with the node's
 * log lines about the client and the cluster.
 */
export async function connectMqtt(url: string, opts: mqtt.IClientOptions, node: LoggedNode): Promise<MqttClient> {
  const clientId = opts.clientId ?? '';
  const failures: string[] = [];
  for (let attempt = 1; ; attempt++) {
    const t0 = Date.now();
    try {
      return await connectOnce(url, opts);
    } catch (err) {
      if (!(err instanceof ConnectFailure)) throw err;
      const what = `CONNECT ${attempt} of ${clientId} to ${node.nodeId}: ${err.message} after ${Date.now() - t0} ms`;
      failures.push(what);
      if (!err.retry || attempt >= CONNECT_ATTEMPTS) {
        const lines = node.log().split('\n');
        const about = lines.filter((l) => (clientId !== '' && l.includes(clientId)) || l.includes('cluster'));
        throw new Error(`${failures.join('; ')}\n${node.nodeId}'s lines on this client and the cluster:\n${about.slice(-30).join('\n')}\nits log ends:\n${lines.slice(-10).join('\n')}`);
      }
      console.log(`${what}; connecting again`);
    }
  }
}

/** An MQTT 5 client of mqtt.js on the broker as admin (connectMqtt), pushed on `clients` for the after hook. */
export async function clusterClient(x: ClusterBroker, clients: MqttClient[], clientId: string, opts: mqtt.IClientOptions = {}): Promise<MqttClient> {
  const url = `mqtt://127.0.0.1:${x.mqttPort}`;
  const cl = await connectMqtt(url, { clientId, protocolVersion: 5, username: 'admin', password: adminPasswordOf(x.dataDir), reconnectPeriod: 0, connectTimeout: 10000, ...opts }, { nodeId: x.nodeId, log: () => x.p!.stdout() });
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
