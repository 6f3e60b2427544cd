/**
 * A real partition (docs/cluster.md "Partitions"): broker gamma runs in a network namespace of the test's own and
 * reaches the three nats-servers (on 127.0.0.1) over a veth pair through socat forwarders; the test reaches its MQTT
 * and REST listeners over a second veth pair. Taking the NATS pair's host end down cuts gamma off from NATS and
 * nothing else. Alpha and beta run on the host. The namespace's addresses are private to the test (10.x.y.0/24 on
 * two veth pairs); nothing leaves the machine.
 *
 * What the isolated node must answer: CONNACK 0x88 (3.1.1: 3) to new clients, /readyz 503, SUBACK 0x80 to a persistent
 * session's SUBSCRIBE, PUBACK 0x80 to QoS 1; its connected clients stay connected and QoS 0 flows between them. The
 * others declare it gone and publish its client's will once; when the link is back it rejoins with the next epoch,
 * serves again, and does not publish that will a second time when the client's connection breaks.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { readlinkSync } from 'node:fs';
import { connect as tcpConnect } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import mqtt, { type MqttClient } from 'mqtt';
import { adminPasswordOf, NPM_START_SETTINGS, removeDir, ROOT, spawnBroker, tempDir, waitUntil, type BrokerProcess } from '../helpers.js';
import { clusterConfigDir, mqttPortOf, restGet } from './helpers.js';
import { startNatsCluster, type NatsCluster } from './nats-cluster.js';

const CLUSTER = 'part';
const HEARTBEAT = 1;
const LEASE = 4;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Proc {
  proc: ChildProcess;
  out: string;
}

/** Stops a process by its pid and waits for its exit. */
async function stopProc(p: ChildProcess | undefined, signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
  if (!p || p.exitCode !== null || p.signalCode !== null) return;
  const exited = new Promise<void>((r) => p.once('exit', () => r()));
  process.kill(p.pid!, signal);
  await exited;
}

