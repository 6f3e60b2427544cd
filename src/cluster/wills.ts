/**
 * Wills across the cluster (docs/cluster.md "Wills"): the will of every client connected to this node is kept in the
 * JetStream KV bucket `switchyard_<clusterName>_wills` under its client id, with this node's id and epoch, so that
 * when this node dies a survivor publishes it, once.
 *
 * The record's life, every step after the first write a compare-and-set on the key's revision:
 * - written (put) when a client with a will connects here; a client connecting anywhere replaces it (its new will)
 *   or removes it (no will): the key is the client id, so the newest connection wins wherever it is;
 * - removed when the connection ends without a will (clean DISCONNECT), or when this node publishes the will itself:
 *   the removal comes first and the will is published only if it succeeded, so a will the cluster already took
 *   (this node was declared gone while cut off) is never published a second time here;
 * - claimed by the node whose compare-and-set declared its node gone (`cluster.node.gone` with `declaredHere`): the
 *   claim names the claimer's node id and epoch. The claimer waits the will delay (the smaller of will delay and
 *   session expiry, counted from the gone node's last heartbeat, i.e. a lease before the declaration, on the
 *   claimer's clock), then removes the record with compare-and-set on its claim revision: the removal fails if the
 *   client connected again meanwhile (its connection rewrote the key), and the will is then not published.
 *   Removed, the will goes through the one ingress path (src/engine/ingress.ts: $SYS refusal, the ACL of the user of
 *   that name on this node, payload schema, flow control) as if its client had published it here.
 * - a claimer that dies before publishing leaves the claim: whoever declares the claimer gone claims the record
 *   again (it names the claimer) and publishes it after the wait the claim was given. Removing before publishing means
 *   a will is published at most once; the one instant in which a will can be lost is a claimer killed between the
 *   answer to its removal and the synchronous ingress call that follows it in the same turn of its event loop.
 *
 * Reads: the bucket is read by direct get (any replica answers, also while the stream elects a leader), and a replica
 * may answer before it applied the latest write. Where a read decides a compare-and-set, a write refused for a wrong
 * revision is decided again on the key as the stream's leader has it, CAS_ATTEMPTS writes at most, WARN past them
 * (casOnRead); the removal of an earlier connection's record reads the leader first, since a replica behind its write
 * would answer that there is none.
 *
 * Bounded: a record is at most MAX_WILL_BYTES (a larger will stays on its node only, WARN), this node holds at most
 * MAX_WILLS records, wills waiting for a NATS answer are at most MAX_DEFERRED, the bucket at most BUCKET_BYTES
 * (JetStream refuses writes past it: the will then stays on its node, WARN).
 */
import { jetstream, JetStreamApiCodes, JetStreamApiError } from '@nats-io/jetstream';
import { Kvm, type KV, type KvEntry } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import { ingress, ingressContext, IngressResult, refusalText } from '../engine/ingress.js';
import type { MessageInit } from '../engine/message.js';
import { LogLimiter } from '../log-limit.js';
import type { MqttBroker } from '../protocol/mqtt/broker.js';
import type { MqttBrokerService } from '../protocol/mqtt/mqtt-broker.service.js';
import type { ClusterWillRegistry } from '../protocol/mqtt/types.js';
import type { WillMessage } from '../protocol/mqtt/session.js';
import type { Runtime, Service } from '../runtime/runtime.js';
import type { SecurityManagerService } from '../security/service.js';
import { ANONYMOUS, type Principal } from '../security/types.js';
import { PartitionAdmission } from './admission.js';
import type { ClusterService } from './cluster.service.js';
import { ClusterState, type GoneNode } from './membership.js';

declare module '../runtime/runtime.js' {
  interface RuntimeServices {
    clusterWills: ClusterWillsService;
  }
}

/** A will record's JSON at most (NATS's default max_payload is 1 MiB). */
export const MAX_WILL_BYTES = 512 * 1024;
/** Will records this node keeps in the bucket at most (its connected clients with a will). */
export const MAX_WILLS = 100_000;
/** Wills due here while NATS does not answer, kept until it does. */
export const MAX_DEFERRED = 10_000;
/** Wills this node claimed and is waiting to publish. */
export const MAX_CLAIMED = 100_000;
const BUCKET_BYTES = 256 * 1024 * 1024;
/**
 * Writes decided on a read of one key, at most (casOnRead): each one refused for a wrong revision is decided again on
 * the key as the stream's leader has it.
 */
export const CAS_ATTEMPTS = 3;
/**
 * A listing of the bucket that brings no key for this long is given up (and read again by the caller): @nats-io/kv
 * lists keys through an ordered push consumer that, when its deliveries stall, ends only at its idle heartbeat (30 s).
 */
export const LIST_STALL_MS = 5000;

/** The value of a client's key in the wills bucket. */
export interface WillRecord {
  clientId: string;
  /** The node the client is connected to, and its epoch when it wrote this. */
  nodeId: string;
  epoch: number;
  topic: string;
  /** Base64. */
  payload: string;
  qos: 0 | 1 | 2;
  retain: boolean;
  /** Will Delay Interval and Session Expiry Interval, s. */
  delay: number;
  sessionExpiry: number;
  properties?: {
    payloadFormatIndicator?: number;
    messageExpiryInterval?: number;
    contentType?: string;
    responseTopic?: string;
    /** Base64. */
    correlationData?: string;
    userProperties?: Record<string, string | string[]>;
  };
  /** Whose ACL the will is published under. */
  principal?: { username: string; uniqueId: string; groups: string[] };
  /** ISO time (the writer's clock), shown in logs only. */
  written: string;
  /** Set by the node that claimed it after its node was declared gone. */
  claim?: { by: string; epoch: number; at: string; waitSeconds: number; from?: string };
}

