/**
 * The hand-over of a persistent session between two live brokers (docs/cluster.md "Sessions", "No message lost in the
 * hand-over") when something happens in the middle of it: a third broker gets the client's CONNECT, or the new owner
 * is SIGKILLed while it holds the session's messages provisionally. Three real `nats-server -js` in a cluster (R3),
 * three Switchyard brokers as child processes (heartbeat 1 s, lease 4 s). The hand-over is held open by real means:
 * the old owner is SIGSTOPped at a chosen point of it (seen in the session's record in the KV bucket).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { connect as natsConnect, type NatsConnection } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Kvm, type KV } from '@nats-io/kv';
import { removeDir, spawnBroker, tempDir, waitUntil, type BrokerProcess } from '../helpers.js';
import { RawClient, rest } from '../mqtt/helpers.js';
import { clusterConfigDir, warmMessagePlane } from './helpers.js';
import { startNatsCluster, type NatsCluster } from './nats-cluster.js';

interface Broker {
  nodeId: string;
  dataDir: string;
  p?: BrokerProcess;
  mqtt: number;
  stopped: boolean;
}

interface Record_ {
  owner: string;
  released: boolean;
  previousOwner?: string;
  handover?: { from: string; to?: string; closedSeq?: number; cutSeq?: number };
}

const SESSION = { sessionExpiryInterval: 600 };
const recordKey = (clientId: string) => `c_${Buffer.from(clientId, 'utf8').toString('base64url')}`;

describe('cluster handover - a session hand-over interrupted by a third broker or by the new owner dying', { timeout: 420000 }, () => {
  let nats: NatsCluster;
  let nc: NatsConnection;
  let kv: KV;
  const brokers: Broker[] = [];
  const dirs: string[] = [];
  const clients: RawClient[] = [];
  let a: Broker;
  let b: Broker;
  let c: Broker;

  const launch = async (nodeId: string): Promise<Broker> => {
    const dataDir = tempDir('switchyard-clh-data-');
    dirs.push(dataDir);
    const cluster = { servers: nats.urls, clusterName: 'ho', nodeId, replicas: 3, heartbeatSeconds: 1, leaseSeconds: 4, sessionTakeoverWaitSeconds: 3 };
    const configDir = clusterConfigDir('switchyard-clh-config-', dirs, cluster);
    const br: Broker = { nodeId, dataDir, mqtt: 0, stopped: false };
    brokers.push(br);
    br.p = await spawnBroker({ SWITCHYARD_DATA_DIR: dataDir, SWITCHYARD_CONFIG_DIR: configDir, SWITCHYARD_ALLOW_ANONYMOUS: 'true' });
    const list = await rest(br.p.port, br.p.auth(), 'GET', '/api/v1/server/interfaces');
    br.mqtt = (list.json as Array<{ name: string; port: number }>).find((i) => i.name === 'MQTT Interface')!.port;
    return br;
  };
  const ready = async (br: Broker): Promise<void> => {
    await waitUntil(async () => {
      const r = await rest(br.p!.port, br.p!.auth(), 'GET', '/api/v1/server/cluster');
      const link = await rest(br.p!.port, br.p!.auth(), 'GET', '/api/v1/server/integration/cluster/status');
      return r.json.state === 'Member' && link.json.state === 'Established' && br.p!.stdout().includes('session plane active');
    }, 60000, `${br.nodeId} member with its session plane and message link`);
  };
  const signal = (br: Broker, sig: 'SIGSTOP' | 'SIGCONT'): void => {
    process.kill(br.p!.proc.pid!, sig);
    br.stopped = sig === 'SIGSTOP';
  };
  /** The brokers' lines about `clientId` and every WARN / ERROR, for a failure message. */
  const logs = (clientId: string): string =>
    brokers.map((x) => `${x.nodeId}:\n${x.p!.stdout().split('\n').filter((l) => l.includes(clientId) || / (WARN|ERROR) /.test(l)).slice(-15).join('\n')}`).join('\n');
  /** A step that fails naming itself (and the brokers' lines) when it takes longer than `ms`. */
  const step = async <T>(what: string, clientId: string, ms: number, p: Promise<T>): Promise<T> => {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: not done in ${ms} ms\n${logs(clientId)}`)), ms);
    });
    try {
      return await Promise.race([p, late]);
    } finally {
      clearTimeout(timer);
    }
  };
  const open = async (br: Broker): Promise<RawClient> => {
    const cl = await RawClient.open(br.mqtt, 5);
    clients.push(cl);
    return cl;
  };
  const record = async (clientId: string): Promise<Record_ | undefined> => {
    const e = await kv.get(recordKey(clientId));
    return e === null || e.operation !== 'PUT' ? undefined : (e.json() as Record_);
  };
  /**
   * A watch on the session's record, made (and so seeing every later write) before the step that changes it: `until`
   * resolves with the first version of the record for which `pred` holds, as soon as the watch delivers it (no poll
   * interval for a broker to slip through).
   */
  const watchRecord = async (clientId: string) => {
    const it = await kv.watch({ key: recordKey(clientId) });
    const seen: Record_[] = [];
    const waiters = new Set<() => void>();
    void (async () => {
      for await (const e of it) {
        if (e.operation !== 'PUT') continue;
        seen.push(e.json() as Record_);
        for (const w of waiters) w();
      }
    })();
    return {
      until: (pred: (r: Record_) => boolean): Promise<Record_> =>
        new Promise<Record_>((resolve) => {
          const check = () => {
            const r = seen.find(pred);
            if (r === undefined) return;
            waiters.delete(check);
            resolve(r);
          };
          waiters.add(check);
          check();
        }),
      stop: () => it.stop(),
    };
  };
  /** CONNECT resuming the session until CONNACK 0 (0x88 while the cluster settles who holds it is retried). */
  const resume = async (br: Broker, clientId: string, codes: number[] = []): Promise<RawClient> => {
    for (;;) {
      const cl = await open(br);
      const ack = await cl.connect({ clientId, clean: false, properties: SESSION });
      codes.push(ack.reasonCode);
      if (ack.reasonCode === 0) {
        assert.equal(ack.sessionPresent, true, `${clientId}: the session resumed on ${br.nodeId}`);
        return cl;
      }
      cl.destroy();
      await new Promise((r) => setTimeout(r, 300));
    }
  };
  /** A QoS 1/2 publisher: resolves when the broker acknowledged (PUBACK, or PUBREC then PUBCOMP). */
  const publisher = async (br: Broker, clientId: string) => {
    const cl = await open(br);
    assert.equal((await cl.connect({ clientId, clean: true })).reasonCode, 0);
    let pid = 0;
    return async (topic: string, payload: string, qos: 1 | 2): Promise<void> => {
      const messageId = (pid = (pid % 65535) + 1);
      cl.send({ cmd: 'publish', topic, payload: Buffer.from(payload), qos, messageId, retain: false, dup: false });
      if (qos === 1) {
        assert.equal((await cl.next('puback', 15000)).reasonCode ?? 0, 0, `${payload} acknowledged`);
        return;
      }
      assert.equal((await cl.next('pubrec', 15000)).reasonCode ?? 0, 0, `${payload} received`);
      cl.send({ cmd: 'pubrel', messageId });
      await cl.next('pubcomp', 15000);
    };
  };
  /**
   * What a client application gets on a connection until `done` holds or `ms` passed: QoS 1 counted per PUBLISH and
   * acknowledged; QoS 2 counted once per packet id (at its first PUBLISH, as a client delivers it) and completed.
   */
  const receive = async (cl: RawClient, got: Map<string, number>, done: () => boolean, ms: number): Promise<void> => {
    const awaitingRel = new Set<number>();
    const end = Date.now() + ms;
    while (!done() && Date.now() < end) {
      const p = cl.packets.shift();
      if (p === undefined) {
        if (cl.closed) return;
        await new Promise((r) => setTimeout(r, 10));
        continue;
      }
      if (p.cmd === 'publish') {
        const payload = p.payload.toString();
        if (p.qos === 1) {
          got.set(payload, (got.get(payload) ?? 0) + 1);
          cl.send({ cmd: 'puback', messageId: p.messageId });
        } else if (p.qos === 2) {
          if (!awaitingRel.has(p.messageId)) got.set(payload, (got.get(payload) ?? 0) + 1);
          awaitingRel.add(p.messageId);
          cl.send({ cmd: 'pubrec', messageId: p.messageId });
        }
      } else if (p.cmd === 'pubrel') {
        awaitingRel.delete(p.messageId);
        cl.send({ cmd: 'pubcomp', messageId: p.messageId });
      }
    }
  };
  /** A session on `br` subscribed to `topic` (QoS 2 granted, so each message keeps its own QoS), left connected. */
  const subscribed = async (br: Broker, clientId: string, topic: string): Promise<RawClient> => {
    const x = await open(br);
    assert.equal((await x.connect({ clientId, clean: false, properties: SESSION })).reasonCode, 0);
    x.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic, qos: 2 }] });
    assert.deepEqual((await x.next('suback')).granted, [2]);
    await waitUntil(async () => (await record(clientId))?.owner === br.nodeId, 10000, `${clientId}: its record on ${br.nodeId}`);
    return x;
  };

  /**
   * A session on alpha (subscribed to `<name>/t`; pre-0..2 published on gamma and received, pre-1 and pre-2 left
   * unacknowledged) that the client then moves to beta; alpha is SIGSTOPped as soon as the record shows `stopAt` and
   * alpha has not released the session yet. The record's revisions can follow each other within milliseconds (the
   * bucket keeps one per key), so on a busy machine the watch may see a later one first, or the hand-over may end
   * before the signal: then alpha goes on and the same is tried with a new session, three times at most.
   */
  const stoppedInHandOver = async (name: string, stopAt: (r: Record_) => boolean) => {
    for (let attempt = 1; ; attempt++) {
      const ID = `${name}-${attempt}`;
      const x = await subscribed(a, ID, `${name}/t`);
      const pub = await publisher(c, `${ID}-pub`);
      for (let i = 0; i < 3; i++) await pub(`${name}/t`, `pre-${i}`, 1);
      const first = await step('the messages before the move reach alpha', ID, 15000, Promise.all([x.next('publish', 20000), x.next('publish', 20000), x.next('publish', 20000)]));
      x.send({ cmd: 'puback', messageId: first.find((p) => p.payload.toString() === 'pre-0')!.messageId });
      const y = await open(b);
      const rec = await watchRecord(ID);
      y.send({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: 5, clean: false, clientId: ID, keepalive: 0, properties: SESSION });
      const hit = await Promise.race([rec.until((r) => stopAt(r) && !r.released), new Promise<undefined>((r) => setTimeout(r, 15000))]);
      if (hit !== undefined) signal(a, 'SIGSTOP');
      rec.stop();
      const now = await record(ID);
      if (hit !== undefined && now !== undefined && !now.released) return { ID, x, y, pub, atStop: now };
      if (hit !== undefined) signal(a, 'SIGCONT');
      y.destroy();
      const why = `attempt ${attempt}: the hand-over of ${ID} ${hit === undefined ? 'was not seen at its point in 15 s' : 'ended before alpha was stopped'} (record now ${JSON.stringify(now)})`;
      if (attempt >= 3) throw new Error(`${why}\n${logs(ID)}`);
      console.log(`cluster handover: ${why}; again with a new session`);
      await new Promise((r) => setTimeout(r, 1000));
    }
  };

  before(async () => {
    nats = await startNatsCluster(3);
    nc = await natsConnect({ servers: nats.urls });
    [a, b, c] = await Promise.all([launch('alpha'), launch('beta'), launch('gamma')]);
    await Promise.all([a, b, c].map(ready));
    kv = await new Kvm(jetstream(nc)).open('switchyard_ho_sessions');
    // every node's message-plane consumer is pulling before the tests count on it (each node publishes until each
    // other node got one of its own)
    await warmMessagePlane([a, b, c], open);
  });

  after(async () => {
    for (const cl of clients) cl.destroy();
    for (const br of brokers) {
      if (br.stopped) signal(br, 'SIGCONT');
      await br.p?.stop('SIGKILL');
    }
    await nc?.close();
    await nats?.dispose();
    for (const d of dirs) removeDir(d);
  });

  test('cluster handover - a CONNECT on a third broker while a hand-over A -> B is under way waits for it: every acknowledged message arrives', async () => {
    // the client moves to beta; as soon as beta holds the record, alpha is stopped: the hand-over cannot end
    const { ID, y, pub } = await stoppedInHandOver('third', (r) => r.owner === 'beta');
    // acknowledged while the hand-over is open: only alpha (stopped) or beta (not holding yet) could route them
    for (let i = 0; i < 10; i++) await pub('third/t', `mid-${i}`, i % 2 === 0 ? 1 : 2);
    // the client (its retry) comes to gamma meanwhile; alpha goes on after 1.5 s, well inside its lease of 4 s
    const codes: number[] = [];
    const onGamma = resume(c, ID, codes);
    await new Promise((r) => setTimeout(r, 1500));
    signal(a, 'SIGCONT');
    const z = await step('the session resumed on gamma', ID, 45000, onGamma);
    y.destroy();
    const got = new Map<string, number>();
    const want = ['pre-1', 'pre-2', ...Array.from({ length: 10 }, (_, i) => `mid-${i}`)];
    await receive(z, got, () => want.every((p) => got.has(p)), 20000);
    const missing = want.filter((p) => !got.has(p));
    const twice = [...got.entries()].filter(([, n]) => n > 1).map(([p]) => p);
    console.log(
      `cluster handover: CONNECT on gamma during alpha -> beta (alpha SIGSTOPped 1.5 s): gamma's CONNACKs ${codes.map((n) => `0x${n.toString(16)}`).join(',')}; ${want.length} acknowledged and unacknowledged by the client, received on gamma ${want.length - missing.length}, missing ${missing.length}${missing.length ? ` (${missing.join(',')})` : ''}, twice ${twice.length}`,
    );
    assert.deepEqual(missing, [], `every acknowledged message reaches the client on gamma\n${logs(ID)}`);
    assert.deepEqual(twice.filter((p) => /^mid-\d*[13579]$/.test(p)), [], 'no QoS 2 message twice');
    const last = await record(ID);
    assert.equal(last?.owner, 'gamma');
    assert.equal(last?.handover, undefined, 'the record shows no hand-over under way');
  });

  test('cluster handover - the new owner SIGKILLed while it holds the session provisionally: the adopter replays, every acknowledged message arrives', async () => {
    // alpha says where its client stopped (closedSeq) and is stopped there: it cannot release; beta makes its
    // provisional subscriptions and writes cutSeq, from which every message is beta's to hold
    const { ID, pub } = await stoppedInHandOver('orphan', (r) => r.owner === 'beta' && r.handover?.from === 'alpha' && r.handover.closedSeq !== undefined);
    let cut: Record_ | undefined;
    await step('beta writes cutSeq', ID, 15000, waitUntil(async () => (cut = await record(ID))?.handover?.cutSeq !== undefined, 15000, 'cutSeq'));
    assert.equal(cut!.released, false, 'alpha has not released the session');

    // acknowledged by gamma, routed by beta into its provisional lists (beta's consumer acknowledged them)
    for (let i = 0; i < 10; i++) await pub('orphan/t', `mid-${i}`, i % 2 === 0 ? 1 : 2);
    const jsm = await jetstreamManager(nc);
    // beta's durable consumer of the message plane: `<its server name>-cluster-1` (src/cluster/sessions.ts planeConsumer)
    const nodes = (await rest(c.p!.port, c.p!.auth(), 'GET', '/api/v1/server/cluster')).json.nodes as Array<{ nodeId: string; serverName: string }>;
    const betaConsumer = `${nodes.find((n) => n.nodeId === 'beta')!.serverName}-cluster-1`.replace(/[^A-Za-z0-9_-]/g, '_');
    await step(
      "beta's message plane routed them",
      ID,
      20000,
      waitUntil(async () => {
        const last = (await jsm.streams.info('SY_ho_MSG')).state.last_seq;
        return (await jsm.consumers.info('SY_ho_MSG', betaConsumer)).ack_floor.stream_seq >= last;
      }, 20000, "beta's consumer at the stream's end"),
    );
    await b.p!.stop('SIGKILL');
    // beta's lease lapses (alpha's too: it is still stopped); gamma adopts beta's sessions, then alpha goes on
    await step('gamma adopts the sessions of beta', ID, 40000, waitUntil(() => /sessions of a gone node adopted .*node=beta/.test(c.p!.stdout()), 40000, 'the adoption'));
    signal(a, 'SIGCONT');

    const z = await step('the session resumed on gamma', ID, 45000, resume(c, ID));
    const got = new Map<string, number>();
    const want = ['pre-1', 'pre-2', ...Array.from({ length: 10 }, (_, i) => `mid-${i}`)];
    await receive(z, got, () => want.every((p) => got.has(p)), 20000);
    await receive(z, got, () => false, 1000); // a late second copy would show now
    const missing = want.filter((p) => !got.has(p));
    const twice = [...got.entries()].filter(([, n]) => n > 1).map(([p]) => p);
    console.log(
      `cluster handover: beta SIGKILLed after cutSeq ${cut!.handover?.cutSeq} (alpha SIGSTOPped at closedSeq ${cut!.handover?.closedSeq}), gamma adopted: ${want.length} acknowledged and unacknowledged by the client, received on gamma ${want.length - missing.length}, missing ${missing.length}${missing.length ? ` (${missing.join(',')})` : ''}, twice ${twice.length}${twice.length ? ` (${twice.join(',')})` : ''}`,
    );
    const replayed = c.p!.stdout().split('\n').find((l) => l.includes('a hand-over completed here from the message stream') && l.includes(ID));
    console.log(`cluster handover: gamma's line: ${replayed?.replace(/^.*?(from=)/, '$1') ?? '(none)'}`);
    assert.deepEqual(missing, [], `every acknowledged message reaches the client on gamma\n${logs(ID)}`);
    assert.deepEqual(twice.filter((p) => /^mid-\d*[13579]$/.test(p)), [], 'no QoS 2 message twice');
  });
});
