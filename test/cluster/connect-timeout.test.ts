/**
 * A CONNECT in a cluster always ends in a CONNACK (docs/cluster.md "Sessions"): the session plane's answer comes
 * within the endpoint's connect timeout even when the cluster cannot settle who holds the session by then. Switchyard
 * brokers over one real `nats-server -js` (R1), lease 30 s (a frozen broker stays live), takeover wait 10 s: longer
 * than the 5 s connect timeout, so a takeover from a frozen owner outlasts it. The owner that wakes up hands the
 * session over, also when its NATS connection was lost in the freeze with the takeover's record change unread (a
 * relay in this process stands between that owner and nats-server, and drops and cuts its connections).
 */
import assert from 'node:assert/strict';
import { createServer, connect as tcpConnect, type AddressInfo, type Server, type Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { connect as natsConnect, type NatsConnection } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { removeDir, spawnBroker, tempDir, waitUntil, type BrokerProcess } from '../helpers.js';
import { RawClient, rest } from '../mqtt/helpers.js';
import { clusterConfigDir } from './helpers.js';
import { sessionKey } from '../../src/cluster/sessions.js';
import { startNats, type NatsServer } from '../federation/nats-server.js';

interface Broker {
  nodeId: string;
  p?: BrokerProcess;
  mqtt: number;
}

const SESSION = { sessionExpiryInterval: 600 };

/**
 * A TCP relay to nats-server for one broker: while `drop` is set, what the server sends is discarded (as unread bytes
 * are when a connection closes); `cut()` closes every relayed connection, and the broker's client reconnects through
 * the relay.
 */
class NatsRelay {
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();
  drop = false;
  port = 0;

  constructor(targetPort: number) {
    this.server = createServer((down) => {
      const up = tcpConnect(targetPort, '127.0.0.1');
      this.sockets.add(down);
      this.sockets.add(up);
      const end = (): void => {
        down.destroy();
        up.destroy();
        this.sockets.delete(down);
        this.sockets.delete(up);
      };
      for (const s of [down, up]) {
        s.on('close', end);
        s.on('error', end);
      }
      down.on('data', (d) => up.write(d));
      up.on('data', (d) => {
        if (!this.drop) down.write(d);
      });
    });
  }

  async start(): Promise<string> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.port = (this.server.address() as AddressInfo).port;
    return `nats://127.0.0.1:${this.port}`;
  }

  cut(): void {
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
  }

  close(): void {
    this.cut();
    this.server.close();
  }
}