const wrongSequence = (err: unknown): boolean =>
  err instanceof JetStreamApiError && (err.code === JetStreamApiCodes.StreamWrongLastSequence || err.code === JetStreamApiCodes.StreamWrongLastSequenceUnknown);
const messageOf = (err: unknown): string => (err instanceof Error ? err.message : String(err));

/**
 * The wills bucket as this plane uses it: `kv` reads by direct get where the bucket allows it (any replica answers, so
 * a read keeps working while the stream elects a leader, as the leases bucket needs) and writes; `leader` is a view of
 * the same bucket that reads from the stream's leader (`$JS.API.STREAM.MSG.GET`), which has every write JetStream
 * acknowledged. A direct get may come from a replica that has not applied the latest write yet, so a compare-and-set
 * decided on it can name an old revision: such a key is read again from `leader` (casOnRead).
 */
export interface WillsBucket {
  kv: WillsKv;
  leader: Pick<KV, 'get'>;
}

/** What the wills plane does with the bucket (a KV of @nats-io/kv is one). */
export interface WillsKv extends Pick<KV, 'get' | 'put' | 'update' | 'delete'> {
  keys(): Promise<AsyncIterable<string>>;
}

/** Opens the wills bucket on a NATS connection (ClusterWills is given another opener in unit tests). */
export type WillsBucketOpener = (nc: NatsConnection, bucket: string, cfg: { replicas: number; heartbeatSeconds: number }) => Promise<WillsBucket>;

export const openWillsBucket: WillsBucketOpener = async (nc, bucket, cfg) => {
  const kvm = new Kvm(jetstream(nc, { timeout: Math.max(2000, cfg.heartbeatSeconds * 1000) }));
  let kv: KV;
  try {
    kv = await kvm.create(bucket, { replicas: cfg.replicas, history: 1, maxValueSize: MAX_WILL_BYTES, max_bytes: BUCKET_BYTES });
  } catch (err) {
    if (!/already in use|different configuration/i.test(messageOf(err))) throw err;
    kv = await kvm.open(bucket); // made with other settings: used as it is
  }
  // a bound view: no request to JetStream until it reads, and it reads from the leader (allow_direct false)
  const leader = await kvm.open(bucket, { allow_direct: false });
  return { kv, leader };
};

/** Every key of the bucket; throws when the listing brings nothing for `stallMs` (see LIST_STALL_MS). */
export async function listKeys(kv: Pick<WillsKv, 'keys'>, stallMs: number): Promise<string[]> {
  const keys: string[] = [];
  const it = (await kv.keys())[Symbol.asyncIterator]();
  for (;;) {
    let timer: NodeJS.Timeout | undefined;
    const stalled = new Promise<'stalled'>((resolve) => {
      timer = setTimeout(() => resolve('stalled'), stallMs);
    });
    const next = await Promise.race([it.next(), stalled]).finally(() => clearTimeout(timer));
    if (next === 'stalled') {
      void it.return?.()?.catch(() => undefined);
      throw new Error(`the listing of the wills bucket brought no key for ${stallMs} ms (${keys.length} listed)`);
    }
    if (next.done === true) return keys;
    keys.push(next.value);
  }
}

/** How casOnRead ended: the write went through (`value`), or nothing was written (`gaveUp`: the last write was refused too). */
export type CasOutcome<E, T> = { done: true; value: T } | { done: false; read: E; gaveUp: boolean };

/**
 * A compare-and-set decided on a read of one key. `decide(read)` returns the write to make (naming the revision of
 * that read), or undefined when there is nothing to write. A write that JetStream refuses for a wrong revision is
 * decided again on `reread()` (the key as the stream's leader has it): the first read may have been a direct get
 * answered by a replica behind the latest write, and then the refusal says nothing about the key (an earlier
 * connection's will would stay, or a gone node's will stay unclaimed). At most `attempts` writes; other errors are
 * thrown.
 */
export async function casOnRead<E, T>(first: E, reread: () => Promise<E>, decide: (read: E) => (() => Promise<T>) | undefined, attempts = CAS_ATTEMPTS): Promise<CasOutcome<E, T>> {
  let read = first;
  for (let n = 1; ; n++) {
    const write = decide(read);
    if (write === undefined) return { done: false, read, gaveUp: false };
    try {
      return { done: true, value: await write() };
    } catch (err) {
      if (!wrongSequence(err)) throw err;
      if (n >= attempts) return { done: false, read, gaveUp: true };
    }
    read = await reread();
  }
}

/** A will record as read with its revision (rev 0 and no record: no key, deleted, or not a will record). */
interface RecordRead {
  rec: WillRecord | undefined;
  rev: number;
}

/** The KV key of a client id: any bytes become `c.<base64url>` (KV keys allow letters, digits, `-_=./`). */
export function willKey(clientId: string): string {
  return `c.${Buffer.from(clientId, 'utf8').toString('base64url')}`;
}

