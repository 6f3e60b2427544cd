/**
 * Persistent MQTT sessions across the cluster (docs/cluster.md "Sessions"): three real `nats-server -js` in a cluster
 * (R3), three Switchyard brokers as child processes (heartbeat 1 s, lease 4 s), raw MQTT clients so the tests choose
 * exactly which packets are acknowledged.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { connect as natsConnect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { removeDir, spawnBroker, tempDir, waitUntil, type BrokerProcess } from '../helpers.js';
import { RawClient, rest } from '../mqtt/helpers.js';
import { clusterConfigDir, warmMessagePlane } from './helpers.js';
import { startNatsCluster, type NatsCluster } from './nats-cluster.js';

interface Broker {
  nodeId: string;
  dataDir: string;
  configDir: string;
  p?: BrokerProcess;
  mqtt: number;
}

const HEARTBEAT = 1;
const LEASE = 4;
const SESSION = { sessionExpiryInterval: 600 };

/** The record key of a client id (src/cluster/sessions.ts sessionKey, for short ids). */
const recordKey = (clientId: string) => `c_${Buffer.from(clientId, 'utf8').toString('base64url')}`;

describe('cluster sessions - persistent MQTT sessions over a 3-node NATS cluster', { timeout: 420000 }, () => {
  let nats: NatsCluster;
  const brokers: Broker[] = [];
  const dirs: string[] = [];
  const clients: RawClient[] = [];
  const natsClients: Array<{ close(): Promise<void> }> = []; // closed in `after` (a test that fails leaves its own open)
  let a: Broker;
  let b: Broker;
  let c: Broker;

  const launch = async (nodeId: string): Promise<Broker> => {
    const dataDir = tempDir('switchyard-cls-data-');
    dirs.push(dataDir);
    const cluster = { servers: nats.urls, clusterName: 'sess', nodeId, replicas: 3, heartbeatSeconds: HEARTBEAT, leaseSeconds: LEASE, sessionTakeoverWaitSeconds: 3, sessionRecordMaxBytes: 1024 };
    const configDir = clusterConfigDir('switchyard-cls-config-', dirs, cluster);
    const br: Broker = { nodeId, dataDir, configDir, mqtt: 0 };
    brokers.push(br);
    br.p = await spawnBroker({ SWITCHYARD_DATA_DIR: dataDir, SWITCHYARD_CONFIG_DIR: configDir, SWITCHYARD_ALLOW_ANONYMOUS: 'true' });
    const list = await rest(br.p.port, br.p.auth(), 'GET', '/api/v1/server/interfaces');
    br.mqtt = (list.json as Array<{ name: string; port: number }>).find((i) => i.name === 'MQTT Interface')!.port;
    return br;
  };
  const member = async (br: Broker): Promise<void> => {
    await waitUntil(async () => {
      const r = await rest(br.p!.port, br.p!.auth(), 'GET', '/api/v1/server/cluster');
      return r.json.state === 'Member' && br.p!.stdout().includes('session plane active');
    }, 30000, `${br.nodeId} member with its session plane`);
  };
  const open = async (br: Broker): Promise<RawClient> => {
    const cl = await RawClient.open(br.mqtt, 5);
    clients.push(cl);
    return cl;
  };
  /** CONNECT until CONNACK 0 (0x88 while the cluster decides who holds the session: the client retries). */
  const resume = async (br: Broker, clientId: string, ms = 30000): Promise<{ cl: RawClient; connack: Record<string, any> }> => {
    const end = Date.now() + ms;
    for (;;) {
      const cl = await open(br);
      const connack = await cl.connect({ clientId, clean: false, properties: SESSION });
      if (connack.reasonCode === 0) return { cl, connack };
      cl.destroy();
      if (Date.now() > end) {
        const lines = brokers.map((x) => `${x.nodeId}:\n${x.p!.stdout().split('\n').filter((l) => l.includes(`clientId=${clientId} `) || /WARN|ERROR|adopted|watch/.test(l)).slice(-15).join('\n')}`);
        throw new Error(`${clientId} not resumed on ${br.nodeId}: CONNACK ${connack.reasonCode}\n${lines.join('\n')}`);
      }
      await new Promise((r) => setTimeout(r, 300));
    }
  };
  /** Every packet of `cmd` that arrives within `ms` (removed from the client's list). */
  const drain = async (cl: RawClient, cmd: string, ms: number): Promise<Array<Record<string, any>>> => {
    const out: Array<Record<string, any>> = [];
    const end = Date.now() + ms;
    for (;;) {
      const left = end - Date.now();
      if (left <= 0) return out;
      try {
        out.push(await cl.next(cmd, left));
      } catch {
        return out;
      }
    }
  };
  /** A QoS 1/2 publisher on a broker: resolves when the broker acknowledged (PUBACK, or PUBREC then PUBCOMP). */
  const publisher = async (br: Broker, clientId: string) => {
    const cl = await open(br);
    assert.equal((await cl.connect({ clientId, clean: true })).reasonCode, 0);
    let pid = 0;
    return async (topic: string, payload: string, qos: 1 | 2): Promise<void> => {
      const messageId = (pid = (pid % 65535) + 1);
      cl.send({ cmd: 'publish', topic, payload: Buffer.from(payload), qos, messageId, retain: false, dup: false });
      if (qos === 1) {
        const ack = await cl.next('puback', 15000);
        assert.equal(ack.reasonCode ?? 0, 0, `${payload} acknowledged`);
        return;
      }
      const rec = await cl.next('pubrec', 15000);
      assert.equal(rec.reasonCode ?? 0, 0, `${payload} received`);
      cl.send({ cmd: 'pubrel', messageId });
      await cl.next('pubcomp', 15000);
    };
  };
  const record = async (clientId: string): Promise<{ owner: string; epoch: number; subscriptions: Array<{ filter: string; qos: number }> } | undefined> => {
    const nc = await natsConnect({ servers: nats.urls });
    try {
      const kv = await new Kvm(jetstream(nc)).open('switchyard_sess_sessions');
      const e = await kv.get(recordKey(clientId));
      return e === null || e.operation !== 'PUT' ? undefined : (e.json() as never);
    } finally {
      await nc.close();
    }
  };

  /** Held copies in the stream SY_sess_HELD of the sessions whose record key starts with `keyPrefix`. */
  const heldInStream = async (keyPrefix: string): Promise<number> => {
    const nc = await natsConnect({ servers: nats.urls });
    try {
      const jsm = await jetstreamManager(nc);
      const info = await jsm.streams.info('SY_sess_HELD', { subjects_filter: `sy.sess.h.*.d.>` });
      return Object.keys(info.state.subjects ?? {}).filter((k) => k.startsWith(`sy.sess.h.${keyPrefix}`)).length;
    } finally {
      await nc.close();
    }
  };

  /** Where the messages with these payloads are in the message stream SY_sess_MSG: sequence and origin server. */
  const streamSequences = async (payloads: Set<string>): Promise<string> => {
    const nc = await natsConnect({ servers: nats.urls });
    try {
      const js = jetstream(nc);
      const consumer = await js.consumers.get('SY_sess_MSG', { filter_subjects: 'sy.sess.m.roam.>' });
      const found: string[] = [];
      for (let m = await consumer.next({ expires: 2000 }); m !== null; m = m.info.pending === 0 ? null : await consumer.next({ expires: 2000 })) {
        const payload = Buffer.from(m.data).toString();
        if (payloads.has(payload)) found.push(`${payload} seq ${m.seq} origin ${m.headers?.get('Sy-Origin') ?? '?'}`);
      }
      return found.join(', ') || 'none of them';
    } finally {
      await nc.close();
    }
  };

  before(async () => {
    nats = await startNatsCluster(3);
    [a, b, c] = await Promise.all([launch('alpha'), launch('beta'), launch('gamma')]);
    await Promise.all([a, b, c].map(member));
    // every node's message plane carries messages from each other node before the tests count on it: a member's
    // cluster link may still be connecting (one run here: alpha's first attempt timed out while the nodes started), and
    // a hand-over then found no consumer of alpha's to wait for
    await warmMessagePlane([a, b, c], open);
  });

  after(async () => {
    for (const br of brokers) {
      const warns = br.p?.stdout().split('\n').filter((l) => / (WARN|ERROR) cluster: (?!node alpha)/.test(l)) ?? [];
      if (warns.length) console.log(`${br.nodeId}:\n${warns.slice(-10).join('\n')}`);
    }
    for (const cl of clients) cl.destroy();
    for (const nc of natsClients) await nc.close().catch(() => undefined);
    for (const br of brokers) await br.p?.stop('SIGKILL');
    await nats?.dispose();
    for (const d of dirs) removeDir(d);
  });

  test('cluster sessions - a persistent MQTT 5 session moves from A to B: no acknowledged QoS 1 lost, QoS 2 exactly once, subscriptions intact, A gets 0x8E', async () => {
    const x = await open(a);
    const ack = await x.connect({ clientId: 'mover', clean: false, properties: SESSION });
    assert.equal(ack.reasonCode, 0);
    x.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: 'move/q1', qos: 1 }, { topic: 'move/q2', qos: 2 }] });
    assert.deepEqual((await x.next('suback')).granted, [1, 2]);
    assert.deepEqual((await record('mover'))?.subscriptions.map((s) => s.filter).sort(), ['move/q1', 'move/q2']);

    const pub = await publisher(a, 'mover-pub');
    for (let i = 0; i < 10; i++) await pub('move/q1', `q1-${i}`, 1);
    for (let i = 0; i < 10; i++) await pub('move/q2', `q2-${i}`, 2);
    const seenX = new Map<string, number>(); // payload → packet id at A
    for (let i = 0; i < 20; i++) {
      const p = await x.next('publish', 10000);
      seenX.set(p.payload.toString(), p.messageId);
    }
    // A's client acknowledges part: QoS 1 q1-0..4; QoS 2 q2-0..2 completed, q2-3..5 PUBREC only (PUBREL pending)
    const q1Acked = new Set<string>();
    const q2Delivered = new Set<string>();
    for (let i = 0; i < 5; i++) {
      x.send({ cmd: 'puback', messageId: seenX.get(`q1-${i}`)! });
      q1Acked.add(`q1-${i}`);
    }
    const pendingRel = new Set<number>();
    for (let i = 0; i < 6; i++) {
      const pid = seenX.get(`q2-${i}`)!;
      x.send({ cmd: 'pubrec', messageId: pid });
      q2Delivered.add(`q2-${i}`); // delivered to the application at PUBREC (exactly once from here)
      const rel = await x.next('pubrel', 10000);
      assert.equal(rel.messageId, pid);
      if (i < 3) x.send({ cmd: 'pubcomp', messageId: pid });
      else pendingRel.add(pid);
    }
    await new Promise((r) => setTimeout(r, 500)); // the acknowledgements are written (store and JetStream)

    const moved = await resume(b, 'mover');
    assert.equal(moved.connack.sessionPresent, true, 'B resumes the session');
    const disc = await x.next('disconnect', 10000);
    assert.equal(disc.reasonCode, 0x8e, "A's connection gets DISCONNECT 0x8E Session taken over");
    await x.waitClosed(5000);
    const y = moved.cl;

    // PUBREL for the QoS 2 messages awaiting PUBCOMP, with their ids
    const rels = await drain(y, 'pubrel', 3000);
    assert.deepEqual(new Set(rels.map((r) => r.messageId)), pendingRel, 'PUBREL resent for the QoS 2 ids awaiting PUBCOMP');
    for (const r of rels) y.send({ cmd: 'pubcomp', messageId: r.messageId });
    const again = [...(await drain(y, 'publish', 3000))];
    const q1Y = again.filter((p) => p.topic === 'move/q1');
    const q2Y = again.filter((p) => p.topic === 'move/q2');
    for (const p of again) {
      const payload = p.payload.toString();
      assert.equal(p.dup, true, `${payload} resent with DUP`);
      assert.equal(p.messageId, seenX.get(payload), `${payload} resent with its packet id`);
      if (p.qos === 1) y.send({ cmd: 'puback', messageId: p.messageId });
      else {
        y.send({ cmd: 'pubrec', messageId: p.messageId });
        await y.next('pubrel', 5000);
        y.send({ cmd: 'pubcomp', messageId: p.messageId });
      }
    }
    // QoS 1: every message A's client did not acknowledge arrives at B (none lost)
    const q1All = new Set([...q1Acked, ...q1Y.map((p) => p.payload.toString())]);
    assert.equal(q1All.size, 10, `QoS 1 at A (acknowledged) and B: ${[...q1All].sort().join(',')}`);
    // QoS 2: the six delivered at A never again, the four others once
    const q2Payloads = q2Y.map((p) => p.payload.toString());
    assert.deepEqual(q2Payloads.filter((p) => q2Delivered.has(p)), [], 'no QoS 2 message delivered twice');
    assert.equal(new Set(q2Payloads).size, q2Payloads.length, 'no QoS 2 message resent twice');
    assert.equal(q2Payloads.length + q2Delivered.size, 10, `QoS 2 exactly once: ${q2Payloads.sort().join(',')}`);

    console.log(
      `cluster sessions: move alpha -> beta: QoS 1 10 acknowledged to the publisher, ${q1Acked.size} acknowledged by the client at alpha, ${q1Y.length} resent at beta with DUP, lost ${10 - q1All.size}; QoS 2 10, ${q2Delivered.size} delivered at alpha (${rels.length} PUBREL resent at beta), ${q2Payloads.length} resent at beta, delivered twice ${q2Payloads.filter((p) => q2Delivered.has(p)).length}; alpha's client got DISCONNECT 0x${disc.reasonCode.toString(16)}`,
    );
    // subscriptions intact: new messages reach B's session without a new SUBSCRIBE, published on B and on C
    const pubB = await publisher(b, 'mover-pub-b');
    await pubB('move/q1', 'after-b', 1);
    const pubC = await publisher(c, 'mover-pub-c');
    await pubC('move/q2', 'after-c', 2);
    const late = new Set<string>();
    await waitUntil(async () => {
      for (const p of await drain(y, 'publish', 200)) {
        late.add(p.payload.toString());
        if (p.qos === 1) y.send({ cmd: 'puback', messageId: p.messageId });
        if (p.qos === 2) y.send({ cmd: 'pubrec', messageId: p.messageId });
      }
      return late.has('after-b') && late.has('after-c');
    }, 20000, 'messages published after the move');
    const rec = await record('mover');
    assert.equal(rec?.owner, 'beta');
    assert.equal(rec?.epoch, 2);
  });

  test('cluster sessions - a persistent session moves A -> B -> A -> B -> A while QoS 1 and 2 are published on A, B and C: every acknowledged message arrives, QoS 2 once, QoS 0 at most once', async () => {
    const ID = 'roamer';
    /** A step that fails naming itself (and the brokers' last cluster lines) when it takes longer than `ms`. */
    const bounded = async <T>(what: string, ms: number, p: Promise<T>): Promise<T> => {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          const logs = brokers.map((x) => `${x.nodeId}:\n${x.p!.stdout().split('\n').filter((l) => l.includes(ID) || / (WARN|ERROR) /.test(l)).slice(-12).join('\n')}`);
          reject(new Error(`${what}: not done in ${ms} ms\n${logs.join('\n')}`));
        }, ms);
      });
      try {
        return await Promise.race([p, late]);
      } finally {
        clearTimeout(timer);
      }
    };
    // the client's side of the session, kept across its connections (as a client library keeps it)
    const q1 = new Map<string, number>(); // payload -> times delivered
    const q2 = new Map<string, number>(); // payload -> times delivered to the application (at the first PUBLISH of a packet id)
    const q0 = new Map<string, number>(); // payload -> times delivered (at most once: none may come twice)
    const awaitingRel = new Set<number>(); // QoS 2 packet ids PUBREC'd, PUBREL not yet received
    // what a failure prints: when each message was acknowledged to its publisher, when and on which connection it first
    // arrived, and a timeline of the moves and of every version of the session's record (owner, handover with closedSeq
    // and cutSeq), so a missing message can be placed against the hand-over it fell into
    const t0 = Date.now();
    const timeline: string[] = [];
    const mark = (what: string) => timeline.push(`${Date.now() - t0} ms ${what}`);
    const ackedAt = new Map<string, number>(); // payload -> ms since t0 when its publisher got PUBACK / PUBREC
    const firstAt = new Map<string, string>(); // payload -> 'ms on connection n' of its first arrival
    let connection = 0;
    const recordNc = await natsConnect({ servers: nats.urls });
    natsClients.push(recordNc);
    const recordWatch = await (await new Kvm(jetstream(recordNc)).open('switchyard_sess_sessions')).watch({ key: recordKey(ID) });
    void (async () => {
      for await (const e of recordWatch) {
        const d = e.operation === 'PUT' ? (e.json() as { owner?: string; epoch?: number; previousOwner?: string; released?: boolean; connected?: boolean; handover?: unknown }) : undefined;
        mark(`record rev ${e.revision} ${e.operation}${d ? ` owner ${d.owner} epoch ${d.epoch} previous ${d.previousOwner} released ${d.released} connected ${d.connected} handover ${JSON.stringify(d.handover)}` : ''}`);
      }
    })().catch(() => undefined);
    /** Reads every packet of a connection in order and answers as a client does, until it is closed and read out. */
    const consume = (cl: RawClient, n: number): Promise<void> =>
      (async () => {
        for (;;) {
          const p = cl.packets.shift();
          if (p === undefined) {
            if (cl.closed) return;
            await new Promise((r) => setTimeout(r, 5));
            continue;
          }
          if (p.cmd === 'publish') {
            const payload = p.payload.toString();
            if (!firstAt.has(payload)) firstAt.set(payload, `${Date.now() - t0} ms on connection ${n}${p.dup ? ' DUP' : ''}`);
            if (p.qos === 0) q0.set(payload, (q0.get(payload) ?? 0) + 1);
            else if (p.qos === 1) {
              q1.set(payload, (q1.get(payload) ?? 0) + 1);
              if (!cl.closed) cl.send({ cmd: 'puback', messageId: p.messageId });
            } else if (p.qos === 2) {
              if (!awaitingRel.has(p.messageId)) {
                q2.set(payload, (q2.get(payload) ?? 0) + 1);
                awaitingRel.add(p.messageId);
              }
              if (!cl.closed) cl.send({ cmd: 'pubrec', messageId: p.messageId });
            }
          } else if (p.cmd === 'pubrel') {
            awaitingRel.delete(p.messageId);
            if (!cl.closed) cl.send({ cmd: 'pubcomp', messageId: p.messageId });
          }
        }
      })();
    /** CONNECT (resuming the session) until CONNACK 0; 0x88 while the cluster settles who holds it is retried. */
    const connectTo = async (br: Broker): Promise<{ cl: RawClient; connack: Record<string, any> }> => {
      for (let i = 0; ; i++) {
        const cl = await open(br);
        cl.send({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: 5, clean: false, clientId: ID, keepalive: 0, properties: SESSION });
        const connack = await cl.next('connack', 20000);
        if (connack.reasonCode === 0 || i >= 60) return { cl, connack };
        cl.destroy();
        await new Promise((r) => setTimeout(r, 300));
      }
    };

    let { cl, connack } = await bounded(`${ID}: first CONNECT on alpha`, 30000, connectTo(a));
    assert.equal(connack.reasonCode, 0);
    cl.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: 'roam/q1', qos: 1 }, { topic: 'roam/q2', qos: 2 }, { topic: 'roam/q0', qos: 1 }] });
    assert.deepEqual((await cl.next('suback', 10000)).granted, [1, 2, 1]);
    mark(`connection 0 on ${a.nodeId}`);
    let reading = consume(cl, connection);

    // a publisher on each broker: one QoS 1 and one QoS 2 message at a time, each recorded once its broker acknowledged it
    const acked1: string[] = [];
    const acked2: string[] = [];
    let publishing = true;
    const publishOn = async (br: Broker, tag: string): Promise<void> => {
      const pub = await open(br);
      assert.equal((await pub.connect({ clientId: `roam-pub-${tag}`, clean: true })).reasonCode, 0);
      let pid = 0;
      for (let i = 0; publishing; i++) {
        pid = (pid % 65000) + 1;
        pub.send({ cmd: 'publish', topic: 'roam/q1', payload: Buffer.from(`${tag}1-${i}`), qos: 1, messageId: pid, retain: false, dup: false });
        const ack = await pub.next('puback', 20000);
        assert.equal(ack.reasonCode ?? 0, 0, `${tag}1-${i} acknowledged by ${br.nodeId}`);
        acked1.push(`${tag}1-${i}`);
        ackedAt.set(`${tag}1-${i}`, Date.now() - t0);
        pid = (pid % 65000) + 1;
        pub.send({ cmd: 'publish', topic: 'roam/q2', payload: Buffer.from(`${tag}2-${i}`), qos: 2, messageId: pid, retain: false, dup: false });
        const rec = await pub.next('pubrec', 20000);
        assert.equal(rec.reasonCode ?? 0, 0, `${tag}2-${i} received by ${br.nodeId}`);
        acked2.push(`${tag}2-${i}`);
        ackedAt.set(`${tag}2-${i}`, Date.now() - t0);
        pub.send({ cmd: 'pubrel', messageId: pid });
        await pub.next('pubcomp', 20000);
        pub.send({ cmd: 'publish', topic: 'roam/q0', payload: Buffer.from(`${tag}0-${i}`), qos: 0, retain: false, dup: false });
        await new Promise((r) => setTimeout(r, 5));
      }
      pub.destroy();
    };
    const publishLoop = Promise.all([publishOn(a, 'a'), publishOn(b, 'b'), publishOn(c, 'c')]);

    const route = [b, a, b, a];
    let at = a;
    for (const to of route) {
      await new Promise((r) => setTimeout(r, 1500)); // traffic flows to the session where it is
      const old = cl;
      mark(`move ${at.nodeId} -> ${to.nodeId}: CONNECT`);
      ({ cl, connack } = await bounded(`${ID}: move ${at.nodeId} -> ${to.nodeId}`, 60000, connectTo(to)));
      mark(`move ${at.nodeId} -> ${to.nodeId}: CONNACK ${connack.reasonCode}, connection ${connection + 1}`);
      assert.equal(connack.reasonCode, 0, `CONNACK on ${to.nodeId}`);
      assert.equal(connack.sessionPresent, true, `the session resumed on ${to.nodeId}`);
      await bounded(`${ID}: the connection on ${at.nodeId} closed after the move`, 15000, old.closedPromise);
      mark(`connection ${connection} on ${at.nodeId} closed`);
      await reading; // what the old connection received is read out
      reading = consume(cl, ++connection);
      at = to;
    }
    await new Promise((r) => setTimeout(r, 1500));
    publishing = false;
    await bounded('the publishers stop', 30000, publishLoop);
    const missing = () => [...acked1.filter((p) => !q1.has(p)), ...acked2.filter((p) => !q2.has(p))];
    await bounded(`every acknowledged message at ${at.nodeId} (missing ${missing().length})`, 30000, waitUntil(() => missing().length === 0, 30000, 'all received')).catch(async (err: Error) => {
      const gone = missing();
      // each missing message beside its neighbours from the same publisher (acknowledged when, arrived when and where)
      const around = gone.slice(0, 20).map((p) => {
        const [, tag, q, i] = /^([abc])([12])-(\d+)$/.exec(p)!;
        const near = [-2, -1, 0, 1, 2].map((d) => `${tag}${q}-${Number(i) + d}`).filter((x) => ackedAt.has(x));
        return near.map((x) => `${x}${x === p ? ' MISSING' : ''} acked ${ackedAt.get(x)} ms, arrived ${firstAt.get(x) ?? 'never'}`).join(' | ');
      });
      const seqs = await streamSequences(new Set(gone)).catch((e: Error) => `(stream not read: ${e.message})`);
      const lines = brokers.map((x) => `${x.nodeId}:\n${x.p!.stdout().split('\n').filter((l) => l.includes(ID) || / (WARN|ERROR) /.test(l)).slice(-30).join('\n')}`);
      throw new Error(
        `${err.message}: missing ${gone.slice(0, 40).join(',')}\n${around.join('\n')}\nin the message stream: ${seqs}\ntimeline:\n${timeline.join('\n')}\n${lines.join('\n')}`,
      );
    });
    await new Promise((r) => setTimeout(r, 1000)); // a late duplicate would show now
    const twice1 = [...q1.values()].filter((n) => n > 1).length;
    const twice2 = [...q2.entries()].filter(([, n]) => n > 1).map(([p]) => p);
    const twice0 = [...q0.entries()].filter(([, n]) => n > 1).map(([p]) => p);
    console.log(
      `cluster sessions: roaming alpha -> beta -> alpha -> beta -> alpha while a publisher on each broker ran: QoS 1 ${acked1.length} acknowledged, missing ${acked1.filter((p) => !q1.has(p)).length}, delivered twice ${twice1}; QoS 2 ${acked2.length} acknowledged, missing ${acked2.filter((p) => !q2.has(p)).length}, delivered twice ${twice2.length}; QoS 0 ${acked1.length} sent, ${q0.size} delivered, twice ${twice0.length}`,
    );
    assert.deepEqual(missing(), [], 'every message acknowledged to its publisher reaches the client');
    assert.deepEqual(twice2, [], 'no QoS 2 message delivered twice');
    assert.deepEqual(twice0, [], 'no QoS 0 message delivered twice');
    assert.ok(acked1.length > 100, `a steady stream (${acked1.length} QoS 1 messages)`);
    cl.send({ cmd: 'disconnect', reasonCode: 0 });
    recordWatch.stop();
  });

  test('cluster sessions - two simultaneous CONNECTs with one client id on two brokers end with one owner', async () => {
    // each client retries a CONNACK 0x88 (Server unavailable) as a client library does; neither reconnects after 0x8E
    const attempt = async (br: Broker): Promise<{ cl: RawClient; codes: number[] }> => {
      const codes: number[] = [];
      for (;;) {
        const cl = await open(br);
        const ack = await cl.connect({ clientId: 'twin', clean: false, properties: SESSION });
        codes.push(ack.reasonCode);
        if (ack.reasonCode !== 0x88 || codes.length >= 20) return { cl, codes };
        cl.destroy();
        await new Promise((r) => setTimeout(r, 300));
      }
    };
    const [p, q] = await Promise.all([attempt(a), attempt(b)]);
    await new Promise((r) => setTimeout(r, 3000)); // a takeover between the two settles
    const held = [
      { ...p, br: a },
      { ...q, br: b },
    ].filter((x) => x.codes.at(-1) === 0 && !x.cl.closed);
    console.log(`cluster sessions: simultaneous CONNECTs on alpha and beta: CONNACKs ${p.codes.join(',')} / ${q.codes.join(',')}; connections left ${held.length}`);
    assert.equal(held.length, 1, `one connection holds the session (CONNACKs ${p.codes} / ${q.codes})`);
    const other = held[0]!.cl === p.cl ? q : p;
    // the other was taken over (DISCONNECT 0x8E) or never got past 0x88
    if (other.codes.at(-1) === 0) assert.equal(other.cl.packets.find((x) => x.cmd === 'disconnect')?.reasonCode, 0x8e);
    else assert.equal(other.codes.at(-1), 0x88);
    assert.equal((await record('twin'))?.owner, held[0]!.br.nodeId, 'the record names the broker holding the connection');
  });

  test('cluster sessions - a client that keeps displacing itself between two brokers gets a CONNACK delayed more at each takeover', async () => {
    let prev: RawClient | undefined;
    for (let k = 0; k < 6; k++) {
      const { cl, connack } = await resume(k % 2 === 0 ? a : b, 'flap');
      assert.equal(connack.reasonCode, 0);
      if (prev !== undefined) assert.equal((await prev.next('disconnect', 10000)).reasonCode, 0x8e, `connection ${k - 1} taken over`);
      prev = cl;
    }
    // 1 CONNECT made the record, 5 took it over: the 4th and 5th within 10 s are above the limit of 3
    const delays = [a, b]
      .flatMap((x) => x.p!.stdout().split('\n'))
      .map((l) => /client flap keeps displacing itself \((\d+) takeovers in 10 s\): CONNACK delayed (\d+) ms/.exec(l))
      .filter((m) => m !== null)
      .map((m) => [Number(m[1]), Number(m[2])])
      .sort((x, y) => x[0]! - y[0]!);
    console.log(`cluster sessions: 6 CONNECTs of one client id alternating alpha/beta: CONNACK delays (takeovers, ms) ${JSON.stringify(delays)}`);
    assert.deepEqual(
      delays,
      [
        [4, 250],
        [5, 500],
      ],
      [a, b].map((x) => `${x.nodeId}:\n${x.p!.stdout().split('\n').filter((l) => l.includes('clientId=flap ') || l.includes('client flap ')).join('\n')}`).join('\n'),
    );
  });

  test('cluster sessions - clean start on another broker replaces the session: the MQTT 3.1.1 client on A is closed, nothing of the old session comes back', async () => {
    const old = await RawClient.open(a.mqtt, 4);
    clients.push(old);
    assert.equal((await old.connect({ clientId: 'fresh', clean: false })).returnCode, 0);
    old.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: 'fresh/t', qos: 1 }] });
    await old.next('suback');
    const pub = await publisher(a, 'fresh-pub');
    await pub('fresh/t', 'old-1', 1);
    assert.equal((await old.next('publish', 10000)).payload.toString(), 'old-1'); // left unacknowledged
    assert.equal(await heldInStream(`${recordKey('fresh')}.`), 1, 'the unacknowledged copy is in JetStream');
    // a CONNACK 0x88 (this broker briefly not a member on a loaded machine) is retried, as a client library does
    let cl: RawClient;
    let ack: Record<string, any>;
    for (let i = 0; ; i++) {
      cl = await open(b);
      ack = await cl.connect({ clientId: 'fresh', clean: true, properties: SESSION });
      if (ack.reasonCode !== 0x88 || i >= 20) break;
      cl.destroy();
      await new Promise((r) => setTimeout(r, 300));
    }
    assert.equal(ack.reasonCode, 0);
    assert.equal(ack.sessionPresent, false, 'a new session');
    await old.waitClosed(10000); // 3.1.1 has no DISCONNECT from the server: the connection closes
    assert.deepEqual(await drain(cl, 'publish', 1500), [], 'nothing of the old session is resent');
    const rec = await record('fresh');
    assert.equal(rec?.owner, 'beta');
    assert.deepEqual(rec?.subscriptions, [], 'the record is replaced');
    assert.equal(await heldInStream(`${recordKey('fresh')}.`), 0, 'what JetStream held for the old session is gone');
  });

  test('cluster sessions - a session whose record outgrows the bucket stays on its broker: WARN naming the client, no record', async () => {
    const cl = await open(a);
    assert.equal((await cl.connect({ clientId: 'big', clean: false, properties: SESSION })).reasonCode, 0);
    assert.equal((await record('big'))?.owner, 'alpha');
    // 20 subscriptions of 60-character filters: more than the 1 KiB Cluster.sessionRecordMaxBytes of these brokers
    cl.send({ cmd: 'subscribe', messageId: 1, subscriptions: Array.from({ length: 20 }, (_, i) => ({ topic: `big/${'x'.repeat(52)}/${String(i).padStart(2, '0')}`, qos: 1 })) });
    assert.equal((await cl.next('suback')).granted.length, 20);
    await waitUntil(() => /session record of big is \d+ bytes, above the bucket's max value .*stays on this broker only/.test(a.p!.stdout()), 10000, 'the WARN line');
    await waitUntil(async () => (await record('big')) === undefined, 10000, 'the record deleted');
    // the client keeps its session on alpha
    cl.send({ cmd: 'publish', topic: `big/${'x'.repeat(52)}/07`, payload: Buffer.from('still here'), qos: 0, retain: false, dup: false });
    assert.equal((await cl.next('publish', 10000)).payload.toString(), 'still here');
  });

  test('cluster sessions - SIGKILL of the broker holding 100 persistent sessions: adopted by a survivor, they keep holding, and resume on the others with every acknowledged message', async () => {
    const N = 100;
    const BEFORE = 3;
    const TOPIC = 'kill/all';
    for (let i = 0; i < N; i++) {
      const cl = await open(a);
      assert.equal((await cl.connect({ clientId: `k-${i}`, clean: false, properties: SESSION })).reasonCode, 0);
      cl.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: TOPIC, qos: 1 }] });
      await cl.next('suback');
      cl.send({ cmd: 'disconnect', reasonCode: 0 });
      await cl.waitClosed();
    }
    /** Each of the 100 sessions holds `n` messages on broker `br` (GET destination detail). */
    const holding = async (br: Broker, n: number) => {
      let seen = '';
      await waitUntil(async () => {
        const r = await rest(br.p!.port, br.p!.auth(), 'GET', `/api/v1/server/destination/detail?destinationName=${encodeURIComponent(TOPIC)}`);
        if (r.status !== 200) return false;
        const subs = (r.json.subscriptionList as Array<{ sessionId: string; size: number }>).filter((x) => x.sessionId.startsWith('mqtt:k-'));
        const sizes = new Map<number, number>();
        for (const x of subs) sizes.set(x.size, (sizes.get(x.size) ?? 0) + 1);
        seen = `${subs.length} subscriptions, sizes ${JSON.stringify([...sizes])}`;
        return subs.length === N && subs.every((x) => x.size >= n); // a copy routed by alpha but not acknowledged may come twice
      }, 30000, `${N} sessions holding ${n} messages on ${br.nodeId}`).catch(async (err: Error) => {
        const nc = await natsConnect({ servers: nats.urls });
        const jsm = await jetstreamManager(nc);
        const info = await jsm.streams.info('SY_sess_HELD', { subjects_filter: 'sy.sess.h.>' });
        const subj = Object.keys(info.state.subjects ?? {}).filter((k) => k.includes('.d.')).slice(0, 12);
        await nc.close();
        const logs = brokers.map((x) => `${x.nodeId}:\n${x.p!.stdout().split('\n').filter((l) => /WARN|ERROR|k-7 /.test(l)).slice(-20).join('\n')}`).join('\n');
        throw new Error(`${err.message}: ${seen}; stream ${info.state.messages} msgs, ${subj.join(' ')}\n${logs}`);
      });
    };
    // published on B (acknowledged there), routed to A's sessions by the message plane; A is killed at once, whether
    // it routed them or not, and one more is published on B before anyone adopts A's sessions
    const pubB = await publisher(b, 'kill-pub-b');
    for (let j = 0; j < BEFORE; j++) await pubB(TOPIC, `m-${j}`, 1);
    await a.p!.stop('SIGKILL');
    await pubB(TOPIC, `m-${BEFORE}`, 1);
    const ALL = BEFORE + 2;

    // the node that declares alpha gone adopts its sessions; a message published on the other one is held for them
    let adopter: Broker | undefined;
    await waitUntil(() => {
      // the 100 and the sessions of the earlier tests that alpha held
      adopter = [b, c].find((x) => Number(/sessions of a gone node adopted .*node=alpha sessions=(\d+)/.exec(x.p!.stdout())?.[1] ?? 0) >= N);
      return adopter !== undefined;
    }, 30000, 'the sessions of alpha adopted').catch((err: Error) => {
      throw new Error(`${err.message}\n${[b, c].map((x) => x.p!.stdout().split('\n').filter((l) => /gone|adopt|session/i.test(l)).join('\n')).join('\n---\n')}`);
    });
    await holding(adopter!, BEFORE + 1);
    const other = adopter === b ? c : b;
    const pubOther = await publisher(other, 'kill-pub-other');
    await pubOther(TOPIC, `m-${BEFORE + 1}`, 1);
    await holding(adopter!, ALL);

    const got = new Map<number, Set<string>>();
    await Promise.all(
      Array.from({ length: N }, async (_, i) => {
        const { cl, connack } = await resume(i % 2 === 0 ? b : c, `k-${i}`, 60000);
        assert.equal(connack.sessionPresent, true, `k-${i} resumed its session`);
        const mine = new Set<string>();
        got.set(i, mine);
        const end = Date.now() + 20000;
        while (mine.size < ALL && Date.now() < end) {
          const p = await cl.next('publish', end - Date.now()).catch(() => undefined);
          if (p === undefined) break;
          mine.add(p.payload.toString());
          cl.send({ cmd: 'puback', messageId: p.messageId });
        }
      }),
    );
    const missing: string[] = [];
    for (let i = 0; i < N; i++) for (let j = 0; j < ALL; j++) if (!got.get(i)?.has(`m-${j}`)) missing.push(`k-${i}:m-${j}`);
    console.log(
      `cluster sessions: ${N} sessions on alpha; published on beta and acknowledged: ${N * BEFORE} copies before the SIGKILL (alpha killed at once), ${N} after it before the adoption, ${N} after the adoption on ${other.nodeId} (${adopter!.nodeId} adopted); missing after resuming on beta/gamma: ${missing.length}`,
    );
    assert.deepEqual(missing, [], 'every message acknowledged to its publisher arrives');
  });

  test('cluster sessions - a broker stopped cleanly: a member adopts its persistent sessions, which keep holding', async () => {
    const cl = await open(c);
    assert.equal((await cl.connect({ clientId: 'leaver', clean: false, properties: SESSION })).reasonCode, 0);
    cl.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: 'leave/t', qos: 1 }] });
    await cl.next('suback');
    cl.send({ cmd: 'disconnect', reasonCode: 0 });
    await cl.waitClosed();
    await c.p!.stop('SIGTERM');
    // the live member with the smallest node id adopts (beta when the test above has killed alpha)
    const live = [a, b].filter((x) => x.p!.proc.exitCode === null && x.p!.proc.signalCode === null);
    let adopter: Broker | undefined;
    await waitUntil(() => (adopter = live.find((x) => /sessions of a gone node adopted .*node=gamma sessions=\d+/.test(x.p!.stdout()))) !== undefined, 20000, 'the sessions of gamma adopted').catch((err: Error) => {
      throw new Error(`${err.message}\n${live.map((x) => x.p!.stdout().split('\n').filter((l) => /gamma|left|adopt/.test(l)).slice(-10).join('\n')).join('\n---\n')}`);
    });
    assert.equal(adopter!.nodeId, live[0]!.nodeId, 'the live member with the smallest node id');
    const pub = await publisher(b, 'leave-pub');
    await pub('leave/t', 'while-away', 1);
    const { cl: back, connack } = await resume(b, 'leaver');
    assert.equal(connack.sessionPresent, true);
    assert.equal((await back.next('publish', 10000)).payload.toString(), 'while-away', 'held for the session while its broker was down');
  });
});
