/**
 * The wills plane against a stale read (src/cluster/wills.ts casOnRead, docs/cluster.md "Wills"): the wills bucket is
 * read by JetStream direct get, which a replica that has not applied the latest write may answer. A compare-and-set
 * decided on such a read names an old revision (or is not made at all), and before casOnRead a refused one was taken
 * as "the record changed": an earlier connection's will stayed in the bucket to be published later, and a gone node's
 * will stayed unclaimed. A real NATS cluster does not produce that read on demand (the replica a broker asks is the
 * one of its own nats-server; held back from the stream's writes, it holds back the broker's own requests too), so
 * the bucket here is a fake behind the plane's WillsKv interface whose direct get answers from a replica behind,
 * once, while its leader view has every write; a refused write throws JetStream's own JetStreamApiError (10071).
 */
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { after, describe, test } from 'node:test';
import { JetStreamApiCodes, JetStreamApiError } from '@nats-io/jetstream';
import type { KvEntry } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import pino from 'pino';
import { ClusterState, type GoneNode } from '../../src/cluster/membership.js';
import type { ClusterService } from '../../src/cluster/cluster.service.js';
import { CAS_ATTEMPTS, ClusterWills, LIST_STALL_MS, willKey, type WillRecord, type WillsKv } from '../../src/cluster/wills.js';
import type { MqttBroker } from '../../src/protocol/mqtt/broker.js';
import type { WillMessage } from '../../src/protocol/mqtt/session.js';
import type { Runtime } from '../../src/runtime/runtime.js';
import type { SecurityManagerService } from '../../src/security/service.js';
import { waitUntil } from '../helpers.js';

const text = (data: string | Uint8Array): string => (typeof data === 'string' ? data : Buffer.from(data).toString('utf8'));

/** One KV bucket with history 1 as JetStream keeps it, and the replica behind it that direct gets may reach. */
class FakeBucket {
  private seq = 0;
  /** Per key every entry written, oldest first (what the replicas apply one after the other). */
  private readonly history = new Map<string, KvEntry[]>();
  /** Key → how many writes behind the replica is that answers the next direct get of that key (once). */
  readonly behind = new Map<string, number>();
  /** Called before each compare-and-set is checked: another writer changing the key meanwhile. */
  beforeCas?: (key: string) => void;
  refused = 0;
  /** Key → how many of the next direct gets / compare-and-sets of it NATS does not answer (a request timeout). */
  readonly unansweredGets = new Map<string, number>();
  readonly unansweredUpdates = new Map<string, number>();
  /** How many of the next listings stall after their first key (deliveries stop; @nats-io/kv waits for its idle heartbeat). */
  stalledListings = 0;

  /** Throws a request timeout when `key` has unanswered requests of that kind left (one used). */
  private unanswered(which: Map<string, number>, key: string): void {
    const n = which.get(key) ?? 0;
    if (n === 0) return;
    which.set(key, n - 1);
    throw new Error('TIMEOUT');
  }

  latest(key: string): KvEntry | null {
    const h = this.history.get(key);
    return h === undefined ? null : h[h.length - 1]!;
  }

  record(key: string): WillRecord | undefined {
    const e = this.latest(key);
    return e !== null && e.operation === 'PUT' ? e.json<WillRecord>() : undefined;
  }

  write(key: string, operation: 'PUT' | 'DEL', data: string | Uint8Array): number {
    const value = Buffer.from(text(data), 'utf8');
    const revision = ++this.seq;
    const e: KvEntry = {
      bucket: 'switchyard_stale_wills',
      key,
      rawKey: key,
      value,
      created: new Date(),
      revision,
      operation,
      length: value.length,
      json: <T>() => JSON.parse(value.toString('utf8')) as T,
      string: () => value.toString('utf8'),
    };
    const h = this.history.get(key) ?? [];
    h.push(e);
    this.history.set(key, h);
    return revision;
  }

  private cas(key: string, previous: number): void {
    this.beforeCas?.(key);
    const now = this.latest(key)?.revision ?? 0;
    if (now !== previous) {
      this.refused++;
      throw new JetStreamApiError({ err_code: JetStreamApiCodes.StreamWrongLastSequence, code: 400, description: `wrong last sequence: ${now}` });
    }
  }