function parseRecord(e: KvEntry | null): WillRecord | undefined {
  if (e === null || e.operation !== 'PUT') return undefined;
  try {
    const r = e.json<WillRecord>();
    if (!r || typeof r.clientId !== 'string' || typeof r.nodeId !== 'string' || typeof r.topic !== 'string' || typeof r.payload !== 'string') return undefined;
    return r;
  } catch {
    return undefined;
  }
}

function toRecord(clientId: string, will: WillMessage, sessionExpiry: number, principal: Principal | undefined, nodeId: string, epoch: number): WillRecord {
  const p = will.properties;
  return {
    clientId,
    nodeId,
    epoch,
    topic: will.topic,
    payload: will.payload.toString('base64'),
    qos: will.qos,
    retain: will.retain,
    delay: will.delay,
    sessionExpiry,
    properties: p
      ? {
          payloadFormatIndicator: p.payloadFormatIndicator,
          messageExpiryInterval: p.messageExpiryInterval,
          contentType: p.contentType,
          responseTopic: p.responseTopic,
          correlationData: p.correlationData?.toString('base64'),
          userProperties: p.userProperties,
        }
      : undefined,
    principal: principal ? { username: principal.username, uniqueId: principal.uniqueId, groups: [...principal.groups] } : undefined,
    written: new Date().toISOString(),
  };
}

/**
 * The wills plane of one broker: the registry the MQTT broker asks (ClusterWillRegistry) and the claimer of a gone
 * node's wills. Owned by ClusterWillsService; the NATS connection is the membership's (never closed here).
 */
export class ClusterWills implements ClusterWillRegistry {
  /** Client id → revision of the record this node wrote for its connection here. */
  private readonly held = new Map<string, number>();
  /** Per client id, the operations in order (a takeover's will and the new connection's record, in that order). */
  private readonly chains = new Map<string, Promise<void>>();
  /** Wills due here while NATS did not answer: published once the removal of their record goes through. */
  private readonly deferred = new Map<string, () => void>();
  /** Claimed records waiting for their delay: key → timer. */
  private readonly claimed = new Map<string, NodeJS.Timeout>();
  private kv?: WillsKv;
  /** The bucket's view that reads from the stream's leader, for the re-reads of casOnRead (opened with `kv`). */
  private leader?: Pick<KV, 'get'>;
  private kvFor?: NatsConnection;
  private opening?: Promise<WillsKv | undefined>;
  private scannedEpoch = 0;
  private stopped = false;
  private readonly warnings = new LogLimiter({ intervalMs: 60_000 });

  constructor(
    private readonly rt: Runtime,
    private readonly cluster: ClusterService,
    private readonly broker: MqttBroker,
    private readonly log: Logger,
    private readonly security: SecurityManagerService,
    private readonly openBucket: WillsBucketOpener = openWillsBucket,
  ) {}

  get bucket(): string {
    return `switchyard_${this.rt.config.Cluster.clusterName}_wills`;
  }

  private get member(): boolean {
    return this.cluster.state === ClusterState.Member;
  }

  /** The bucket on the membership's current connection (opened again after the membership made a new one). */
  private async openKv(): Promise<WillsKv | undefined> {
    const nc = this.cluster.nats();
    if (nc === undefined || nc.isClosed()) return undefined;
    if (this.kv !== undefined && this.kvFor === nc) return this.kv;
    if (this.opening) return this.opening;
    const cfg = this.rt.config.Cluster;
    this.opening = (async () => {
      try {
        const { kv, leader } = await this.openBucket(nc, this.bucket, cfg);
        this.kv = kv;
        this.leader = leader;
        this.kvFor = nc;
        return kv;
      } catch (err) {
        this.warnings.warn(this.log, 'bucket', '', { bucket: this.bucket, err: messageOf(err) }, 'cluster: cannot open the wills bucket yet');
        return undefined;
      } finally {
        this.opening = undefined;
      }
    })();
    return this.opening;
  }

  /**
   * One key as the stream's leader has it; should the leader not answer (a leader being elected), as `kv` reads it
   * (a direct get answers then): a compare-and-set that names a stale revision is refused, and tried again.
   */
  private async freshGet(kv: WillsKv, key: string): Promise<KvEntry | null> {
    const leader = this.kv === kv ? this.leader : undefined;
    if (leader !== undefined) {
      try {
        return await leader.get(key);
      } catch {
        // read below as the bucket answers
      }
    }
    return kv.get(key);
  }

  private async freshRecord(kv: WillsKv, key: string): Promise<RecordRead> {
    const e = await this.freshGet(kv, key);
    const rec = parseRecord(e);
    return { rec, rev: e !== null && rec !== undefined ? e.revision : 0 };
  }

  private gaveUp(clientId: string, what: string): void {
    this.warnings.warn(this.log, 'cas', '', { clientId, attempts: CAS_ATTEMPTS }, `cluster: ${what}: the wills bucket refused ${CAS_ATTEMPTS} compare-and-sets on revisions read from its stream's leader (the key changed each time)`);
  }

  /** Runs `op` after the earlier operations of this client id (errors are logged, never thrown). */
  private enqueue(clientId: string, op: () => Promise<void>): void {
    const before = this.chains.get(clientId) ?? Promise.resolve();
    const next = before.then(op).catch((err: unknown) => {
      this.warnings.warn(this.log, 'op', '', { clientId, err: messageOf(err) }, 'cluster: a will record could not be written');
    });
    this.chains.set(clientId, next);
    void next.finally(() => {
      if (this.chains.get(clientId) === next) this.chains.delete(clientId);
    });
  }