function started(cmd: string, args: string[], opts: { env?: NodeJS.ProcessEnv } = {}): Proc {
  const proc = spawn(cmd, args, { cwd: ROOT, env: opts.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
  const p: Proc = { proc, out: '' };
  const add = (d: Buffer) => {
    p.out += d.toString();
    if (p.out.length > 2_000_000) p.out = p.out.slice(-1_000_000);
  };
  proc.stdout!.on('data', add);
  proc.stderr!.on('data', add);
  return p;
}

const canConnect = (host: string, port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const s = tcpConnect({ host, port, timeout: 1000 });
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
    s.once('timeout', () => {
      s.destroy();
      resolve(false);
    });
  });

const ip = (...args: string[]) => execFileSync('ip', args, { stdio: ['ignore', 'pipe', 'pipe'] });

describe('cluster partition - a broker cut off from NATS inside a network namespace', { timeout: 320000 }, () => {
  let nats: NatsCluster;
  const dirs: string[] = [];
  const clients: MqttClient[] = [];
  const forwarders: Proc[] = [];
  let holder: Proc | undefined;
  let gammaProc: Proc | undefined;
  let alpha: BrokerProcess | undefined;
  let beta: BrokerProcess | undefined;
  let alphaData = '';
  let gammaData = '';
  let gammaRest = 0;
  let gammaMqtt = 0;
  let alphaMqtt = 0;
  let betaMqtt = 0;
  let betaData = '';
  // two /24 networks private to this test: NATS link (host .1, namespace .2) and client link
  const x = 200 + (process.pid % 50);
  const y = (process.pid >> 6) % 250;
  const natsNet = `10.${x}.${y}`;
  const clientNet = `10.${x}.${y + 1}`;
  const natsIf = `syn${process.pid % 100000}`;
  const clientIf = `syc${process.pid % 100000}`;
  const gammaHost = `${clientNet}.2`;

  const clusterYaml = (nodeId: string, servers: string[]): string =>
    clusterConfigDir('switchyard-clp-config-', dirs, { servers, clusterName: CLUSTER, nodeId, replicas: 3, heartbeatSeconds: HEARTBEAT, leaseSeconds: LEASE });
  // every request and every MQTT step is bounded: a step that gets no answer fails naming itself, with gamma's log
  const gammaGet = (path: string): Promise<Response> =>
    fetch(`http://${gammaHost}:${gammaRest}${path}`, { headers: { authorization: `Basic ${Buffer.from(`admin:${adminPasswordOf(gammaData)}`).toString('base64')}` }, signal: AbortSignal.timeout(10000) });
  const within = async <T>(ms: number, what: string, p: Promise<T>): Promise<T> => {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms: ${what}\ngamma's log:\n${gammaProc?.out.split('\n').slice(-30).join('\n')}`)), ms);
    });
    try {
      return await Promise.race([p, late]);
    } finally {
      clearTimeout(timer);
    }
  };
  // a request gamma does not answer in time is a state of its own (the waits go on and name it when they give up)
  let lastState = '';
  const gammaState = async (): Promise<{ state: string; epoch: number }> => {
    const s = await gammaGet('/api/v1/server/cluster').then(
      async (r) => (await r.json()) as { state: string; epoch: number },
      (err: Error) => ({ state: `no answer (${err.message})`, epoch: -1 }),
    );
    lastState = `${s.state} epoch ${s.epoch}`;
    return s;
  };
  const lastSeen = (err: Error): never => {
    throw new Error(`${err.message}; gamma's last answer: ${lastState}\ngamma's log:\n${gammaProc?.out.split('\n').slice(-30).join('\n')}`);
  };
  const mqttTo = async (url: string, dataDir: string, opts: mqtt.IClientOptions): Promise<MqttClient> => {
    // allowRetries false: a connection closed without a CONNACK rejects instead of leaving the promise pending
    const cl = await mqtt.connectAsync(url, { protocolVersion: 5, username: 'admin', password: adminPasswordOf(dataDir), reconnectPeriod: 0, connectTimeout: 10000, ...opts }, false);
    clients.push(cl);
    return cl;
  };

  before(async () => {
    nats = await startNatsCluster(3);
    // the namespace: held by a process of its own (stopped by pid in after; the kernel removes the namespace and the
    // veth pairs with it)
    holder = started('unshare', ['-n', 'sleep', '600']);
    const pid = String(holder.proc.pid);
    // the holder is in a namespace of its own only once unshare(2) ran: until then `netns <pid>` is the host's
    const ownNs = readlinkSync('/proc/self/ns/net');
    await waitUntil(() => {
      try {
        return readlinkSync(`/proc/${pid}/ns/net`) !== ownNs;
      } catch {
        return false;
      }
    }, 10000, 'the namespace holder in a network namespace of its own');
    ip('link', 'add', natsIf, 'type', 'veth', 'peer', 'name', 'nats0', 'netns', pid);
    ip('link', 'add', clientIf, 'type', 'veth', 'peer', 'name', 'client0', 'netns', pid);
    ip('addr', 'add', `${natsNet}.1/24`, 'dev', natsIf);
    ip('addr', 'add', `${clientNet}.1/24`, 'dev', clientIf);
    ip('link', 'set', natsIf, 'up');
    ip('link', 'set', clientIf, 'up');
    const inNs = (...args: string[]) => execFileSync('nsenter', ['-t', pid, '-n', 'ip', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    inNs('link', 'set', 'lo', 'up');
    inNs('addr', 'add', `${natsNet}.2/24`, 'dev', 'nats0');
    inNs('addr', 'add', `${clientNet}.2/24`, 'dev', 'client0');
    inNs('link', 'set', 'nats0', 'up');
    inNs('link', 'set', 'client0', 'up');
    // NATS listens on 127.0.0.1: a forwarder per server on the NATS link's host address, same port
    for (const n of nats.nodes) forwarders.push(started('socat', [`TCP-LISTEN:${n.port},bind=${natsNet}.1,fork,reuseaddr`, `TCP:127.0.0.1:${n.port}`]));
    for (const n of nats.nodes) await waitUntil(() => canConnect(`${natsNet}.1`, n.port), 10000, `forwarder of ${n.name}`);

    alphaData = tempDir('switchyard-clp-data-');
    betaData = tempDir('switchyard-clp-data-');
    gammaData = tempDir('switchyard-clp-data-');
    dirs.push(alphaData, betaData, gammaData);
    [alpha, beta] = await Promise.all([
      spawnBroker({ SWITCHYARD_DATA_DIR: alphaData, SWITCHYARD_CONFIG_DIR: clusterYaml('alpha', nats.urls) }),
      spawnBroker({ SWITCHYARD_DATA_DIR: betaData, SWITCHYARD_CONFIG_DIR: clusterYaml('beta', nats.urls) }),
    ]);
    // gamma in the namespace, as `npm start` runs it, listening on the client link
    const gammaEnv = {
      ...process.env,
      ...NPM_START_SETTINGS.env,
      SWITCHYARD_DATA_DIR: gammaData,
      SWITCHYARD_CONFIG_DIR: clusterYaml('gamma', nats.nodes.map((n) => `nats://${natsNet}.1:${n.port}`)),
      SWITCHYARD_REST_PORT: '0',
      SWITCHYARD_REST_HOST: '0.0.0.0',
      SWITCHYARD_MQTT_PORT: '0',
      SWITCHYARD_MQTT_WS_PORT: '0',
      SWITCHYARD_MQTT_HOST: '0.0.0.0',
    };
    gammaProc = started('nsenter', ['-t', pid, '-n', '--', process.execPath, ...NPM_START_SETTINGS.flags, '--import', 'tsx', join(ROOT, 'src/main.ts')], { env: gammaEnv });
    await waitUntil(() => /SWITCHYARD_(?:LISTENING|READY) rest=\d+/.test(gammaProc!.out) || gammaProc!.proc.exitCode !== null, 30000, 'gamma listening');
    gammaRest = Number(/SWITCHYARD_(?:LISTENING|READY) rest=(\d+)/.exec(gammaProc.out)?.[1] ?? 0);
    assert.ok(gammaRest > 0, `gamma started in the namespace:\n${gammaProc.out.slice(-3000)}`);
    gammaMqtt = await mqttPortOf(gammaGet);
    alphaMqtt = await mqttPortOf((p) => restGet(alpha!, p));
    betaMqtt = await mqttPortOf((p) => restGet(beta!, p));
    // the message plane carries a will published on one of them to the other
    for (const x of [alpha, beta]) {
      let status: unknown;
      await waitUntil(async () => {
        status = await (await fetch(`http://127.0.0.1:${x!.port}/api/v1/server/integration/cluster/status`, { headers: x!.auth() })).json();
        return (status as { state?: string }).state === 'Established';
      }, 60000, 'cluster link established').catch((err: Error) => {
        throw new Error(`${err.message}: ${JSON.stringify(status)}\n${x!.stdout().split('\n').slice(-20).join('\n')}`);
      });
    }
    await waitUntil(async () => (await gammaState()).state === 'Member', 30000, 'gamma a member').catch(lastSeen);
    // and its session plane open (bucket and stream made or found): a persistent CONNECT before that waits for it, and
    // on a loaded machine the wait with the first record writes can outlast the connect timeout (CONNACK 0x88)
    await waitUntil(() => gammaProc!.out.includes('session plane active'), 30000, "gamma's session plane active").catch(lastSeen);
  });

  after(async () => {
    for (const cl of clients) cl.end(true);
    await stopProc(gammaProc?.proc);
    await alpha?.stop('SIGKILL');
    await beta?.stop('SIGKILL');
    for (const f of forwarders) await stopProc(f.proc);
    await stopProc(holder?.proc);
    for (const dev of [natsIf, clientIf]) {
      try {
        ip('link', 'del', dev); // the kernel frees the namespace (and so the pair) lazily; not left behind for the next run
      } catch {
        /* gone with the namespace already */
      }
    }
    await nats?.dispose();
    for (const d of dirs) removeDir(d);
  });

  test('cluster partition - the isolated node refuses new clients and cluster changes, keeps its clients and local QoS 0, the others publish its client’s will once, and it rejoins and serves again', { timeout: 200000 }, async () => {
    const gammaUrl = `mqtt://${gammaHost}:${gammaMqtt}`;
    // before the cut: a client with a will and a persistent subscriber on gamma, a watcher of the wills on alpha
    const watcher = await mqttTo(`mqtt://127.0.0.1:${alphaMqtt}`, alphaData, { clientId: 'watcher' });
    await within(10000, 'SUBACK on alpha', watcher.subscribeAsync('part/#', { qos: 1 }));
    const wills: string[] = [];
    watcher.on('message', (topic) => wills.push(topic));
    const watcherB = await mqttTo(`mqtt://127.0.0.1:${betaMqtt}`, betaData, { clientId: 'watcher-b' });
    await within(10000, 'SUBACK on beta', watcherB.subscribeAsync('part/#', { qos: 1 }));
    const willsB: string[] = [];
    watcherB.on('message', (topic) => willsB.push(topic));
    const g1 = await mqttTo(gammaUrl, gammaData, { clientId: 'g1', will: { topic: 'part/g1', payload: Buffer.from('g1 gone'), qos: 1, retain: false } });
    const g2 = await mqttTo(gammaUrl, gammaData, { clientId: 'g2', properties: { sessionExpiryInterval: 300 } });
    await within(10000, 'SUBACK on gamma', g2.subscribeAsync('local/#', { qos: 0 }));
    const local: string[] = [];
    g2.on('message', (topic) => local.push(topic));
    assert.equal((await gammaGet('/readyz')).status, 200);

    // the cut: the NATS link's host end goes down (the client link stays)
    ip('link', 'set', natsIf, 'down');
    const cutAt = Date.now();
    await waitUntil(async () => (await gammaState()).state === 'Isolated', 20000, 'gamma isolated').catch(lastSeen);
    const ready = await gammaGet('/readyz');
    const readyBody = JSON.stringify(await ready.json());
    assert.equal(ready.status, 503);
    assert.match(readyBody, /cluster: Isolated/);

    // what a client gets (the code of each refusal, as mqtt.js reports it)
    const codeOf = async (p: Promise<unknown>): Promise<number | undefined> => {
      try {
        await p;
        return undefined;
      } catch (err) {
        const e = err as Error & { code?: number; packet?: { granted?: number[] } };
        return e.packet?.granted?.[0] ?? e.code;
      }
    };
    // new clients: MQTT 5 CONNACK 0x88 Server unavailable, 3.1.1 return code 3
    const connack5 = await codeOf(mqttTo(gammaUrl, gammaData, { clientId: 'new-5' }));
    const connack311 = await codeOf(mqttTo(gammaUrl, gammaData, { clientId: 'new-311', protocolVersion: 4 }));
    // a persistent session's SUBSCRIBE: 0x80; a QoS 1 publish: PUBACK 0x80 (not delivered); QoS 0 flows locally
    const suback = await codeOf(within(10000, 'SUBACK of the persistent session', g2.subscribeAsync('local/more', { qos: 1 })));
    const unsuback = await within(10000, 'UNSUBACK of the persistent session', g2.unsubscribeAsync('local/#')).then(
      (p) => (p as { granted?: number[]; reasonCode?: number } | undefined)?.granted?.[0] ?? (p as { reasonCode?: number } | undefined)?.reasonCode,
      (err: Error & { packet?: { granted?: number[]; reasonCode?: number } }) => err.packet?.granted?.[0] ?? err.packet?.reasonCode,
    );
    const puback = await codeOf(within(10000, 'PUBACK of a QoS 1 publish', g1.publishAsync('local/q1', 'refused', { qos: 1 })));
    await within(10000, 'a QoS 0 publish written', g1.publishAsync('local/q0', 'flows', { qos: 0 }));
    await waitUntil(() => local.includes('local/q0'), 5000, 'QoS 0 between gamma’s own clients');
    console.log(
      `isolated gamma answered: /readyz ${ready.status} ${readyBody}; MQTT 5 CONNECT: CONNACK 0x${connack5?.toString(16)}; 3.1.1 CONNECT: return code ${connack311}; ` +
        `SUBSCRIBE of a persistent session: 0x${suback?.toString(16)}; its UNSUBSCRIBE: 0x${unsuback?.toString(16)}; QoS 1 PUBLISH: PUBACK 0x${puback?.toString(16)}; QoS 0 between its clients delivered: ${local.includes('local/q0')}`,
    );
    assert.deepEqual({ connack5, connack311, suback, unsuback, puback }, { connack5: 0x88, connack311: 3, suback: 0x80, unsuback: 0x80, puback: 0x80 });
    assert.ok(!local.includes('local/q1'), 'the refused QoS 1 message was not delivered');

    // the others declare gamma gone after its lease and publish g1's will, once (g1 is still connected to gamma:
    // the majority side is the one that decides)
    await waitUntil(() => wills.includes('part/g1') && willsB.includes('part/g1'), 20000, 'g1’s will published by the majority side');
    assert.ok(Date.now() - cutAt >= (LEASE - HEARTBEAT) * 1000, 'not before gamma’s lease could lapse');
    const seenByAlpha = (await (await fetch(`http://127.0.0.1:${alpha!.port}/api/v1/server/cluster`, { headers: alpha!.auth() })).json()) as { nodes: Array<{ nodeId: string; state: string; declaredBy?: string }> };
    const g = seenByAlpha.nodes.find((n) => n.nodeId === 'gamma');
    assert.equal(g?.state, 'gone');
    assert.ok(g?.declaredBy === 'alpha' || g?.declaredBy === 'beta');
    console.log(`gamma declared gone by ${g?.declaredBy} ${((Date.now() - cutAt) / 1000).toFixed(1)} s after the cut; g1's will received on alpha ${wills.filter((t) => t === 'part/g1').length}, on beta ${willsB.filter((t) => t === 'part/g1').length} time(s); gamma's clients connected: ${g1.connected && g2.connected}`);
    assert.ok(g1.connected && g2.connected, 'gamma’s clients stay connected');
    assert.equal((await gammaState()).state, 'Isolated');

    // the link is back: gamma rejoins with the next epoch and accepts clients again
    ip('link', 'set', natsIf, 'up');
    await waitUntil(async () => {
      const s = await gammaState();
      return s.state === 'Member' && s.epoch === 2;
    }, 30000, 'gamma a member again with epoch 2').catch(lastSeen);
    assert.match(gammaProc!.out, /was declared gone by (alpha|beta) while it was isolated; rejoined with epoch 2/);
    assert.equal((await gammaGet('/readyz')).status, 200);
    const again = await mqttTo(gammaUrl, gammaData, { clientId: 'after' });
    assert.ok(again.connected);
    await waitUntil(() => /the will of g1 was taken by the cluster while this node was cut off/.test(gammaProc!.out), 10000, 'gamma knows g1’s will was published');

    // g1's connection breaks now: its will was published already, so it is not published again
    g1.stream.destroy();
    await sleep(3000);
    const back = await gammaState();
    console.log(`link back: gamma ${back.state} with epoch ${back.epoch}, /readyz ${(await gammaGet('/readyz')).status}, a new CONNECT accepted: ${again.connected}; g1's will received on alpha ${wills.filter((t) => t === 'part/g1').length}, on beta ${willsB.filter((t) => t === 'part/g1').length} time(s) in all after its connection broke`);
    assert.deepEqual(wills.filter((t) => t === 'part/g1'), ['part/g1'], 'g1’s will received exactly once on alpha');
    assert.deepEqual(willsB.filter((t) => t === 'part/g1'), ['part/g1'], 'g1’s will received exactly once on beta');
  });
});