  /** The plane's view that reads by direct get. */
  readonly kv: WillsKv = {
    get: async (key) => {
      this.unanswered(this.unansweredGets, key);
      const lag = this.behind.get(key);
      if (lag === undefined) return this.latest(key);
      this.behind.delete(key);
      const h = this.history.get(key) ?? [];
      return h[h.length - 1 - lag] ?? null;
    },
    put: async (key, data) => this.write(key, 'PUT', data),
    update: async (key, data, version) => {
      this.unanswered(this.unansweredUpdates, key);
      this.cas(key, version);
      return this.write(key, 'PUT', data);
    },
    delete: async (key, opts) => {
      if (opts?.previousSeq !== undefined) this.cas(key, opts.previousSeq);
      this.write(key, 'DEL', '');
    },
    keys: async () => {
      const live = [...this.history.keys()].filter((k) => this.latest(k)?.operation === 'PUT');
      const stall = this.stalledListings > 0;
      if (stall) this.stalledListings--;
      return (async function* () {
        if (!stall) {
          yield* live;
          return;
        }
        yield* live.slice(0, 1);
        await new Promise(() => undefined);
      })();
    },
  };

  /** The view that reads from the stream's leader: every write. */
  readonly leader = { get: async (key: string): Promise<KvEntry | null> => this.latest(key) };
}

/** A wills plane of node `nodeId` on `bucket`: the members of the runtime, membership and broker it reads, and a log. */
function plane(nodeId: string, bucket: FakeBucket, lines: string[], epoch = 1, sessions = new Map<string, { pendingWill?: WillMessage }>()): ClusterWills {
  const rt = { config: { Cluster: { clusterName: 'stale', replicas: 3, heartbeatSeconds: 1, leaseSeconds: 4 } } } as unknown as Runtime;
  const nc = { isClosed: () => false } as unknown as NatsConnection;
  const cluster = { nodeId, epoch, state: ClusterState.Member, nats: () => nc, view: () => ({ enabled: false }) } as unknown as ClusterService;
  const broker = { sessions, connections: new Map(), cancelWill: () => undefined } as unknown as MqttBroker;
  const log = pino(
    { level: 'info' },
    new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(chunk.toString());
        done();
      },
    }),
  );
  return new ClusterWills(rt, cluster, broker, log, {} as SecurityManagerService, async () => ({ kv: bucket.kv, leader: bucket.leader }));
}

/** A will record of gone node gamma (epoch 1, delay 600 s). */
const gammaWill = (clientId: string): WillRecord => ({ clientId, nodeId: 'gamma', epoch: 1, topic: `wills/${clientId}`, payload: '', qos: 1, retain: false, delay: 600, sessionExpiry: 600, written: '' });
const willOf = (topic: string, delay = 0): WillMessage => ({ topic, payload: Buffer.from(`gone:${topic}`), qos: 1, retain: false, delay });