  // ---- ClusterWillRegistry: what the MQTT broker tells ----

  connected(clientId: string, will: WillMessage | undefined, sessionExpiry: number, principal: Principal | undefined): void {
    if (this.stopped) return;
    const nodeId = this.cluster.nodeId;
    if (nodeId === undefined) return;
    const epoch = this.cluster.epoch;
    this.deferred.delete(clientId); // a will of an earlier connection still waiting here: the client is back
    this.enqueue(clientId, async () => {
      const kv = this.member ? await this.openKv() : undefined;
      if (kv === undefined) {
        this.held.delete(clientId);
        return; // not a member (the first start, before joining): the will lives on this node only
      }
      const key = willKey(clientId);
      if (will !== undefined) {
        const value = JSON.stringify(toRecord(clientId, will, sessionExpiry, principal, nodeId, epoch));
        if (value.length <= MAX_WILL_BYTES && (this.held.size < MAX_WILLS || this.held.has(clientId))) {
          try {
            this.held.set(clientId, await kv.put(key, value));
            return;
          } catch (err) {
            this.warnings.warn(this.log, 'put', '', { clientId, err: messageOf(err) }, 'cluster: a will could not be written to the wills bucket; it is kept on this node only');
          }
        } else {
          this.warnings.warn(this.log, 'cap', '', { clientId, bytes: value.length, held: this.held.size }, `cluster: a will over ${MAX_WILL_BYTES} bytes, or more than ${MAX_WILLS} wills on this node: kept on this node only`);
        }
      }
      // no will (or one kept here only): a record of an earlier connection, here or on another node, must go. Read
      // from the stream's leader: a replica behind the record's write would answer that there is none (or an older
      // revision, whose compare-and-set fails), and the earlier connection's will would stay, to be published later
      this.held.delete(clientId);
      const out = await casOnRead(
        await this.freshGet(kv, key),
        () => this.freshGet(kv, key),
        (e) => (e !== null && e.operation === 'PUT' ? () => kv.delete(key, { previousSeq: e.revision }) : undefined),
      );
      if (!out.done && out.gaveUp) this.gaveUp(clientId, 'the will record of an earlier connection was left in the bucket');
    });
  }

  discarded(clientId: string): void {
    // no record, and none being written: nothing to remove. A record still being written (a DISCONNECT right after
    // CONNACK, or a slow JetStream) is removed once it has landed: the chain runs this after the put
    if (this.stopped || (!this.held.has(clientId) && !this.chains.has(clientId))) return;
    this.deferred.delete(clientId);
    this.enqueue(clientId, async () => {
      const rev = this.held.get(clientId);
      if (rev === undefined) return;
      const kv = await this.openKv();
      if (kv === undefined) return; // left as it is: if this node is declared gone meanwhile, the will goes out (it cannot tell)
      this.held.delete(clientId);
      await kv.delete(willKey(clientId), { previousSeq: rev }).catch((err: unknown) => (wrongSequence(err) ? undefined : Promise.reject(err)));
    });
  }

  publishing(clientId: string, publish: () => void): boolean {
    if (this.stopped) return false;
    if (this.held.has(clientId)) {
      this.enqueue(clientId, () => this.releaseAndPublish(clientId, publish));
      return true;
    }
    if (!this.chains.has(clientId)) return false; // no record in the cluster: published here as always
    // the record is still being written: decide once the write has landed (published here when it made no record),
    // so a record written after the will went out here cannot make a survivor publish it a second time
    this.enqueue(clientId, async () => {
      if (this.held.has(clientId)) return this.releaseAndPublish(clientId, publish);
      publish();
    });
    return true;
  }

  /** Removes this node's record of the will (compare-and-set), then publishes it; without NATS, waits for it. */
  private async releaseAndPublish(clientId: string, publish: () => void): Promise<void> {
    const rev = this.held.get(clientId);
    if (rev === undefined) return; // a later connection replaced it meanwhile
    const kv = this.member ? await this.openKv() : undefined;
    if (kv === undefined) return this.defer(clientId, publish);
    try {
      await kv.delete(willKey(clientId), { previousSeq: rev });
    } catch (err) {
      if (!wrongSequence(err)) return this.defer(clientId, publish);
      // the record changed: another node claimed it (this node was declared gone) or the client connected elsewhere
      this.held.delete(clientId);
      const cur = parseRecord(await kv.get(willKey(clientId)).catch(() => null));
      this.log.info(
        { clientId, claimedBy: cur?.claim?.by, connectedTo: cur && !cur.claim ? cur.nodeId : undefined },
        cur?.claim ? `cluster: the will of ${clientId} is not published here: node ${cur.claim.by} claimed it` : `cluster: the will of ${clientId} is not published here: the cluster holds another record for it (or published it)`,
      );
      return;
    }
    this.held.delete(clientId);
    publish();
  }

