/**
 * Messages across the cluster's nodes (src/cluster/messages.ts, docs/cluster.md "Messages across nodes"): three real
 * nats-servers with JetStream in a cluster, three Switchyard brokers as child processes (a fourth started later for the
 * retained set), mqtt.js clients. One NATS cluster for the whole file.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import mqtt, { type IClientPublishOptions, type MqttClient } from 'mqtt';
import { adminPasswordOf, removeDir, waitUntil } from '../helpers.js';
import { ClusterSchema } from '../../src/cluster/config.js';
import { clusterLinkConfig } from '../../src/cluster/messages.js';
import { api, clusterClient, launchClusterBroker, newClusterBroker, type ClusterBroker as Broker } from './helpers.js';
import { startNatsCluster, type NatsCluster } from './nats-cluster.js';

const CLUSTER = 'msg';

test('cluster messages - the messages keys: defaults, bounds, and the link they make', () => {
  const cfg = ClusterSchema.parse({ enabled: true, servers: ['nats://10.0.0.1:4222', 'nats://10.0.0.2:4222'], clusterName: 'main', user: 'u', password: 'p' });
  assert.deepEqual(cfg.messages, { enabled: true, maxAgeSeconds: 86400, maxBytes: 1073741824 });
  for (const [messages, path] of [[{ maxAgeSeconds: 59 }, 'maxAgeSeconds'], [{ maxBytes: 1000 }, 'maxBytes'], [{ retain: true }, '']] as const) {
    const r = ClusterSchema.safeParse({ messages });
    assert.equal(r.success, false, JSON.stringify(messages));
    assert.equal(r.error!.issues[0]!.path.join('.'), path ? `messages.${path}` : 'messages', JSON.stringify(messages));
  }
  const link = clusterLinkConfig(cfg);
  assert.equal(link.name, 'cluster');
  assert.equal(link.url, 'nats://10.0.0.1:4222,nats://10.0.0.2:4222');
  assert.deepEqual(link.authConfig, { username: 'u', password: 'p' });
  assert.deepEqual(link.protocolConfigs, [
    { type: 'nats', stream: 'SY_main_MSG', subjects: ['sy.main.m.>'], maxAgeSeconds: 86400, maxBytes: 1073741824, replicas: 3, qos0Subjects: { from: 'sy.main.m', to: 'sy.main.q0' } },
  ]);
  assert.deepEqual(
    link.linkConfigs.map((l) => [l.direction, l.localNamespace, l.remoteNamespace, l.qualityOfService]),
    [
      ['push', '', 'sy/main/m/', 2],
      ['pull', '', 'sy/main/m/', 2],
    ],
  );
});
const STREAM = `SY_${CLUSTER}_MSG`;

interface Received {
  topic: string;
  payload: string;
  qos: number;
  retain: boolean;
  properties: mqtt.IPublishPacket['properties'];
}

describe('cluster messages - one broker to clients over three nodes', { timeout: 300000 }, () => {
  let nats: NatsCluster;
  let nc: NatsConnection;
  let jsm: JetStreamManager;
  const brokers: Broker[] = [];
  const dirs: string[] = [];
  const clients: MqttClient[] = [];
  let a: Broker;
  let b: Broker;
  let c: Broker;

  const makeBroker = (nodeId: string): Broker =>
    // a long lease: a broker restarted here is never declared gone; $SYS every second
    newClusterBroker('switchyard-clm-', dirs, brokers, { servers: nats.urls, clusterName: CLUSTER, nodeId, replicas: 3, heartbeatSeconds: 2, leaseSeconds: 20 }, { MessageDaemon: { systemTopicInterval: 1000 } });
  const launch = launchClusterBroker;
  const client = (x: Broker, clientId: string, opts: mqtt.IClientOptions = {}): Promise<MqttClient> => clusterClient(x, clients, clientId, opts);

  const collect = (cl: MqttClient): Received[] => {
    const got: Received[] = [];
    cl.on('message', (topic, payload, packet) => got.push({ topic, payload: payload.toString(), qos: packet.qos, retain: packet.retain, properties: packet.properties }));
    return got;
  };

  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  before(async () => {
    nats = await startNatsCluster(3, `sy-msg-${process.pid}`);
    nc = await connect({ servers: nats.urls });
    jsm = await jetstreamManager(nc);
    a = makeBroker('alpha');
    b = makeBroker('beta');
    c = makeBroker('gamma');
    await Promise.all([launch(a), launch(b), launch(c)]);
  });

  after(async () => {
    if (process.env.CLUSTER_MESSAGES_LOGS) for (const x of brokers) writeFileSync(join(process.env.CLUSTER_MESSAGES_LOGS, `${x.nodeId}.log`), x.p?.stdout() ?? '');
    for (const cl of clients) cl.end(true);
    for (const x of brokers) await x.p?.stop('SIGKILL');
    await nc?.close().catch(() => undefined);
    await nats?.dispose();
    for (const d of dirs) removeDir(d);
  });

  test('cluster messages - a publish on A reaches B and C once, QoS 0/1/2 downgraded per subscriber, MQTT 5 properties and the subscription identifier kept', async () => {
    const subA = await client(a, 'props-sub-a');
    const subB = await client(b, 'props-sub-b');
    const subC = await client(c, 'props-sub-c');
    const gotA = collect(subA);
    const gotB = collect(subB);
    const gotC = collect(subC);
    await subA.subscribeAsync('props/#', { qos: 2 });
    await subB.subscribeAsync('props/#', { qos: 2, properties: { subscriptionIdentifier: 7 } });
    await subC.subscribeAsync('props/#', { qos: 1 });
    const pub = await client(a, 'props-pub');
    const properties: IClientPublishOptions['properties'] = {
      userProperties: { site: 'north', tags: ['a', 'b'] },
      contentType: 'text/plain; charset=utf-8',
      responseTopic: 'props/reply',
      correlationData: Buffer.from([1, 2, 3, 250]),
      payloadFormatIndicator: true,
      messageExpiryInterval: 300,
    };
    for (const qos of [0, 1, 2] as const) await pub.publishAsync(`props/q${qos}`, `hello ${qos}`, { qos, properties });
    await waitUntil(() => gotB.length >= 3 && gotC.length >= 3 && gotA.length >= 3, 20000, 'three messages on each node');
    await sleep(1500); // a copy routed twice (an echo from the stream) would arrive meanwhile
    for (const [name, got, maxQos] of [['A', gotA, 2], ['B', gotB, 2], ['C', gotC, 1]] as const) {
      assert.deepEqual(got.map((m) => m.topic).sort(), ['props/q0', 'props/q1', 'props/q2'], `${name} got each message once`);
      for (const m of got) {
        const qos = Number(m.topic.slice(-1));
        assert.equal(m.qos, Math.min(qos, maxQos), `${name}: ${m.topic} at QoS min(publish, subscription)`);
        assert.equal(m.payload, `hello ${qos}`);
        assert.equal(m.retain, false);
        const p = m.properties ?? {};
        assert.deepEqual({ ...p.userProperties }, { site: 'north', tags: ['a', 'b'] }, `${name}: user properties`);
        assert.equal(p.contentType, 'text/plain; charset=utf-8');
        assert.equal(p.responseTopic, 'props/reply');
        assert.deepEqual(p.correlationData, Buffer.from([1, 2, 3, 250]));
        assert.equal(p.payloadFormatIndicator, true, `${name}: payload format indicator`);
        assert.ok(p.messageExpiryInterval !== undefined && p.messageExpiryInterval > 0 && p.messageExpiryInterval <= 300, `${name}: remaining expiry ${p.messageExpiryInterval}`);
        if (name === 'B') assert.deepEqual([p.subscriptionIdentifier].flat(), [7], 'B: its own subscription identifier');
        else assert.equal(p.subscriptionIdentifier, undefined);
      }
    }
  });

  test('cluster messages - QoS 0 crosses outside the stream: a QoS 0 publish on A reaches B and is not stored, a QoS 1 one is; a retained QoS 0 message is kept in SY_RETAINED for new subscribers', async () => {
    const subB = await client(b, 'q0-sub-b');
    const gotB = collect(subB);
    await subB.subscribeAsync('q0s/#', { qos: 1 });
    const pub = await client(a, 'q0-pub');
    await pub.publishAsync('q0s/zero', 'zero', { qos: 0 });
    await pub.publishAsync('q0s/one', 'one', { qos: 1 });
    await waitUntil(() => gotB.length >= 2, 15000, 'both messages on B');
    assert.deepEqual(gotB.map((m) => [m.topic, m.payload, m.qos]).sort(), [['q0s/one', 'one', 1], ['q0s/zero', 'zero', 0]], 'B got each once, QoS 0 at QoS 0');
    const stored = async (): Promise<Record<string, number>> => (await jsm.streams.info(STREAM, { subjects_filter: `sy.${CLUSTER}.>` })).state.subjects ?? {};
    const inStream = Object.entries(await stored()).filter(([subject]) => subject.startsWith(`sy.${CLUSTER}.m.q0s.`) || subject.startsWith(`sy.${CLUSTER}.q0.`));
    assert.deepEqual(inStream, [[`sy.${CLUSTER}.m.q0s.one`, 1]], 'the stream holds the QoS 1 message only');

    // retained at QoS 0: crosses live, and its last value is in SY_RETAINED under the stream's subject (what a node
    // that starts reads), while the stream itself does not hold it
    await pub.publishAsync('q0s/kept', 'kept', { qos: 0, retain: true });
    await waitUntil(async () => {
      const probe = await client(c, `q0-probe-${Date.now()}`);
      const got = collect(probe);
      await probe.subscribeAsync('q0s/kept', { qos: 1 });
      await sleep(200);
      probe.end(true);
      return got.some((m) => m.payload === 'kept' && m.retain);
    }, 15000, 'C holds the retained QoS 0 message for a new subscriber');
    const kept = await jsm.streams.getMessage('SY_RETAINED', { last_by_subj: `$SY.retained.sy.${CLUSTER}.m.q0s.kept` });
    assert.equal(Buffer.from(kept!.data).toString(), 'kept', 'SY_RETAINED holds the last value');
    assert.equal((await stored())[`sy.${CLUSTER}.m.q0s.kept`], undefined, 'the stream does not hold the retained QoS 0 message');
    const status = (await api(b, '/api/v1/server/integration/cluster/status')) as { qos0Dropped?: number };
    assert.equal(status.qos0Dropped, 0, 'B dropped no QoS 0 message');
  });

  test('cluster messages - no local: a client never gets its own publish back from another node, the other nodes get it', async () => {
    const self = await client(a, 'nl-self');
    const gotSelf = collect(self);
    await self.subscribeAsync('nl/t', { qos: 1, nl: true });
    const other = await client(b, 'nl-other');
    const gotOther = collect(other);
    await other.subscribeAsync('nl/t', { qos: 1, nl: true });
    await self.publishAsync('nl/t', 'mine', { qos: 1 });
    await waitUntil(() => gotOther.length === 1, 15000, 'B receives the message');
    await sleep(1500);
    assert.equal(gotSelf.length, 0, 'the publisher did not get its own message back');
    assert.equal(gotOther.length, 1);
  });

  test('cluster messages - ACLs are checked where the subscriber is: a topic its node denies never arrives, the others do', async () => {
    const rest = async (x: Broker, method: string, path: string, body: unknown): Promise<Response> =>
      fetch(`http://127.0.0.1:${x.p!.port}${path}`, { method, headers: { ...x.p!.auth(), 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const created = await rest(c, 'POST', '/api/v1/auth/users', { username: 'alice', password: 'alice-password-1' });
    assert.equal(created.status, 201, await created.clone().text());
    const uuid = ((await created.json()) as { uniqueId: string }).uniqueId;
    const deny = await rest(c, 'PUT', '/api/v1/auth/resources/acl', { resourceType: 'Topic', resourceKey: 'acl/secret', entries: [{ principalType: 'IDENTITY', principalId: uuid, effect: 'DENY', permissions: ['subscribe'] }] });
    assert.equal(deny.status, 200, await deny.text());
    const alice = await client(c, 'acl-alice', { username: 'alice', password: 'alice-password-1' });
    const gotAlice = collect(alice);
    await alice.subscribeAsync('acl/#', { qos: 1 });
    const admin = await client(c, 'acl-admin');
    const gotAdmin = collect(admin);
    await admin.subscribeAsync('acl/#', { qos: 1 });
    const pub = await client(a, 'acl-pub');
    await pub.publishAsync('acl/secret', 'secret', { qos: 1 });
    await pub.publishAsync('acl/open', 'open', { qos: 1 });
    await waitUntil(() => gotAdmin.length === 2 && gotAlice.length >= 1, 15000, 'both messages on C');
    await sleep(500);
    assert.deepEqual(gotAdmin.map((m) => m.topic).sort(), ['acl/open', 'acl/secret'], 'both crossed to C');
    assert.deepEqual(gotAlice.map((m) => m.topic), ['acl/open'], "C's ACL kept acl/secret from alice");
  });

  test('cluster messages - a retained message is seen by new subscribers on every node, on a broker started later too, and an empty one clears it everywhere', async () => {
    const pub = await client(a, 'ret-pub');
    await pub.publishAsync('ret/one', 'kept', { qos: 1, retain: true });
    const firstRetained = async (x: Broker, id: string, filter: string, want: number): Promise<Received[]> => {
      const cl = await client(x, id);
      const got = collect(cl);
      await cl.subscribeAsync(filter, { qos: 1 });
      await waitUntil(() => got.length >= want, 15000, `${id}: ${want} retained message(s)`);
      await sleep(300);
      cl.end(true);
      return got;
    };
    await waitUntil(async () => {
      // the copies travel asynchronously: poll with fresh subscribers until each node holds it
      for (const [x, i] of [[b, 1], [c, 2]] as const) {
        const cl = await client(x, `ret-probe-${i}-${Date.now()}`);
        const got = collect(cl);
        await cl.subscribeAsync('ret/one', { qos: 1 });
        await sleep(200);
        cl.end(true);
        if (got.length === 0) return false;
      }
      return true;
    }, 15000, 'B and C hold the retained message');
    for (const [x, id] of [[b, 'ret-b'], [c, 'ret-c']] as const) {
      const got = await firstRetained(x, id, 'ret/#', 1);
      assert.deepEqual(got.map((m) => [m.topic, m.payload, m.retain]), [['ret/one', 'kept', true]], `${id}: the retained message, flagged retained`);
    }
    // a broker that joins after the publish reads the retained set when its link starts
    const d = makeBroker('delta');
    await launch(d);
    const gotD = await firstRetained(d, 'ret-d', 'ret/#', 1);
    assert.deepEqual(gotD.map((m) => [m.topic, m.payload, m.retain]), [['ret/one', 'kept', true]], 'the later broker has the retained message');

    // cleared on B (an empty retained payload), then a marker retained after it: once a node has the marker, it has
    // taken the clear too (one stream, in order)
    const clearer = await client(b, 'ret-clear');
    await clearer.publishAsync('ret/one', '', { qos: 1, retain: true });
    await clearer.publishAsync('ret/marker', 'after', { qos: 1, retain: true });
    for (const [x, id] of [[a, 'ret-a2'], [c, 'ret-c2'], [d, 'ret-d2'], [b, 'ret-b2']] as const) {
      await waitUntil(async () => {
        const got = await firstRetained(x, `${id}-${Date.now()}`, 'ret/marker', 1).catch(() => []);
        return got.length === 1;
      }, 20000, `${id}: the marker arrived`);
      const got = await firstRetained(x, id, 'ret/#', 1);
      assert.deepEqual(got.map((m) => m.topic), ['ret/marker'], `${id}: ret/one is cleared`);
    }
    await d.p!.stop('SIGTERM');

    // the link of C reconnects (stopped and started over REST): it reads the retained set again, and a live subscriber
    // does not get the retained messages a second time
    const live = await client(c, 'ret-live');
    const gotLive = collect(live);
    await live.subscribeAsync('ret/#', { qos: 1 });
    await waitUntil(() => gotLive.length === 1, 10000, 'the retained marker at subscribe');
    const patch = (state: string) =>
      fetch(`http://127.0.0.1:${c.p!.port}/api/v1/server/integration/cluster`, { method: 'PATCH', headers: { ...c.p!.auth(), 'content-type': 'application/json' }, body: JSON.stringify({ state }) });
    assert.equal((await patch('stopped')).status, 200);
    assert.equal((await patch('started')).status, 200);
    await waitUntil(async () => ((await api(c, '/api/v1/server/integration/cluster/status')) as { state?: string }).state === 'Established', 30000, 'C: cluster link established again');
    await sleep(1500);
    assert.deepEqual(gotLive.map((m) => [m.topic, m.retain]), [['ret/marker', true]], 'the retained set read again is not delivered again');
  });

  test('cluster messages - a shared subscription with a member on each broker gets each of 10 000 messages exactly once, and the member on each broker a share of them', async () => {
    const members = await Promise.all([client(a, 'share-a'), client(b, 'share-b'), client(c, 'share-c')]);
    const counts = new Map<number, number>();
    const per = [0, 0, 0];
    members.forEach((m, i) =>
      m.on('message', (_topic, payload) => {
        const n = Number(payload.toString());
        counts.set(n, (counts.get(n) ?? 0) + 1);
        per[i]!++;
      }),
    );
    for (const m of members) await m.subscribeAsync('$share/g/share/t', { qos: 1 });
    // the group's one JetStream consumer exists (so nothing published from now on is missed)
    await waitUntil(async () => {
      for await (const ci of jsm.consumers.list(STREAM)) if (ci.name.startsWith('SY_share_g_')) return true;
      return false;
    }, 20000, 'the shared group consumer');
    const pub = await client(a, 'share-pub');
    // the three brokers pull from the group's consumer: a first pull that nats-server 2.9 lost on the consumer just
    // created is renewed within 5 s (SHARE_PULL_EXPIRES_MS; it was 30 s, and one broker's member got everything)
    await waitUntil(async () => {
      for await (const ci of jsm.consumers.list(STREAM)) if (ci.name.startsWith('SY_share_g_')) return ci.num_waiting >= 3;
      return false;
    }, 15000, 'a pull of each broker waiting on the group consumer');
    const N = 10000;
    const WINDOW = 10; // the broker's default Receive Maximum (MQTT Interface serverReceiveMaximum)
    for (let i = 0; i < N; i += WINDOW) {
      const batch: Promise<unknown>[] = [];
      for (let j = i; j < Math.min(N, i + WINDOW); j++) batch.push(pub.publishAsync('share/t', String(j), { qos: 1 }));
      await Promise.all(batch);
    }
    await waitUntil(() => counts.size === N, 120000, `all ${N} messages received (have ${counts.size})`).catch(() => undefined);
    await sleep(2000); // late duplicates would arrive meanwhile
    let duplicates = 0;
    for (const v of counts.values()) duplicates += v - 1;
    const lost = N - counts.size;
    console.log(`# shared group over 3 brokers: ${N} published on A, received ${counts.size} distinct (A ${per[0]}, B ${per[1]}, C ${per[2]}), duplicates ${duplicates}, lost ${lost}`);
    assert.equal(lost, 0, 'no message lost');
    assert.equal(duplicates, 0, 'no message delivered twice');
    // JetStream hands a pull consumer's messages to the waiting pulls in turn: about a third each; 5 % is the floor
    for (const [i, n] of per.entries()) assert.ok(n >= N / 20, `broker ${'ABC'[i]}'s member got a share (${per.join(' / ')})`);
  });

  test('cluster messages - $SYS stays per node: nothing under $SYS enters the stream, while ordinary topics do; a shared group on $SYS is served by its node', async () => {
    // a shared group on a $ filter is not fed through NATS (nothing under $ crosses): its node's own $SYS updates reach it
    const member = await client(b, 'sys-share');
    const got = collect(member);
    await member.subscribeAsync('$share/sys/$SYS/#', { qos: 0 });
    await waitUntil(() => got.length > 0, 15000, 'a $SYS update for the shared group on B');
    const info = await jsm.streams.info(STREAM, { subjects_filter: '>' });
    const subjects = Object.keys(info.state.subjects ?? {});
    assert.ok(subjects.includes(`sy.${CLUSTER}.m.props.q1`), `the stream holds ordinary topics (${subjects.slice(0, 5).join(', ')})`);
    assert.deepEqual(subjects.filter((s) => s.includes('$SYS')), [], 'no $SYS subject');
    assert.equal(info.config.num_replicas, 3, 'the stream has Cluster.replicas replicas');
  });

  test('cluster messages - a node that was down catches up from its durable consumer: a persistent session there gets what was published meanwhile, and its restored shared group is one group with the other nodes', async () => {
    const session = { clean: false, properties: { sessionExpiryInterval: 600 } };
    const first = await client(c, 'catch-sub', session);
    await first.subscribeAsync('catch/t', { qos: 1 });
    await first.endAsync();
    // a persistent member of a shared group on C too: its group is restored with the session when C starts again
    const shareFirst = await client(c, 'catch-share', session);
    await shareFirst.subscribeAsync('$share/h/catchs/t', { qos: 1 });
    await shareFirst.endAsync();
    // SIGKILL and back within its lease: nobody declares C gone or adopts its sessions (a clean stop would hand them to
    // another node, docs/cluster.md Sessions), so what C delivers after its restart comes from its own durable consumer
    await c.p!.stop('SIGKILL');
    const pub = await client(a, 'catch-pub');
    const N = 50;
    for (let i = 0; i < N; i++) await pub.publishAsync('catch/t', String(i), { qos: 1 });
    await launch(c);
    // the held messages come right after CONNACK: the handler is attached before the connection is made
    const again = mqtt.connect(`mqtt://127.0.0.1:${c.mqttPort}`, { clientId: 'catch-sub', protocolVersion: 5, username: 'admin', password: adminPasswordOf(c.dataDir), reconnectPeriod: 0, ...session });
    clients.push(again);
    const got = collect(again);
    await new Promise((resolve, reject) => {
      again.once('connect', resolve);
      again.once('error', reject);
    });
    await waitUntil(() => new Set(got.map((m) => m.payload)).size === N, 30000, `the ${N} messages published while C was down (have ${got.length})`);
    assert.deepEqual(got.map((m) => Number(m.payload)), [...Array(N).keys()], 'each once, in publish order');

    // the restored shared group on C and a new member on B form one group across the cluster: each message once
    const shareAgain = mqtt.connect(`mqtt://127.0.0.1:${c.mqttPort}`, { clientId: 'catch-share', protocolVersion: 5, username: 'admin', password: adminPasswordOf(c.dataDir), reconnectPeriod: 0, ...session });
    clients.push(shareAgain);
    const gotShareC = collect(shareAgain);
    await new Promise((resolve, reject) => {
      shareAgain.once('connect', resolve);
      shareAgain.once('error', reject);
    });
    const shareB = await client(b, 'catch-share-b');
    const gotShareB = collect(shareB);
    await shareB.subscribeAsync('$share/h/catchs/t', { qos: 1 });
    await waitUntil(async () => {
      for await (const ci of jsm.consumers.list(STREAM)) if (ci.name.startsWith('SY_share_h_')) return true;
      return false;
    }, 20000, 'the consumer of group h');
    await sleep(1500);
    const M = 20;
    for (let i = 0; i < M; i++) await pub.publishAsync('catchs/t', String(i), { qos: 1 });
    const delivered = () => [...gotShareC, ...gotShareB].map((m) => Number(m.payload));
    await waitUntil(() => new Set(delivered()).size === M, 20000, 'each message of group h delivered');
    await sleep(1500); // a second copy in the group would arrive meanwhile
    assert.equal(delivered().length, M, `each message once in the group (C ${gotShareC.length}, B ${gotShareB.length})`);
  });

  test('cluster messages - SIGKILL of the nats-server leading the stream while QoS 1 traffic flows: every acknowledged message arrives', async () => {
    const sub = await client(b, 'kill-sub', { clean: false, properties: { sessionExpiryInterval: 600 } });
    const got = new Map<number, number>();
    sub.on('message', (_t, payload) => {
      const n = Number(payload.toString());
      got.set(n, (got.get(n) ?? 0) + 1);
    });
    await sub.subscribeAsync('kill/t', { qos: 1 });
    const pub = await client(a, 'kill-pub');
    const acked = new Set<number>();
    let refused = 0;
    const N = 3000;
    const leader = (await jsm.streams.info(STREAM)).cluster?.leader;
    const victim = nats.nodes.findIndex((n) => n.name === leader);
    assert.ok(victim >= 0, `the stream leader ${leader} is one of ours`);
    let killed = false;
    for (let i = 0; i < N; i += 10) {
      if (!killed && i >= 600) {
        killed = true;
        await nats.stop(victim, 'SIGKILL');
      }
      const batch: Promise<void>[] = [];
      for (let j = i; j < Math.min(N, i + 10); j++) {
        batch.push(
          pub.publishAsync('kill/t', String(j), { qos: 1 }).then(
            (packet) => {
              const rc = (packet as { reasonCode?: number } | undefined)?.reasonCode ?? 0;
              if (rc < 0x80) acked.add(j);
              else refused++;
            },
            () => {
              refused++;
            },
          ),
        );
      }
      await Promise.all(batch);
    }
    await waitUntil(() => [...acked].every((n) => got.has(n)), 90000, 'every acknowledged message at the subscriber on B').catch(() => undefined);
    const lost = [...acked].filter((n) => !got.has(n));
    let duplicates = 0;
    for (const v of got.values()) duplicates += v - 1;
    // where duplicates come from: copies stored twice in the stream (a resend JetStream did not recognise) or delivered twice
    const stored = (await jsm.streams.info(STREAM, { subjects_filter: `sy.${CLUSTER}.m.kill.t` })).state.subjects?.[`sy.${CLUSTER}.m.kill.t`] ?? 0;
    console.log(`# SIGKILL of nats-server ${leader} (stream leader) after 600 of ${N} QoS 1 publishes on A: acknowledged ${acked.size}, refused ${refused}, received on B ${got.size} distinct, duplicates ${duplicates}, acknowledged but lost ${lost.length}; the stream holds ${stored} copies`);
    assert.deepEqual(lost.slice(0, 20), [], 'no acknowledged message lost');
    await nats.restart(victim);
  });
});