describe('cluster connect - a CONNECT the cluster cannot settle in time', { timeout: 300000 }, () => {
  let nats: NatsServer;
  let nc: NatsConnection | undefined;
  let relay: NatsRelay | undefined;
  const brokers: Broker[] = [];
  const dirs: string[] = [];
  const clients: RawClient[] = [];
  const frozen = new Set<number>();
  /** SIGSTOP a broker (SIGCONT in `after` if a test fails before thaw). */
  const freeze = (pid: number): void => {
    process.kill(pid, 'SIGSTOP');
    frozen.add(pid);
  };
  const thaw = (pid: number): void => {
    process.kill(pid, 'SIGCONT');
    frozen.delete(pid);
  };
  let a: Broker;
  let b: Broker;

  // every broker but beta at debug: a failure shows every step the old owner's session plane took (or did not take)
  const launch = async (nodeId: string, servers = [nats.url]): Promise<Broker> => {
    const dataDir = tempDir('switchyard-clct-data-');
    dirs.push(dataDir);
    const cluster = { servers, clusterName: 'ct', nodeId, replicas: 1, heartbeatSeconds: 1, leaseSeconds: 30, sessionTakeoverWaitSeconds: 10 };
    const configDir = clusterConfigDir('switchyard-clct-config-', dirs, cluster);
    const br: Broker = { nodeId, mqtt: 0 };
    brokers.push(br);
    br.p = await spawnBroker({ SWITCHYARD_DATA_DIR: dataDir, SWITCHYARD_CONFIG_DIR: configDir, SWITCHYARD_ALLOW_ANONYMOUS: 'true', ...(nodeId !== 'beta' ? { SWITCHYARD_LOG_LEVEL: 'debug' } : {}) });
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
  const connect = (cl: RawClient, clientId: string): void => cl.send({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: 5, clean: false, clientId, keepalive: 0, properties: SESSION });
  const tail = (br: Broker, clientId: string): string =>
    `${br.nodeId}:\n${br.p!.stdout().split('\n').filter((l) => l.includes(clientId) || /WARN|ERROR/.test(l)).slice(-12).join('\n')}`;
  /** A broker's log from `from` (a length of its stdout) on: the last 150 lines. */
  const since = (br: Broker, from: number): string => {
    const lines = br.p!.stdout().slice(from).split('\n');
    return `${br.nodeId}'s log from the freeze on (${lines.length} lines, the last 150):\n${lines.slice(-150).join('\n')}`;
  };
  /** The session record of `clientId` as JetStream has it now (read on the test's own NATS connection). */
  const record = async (clientId: string): Promise<string> => {
    try {
      nc ??= await natsConnect({ servers: nats.url });
      const kv = await new Kvm(jetstream(nc)).open('switchyard_ct_sessions');
      const e = await kv.get(sessionKey(clientId));
      return `session record of ${clientId}: ${e === null ? 'none' : `revision ${e.revision} ${e.string()}`}`;
    } catch (err) {
      return `session record of ${clientId}: could not be read (${(err as Error).message})`;
    }
  };

  /** `owner`'s client holding the persistent session `clientId` with a QoS 1 subscription. */
  const hold = async (owner: Broker, clientId: string): Promise<RawClient> => {
    const x = await open(owner);
    connect(x, clientId);
    assert.equal((await x.next('connack', 15000)).reasonCode, 0);
    x.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: `${clientId}/t`, qos: 1 }] });
    assert.equal((await x.next('suback', 10000)).granted[0], 1);
    return x;
  };

  /** A CONNECT of `clientId` on beta while its owner is frozen: CONNACK 0x88 within the connect timeout. */
  const refusedOnBeta = async (clientId: string): Promise<void> => {
    const y = await open(b);
    const started = Date.now();
    connect(y, clientId);
    const connack = await y.next('connack', 9000).catch((err: Error) => {
      throw new Error(`no CONNACK from beta ${Date.now() - started} ms after the CONNECT (${err.message})\n${tail(b, clientId)}`);
    });
    const tookMs = Date.now() - started;
    console.log(`cluster connect: CONNECT of ${clientId} on beta for a session held by a frozen broker (takeover wait 10 s, connect timeout 5 s): CONNACK 0x${connack.reasonCode.toString(16)} after ${tookMs} ms`);
    assert.equal(connack.reasonCode, 0x88, 'Server unavailable: the client retries');
    // beta answers 0.3 s before its 5 s connect timeout (later it would have closed the connection without CONNACK);
    // measured here, the time includes this process's own delays on a loaded machine: a generous margin
    assert.ok(tookMs < 7000, `within the connect timeout (${tookMs} ms)`);
    assert.match(b.p!.stdout(), /a CONNECT could not be settled within its connect timeout \(waiting for broker \w+ to hand the session over\)/, 'the INFO line names where it waited');
    y.destroy();
  };

  /**
   * The client's retries on beta (every 300 ms, for `seconds` at most) until one resumes the session; the old owner's
   * client gets DISCONNECT 0x8E. A failure prints the record, the old owner's whole log from `from` on, and beta's lines.
   */
  const resumesOnBeta = async (clientId: string, owner: Broker, x: RawClient, from: number, seconds: number): Promise<void> => {
    const diagnose = async (): Promise<string> =>
      `${await record(clientId)}\n${since(owner, from)}\n${tail(b, clientId)}\nnats-server's warnings and errors:\n${nats.output().split('\n').filter((l) => /\[(WRN|ERR)\]/.test(l)).slice(-20).join('\n')}`;
    let resumed: Record<string, any> | undefined;
    const end = Date.now() + seconds * 1000;
    while (resumed === undefined) {
      const z = await open(b);
      connect(z, clientId);
      const ack = await z.next('connack', 9000).catch(async (err: Error) => {
        throw new Error(`a retry on beta got no CONNACK (${err.message})\n${await diagnose()}`);
      });
      if (ack.reasonCode === 0) resumed = ack;
      else {
        z.destroy();
        if (Date.now() > end) throw new Error(`beta did not resume the session in ${seconds} s: CONNACK 0x${ack.reasonCode.toString(16)}\n${await diagnose()}`);
        await new Promise((r) => setTimeout(r, 300));
      }
    }
    assert.equal(resumed.sessionPresent, true, 'the session resumed on beta');
    assert.equal((await x.next('disconnect', 15000)).reasonCode, 0x8e, `${owner.nodeId}'s client gets DISCONNECT 0x8E`);
  };

  before(async () => {
    nats = await startNats({ jetstream: true });
    [a, b] = await Promise.all([launch('alpha'), launch('beta')]);
  });

  after(async () => {
    for (const pid of frozen) process.kill(pid, 'SIGCONT');
    for (const cl of clients) cl.destroy();
    for (const br of brokers) await br.p?.stop('SIGKILL');
    relay?.close();
    await nc?.close();
    await nats?.dispose();
    for (const d of dirs) removeDir(d);
  });

  test('cluster connect - a takeover from a frozen owner ends in CONNACK 0x88 within the connect timeout, and the retry resumes the session once the owner is back', async () => {
    const x = await hold(a, 'held');
    // alpha frozen: its lease (30 s) stays live, it cannot release the session
    const pid = a.p!.proc.pid!;
    const from = a.p!.stdout().length;
    freeze(pid);
    await refusedOnBeta('held');
    // alpha back: it releases the session, and a retry on beta resumes it (the takeover went on meanwhile)
    thaw(pid);
    await resumesOnBeta('held', a, x, from, 60);
  });

  test('cluster connect - a broker whose event loop stalls past the connect timeout still answers CONNACK 0x88, never a close without CONNACK', async () => {
    const x = await hold(a, 'late');
    const apid = a.p!.proc.pid!;
    const from = a.p!.stdout().length;
    freeze(apid);
    const y = await open(b);
    const started = Date.now();
    connect(y, 'late');
    // beta stalls from 4 s to about 5.6 s after the CONNECT: its connect-timeout sweep (every 250 ms, due before the
    // session plane's answer at 4.7 s) and that answer both run late, the sweep first
    await new Promise((r) => setTimeout(r, 4000));
    const bpid = b.p!.proc.pid!;
    freeze(bpid);
    await new Promise((r) => setTimeout(r, Math.max(0, started + 5600 - Date.now())));
    thaw(bpid);
    const connack = await y.next('connack', 9000).catch((err: Error) => {
      throw new Error(`no CONNACK from beta ${Date.now() - started} ms after the CONNECT (${err.message})\n${tail(b, 'late')}`);
    });
    console.log(`cluster connect: CONNECT of late on beta, beta stalled from 4 s to 5.6 s: CONNACK 0x${connack.reasonCode.toString(16)} after ${Date.now() - started} ms`);
    assert.equal(connack.reasonCode, 0x88, 'Server unavailable: the client retries');
    y.destroy();
    thaw(apid);
    await resumesOnBeta('late', a, x, from, 60);
  });

  test('cluster connect - an owner that lost its NATS connection in a freeze, with the takeover unread, hands the session over once back', async () => {
    relay = new NatsRelay(nats.port);
    const g = await launch('gamma', [await relay.start()]);
    const x = await hold(g, 'moved');
    const pid = g.p!.proc.pid!;
    const from = g.p!.stdout().length;
    freeze(pid);
    // from now on what nats-server sends gamma is lost: beta's takeover of the record among it
    relay.drop = true;
    await refusedOnBeta('moved');
    // gamma's connections end while it is frozen (as a client that wakes up with its pings unanswered drops its
    // connection as stale, unread bytes and all); it wakes up and reconnects through the relay
    relay.cut();
    relay.drop = false;
    thaw(pid);
    // a takeover waits up to 60 s for the old owner (HANDOVER_MAX_MS): 45 s tells a hand-over from none
    await resumesOnBeta('moved', g, x, from, 45);
    assert.match(g.p!.stdout().slice(from), /cluster: NATS connection back; the session watch starts again/);
  });
});