  private defer(clientId: string, publish: () => void): void {
    if (this.deferred.size >= MAX_DEFERRED && !this.deferred.has(clientId)) {
      // past the cap the will is published here at once: better a will the cluster may publish too than none
      this.held.delete(clientId);
      this.warnings.warn(this.log, 'deferred', '', { clientId, cap: MAX_DEFERRED }, 'cluster: too many wills wait for NATS; publishing on this node without the cluster');
      publish();
      return;
    }
    this.deferred.set(clientId, publish);
  }

  // ---- membership events ----

  /** This node is a member (again): deferred wills go, and its records from an earlier run are dealt with. */
  onMember(): void {
    for (const [clientId, publish] of [...this.deferred]) {
      this.deferred.delete(clientId);
      this.enqueue(clientId, () => this.releaseAndPublish(clientId, publish));
    }
    const epoch = this.cluster.epoch;
    if (epoch > this.scannedEpoch) {
      this.scannedEpoch = epoch;
      void this.scanOwn(epoch).catch((err: unknown) => this.log.warn({ err: messageOf(err) }, 'cluster: the wills of an earlier run of this node could not be read'));
    }
  }

  /**
   * Records of this node from an earlier epoch. A record still unclaimed whose client is connected here (this node
   * was declared gone while isolated and nobody claimed it yet, or it kept running) is rewritten with the new epoch; a
   * record whose client is not here belongs to a run that ended without removing it (a crash and a restart
   * within the lease: nobody declared it gone) and is claimed and published like a gone node's; a record another node
   * claimed means the cluster publishes that will, so the connection here no longer has one.
   */
  private async scanOwn(epoch: number): Promise<void> {
    const kv = await this.openKv();
    const self = this.cluster.nodeId;
    if (kv === undefined || self === undefined) return;
    // records held for this process's connections: still ours and unclaimed, or taken by the cluster
    for (const [clientId, rev] of [...this.held]) {
      this.enqueue(clientId, async () => {
        if (this.held.get(clientId) !== rev) return;
        const key = willKey(clientId);
        let e = await kv.get(key);
        // a replica is never ahead of the leader, but may be behind this node's own write: read that one again
        if (e === null || e.revision < rev) e = await this.freshGet(kv, key);
        const out = await casOnRead(e, () => this.freshGet(kv, key), (x) => {
          const rec = parseRecord(x);
          return x !== null && rec !== undefined && x.revision === rev ? () => kv.update(key, JSON.stringify({ ...rec, epoch }), rev) : undefined;
        });
        if (out.done) {
          this.held.set(clientId, out.value);
          return;
        }
        this.held.delete(clientId);
        this.dropLocalWill(clientId, parseRecord(out.read)?.claim?.by);
      });
    }
    // each test below is applied again to the record as the stream's leader has it when a compare-and-set decided on
    // it is refused (claim, removeIf)
    const claimedEarlier = (r: WillRecord) => r.claim !== undefined && r.claim.by === self && r.claim.epoch < epoch;
    const ofEarlierRun = (r: WillRecord) => r.claim === undefined && r.nodeId === self && r.epoch < epoch;
    await this.eachRecord(kv, (key, rec, rev) => {
      if (rec.claim !== undefined) {
        // a claim of an earlier run of this node (it died while waiting, and came back within its lease)
        if (claimedEarlier(rec)) void this.claim(kv, key, rec, rev, `claimed by an earlier run of this node (epoch ${rec.claim.epoch})`, claimedEarlier);
        return;
      }
      if (!ofEarlierRun(rec)) return;
      const s = this.broker.sessions.get(rec.clientId);
      if (s !== undefined) {
        // a persistent session restored from this node's store: its will is this node's business, as on a single
        // broker (a pending delayed will is published here, after removing this record; one published or dropped at
        // the restore already, or never stored, is not published again)
        if (s.pendingWill !== undefined) {
          const id = rec.clientId;
          if (!this.held.has(id)) {
            this.held.set(id, rev);
            // the removal before publishing names this revision: it is taken as the leader has it (a direct get may be
            // behind), ahead of that removal in the client's chain
            this.enqueue(id, async () => {
              const r = await this.freshRecord(kv, key);
              if (this.held.get(id) === rev && r.rec !== undefined && ofEarlierRun(r.rec) && r.rev > rev) this.held.set(id, r.rev);
            });
          }
        } else if (s.conn === undefined) void this.removeIf(kv, key, rec, rev, ofEarlierRun);
        return;
      }
      void this.claim(kv, key, rec, rev, `an earlier run of this node (epoch ${rec.epoch})`, (r) => ofEarlierRun(r) && !this.broker.sessions.has(r.clientId));
    });
  }

  /** The cluster published (or will publish) this client's will: its connection here drops it. */
  private dropLocalWill(clientId: string, by: string | undefined, quiet = false): void {
    const s = this.broker.sessions.get(clientId);
    if (s === undefined) return;
    const conn = s.conn !== undefined ? this.broker.connections.get(s.conn.id) : undefined;
    if (conn !== undefined) conn.will = undefined;
    if (s.pendingWill !== undefined) this.broker.cancelWill(s);
    if (!quiet) this.log.info({ clientId, claimedBy: by }, `cluster: the will of ${clientId} was taken by the cluster while this node was cut off; it is not published here`);
  }

