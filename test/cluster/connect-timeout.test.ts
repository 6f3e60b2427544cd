/**
 * A CONNECT in a cluster always ends in a CONNACK (docs/cluster.md "Sessions"): the session plane's answer comes
 * within the endpoint's connect timeout even when the cluster cannot settle who holds the session by then. Two
 * Switchyard brokers over one real `nats-server -js` (R1), lease 30 s (a frozen broker stays live), takeover wait
 * 10 s: longer than the 5 s connect timeout, so a takeover from a frozen owner outlasts it.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { removeDir, spawnBroker, tempDir, waitUntil, type BrokerProcess } from '../helpers.js';
import { RawClient, rest } from '../mqtt/helpers.js';
import { clusterConfigDir } from './helpers.js';
import { startNats, type NatsServer } from '../federation/nats-server.js';

interface Broker {
  nodeId: string;
  p?: BrokerProcess;
  mqtt: number;
}

const SESSION = { sessionExpiryInterval: 600 };

describe('cluster connect - a CONNECT the cluster cannot settle in time', { timeout: 180000 }, () => {
  let nats: NatsServer;
  const brokers: Broker[] = [];
  const dirs: string[] = [];
  const clients: RawClient[] = [];
  const frozen = new Set<number>();
  let a: Broker;
  let b: Broker;

  const launch = async (nodeId: string): Promise<Broker> => {
    const dataDir = tempDir('switchyard-clct-data-');
    dirs.push(dataDir);
    const cluster = { servers: [nats.url], clusterName: 'ct', nodeId, replicas: 1, heartbeatSeconds: 1, leaseSeconds: 30, sessionTakeoverWaitSeconds: 10 };
    const configDir = clusterConfigDir('switchyard-clct-config-', dirs, cluster);
    const br: Broker = { nodeId, mqtt: 0 };
    brokers.push(br);
    br.p = await spawnBroker({ SWITCHYARD_DATA_DIR: dataDir, SWITCHYARD_CONFIG_DIR: configDir, SWITCHYARD_ALLOW_ANONYMOUS: 'true' });
    const list = await rest(br.p.port, br.p.auth(), 'GET', '/api/v1/server/interfaces');
    br.mqtt = (list.json as Array<{ name: string; port: number }>).find((i) => i.name === 'MQTT Interface')!.port;
    await waitUntil(async () => {
      const r = await rest(br.p!.port, br.p!.auth(), 'GET', '/api/v1/server/cluster');
      return r.json.state === 'Member' && br.p!.stdout().includes('session plane active');
    }, 30000, `${nodeId} member with its session plane`);
    return br;
  };
  const open = async (br: Broker): Promise<RawClient> => {
    const cl = await RawClient.open(br.mqtt, 5);
    clients.push(cl);
    return cl;
  };
  const connect = (cl: RawClient): void => cl.send({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: 5, clean: false, clientId: 'held', keepalive: 0, properties: SESSION });
  const tail = (br: Broker): string => `${br.nodeId}:\n${br.p!.stdout().split('\n').filter((l) => /held|WARN|ERROR/.test(l)).slice(-12).join('\n')}`;

  before(async () => {
    nats = await startNats({ jetstream: true });
    [a, b] = await Promise.all([launch('alpha'), launch('beta')]);
  });

  after(async () => {
    for (const pid of frozen) process.kill(pid, 'SIGCONT');
    for (const cl of clients) cl.destroy();
    for (const br of brokers) await br.p?.stop('SIGKILL');
    await nats?.dispose();
    for (const d of dirs) removeDir(d);
  });

  test('cluster connect - a takeover from a frozen owner ends in CONNACK 0x88 within the connect timeout, and the retry resumes the session once the owner is back', async () => {
    const x = await open(a);
    connect(x);
    assert.equal((await x.next('connack', 15000)).reasonCode, 0);
    x.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: 'held/t', qos: 1 }] });
    assert.equal((await x.next('suback', 10000)).granted[0], 1);

    // alpha frozen: its lease (30 s) stays live, it cannot release the session
    const pid = a.p!.proc.pid!;
    process.kill(pid, 'SIGSTOP');
    frozen.add(pid);
    const y = await open(b);
    const started = Date.now();
    connect(y);
    const connack = await y.next('connack', 9000).catch((err: Error) => {
      throw new Error(`no CONNACK from beta ${Date.now() - started} ms after the CONNECT (${err.message})\n${tail(b)}`);
    });
    const tookMs = Date.now() - started;
    console.log(`cluster connect: CONNECT on beta for a session held by frozen alpha (takeover wait 10 s, connect timeout 5 s): CONNACK 0x${connack.reasonCode.toString(16)} after ${tookMs} ms`);
    assert.equal(connack.reasonCode, 0x88, 'Server unavailable: the client retries');
    assert.ok(tookMs < 5000, `within the connect timeout (${tookMs} ms)`);
    assert.match(b.p!.stdout(), /a CONNECT could not be settled within its connect timeout \(waiting for broker alpha to hand the session over\)/, 'the INFO line names where it waited');

    // alpha back: it releases the session, and a retry on beta resumes it (the takeover went on meanwhile)
    process.kill(pid, 'SIGCONT');
    frozen.delete(pid);
    let resumed: Record<string, any> | undefined;
    const end = Date.now() + 60000;
    while (resumed === undefined) {
      const z = await open(b);
      connect(z);
      const ack = await z.next('connack', 9000).catch((err: Error) => {
        throw new Error(`a retry on beta got no CONNACK (${err.message})\n${tail(a)}\n${tail(b)}`);
      });
      if (ack.reasonCode === 0) resumed = ack;
      else {
        z.destroy();
        if (Date.now() > end) throw new Error(`beta did not resume the session in 60 s: CONNACK 0x${ack.reasonCode.toString(16)}\n${tail(a)}\n${tail(b)}`);
        await new Promise((r) => setTimeout(r, 300));
      }
    }
    assert.equal(resumed.sessionPresent, true, 'the session resumed on beta');
    assert.equal((await x.next('disconnect', 15000)).reasonCode, 0x8e, "alpha's client gets DISCONNECT 0x8E");
  });
});