describe('cluster wills - compare-and-sets decided on a stale read', () => {
  const planes: ClusterWills[] = [];
  after(async () => {
    for (const p of planes) await p.stop();
  });

  test('cluster wills - a client that connects again on another node without a will: its earlier connection’s will is not published, though the replica read first was behind that will’s record', async () => {
    const bucket = new FakeBucket();
    const lines: string[] = [];
    const beta = plane('beta', bucket, lines);
    const alpha = plane('alpha', bucket, lines);
    planes.push(beta, alpha);
    const key = willKey('k1');
    // k1 connects on beta with a will: its record lands
    beta.connected('k1', willOf('wills/k1'), 0, undefined);
    await waitUntil(() => bucket.record(key)?.nodeId === 'beta', 5000, "beta's record of k1");
    // k1 connects again on alpha, without a will; the replica alpha's direct get reaches has not applied beta's write
    bucket.behind.set(key, 1);
    alpha.connected('k1', undefined, 0, undefined);
    await waitUntil(() => bucket.latest(key)?.operation === 'DEL', 5000, "alpha removing the earlier connection's record").catch((err: Error) => {
      throw new Error(`${err.message}: the bucket still holds ${JSON.stringify(bucket.record(key))}`);
    });
    // then beta's connection of k1 breaks: its will is due there, and goes only if its record could be removed
    let published = 0;
    assert.equal(beta.publishing('k1', () => published++), true);
    await waitUntil(() => lines.some((l) => l.includes('the will of k1 is not published here')), 5000, 'beta deciding on the will of k1');
    assert.equal(published, 0, 'the will of the earlier connection on beta was published');
  });

  test('cluster wills - a gone node’s wills are claimed by the declarer though the replica read first was behind their records', async () => {
    const bucket = new FakeBucket();
    const lines: string[] = [];
    const alpha = plane('alpha', bucket, lines);
    planes.push(alpha);
    const key = willKey('k2');
    // k2's connection on gamma wrote its record twice (it connected again there with another will)
    const rec = (payload: string): WillRecord => ({ clientId: 'k2', nodeId: 'gamma', epoch: 1, topic: 'wills/k2', payload, qos: 1, retain: false, delay: 600, sessionExpiry: 600, written: new Date().toISOString() });
    bucket.write(key, 'PUT', JSON.stringify(rec('Zmlyc3Q=')));
    bucket.write(key, 'PUT', JSON.stringify(rec('c2Vjb25k')));
    // and k2b's connection on gamma wrote its record once
    const keyB = willKey('k2b');
    bucket.write(keyB, 'PUT', JSON.stringify({ ...rec('b25jZQ=='), clientId: 'k2b' }));
    // gamma is declared gone here; the replica read first has the first record of k2 only, and none of k2b
    bucket.behind.set(key, 1);
    bucket.behind.set(keyB, 1);
    const gone: GoneNode = { nodeId: 'gamma', epoch: 1, serverName: 'gamma', restAddress: '', lastHeartbeat: new Date().toISOString(), declaredBy: 'alpha', declaredHere: true };
    await alpha.onGone(gone);
    await waitUntil(() => bucket.record(key)?.claim !== undefined, 5000, 'the claim of k2').catch((err: Error) => {
      throw new Error(`${err.message}: not claimed (the will would never be published); log:\n${lines.join('')}`);
    });
    const claimed = bucket.record(key)!;
    assert.equal(claimed.claim?.by, 'alpha');
    assert.equal(claimed.payload, 'c2Vjb25k', 'the claim carries the latest will of k2');
    assert.equal(claimed.claim?.waitSeconds, 596, 'the will delay less a lease');
    assert.equal(bucket.record(keyB)?.claim?.by, 'alpha', 'the will of k2b, which the replica read first did not have, is claimed');
  });

  test('cluster wills - a gone node’s wills whose read or claim NATS did not answer are read again by the declarer and claimed', async () => {
    // the declarer may be the last node left: no later declaration would claim them (test/cluster/wills.test.ts, a
    // claimer SIGKILLed while it waits out a will delay, failed so under load)
    const bucket = new FakeBucket();
    const lines: string[] = [];
    const alpha = plane('alpha', bucket, lines);
    planes.push(alpha);
    const readLost = willKey('k5');
    const claimLost = willKey('k6');
    bucket.write(readLost, 'PUT', JSON.stringify(gammaWill('k5')));
    bucket.write(claimLost, 'PUT', JSON.stringify(gammaWill('k6')));
    bucket.unansweredGets.set(readLost, 1);
    bucket.unansweredUpdates.set(claimLost, 1);
    const gone: GoneNode = { nodeId: 'gamma', epoch: 1, serverName: 'gamma', restAddress: '', lastHeartbeat: new Date().toISOString(), declaredBy: 'alpha', declaredHere: true };
    await alpha.onGone(gone);
    // read again after a heartbeat (1 s here)
    await waitUntil(() => bucket.record(readLost)?.claim !== undefined && bucket.record(claimLost)?.claim !== undefined, 10000, 'the claims of k5 and k6').catch((err: Error) => {
      throw new Error(`${err.message}: k5 ${JSON.stringify(bucket.record(readLost)?.claim)}, k6 ${JSON.stringify(bucket.record(claimLost)?.claim)} (a will left unclaimed is never published); log:\n${lines.join('')}`);
    });
    assert.equal(bucket.record(readLost)!.claim!.by, 'alpha');
    assert.equal(bucket.record(claimLost)!.claim!.by, 'alpha');
    assert.equal(bucket.unansweredGets.get(readLost), 0, 'the read of k5 went unanswered once');
    assert.equal(bucket.unansweredUpdates.get(claimLost), 0, 'the claim of k6 went unanswered once');
  });

  test('cluster wills - a listing of the bucket that stalls is given up and made again: the gone node’s wills are claimed', async () => {
    const bucket = new FakeBucket();
    const lines: string[] = [];
    const alpha = plane('alpha', bucket, lines);
    planes.push(alpha);
    for (const id of ['k7', 'k8']) bucket.write(willKey(id), 'PUT', JSON.stringify(gammaWill(id)));
    bucket.stalledListings = 1;
    const gone: GoneNode = { nodeId: 'gamma', epoch: 1, serverName: 'gamma', restAddress: '', lastHeartbeat: new Date().toISOString(), declaredBy: 'alpha', declaredHere: true };
    void alpha.onGone(gone);
    // LIST_STALL_MS, then a heartbeat (1 s here)
    await waitUntil(() => ['k7', 'k8'].every((id) => bucket.record(willKey(id))?.claim?.by === 'alpha'), LIST_STALL_MS + 5000, 'the claims of k7 and k8').catch((err: Error) => {
      throw new Error(`${err.message} (a will left unclaimed is never published); log:\n${lines.join('')}`);
    });
    assert.ok(lines.some((l) => l.includes('brought no key')), 'the stalled listing is logged');
  });

  test('cluster wills - a persistent session restored with a delayed will: its will is published when due, though the revision read at the rejoin was stale', async () => {
    const bucket = new FakeBucket();
    const lines: string[] = [];
    const key = willKey('k4');
    // alpha's run of epoch 1 wrote k4's record twice (k4 connected again there); alpha restarted within its lease
    // (epoch 2) with k4's session restored from its store, its delayed will pending
    const rec = (payload: string): WillRecord => ({ clientId: 'k4', nodeId: 'alpha', epoch: 1, topic: 'wills/k4', payload, qos: 1, retain: false, delay: 30, sessionExpiry: 600, written: '' });
    bucket.write(key, 'PUT', JSON.stringify(rec('Zmlyc3Q=')));
    bucket.write(key, 'PUT', JSON.stringify(rec('c2Vjb25k')));
    bucket.behind.set(key, 1);
    const alpha = plane('alpha', bucket, lines, 2, new Map([['k4', { pendingWill: willOf('wills/k4', 30) }]]));
    planes.push(alpha);
    alpha.onMember();
    // the delay is over: alpha publishes the will once its record is removed
    let published = 0;
    await waitUntil(() => alpha.publishing('k4', () => published++), 5000, "alpha holding k4's record");
    await waitUntil(() => published > 0 || lines.some((l) => l.includes('the will of k4 is not published')), 5000, 'alpha deciding on the will of k4');
    assert.equal(published, 1, `the will of k4 was not published; log:\n${lines.join('')}`);
    assert.equal(bucket.latest(key)?.operation, 'DEL');
  });

  test(`cluster wills - a removal refused at every re-read from the leader stops after ${CAS_ATTEMPTS} attempts, with a WARN`, async () => {
    const bucket = new FakeBucket();
    const lines: string[] = [];
    const alpha = plane('alpha', bucket, lines);
    planes.push(alpha);
    const key = willKey('k3');
    const rec: WillRecord = { clientId: 'k3', nodeId: 'beta', epoch: 1, topic: 'wills/k3', payload: '', qos: 0, retain: false, delay: 0, sessionExpiry: 0, written: '' };
    bucket.write(key, 'PUT', JSON.stringify(rec));
    // another writer changes the key between each read and the compare-and-set made on it
    bucket.beforeCas = (k) => bucket.write(k, 'PUT', JSON.stringify(rec));
    alpha.connected('k3', undefined, 0, undefined);
    await waitUntil(() => lines.some((l) => l.includes('compare-and-sets')), 5000, 'the WARN of the plane giving up');
    assert.equal(bucket.refused, CAS_ATTEMPTS);
    const warn = JSON.parse(lines.find((l) => l.includes('compare-and-sets'))!) as { level: number; msg: string; clientId: string };
    assert.equal(warn.level, 40);
    assert.equal(warn.clientId, 'k3');
    assert.match(warn.msg, /will record of an earlier connection was left in the bucket/);
  });
});