  /** A node was declared gone: the declarer claims its clients' wills (and those it had claimed itself). */
  async onGone(g: GoneNode, attempt = 1): Promise<void> {
    if (!g.declaredHere || this.stopped) return;
    // every node gone now, not only this one: records a declarer that died before claiming them left behind are
    // claimed here as well (the compare-and-set keeps it to one claimer)
    const view = this.cluster.view();
    const gone = new Map<string, number>([[g.nodeId, g.epoch]]);
    if (view.enabled) for (const n of view.nodes) if (n.state === 'gone' && !n.self) gone.set(n.nodeId, Math.max(n.epoch, gone.get(n.nodeId) ?? 0));
    let n = 0;
    try {
      const kv = await this.openKv();
      if (kv === undefined) throw new Error('no connection to NATS');
      const ofGone = (r: WillRecord) => (r.claim !== undefined ? gone.has(r.claim.by) && r.claim.by !== this.cluster.nodeId : r.epoch <= (gone.get(r.nodeId) ?? -1));
      const claims: Array<Promise<boolean>> = [];
      let listed = 0;
      const unread = await this.eachRecord(kv, (key, rec, rev) => {
        listed++;
        if (!ofGone(rec)) return;
        n++;
        claims.push(this.claim(kv, key, rec, rev, `node ${rec.claim?.by ?? rec.nodeId} is gone`, ofGone));
      });
      this.log.info({ nodeId: g.nodeId, wills: n, records: listed }, `cluster: claiming ${n} will(s) of gone node(s) (${[...gone.keys()].join(', ')}) among ${listed} record(s)`);
      const unclaimed = (await Promise.all(claims)).filter((settled) => !settled).length;
      // a record NATS did not answer for (read or claim) is read again below, like a failed listing: with no other node
      // to declare, the next declaration may never come, and the will would wait in the bucket unpublished
      if (unread > 0 || unclaimed > 0) throw new Error(`${unread} will record(s) not read and ${unclaimed} not claimed: NATS did not answer`);
    } catch (err) {
      // read again after a heartbeat (a few times): the wills of a gone node are not left unclaimed by one failed read
      if (attempt >= 5) {
        this.log.warn({ nodeId: g.nodeId, err: messageOf(err) }, `cluster: the wills of node ${g.nodeId} could not be read; they are claimed at the next declaration`);
        return;
      }
      this.log.info({ nodeId: g.nodeId, attempt, err: messageOf(err) }, `cluster: the wills of gone node(s) are read again in ${this.rt.config.Cluster.heartbeatSeconds} s`);
      setTimeout(() => void this.onGone(g, attempt + 1), this.rt.config.Cluster.heartbeatSeconds * 1000).unref();
    }
  }

  /**
   * A node stopped cleanly (its lease says left): the wills it had claimed and was waiting to publish are claimed by
   * one of the members (compare-and-set; every member tries), and records of its own connections its stop could not
   * remove are removed (those wills were published, or not, on it as its connections closed).
   */
  async onLeft(nodeId: string, epoch: number): Promise<void> {
    if (this.stopped || nodeId === this.cluster.nodeId) return;
    const kv = this.member ? await this.openKv() : undefined;
    if (kv === undefined) return;
    const claimedByLeft = (r: WillRecord) => r.claim?.by === nodeId;
    const ofLeft = (r: WillRecord) => r.claim === undefined && r.nodeId === nodeId && r.epoch <= epoch;
    await this.eachRecord(kv, (key, rec, rev) => {
      if (claimedByLeft(rec)) void this.claim(kv, key, rec, rev, `node ${nodeId} left before publishing it`, claimedByLeft);
      else if (ofLeft(rec)) void this.removeIf(kv, key, rec, rev, ofLeft);
    }).catch((err: unknown) => this.log.warn({ nodeId, err: messageOf(err) }, `cluster: the wills node ${nodeId} left behind could not be read`));
  }

  /** Every record of the bucket (read in parallel, 64 at a time). Returns how many listed keys could not be read. */
  private async eachRecord(kv: WillsKv, fn: (key: string, rec: WillRecord, revision: number) => void): Promise<number> {
    const keys = await listKeys(kv, LIST_STALL_MS);
    let unread = 0;
    for (let i = 0; i < keys.length; i += 64) {
      // a key listed (its last operation a put) that a direct get finds deleted or absent was read from a replica
      // behind: read again from the leader. A read that failed (NATS is not answering) is skipped and counted
      const batch = await Promise.all(
        keys.slice(i, i + 64).map(async (k): Promise<KvEntry | null | undefined> => {
          const e = await kv.get(k).catch(() => undefined);
          if (e === undefined || (e !== null && e.operation === 'PUT')) return e;
          return this.freshGet(kv, k).catch(() => undefined);
        }),
      );
      batch.forEach((e, j) => {
        if (e === undefined) {
          unread++;
          return;
        }
        const rec = parseRecord(e);
        if (e !== null && rec !== undefined) fn(keys[i + j]!, rec, e.revision);
      });
    }
    return unread;
  }

  /**
   * Removes a record read by eachRecord (compare-and-set on its revision) while `still` holds for it: refused, the
   * record is read again from the stream's leader and removed if it still qualifies.
   */
  private async removeIf(kv: WillsKv, key: string, rec: WillRecord, rev: number, still: (r: WillRecord) => boolean): Promise<void> {
    try {
      const out = await casOnRead<RecordRead, void>(
        { rec, rev },
        () => this.freshRecord(kv, key),
        (r) => (r.rec !== undefined && still(r.rec) ? () => kv.delete(key, { previousSeq: r.rev }) : undefined),
      );
      if (!out.done && out.gaveUp) this.gaveUp(rec.clientId, 'a will record of a stopped run was left in the bucket');
    } catch (err) {
      this.warnings.warn(this.log, 'op', '', { clientId: rec.clientId, err: messageOf(err) }, 'cluster: a will record could not be written');
    }
  }

