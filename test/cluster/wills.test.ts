/**
 * Wills across the cluster (src/cluster/wills.ts, docs/cluster.md "Wills"): three real nats-servers with JetStream in a
 * cluster (R3), three Switchyard brokers as child processes (heartbeat 1 s, lease 4 s), mqtt.js clients. The wills of
 * a SIGKILLed broker's clients are published once by the survivor that declared it gone, after their delay, unless the
 * client connected again meanwhile; every survivor's subscribers get each of them exactly once.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import { Kvm, type KV } from '@nats-io/kv';
import mqtt, { type MqttClient } from 'mqtt';
import { removeDir, waitUntil } from '../helpers.js';
import { api, clusterClient, launchClusterBroker, newClusterBroker, type ClusterBroker as Broker } from './helpers.js';
import { startNatsCluster, type NatsCluster } from './nats-cluster.js';

const CLUSTER = 'wills';
const HEARTBEAT = 1;
const LEASE = 4;

interface Got {
  topic: string;
  payload: string;
  at: number;
}

const keyOf = (clientId: string): string => `c.${Buffer.from(clientId).toString('base64url')}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('cluster wills - published once by a survivor', { timeout: 300000 }, () => {
  let nats: NatsCluster;
  let nc: NatsConnection;
  let kv: KV;
  const brokers: Broker[] = [];
  const dirs: string[] = [];
  const clients: MqttClient[] = [];
  let a: Broker;
  let b: Broker;
  let c: Broker;

  const makeBroker = (nodeId: string): Broker =>
    newClusterBroker('switchyard-clw-', dirs, brokers, { servers: nats.urls, clusterName: CLUSTER, nodeId, replicas: 3, heartbeatSeconds: HEARTBEAT, leaseSeconds: LEASE });
  const launch = launchClusterBroker;
  const client = (x: Broker, clientId: string, opts: mqtt.IClientOptions = {}): Promise<MqttClient> => clusterClient(x, clients, clientId, opts);
  const collect = (cl: MqttClient): Got[] => {
    const got: Got[] = [];
    cl.on('message', (topic, payload) => got.push({ topic, payload: payload.toString(), at: Date.now() }));
    return got;
  };
  const count = (got: Got[], topic: string): number => got.filter((g) => g.topic === topic).length;
  const will = (topic: string, delay?: number): mqtt.IClientOptions['will'] => ({
    topic,
    payload: Buffer.from(`gone:${topic}`),
    qos: 1,
    retain: false,
    ...(delay !== undefined ? { properties: { willDelayInterval: delay } } : {}),
  });
  const record = async (clientId: string): Promise<{ nodeId: string; epoch: number; claim?: { by: string } } | undefined> => {
    const e = await kv.get(keyOf(clientId));
    return e && e.operation === 'PUT' ? e.json() : undefined;
  };

  before(async () => {
    nats = await startNatsCluster(3);
    a = makeBroker('alpha');
    b = makeBroker('beta');
    c = makeBroker('gamma');
    await Promise.all([launch(a), launch(b), launch(c)]);
    nc = await connect({ servers: nats.urls });
    kv = await new Kvm(jetstream(nc)).open(`switchyard_${CLUSTER}_wills`);
  });

  after(async () => {
    for (const cl of clients) cl.end(true);
    await nc?.close();
    for (const x of brokers) await x.p?.stop('SIGKILL');
    await nats?.dispose();
    for (const d of dirs) removeDir(d);
  });

  test('cluster wills - a will is kept in JetStream while its client is connected, removed by a clean DISCONNECT, and published once by its own node when the connection breaks', async () => {
    const watcherA = await client(a, 'watch-local-a');
    const watcherB = await client(b, 'watch-local-b');
    await watcherA.subscribeAsync('local/#', { qos: 1 });
    await watcherB.subscribeAsync('local/#', { qos: 1 });
    const gotA = collect(watcherA);
    const gotB = collect(watcherB);

    const clean = await client(a, 'local-clean', { will: will('local/clean') });
    const broken = await client(a, 'local-broken', { will: will('local/broken') });
    await waitUntil(async () => (await record('local-clean'))?.nodeId === 'alpha' && (await record('local-broken'))?.nodeId === 'alpha', 10000, 'will records written by alpha');
    // the epoch of alpha's run (1, or more when its first lease write was taken but not answered in time and it joined again)
    assert.equal((await record('local-broken'))!.epoch, ((await api(a, '/api/v1/server/cluster')) as { epoch: number }).epoch);

    await clean.endAsync(); // DISCONNECT 0x00: the will is discarded
    await waitUntil(async () => (await record('local-clean')) === undefined, 10000, 'the clean client’s record removed');

    broken.stream.destroy(); // no DISCONNECT: the will is due now
    await waitUntil(() => count(gotA, 'local/broken') >= 1 && count(gotB, 'local/broken') >= 1, 15000, 'the broken client’s will on alpha and beta');
    await waitUntil(async () => (await record('local-broken')) === undefined, 10000, 'the broken client’s record removed');
    await sleep(1500);
    assert.equal(count(gotA, 'local/broken'), 1);
    assert.equal(count(gotB, 'local/broken'), 1);
    assert.equal(count(gotA, 'local/clean') + count(gotB, 'local/clean'), 0, 'a clean DISCONNECT publishes no will');
  });

  test('cluster wills - a client that connects again on another broker without a will: the will of its earlier connection is not published when that connection breaks', async () => {
    const watcher = await client(c, 'watch-again-c');
    await watcher.subscribeAsync('again/#', { qos: 1 });
    const got = collect(watcher);
    const first = await client(a, 'again', { will: will('again/first') });
    await waitUntil(async () => (await record('again'))?.nodeId === 'alpha', 10000, "alpha's record of the first connection");
    // the newest connection of a client id decides, wherever it is: beta removes alpha's record (read from the
    // stream's leader: a replica behind alpha's write would say there is none)
    const second = await client(b, 'again');
    await waitUntil(async () => (await record('again')) === undefined, 10000, "the first connection's record removed by beta");
    first.stream.destroy(); // no DISCONNECT: the first connection's will is due on alpha, whose record is gone
    await waitUntil(() => a.p!.stdout().includes('the will of again is not published here'), 10000, 'alpha deciding on the will of the first connection');
    await sleep(1500);
    assert.equal(count(got, 'again/first'), 0, 'the will of the earlier connection was published');
    await second.endAsync();
  });

  test('cluster wills - SIGKILL of a broker: its clients’ wills are published once by the declaring survivor, after their delay, and a client back within the delay cancels its own', async () => {
    const watcherA = await client(a, 'watch-a');
    const watcherB = await client(b, 'watch-b');
    await watcherA.subscribeAsync('dead/#', { qos: 1 });
    await watcherB.subscribeAsync('dead/#', { qos: 1 });
    const gotA = collect(watcherA);
    const gotB = collect(watcherB);

    // on gamma: wills without delay (v5 and 3.1.1), one with a delay of 7 s, one whose session expiry (0) ends the delay,
    // one with a delay of 10 s whose client comes back on alpha, and one that disconnects cleanly
    await client(c, 'now-5', { will: will('dead/now-5') });
    await client(c, 'now-311', { protocolVersion: 4, will: will('dead/now-311') });
    await client(c, 'delayed', { will: will('dead/delayed', 7), properties: { sessionExpiryInterval: 60 } });
    await client(c, 'expiry-0', { will: will('dead/expiry-0', 30) });
    await client(c, 'returns', { will: will('dead/returns', 10), properties: { sessionExpiryInterval: 60 } });
    const clean = await client(c, 'clean', { will: will('dead/clean') });
    await clean.endAsync();
    for (const id of ['now-5', 'now-311', 'delayed', 'expiry-0', 'returns']) {
      await waitUntil(async () => (await record(id))?.nodeId === 'gamma', 10000, `${id}: will record of gamma`);
    }
    await waitUntil(async () => (await record('clean')) === undefined, 10000, 'clean: record removed');
    // and 100 more clients with wills (every fourth with a delay of 5 s and a persistent session)
    const BULK = 100;
    for (let i = 0; i < BULK; i += 10) {
      // ten at a time: the password checks of a hundred simultaneous CONNECTs would fill the hashing queue (0x89)
      await Promise.all(
        Array.from({ length: 10 }, (_, j) => i + j).map((n) =>
          client(c, `bulk-${n}`, n % 4 === 0 ? { will: will(`dead/bulk/${n}`, 5), properties: { sessionExpiryInterval: 60 } } : { will: will(`dead/bulk/${n}`) }),
        ),
      );
    }
    await waitUntil(async () => {
      const keys: string[] = [];
      for await (const k of await kv.keys()) keys.push(k);
      return Array.from({ length: BULK }, (_, i) => keyOf(`bulk-${i}`)).every((k) => keys.includes(k));
    }, 15000, 'the 100 will records written');

    await c.p!.stop('SIGKILL');
    const killedAt = Date.now();
    // the two survivors agree on one declarer
    let declarer: Broker | undefined;
    let lastHeartbeat = 0;
    await waitUntil(async () => {
      const v = (await api(a, '/api/v1/server/cluster')) as { nodes: Array<{ nodeId: string; state: string; declaredBy?: string; lastHeartbeat: string }> };
      const g = v.nodes.find((n) => n.nodeId === 'gamma');
      if (g?.state !== 'gone') return false;
      declarer = g.declaredBy === 'alpha' ? a : b;
      lastHeartbeat = Date.parse(g.lastHeartbeat); // gamma's clock, this machine's
      return true;
    }, 20000, 'gamma declared gone');

    await waitUntil(() => ['now-5', 'now-311', 'expiry-0'].every((t) => count(gotA, `dead/${t}`) >= 1 && count(gotB, `dead/${t}`) >= 1), 15000, 'the wills without delay on both survivors');
    // the client with a 10 s delay is back (on alpha) before its delay ran out: its will is not published
    const back = await client(a, 'returns', { properties: { sessionExpiryInterval: 60 } });
    await waitUntil(() => count(gotA, 'dead/delayed') >= 1 && count(gotB, 'dead/delayed') >= 1, 20000, 'the delayed will on both survivors');
    await waitUntil(() => [gotA, gotB].every((got) => Array.from({ length: BULK }, (_, i) => `dead/bulk/${i}`).every((t) => count(got, t) >= 1)), 20000, 'the 100 wills on both survivors');
    const delayedAt = gotA.find((g) => g.topic === 'dead/delayed')!.at;
    // counted from gamma's last heartbeat: one heartbeat before the kill on a quiet machine, more when gamma was too busy
    // to write it in time (it had just taken the 100 CONNECTs)
    assert.ok(delayedAt - lastHeartbeat >= 7000 - 500, `the delayed will waited its delay (${delayedAt - lastHeartbeat} ms after gamma's last heartbeat, ${delayedAt - killedAt} ms after the kill)`);
    // past the returning client's delay, and a few heartbeats more for anything late or doubled
    await sleep(Math.max(0, killedAt + 12000 - Date.now()));
    await sleep(2000);
    for (const [name, got] of [['alpha', gotA], ['beta', gotB]] as const) {
      for (const t of ['now-5', 'now-311', 'expiry-0', 'delayed']) assert.equal(count(got, `dead/${t}`), 1, `${name} got dead/${t} once`);
      assert.equal(count(got, 'dead/returns'), 0, `${name}: the will of the client that came back is not published`);
      assert.equal(count(got, 'dead/clean'), 0, `${name}: no will after a clean DISCONNECT`);
      assert.equal(got.find((g) => g.topic === 'dead/now-5')!.payload, 'gone:dead/now-5');
      const perClient = Array.from({ length: BULK }, (_, i) => count(got, `dead/bulk/${i}`));
      const missing = perClient.filter((n) => n === 0).length;
      const twice = perClient.filter((n) => n > 1).length;
      console.log(`wills of ${BULK} clients of the SIGKILLed broker, as received on ${name}: ${perClient.filter((n) => n === 1).length} once, ${missing} missing, ${twice} more than once`);
      assert.deepEqual({ missing, twice }, { missing: 0, twice: 0 }, `${name}: each of the ${BULK} wills once`);
    }
    // the declarer logged the claims and the publications; the other survivor published none
    const out = declarer!.p!.stdout();
    assert.equal(out.split('\n').filter((l) => l.includes('cluster: published the will of')).length, 4 + BULK, 'the declarer published each will once');
    assert.match(out, /the will of returns is not published: the client connected again within its delay/);
    const other = declarer === a ? b : a;
    assert.equal(other.p!.stdout().split('\n').filter((l) => l.includes('cluster: published the will of')).length, 0, 'the other survivor published none');
    // the bucket keeps only the returned client's record, now alpha's (it connected without a will: none)
    for (const id of ['now-5', 'now-311', 'delayed', 'expiry-0']) assert.equal(await record(id), undefined, `${id}: record removed after publishing`);
    assert.equal(await record('returns'), undefined, 'returns: its new connection has no will, so no record');
    back.end(true);
  });

  test('cluster wills - a claimer SIGKILLed while it waits out a will delay: the node that declares it gone claims the will again and publishes it once', async () => {
    // gamma again, with an epoch above the one the survivors declared gone (the next one, or more when a lease write of
    // it was taken but not answered in time on a loaded machine and it joined again)
    const goneEpoch = ((await api(a, '/api/v1/server/cluster')) as { nodes: Array<{ nodeId: string; epoch: number }> }).nodes.find((n) => n.nodeId === 'gamma')!.epoch;
    await launch(c);
    let epoch = 0;
    await waitUntil(async () => (epoch = ((await api(c, '/api/v1/server/cluster')) as { epoch: number }).epoch) > goneEpoch, 10000, `gamma back with an epoch above ${goneEpoch}`).catch((err: Error) => {
      throw new Error(`${err.message} (it has ${epoch}); gamma's cluster lines:\n${c.p!.stdout().split('\n').filter((l) => l.includes('cluster')).slice(-20).join('\n')}`);
    });
    await client(c, 'slow', { will: will('dead/slow', 12), properties: { sessionExpiryInterval: 60 } });
    await waitUntil(async () => (await record('slow'))?.nodeId === 'gamma', 10000, 'slow: will record of gamma');
    await c.p!.stop('SIGKILL');
    // the declarer claims it (waiting 12 - 4 s) and is SIGKILLed before it publishes
    let claimer: Broker | undefined;
    await waitUntil(async () => {
      const by = (await record('slow'))?.claim?.by;
      claimer = by === 'alpha' ? a : by === 'beta' ? b : undefined;
      return claimer !== undefined;
    }, 20000, 'slow: claimed by a survivor').catch(async (err: Error) => {
      const lines = [a, b].map((x) => `${x.nodeId}:\n${x.p!.stdout().split('\n').filter((l) => l.includes('cluster')).slice(-30).join('\n')}`);
      throw new Error(`${err.message}; the record: ${JSON.stringify(await record('slow'))}; ${lines.join('\n')}`);
    });
    await claimer!.p!.stop('SIGKILL');
    const survivor = claimer === a ? b : a;
    const watcher = await client(survivor, `watch-slow-${survivor.nodeId}`);
    await watcher.subscribeAsync('dead/slow', { qos: 1 });
    const got = collect(watcher);
    await waitUntil(async () => (await record('slow'))?.claim?.by === survivor.nodeId, 20000, `slow: claimed again by ${survivor.nodeId}`).catch(async (err: Error) => {
      const lines = survivor.p!.stdout().split('\n').filter((l) => l.includes('cluster'));
      throw new Error(`${err.message}; the record: ${JSON.stringify(await record('slow'))}; ${survivor.nodeId}'s cluster lines:\n${lines.slice(-60).join('\n')}`);
    });
    await waitUntil(() => survivor.p!.stdout().includes(`claimed the will of slow (node ${claimer!.nodeId} is gone)`), 5000, 'the re-claim logged');
    await waitUntil(() => count(got, 'dead/slow') >= 1, 25000, 'the slow will published by the survivor');
    await sleep(2000);
    assert.equal(count(got, 'dead/slow'), 1, 'received once');
    assert.equal(await record('slow'), undefined, 'record removed');
  });

  test('cluster wills - a broker SIGKILLed and started again at once: its client’s will is published once (by the broker itself when it is back within its lease, else by the declarer)', async () => {
    const survivor = [a, b].find((x) => x.p!.proc.exitCode === null && x.p!.proc.signalCode === null)!;
    await launch(c);
    const watcher = await client(survivor, `watch-quick-${survivor.nodeId}`);
    await watcher.subscribeAsync('dead/quick', { qos: 1 });
    const got = collect(watcher);
    await client(c, 'quick', { will: will('dead/quick') });
    await waitUntil(async () => (await record('quick'))?.nodeId === 'gamma', 10000, 'quick: will record of gamma');
    await c.p!.stop('SIGKILL');
    await launch(c); // the same data directory: it takes its lease over with the next epoch
    await waitUntil(() => count(got, 'dead/quick') >= 1, 20000, 'the quick will published');
    await sleep(3000);
    assert.equal(count(got, 'dead/quick'), 1, 'received once');
    assert.equal(await record('quick'), undefined, 'record removed');
    const published = [survivor, c].map((x) => x.p!.stdout().split('\n').filter((l) => l.includes('cluster: published the will of quick')).length);
    assert.equal(published[0]! + published[1]!, 1, 'published by one broker');
  });
});