  /**
   * Claims a record (compare-and-set: one claimer cluster-wide), then publishes it after its delay unless the client
   * came back. `still` is the caller's test for a record to claim: a claim refused because the revision read was not
   * the latest (a direct get from a replica behind) is made again on the record as the leader has it, if it still
   * passes; refused because the client connected again or another node claimed it, the record no longer passes.
   * Resolves false when the record may still be unclaimed (NATS did not answer, the cap of claimed wills, the
   * compare-and-set refused CAS_ATTEMPTS times): the caller may try again.
   */
  private async claim(kv: WillsKv, key: string, rec: WillRecord, rev: number, why: string, still: (r: WillRecord) => boolean): Promise<boolean> {
    const self = this.cluster.nodeId;
    if (self === undefined || this.stopped || this.claimed.has(key)) return true;
    if (this.claimed.size >= MAX_CLAIMED) {
      this.warnings.warn(this.log, 'claimed', '', { cap: MAX_CLAIMED }, 'cluster: too many claimed wills waiting; the rest is claimed at the next declaration');
      return false;
    }
    const lease = this.rt.config.Cluster.leaseSeconds;
    const claimOf = (r: WillRecord): WillRecord => {
      // the delay runs from the last heartbeat, a lease before the declaration; a re-claim waits what it was given again
      const effective = Math.max(0, Math.min(r.delay, r.sessionExpiry));
      const wait = r.claim !== undefined ? r.claim.waitSeconds : Math.max(0, effective - lease);
      return { ...r, claim: { by: self, epoch: this.cluster.epoch, at: new Date().toISOString(), waitSeconds: wait, from: r.claim?.by } };
    };
    let published: WillRecord;
    let claimRev: number;
    try {
      const out = await casOnRead<RecordRead, { rec: WillRecord; rev: number }>({ rec, rev }, () => this.freshRecord(kv, key), (r) => {
        if (r.rec === undefined || !still(r.rec)) return undefined;
        const c = claimOf(r.rec);
        return async () => ({ rec: c, rev: await kv.update(key, JSON.stringify(c), r.rev) });
      });
      if (!out.done) {
        if (out.gaveUp) this.gaveUp(rec.clientId, 'a will was not claimed; it is claimed at the next declaration');
        return !out.gaveUp; // changed meanwhile: the client connected again, or another node claimed it
      }
      published = out.value.rec;
      claimRev = out.value.rev;
    } catch (err) {
      this.log.warn({ clientId: rec.clientId, err: messageOf(err) }, 'cluster: a will could not be claimed; it is claimed at the next declaration');
      return false;
    }
    const waitSeconds = published.claim?.waitSeconds ?? 0;
    this.log.info({ clientId: published.clientId, topic: published.topic, waitSeconds, from: published.nodeId }, `cluster: claimed the will of ${published.clientId} (${why}); publishing in ${waitSeconds} s unless the client connects again`);
    const fire = () => {
      this.claimed.delete(key);
      void this.publishClaimed(kv, key, published, claimRev);
    };
    const timer = setTimeout(fire, Math.min(waitSeconds * 1000, 2 ** 31 - 1));
    timer.unref();
    this.claimed.set(key, timer);
    return true;
  }

  private async publishClaimed(kv: WillsKv, key: string, rec: WillRecord, claimRev: number): Promise<void> {
    if (this.stopped) return;
    try {
      await kv.delete(key, { previousSeq: claimRev });
    } catch (err) {
      if (wrongSequence(err)) {
        this.log.info({ clientId: rec.clientId }, `cluster: the will of ${rec.clientId} is not published: the client connected again within its delay`);
        return;
      }
      // NATS did not answer: tried again after a heartbeat (the claim stays, so a successor finds it if this node dies)
      const timer = setTimeout(() => {
        this.claimed.delete(key);
        void this.publishClaimed(kv, key, rec, claimRev);
      }, this.rt.config.Cluster.heartbeatSeconds * 1000);
      timer.unref();
      this.claimed.set(key, timer);
      return;
    }
    this.publishRecord(rec);
  }

  /** The will through the one ingress path, under its client's principal. */
  private publishRecord(rec: WillRecord): void {
    const p = rec.properties ?? {};
    const init: MessageInit = {
      payload: Buffer.from(rec.payload, 'base64'),
      qos: rec.qos,
      retain: rec.retain,
      contentType: p.contentType,
      responseTopic: p.responseTopic,
      correlationData: p.correlationData !== undefined ? Buffer.from(p.correlationData, 'base64') : undefined,
      userProperties: p.userProperties,
      payloadFormat: p.payloadFormatIndicator === 1 ? 1 : p.payloadFormatIndicator === 0 ? 0 : undefined,
      expiresAt: p.messageExpiryInterval !== undefined ? Date.now() + p.messageExpiryInterval * 1000 : undefined,
    };
    const engine = this.rt.engine;
    const security = this.rt.security;
    // the ACL of this node decides, for the user of that name here (user ids and groups are each node's own); a user
    // unknown here publishes with no rights of its own (the ACL's default deny, or what anonymous may)
    const manager = this.security.manager;
    const user = rec.principal !== undefined ? manager?.identities.userByUsername(rec.principal.username) : undefined;
    const principal: Principal = user !== undefined && manager !== undefined ? manager.principalOf(user) : rec.principal !== undefined ? { username: rec.principal.username, uniqueId: '', groups: [], anonymous: false } : ANONYMOUS;
    const cx = ingressContext(engine, security, principal, rec.topic, init, { origin: `will:${rec.nodeId}:${rec.clientId}` });
    const result = ingress(cx);
    if (result !== IngressResult.Accepted) {
      this.log.warn({ clientId: rec.clientId, topic: rec.topic, err: refusalText(cx, result) }, `cluster: the will of ${rec.clientId} was refused`);
      return;
    }
    this.log.info({ clientId: rec.clientId, topic: rec.topic, from: rec.nodeId }, `cluster: published the will of ${rec.clientId} (client of node ${rec.nodeId})`);
    cx.written?.catch((err: unknown) => this.log.warn({ clientId: rec.clientId, err: messageOf(err) }, 'cluster: a published will could not be stored'));
  }

  /**
   * A clean stop: the records of this node's connections are removed (their wills are published, or not, here as
   * the connections close), and claimed wills still waiting are left claimed: the members claim them again when they
   * see this node's lease written as left (onLeft).
   */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const t of this.claimed.values()) clearTimeout(t);
    this.claimed.clear();
    const bounded = (p: Promise<unknown>) => Promise.race([p, new Promise((r) => setTimeout(r, 3000).unref())]);
    await bounded(Promise.all([...this.chains.values()]));
    const kv = this.kv;
    if (kv !== undefined && this.member) {
      await bounded(Promise.all([...this.held].map(([clientId, rev]) => kv.delete(willKey(clientId), { previousSeq: rev }).catch(() => undefined))));
    } else if (this.held.size > 0) {
      // stopping while cut off: the records stay and decide (the node that declares this one gone publishes them, or
      // this node's next start does), so the closing connections publish none of them here as well
      for (const clientId of this.held.keys()) this.dropLocalWill(clientId, undefined, true);
      this.log.warn({ wills: this.held.size }, 'cluster: stopping while cut off from NATS: the wills of this node\'s clients are left to the cluster');
    }
    this.held.clear();
    this.deferred.clear();
    this.warnings.close();
  }
}

/**
 * Runs the wills plane and the partition admission while `Cluster.enabled`: attaches both to the MQTT broker and
 * follows the membership's runtime events. Started after the cluster and the MQTT broker, stopped before them (so a
 * clean stop removes this node's records while the connection to NATS is still there).
 */
/** What the wills plane is given (src/compose.ts): the broker it attaches to, the membership, and the users (a will is published as its client's user here). */
export interface ClusterWillsDeps {
  security: SecurityManagerService;
  mqttBroker: MqttBrokerService;
  cluster: ClusterService;
}

export class ClusterWillsService implements Service {
  readonly name = 'clusterWills';
  readonly dependsOn: readonly string[];
  wills?: ClusterWills;
  private admission?: PartitionAdmission;
  private broker?: MqttBroker;
  private rt?: Runtime;

  private readonly onState = (state: ClusterState, reason: string): void => {
    this.admission?.onState(state, reason);
    if (state === ClusterState.Member) this.wills?.onMember();
  };
  private readonly onRejoined = (): void => this.wills?.onMember();
  private readonly onLeft = (nodeId: string, epoch: number): void => {
    void this.wills?.onLeft(nodeId, epoch);
  };
  private readonly onGone = (g: GoneNode): void => {
    void this.wills?.onGone(g);
  };

  constructor(private readonly deps: ClusterWillsDeps) {
    this.dependsOn = Object.keys(deps);
  }

  async start(rt: Runtime): Promise<void> {
    this.rt = rt;
    if (!rt.config.Cluster.enabled) return;
    const cluster = this.deps.cluster;
    const broker = this.deps.mqttBroker.broker;
    if (broker === undefined) return;
    this.broker = broker;
    this.wills = new ClusterWills(rt, cluster, broker, rt.log.child({ actor: 'cluster', plane: 'wills' }), this.deps.security);
    this.admission = new PartitionAdmission();
    broker.wills = this.wills;
    broker.admission = this.admission;
    rt.on('cluster.state', this.onState);
    rt.on('cluster.rejoined', this.onRejoined);
    rt.on('cluster.node.gone', this.onGone);
    rt.on('cluster.node.left', this.onLeft);
  }

  async stop(): Promise<void> {
    const rt = this.rt;
    if (rt === undefined || this.wills === undefined) return;
    rt.off('cluster.state', this.onState);
    rt.off('cluster.rejoined', this.onRejoined);
    rt.off('cluster.node.gone', this.onGone);
    rt.off('cluster.node.left', this.onLeft);
    if (this.broker !== undefined) {
      if (this.broker.wills === this.wills) this.broker.wills = undefined;
      if (this.broker.admission === this.admission) this.broker.admission = undefined;
    }
    await this.wills.stop();
    this.wills = undefined;
    this.admission = undefined;
  }
}

export function clusterWillsService(deps: ClusterWillsDeps): ClusterWillsService {
  return new ClusterWillsService(deps);
}
