/**
 * The cluster's session plane (issue 26 items 2-4, docs/cluster.md "Sessions"): a persistent MQTT session lives in
 * JetStream, so its client can come back on any broker of the cluster.
 *
 * - **Records**: one key per session in the KV bucket `switchyard_<clusterName>_sessions` (key `c_<client id as
 *   base64url>`, or `h_<sha-256>` for a long id): owner node and its epoch, the session's own epoch (one more at every
 *   change of owner), connected, expiry, subscriptions with their options, inbound QoS 2 ids (PUBREC sent, PUBREL
 *   awaited), last update. Every write is a compare-and-set on the revision this broker last saw: a refused write
 *   means another broker took the session, and this one lets it go. Only sessions that outlive their connection
 *   (MQTT 5 Session Expiry Interval > 0, 3.1.1 clean session 0) get a record.
 * - **Held messages and packet-id state**: the engine writes a durable subscription's held copies (`d!...`) and the
 *   session's packet ids (`s!...`) through its EngineStore; `SessionStore` below passes every batch to the local store
 *   and mirrors the keys of cluster sessions into the stream `SY_<clusterName>_HELD` (one subject per key, at most one
 *   message per subject), and resolves the batch only when JetStream acknowledged it. The engine acknowledges a QoS
 *   >= 1 publisher only once that batch is written (MQTT subscriptions use no write-behind), so what was acknowledged
 *   and held for a cluster session is in JetStream before its PUBACK / PUBREC.
 * - **Takeover**: a CONNECT on this broker for a record owned by another live broker writes the record with this
 *   broker as owner (compare-and-set). The old owner watches the bucket, sees it, disconnects its client (MQTT 5
 *   DISCONNECT 0x8E Session taken over), waits for its pending writes, drops its local copy and marks the record
 *   released. This broker waits for that (Cluster.sessionTakeoverWaitSeconds; the old owner's lapse counts as a
 *   release), rebuilds the session from the record and the stream, and lets accept() resume it. Between the two, the
 *   hand-over (`handover` in the record: handOver on the old owner, takeOver on the new) cuts at a sequence of the
 *   message stream, so what other nodes publish meanwhile reaches the session on one of the two brokers, once. A
 *   third broker's CONNECT waits until a hand-over under way (`handover.to` is the owner) is complete; one that the
 *   new owner left unfinished (it died) is completed by whoever takes the record next, which replays the session from
 *   the stream where the old owner's client stopped (replayHandover).
 * - **Node failure**: the node that declared a node gone (`cluster.node.gone` with `declaredHere`) adopts its
 *   sessions as offline sessions: subscriptions made (hibernated, holding), held messages loaded.
 */
import { createHash } from 'node:crypto';
import { DeliverPolicy, DiscardPolicy, jetstream, jetstreamManager, JetStreamApiCodes, JetStreamApiError, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { Kvm, KvWatchInclude, type KV, type KvEntry } from '@nats-io/kv';
import type { NatsConnection, Status } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import type { Engine, EngineStore, Message, MessageInit, StoreOp, Subscription } from '../engine/index.js';
import { decodeHeld } from '../engine/engine-store.js';
import { createMessage } from '../engine/message.js';
import { subscriptionKey } from '../engine/subscription.js';
import { topicMatchesFilter } from '../engine/topic-trie.js';
import { META_HOPS, META_LINK_ID, META_ORIGIN } from '../links/link-manager.js';
import { decodeMessage, headersOf } from '../links/nats-transport.js';
import { copyOptionalFields } from '../links/transport.js';
import type { MqttBroker, ClaimResult } from '../protocol/mqtt/broker.js';
import { CloseReason, Reason } from '../protocol/mqtt/reason.js';
import { MqttSession, storeInbound, storeOutbound, type OutboundRecord, type StoredSubscription } from '../protocol/mqtt/session.js';
import type { IntegrationsService } from '../links/integrations.service.js';
import type { MessagingService } from '../messaging/messaging.service.js';
import type { MqttBrokerService } from '../protocol/mqtt/mqtt-broker.service.js';
import type { Runtime, Service } from '../runtime/runtime.js';
import type { ClusterService } from './cluster.service.js';
import { ClusterState, type ClusterView, type GoneNode } from './membership.js';
import { CLUSTER_LINK, messageStream, messageSubjectPrefix } from './messages.js';

/** A session record as kept in the bucket (JSON). */
export interface SessionDoc {
  v: 1;
  clientId: string;
  /** The node that holds the session, and its membership epoch when it took it. */
  owner: string;
  ownerEpoch: number;
  /** The session's epoch: one more at every change of owner. */
  epoch: number;
  /** The owner before the last change, and whether it let the session go (its last state is in JetStream). */
  previousOwner?: string;
  released: boolean;
  connected: boolean;
  expiry: number;
  protocolVersion: number;
  username?: string;
  disconnectedAt?: number;
  subscriptions: StoredSubscription[];
  /** Inbound QoS 2 packet ids: PUBREC sent, PUBREL awaited. */
  inbound: number[];
  /** When the last owner changes made by a CONNECT happened (ms), newest last, at most TAKEOVER_KEPT. */
  takeovers: number[];
  /** The hand-over of a live takeover (see ClusterSessions.takeOver): absent in records of other changes. */
  handover?: Handover;
  updated: number;
}

/**
 * The hand-over of a session between two live brokers, written in its record (docs/cluster.md "Sessions", "Takeover").
 * `from` (the old owner) writes `closedSeq` once its client is disconnected: how far its message-plane consumer had
 * been given messages. The new owner waits until its own consumer has routed that far, makes the session's
 * subscriptions (holding, "provisional") and writes `cutSeq`, the last sequence of the message stream after that.
 * The old owner keeps holding for the session until its consumer has routed and stored everything up to `cutSeq`,
 * and only then lets it go (`released`). So every message of the stream reaches the session on one of the two
 * brokers; the copies both hold are told apart by their origin (server and id) when the new owner rebuilds it.
 */
export interface Handover {
  from: string;
  /**
   * The broker taking the session: while it is the record's owner, the hand-over is under way (the session is not
   * rebuilt there yet); the field goes when it is (finishHandover). Records without it are finished hand-overs.
   */
  to?: string;
  closedSeq?: number;
  cutSeq?: number;
}

/** Whether the record's owner is still taking the session over (it has not rebuilt it yet). */
export function handoverUnderWay(doc: SessionDoc): boolean {
  return doc.handover !== undefined && doc.handover.to === doc.owner;
}

/** More than this many takeovers of one session within TAKEOVER_WINDOW_MS delay its CONNACK. */
export const TAKEOVER_LIMIT = 3;
export const TAKEOVER_WINDOW_MS = 10_000;
/** The CONNACK delay of a client that keeps displacing itself: 250 ms for the first takeover above the limit, doubling, at most this. */
export const TAKEOVER_DELAY_MAX_MS = 5_000;
const TAKEOVER_DELAY_FIRST_MS = 250;
const TAKEOVER_KEPT = 16;
/**
 * A CONNECT's answer comes this long before its connect timeout runs out: the keep-alive sweep closes a CONNECT still
 * waiting at its first run (every 250 ms) after the timeout, and the CONNACK has to be written before.
 */
const CLAIM_MARGIN_MS = 300;
/** How long a persistent CONNECT waits for the plane of a broker that is starting (then it is served locally). */
const START_WAIT_MS = 2000;
/** The sessions bucket as a whole (its values are capped by Cluster.sessionRecordMaxBytes). */
const SESSIONS_BUCKET_MAX_BYTES = 1024 * 1024 * 1024;

const wrongSequence = (err: unknown): boolean =>
  err instanceof JetStreamApiError && (err.code === JetStreamApiCodes.StreamWrongLastSequence || err.code === JetStreamApiCodes.StreamWrongLastSequenceUnknown);
const messageOf = (err: unknown): string => (err instanceof Error ? err.message : String(err));
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms).unref());
/** How long the new owner of a live takeover keeps trying to complete the hand-over (the CONNECT waits less). */
const HANDOVER_MAX_MS = 60_000;
/** How often both sides of a hand-over look at the record and at their message-plane consumer. */
const HANDOVER_POLL_MS = 25;
/** The engine session id of the provisional subscriptions a hand-over makes (never an MQTT session's `mqtt:` id). */
const HANDOVER_SESSION_PREFIX = 'cluster-handover:';

/**
 * Which message a held copy is, the same on every node: `<origin server>|<its id there>`. A copy received from the
 * message plane carries its sender's outbox id (`<server>:cluster:<channel>:<id>`, META_LINK_ID); a copy of a message
 * published on `server` itself has no origin in its metaData and is its own id there. Undefined for anything else (a
 * message received over another kind of link).
 */
export function copyIdentity(msg: Message, server: string): string | undefined {
  const lid = msg.metaData[META_LINK_ID];
  if (lid !== undefined) {
    const m = /^(.*):[^:]*:\d+:(\d+)$/.exec(lid);
    return m === null ? lid : `${m[1]}|${m[2]}`;
  }
  return msg.metaData[META_ORIGIN] === undefined ? `${server}|${msg.id}` : undefined;
}

/** The provisional subscriptions of a hand-over: what this broker routes for the session before it holds it. */
interface Provisional {
  subs: Subscription[];
  /** Filter → the copies routed to it here, in order (at most the broker's queue cap each). */
  held: Map<string, Array<[string, Message]>>;
  dropped: number;
}

/** A message of the stream, as replayed into a session's subscription (retain as published when `rap`). */
function replayInit(lm: ReturnType<typeof decodeMessage>, rap: boolean, metaData: Record<string, string> | undefined): MessageInit {
  const init: MessageInit = { payload: lm.payload, qos: lm.qos, retain: rap && lm.retain };
  if (metaData !== undefined) init.metaData = metaData;
  copyOptionalFields(lm, init);
  return init;
}

/** The record key of a client id: `c_<base64url>` (reversible, KV-safe), or `h_<sha-256 hex>` when that is too long for a key. */
export function sessionKey(clientId: string): string {
  const b = Buffer.from(clientId, 'utf8').toString('base64url');
  return b.length <= 160 ? `c_${b}` : `h_${createHash('sha256').update(clientId).digest('hex')}`;
}

/** One subject token for a subscription filter in the held stream. */
function filterToken(filter: string): string {
  return createHash('sha256').update(filter).digest('hex').slice(0, 20);
}

/** What a record says of the session as it is on this broker now (a new record and every rewrite take these fields). */
function sessionState(s: MqttSession): Pick<SessionDoc, 'connected' | 'expiry' | 'protocolVersion' | 'username' | 'disconnectedAt' | 'subscriptions' | 'inbound'> {
  return {
    connected: s.conn !== undefined,
    expiry: s.expiry,
    protocolVersion: s.protocolVersion,
    username: s.username,
    disconnectedAt: s.disconnectedAt,
    subscriptions: [...s.subs.values()].map((x) => x.opts),
    inbound: [...s.inbound],
  };
}

function parseDoc(e: KvEntry | null): SessionDoc | undefined {
  if (e === null || e.operation !== 'PUT') return undefined;
  try {
    const d = JSON.parse(e.string()) as SessionDoc;
    return d && d.v === 1 && typeof d.owner === 'string' ? d : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The EngineStore decorator: every batch goes to the local store; the keys of mirrored sessions also go to the
 * stream `SY_<clusterName>_HELD` as `sy.<clusterName>.h.<session key>.d.<filter token>.<message id>` (held copies)
 * and `....s.<i|o>.<packet id>` (packet-id state). A deletion removes the subject's message by its sequence (no
 * tombstone left behind). The batch resolves when the local store and JetStream have both taken it.
 */
export class SessionStore implements EngineStore {
  /** `encodeURIComponent(session id)` (as in engine keys) → session key, for the sessions this broker mirrors. */
  private readonly mirrored = new Map<string, string>();
  /** Subject → the stream sequence of its message (a promise while the publish is in flight). */
  private readonly seqs = new Map<string, Promise<number | undefined>>();
  js: JetStreamClient | undefined;
  jsm: JetStreamManager | undefined;
  /** Told when a deletion could not be made in the stream (logged, rate-limited, by the plane). */
  onDeleteFailed: ((err: unknown) => void) | undefined;
  stream = '';
  prefix = '';

  constructor(private readonly inner: EngineStore) {}

  mirror(sessionId: string, key: string): void {
    this.mirrored.set(encodeURIComponent(sessionId), key);
  }

  /** Stop mirroring a session (released to another broker): its local keys may go, JetStream keeps them. */
  unmirror(sessionId: string): void {
    const key = this.mirrored.get(encodeURIComponent(sessionId));
    this.mirrored.delete(encodeURIComponent(sessionId));
    if (key === undefined) return;
    const p = `${this.prefix}.${key}.`;
    for (const s of this.seqs.keys()) if (s.startsWith(p)) this.seqs.delete(s);
  }

  isMirrored(sessionId: string): boolean {
    return this.mirrored.has(encodeURIComponent(sessionId));
  }

  /** A subject learnt while reading the stream (a session rebuilt here). */
  known(subject: string, seq: number): void {
    this.seqs.set(subject, Promise.resolve(seq));
  }

  /** The stream subject of an engine key of a mirrored session (or of the session key `sk`); undefined for every other key. */
  subjectOf(key: string, sk?: string): string | undefined {
    if (key.startsWith('d!')) {
      const bar = key.indexOf('|', 2);
      const bang = key.lastIndexOf('!');
      if (bar < 0 || bang < bar) return undefined;
      const k = sk ?? this.mirrored.get(key.slice(2, bar));
      return k === undefined ? undefined : `${this.prefix}.${k}.d.${filterToken(key.slice(bar + 1, bang))}.${key.slice(bang + 1)}`;
    }
    if (key.startsWith('s!')) {
      const m = /^s!(.*)!([io])!(\d{5})$/.exec(key);
      if (m === null) return undefined;
      const k = sk ?? this.mirrored.get(m[1]!);
      return k === undefined ? undefined : `${this.prefix}.${k}.s.${m[2]}.${m[3]}`;
    }
    return undefined;
  }

  /**
   * The stream made to hold exactly what the local store holds for a session that is being released: subjects the
   * store no longer has (a deletion JetStream did not take) are purged, keys it lacks are published. Returns the
   * number of corrections.
   */
  async sync(sessionId: string, sk: string): Promise<number> {
    const js = this.js;
    const jsm = this.jsm;
    if (js === undefined || jsm === undefined) return 0;
    const enc = encodeURIComponent(sessionId);
    const want = new Map<string, Buffer>();
    for (const prefix of [`d!${enc}|`, `s!${enc}!`]) {
      for await (const [key, value] of this.inner.iterate(prefix)) {
        const subject = this.subjectOf(key, sk);
        if (subject !== undefined) want.set(subject, value);
      }
    }
    const info = await jsm.streams.info(this.stream, { subjects_filter: `${this.prefix}.${sk}.>` });
    const have = new Set(Object.keys(info.state.subjects ?? {}));
    let fixed = 0;
    for (const subject of have) {
      if (want.has(subject)) continue;
      await jsm.streams.purge(this.stream, { filter: subject });
      fixed++;
    }
    for (const [subject, value] of want) {
      if (have.has(subject)) continue;
      await js.publish(subject, value);
      fixed++;
    }
    return fixed;
  }

  async batch(ops: StoreOp[]): Promise<void> {
    const local = this.inner.batch(ops);
    const js = this.js;
    if (this.mirrored.size === 0 || js === undefined) return local;
    const mirrored: Array<Promise<unknown>> = [local];
    for (const op of ops) {
      const subject = this.subjectOf(op.key);
      if (subject === undefined) continue;
      if (op.type === 'put') {
        const p = js.publish(subject, op.value).then((a) => a.seq);
        this.seqs.set(subject, p.catch(() => undefined));
        mirrored.push(p);
      } else {
        const prev = this.seqs.get(subject);
        this.seqs.delete(subject);
        // a deletion that JetStream does not take (NATS unreachable) does not fail the batch: the message stays in the
        // stream and is delivered again after a takeover (at least once), where failing would report the local
        // store as failed for every acknowledgement during an outage
        if (prev !== undefined) mirrored.push(prev.then((seq) => (seq === undefined ? undefined : this.remove(seq))).catch((err: unknown) => this.onDeleteFailed?.(err)));
      }
    }
    await Promise.all(mirrored);
  }

  /**
   * The keys a session already has in the local store (kept before this broker was a member: a restart, a partition)
   * published to the stream, so the cluster holds what this broker holds. Resolves when JetStream has them all.
   */
  async push(sessionId: string): Promise<number> {
    const enc = encodeURIComponent(sessionId);
    const js = this.js;
    if (js === undefined || !this.mirrored.has(enc)) return 0;
    const sent: Array<Promise<unknown>> = [];
    for (const prefix of [`d!${enc}|`, `s!${enc}!`]) {
      for await (const [key, value] of this.inner.iterate(prefix)) {
        const subject = this.subjectOf(key);
        if (subject === undefined || this.seqs.has(subject)) continue; // written since it was mirrored: that one counts
        const p = js.publish(subject, value).then((a) => a.seq);
        this.seqs.set(subject, p.catch(() => undefined));
        sent.push(p);
      }
    }
    await Promise.all(sent);
    return sent.length;
  }

  /** Delete one message of the stream by its sequence (already gone: fine). */
  async remove(seq: number): Promise<void> {
    try {
      await this.jsm?.streams.deleteMessage(this.stream, seq, false);
    } catch (err) {
      if (!/no message found|not found/i.test(messageOf(err))) throw err;
    }
  }

  iterate(prefix: string): AsyncIterable<[string, Buffer]> {
    return this.inner.iterate(prefix);
  }
}

interface Owned {
  /** The revision of the record this broker last wrote or read. */
  rev: number;
  doc: SessionDoc;
  want: 'put' | 'delete' | undefined;
  writing: boolean;
}

/**
 * The engine's store as the session plane mirrors it. The messaging service is given `wrapStore` when it is made, and
 * the session plane (which depends on the messaging service, so is made after it) reads the mirror from here.
 */
export class ClusterStoreHook {
  /** The mirror of the engine now running (a new one at every boot), when the cluster is on. */
  store: SessionStore | undefined;

  /** Given to the messaging service: the engine's store, mirrored for cluster sessions when the cluster is on. */
  readonly wrapStore = (inner: EngineStore, rt: Runtime): EngineStore => {
    if (!rt.config.Cluster.enabled) return inner;
    this.store = new SessionStore(inner);
    return this.store;
  };
}

/** What the session plane is given (src/compose.ts). */
export interface ClusterSessionsDeps {
  /** The engine the sessions' subscriptions live in. */
  messaging: MessagingService;
  /** The MQTT broker whose persistent sessions the plane holds in JetStream (it calls the plane at CONNECT). */
  mqttBroker: MqttBrokerService;
  /** The membership: this node's id and epoch, who is live, its NATS connection. */
  cluster: ClusterService;
  /** The link manager running the message plane's link, whose outbox a hand-over waits for. */
  integrations: IntegrationsService;
}

export class ClusterSessions implements Service {
  readonly name = 'clusterSessions';
  readonly dependsOn: readonly string[];
  private rt: Runtime | undefined;
  private nc: NatsConnection | undefined;
  private kv: KV | undefined;
  private log!: Logger;
  private stopped = false;
  private watchGen = 0;
  /** The current watch of the bucket (stopped to start it again after a reconnect, see watchReconnects). */
  private watcher: { stop(): void } | undefined;
  /** The NATS connection's status events, read while the plane is open on it. */
  private statusIt: AsyncIterable<Status> & { stop?: () => void } | undefined;
  /** Sessions whose record this broker holds (client id → last revision seen). */
  private readonly owned = new Map<string, Owned>();
  /** Sessions being let go (so a second change of the record does not start a second release). */
  private readonly releasing = new Set<string>();
  /** Live takeovers this broker is completing, by client id (a CONNECT and its retries wait for the same one). */
  private readonly taking = new Map<string, Promise<boolean>>();
  private activating: Promise<void> | undefined;
  /** The plane has been active since this broker started (before that, it serves as a single broker). */
  private wasActive = false;

  constructor(
    private readonly deps: ClusterSessionsDeps,
    private readonly hook: ClusterStoreHook,
  ) {
    this.dependsOn = Object.keys(deps);
  }

  private get store(): SessionStore | undefined {
    return this.hook.store;
  }

  /** The membership's view of the nodes (undefined before this service started, or while the cluster is off). */
  private view(): ClusterView | undefined {
    return this.rt === undefined ? undefined : this.deps.cluster.memberView();
  }

  private readonly onState = (state: ClusterState): void => {
    if (state === ClusterState.Member) this.activate();
  };
  /** Declared gone while cut off: the sessions adopted elsewhere meanwhile are let go here. */
  private readonly onRejoined = (): void => {
    void this.recheck().catch(() => undefined);
  };
  /**
   * A node stopped cleanly (lease written as left): its sessions are adopted as after a lapse, so they keep holding
   * messages while it is down; one adopter, the live member with the smallest node id (the compare-and-set settles a
   * race anyway).
   */
  private readonly onLeft = (nodeId: string): void => {
    const v = this.view();
    if (v === undefined) return;
    const live = v.nodes.filter((n) => n.state === 'live' && n.nodeId !== nodeId && !v.unreachable.includes(n.nodeId)).map((n) => n.nodeId);
    live.sort();
    if (live[0] !== this.nodeId) return;
    void this.adopt(nodeId).catch((err: unknown) => this.log.warn({ err, node: nodeId }, 'cluster: adopting the sessions of a node that left failed'));
  };
  private readonly onGone = (g: GoneNode): void => {
    if (g.declaredHere) void this.adopt(g.nodeId).catch((err: unknown) => this.log.warn({ err, node: g.nodeId }, 'cluster: adopting the sessions of a gone node failed'));
  };

  async start(rt: Runtime): Promise<void> {
    this.rt = rt;
    this.stopped = false;
    if (!rt.config.Cluster.enabled) return;
    this.log = rt.log.child({ actor: 'cluster', plane: 'sessions' });
    rt.on('cluster.state', this.onState);
    rt.on('cluster.node.gone', this.onGone);
    rt.on('cluster.rejoined', this.onRejoined);
    rt.on('cluster.node.left', this.onLeft);
  }

  running(rt: Runtime): void {
    if (!rt.config.Cluster.enabled) return;
    const broker = this.broker();
    if (broker !== undefined) broker.cluster = this;
    if (this.deps.cluster.state === ClusterState.Member) this.activate();
  }

  async stop(rt: Runtime): Promise<void> {
    this.stopped = true;
    this.watchGen++;
    this.watcher?.stop();
    this.watcher = undefined;
    this.statusIt?.stop?.();
    this.statusIt = undefined;
    rt.off('cluster.state', this.onState);
    rt.off('cluster.node.gone', this.onGone);
    rt.off('cluster.rejoined', this.onRejoined);
    rt.off('cluster.node.left', this.onLeft);
    const broker = this.broker();
    if (broker !== undefined && broker.cluster === this) broker.cluster = undefined;
    // the last record writes (a client that disconnected during the stop), briefly: the records are advisory for a
    // stopped broker's own clients, the held messages are already in JetStream
    const end = Date.now() + 2000;
    while ([...this.owned.values()].some((o) => o.writing) && Date.now() < end) await sleep(20);
    this.owned.clear();
    this.wasActive = false;
    this.kv = undefined;
    this.nc = undefined;
  }

  private broker(): MqttBroker | undefined {
    return this.rt === undefined ? undefined : this.deps.mqttBroker.broker;
  }

  private engine(): Engine | undefined {
    const e = this.rt === undefined ? undefined : this.deps.messaging.engine;
    return e === undefined || e.isClosed ? undefined : e;
  }

  /** This node's membership epoch (0 before it holds its lease). */
  private get epoch(): number {
    return this.rt === undefined ? 0 : this.deps.cluster.epoch;
  }

  private get nodeId(): string {
    return (this.rt === undefined ? undefined : this.deps.cluster.nodeId) ?? '';
  }

  private get cfg() {
    return this.rt!.config.Cluster;
  }

  /** Whether the plane can serve a CONNECT now (member, bucket and stream open). */
  get active(): boolean {
    return this.kv !== undefined && this.store?.js !== undefined && this.rt !== undefined && this.deps.cluster.state === ClusterState.Member;
  }

  private activate(): void {
    const nc = this.rt === undefined ? undefined : this.deps.cluster.nats();
    if (nc === undefined || nc === this.nc || this.stopped) return;
    this.activating = (this.activating ?? Promise.resolve())
      .then(() => this.open(nc))
      .catch((err: unknown) => {
        this.log.warn({ err: messageOf(err) }, 'cluster: the session plane could not open its bucket and stream; retrying in 2 s');
        if (!this.stopped) setTimeout(() => this.activate(), 2000).unref();
      });
  }

  /** Opens the bucket and the stream on the membership's connection, watches the records, reconciles local sessions. */
  private async open(nc: NatsConnection): Promise<void> {
    if (nc === this.nc || this.stopped) return;
    const cfg = this.cfg;
    const js = jetstream(nc, { timeout: 5000 });
    const jsm = await jetstreamManager(nc, { timeout: 5000 });
    const stream = `SY_${cfg.clusterName}_HELD`;
    const prefix = `sy.${cfg.clusterName}.h`;
    try {
      await jsm.streams.add({ name: stream, subjects: [`${prefix}.>`], num_replicas: cfg.replicas, max_msgs_per_subject: 1, max_bytes: cfg.heldMaxBytes, discard: DiscardPolicy.New });
    } catch (err) {
      if (!/already in use|different configuration|exists/i.test(messageOf(err))) throw err;
      this.log.warn({ stream, err: messageOf(err) }, 'cluster: the held-messages stream exists with other settings; using it as it is');
    }
    const bucket = `switchyard_${cfg.clusterName}_sessions`;
    const kvm = new Kvm(js);
    let kv: KV;
    // Records are read from the stream's leader, never by direct get: a direct get may be answered by a replica that
    // has not applied the latest write yet, and a hand-over decides on what it reads (a failing run of
    // test/cluster/sessions: the old owner read the record as it was before the takeover its watch had just delivered,
    // skipped the hand-over's cut and let the session go at once; what its consumer went on acknowledging until the new
    // owner replayed from its ack floor was lost)
    try {
      kv = await kvm.create(bucket, { replicas: cfg.replicas, history: 1, maxValueSize: cfg.sessionRecordMaxBytes, max_bytes: SESSIONS_BUCKET_MAX_BYTES, allow_direct: false });
    } catch (err) {
      if (!/already in use|different configuration/i.test(messageOf(err))) throw err;
      kv = await kvm.open(bucket, { allow_direct: false });
      this.log.warn({ bucket, err: messageOf(err) }, 'cluster: the sessions bucket exists with other settings; using it as it is');
    }
    const store = this.store!;
    let lastWarn = 0;
    store.onDeleteFailed = (err) => {
      if (Date.now() - lastWarn < 60_000) return;
      lastWarn = Date.now();
      this.log.warn({ err: messageOf(err) }, 'cluster: a held message could not be deleted from JetStream (it may be delivered again after a takeover); at most one such line a minute');
    };
    store.js = js;
    store.jsm = jsm;
    store.stream = stream;
    store.prefix = prefix;
    this.kv = kv;
    await this.reconcile();
    this.nc = nc; // only now: a failure above is retried with the same connection
    this.wasActive = true;
    void this.watch(kv);
    void this.watchReconnects(nc);
    this.log.info({ bucket, stream, sessions: this.owned.size }, 'cluster: session plane active');
  }

  /**
   * The persistent sessions this broker has (restored from its store at boot, or kept while it was cut off) against
   * their records: owned here → held again under this node's epoch; owned elsewhere → dropped here; no record → made.
   */
  private async reconcile(): Promise<void> {
    const broker = this.broker();
    const kv = this.kv;
    if (broker === undefined || kv === undefined) return;
    for (const s of [...broker.sessions.values()]) {
      if (!s.persistent) continue;
      const key = sessionKey(s.clientId);
      const e = await kv.get(key);
      const doc = parseDoc(e);
      if (doc !== undefined && doc.owner !== this.nodeId) {
        this.log.info({ clientId: s.clientId, owner: doc.owner }, 'cluster: a session this broker kept is held by another node; dropped here');
        await this.dropLocal(s, 'the session is held by another broker of the cluster');
        continue;
      }
      // held here: under this node's epoch from now on
      const o: Owned = { rev: e?.revision ?? 0, doc: doc ? { ...doc, ownerEpoch: this.epoch } : this.newDoc(s), want: undefined, writing: false };
      if (doc === undefined) {
        const json = this.encode(o.doc, s.clientId);
        if (json === undefined) continue;
        try {
          o.rev = await kv.create(key, json);
        } catch (err) {
          if (!wrongSequence(err)) throw err;
          // made meanwhile by a CONNECT on another broker: that one holds the session
          await this.dropLocal(s, 'the session is held by another broker of the cluster');
          continue;
        }
      }
      this.own(s, o);
      const pushed = await this.store!.push(s.sessionId);
      if (pushed > 0) this.log.info({ clientId: s.clientId, records: pushed }, 'cluster: what this broker held for a session is now in JetStream');
      this.saved(s);
    }
  }

  private newDoc(s: MqttSession): SessionDoc {
    return {
      v: 1,
      clientId: s.clientId,
      owner: this.nodeId,
      ownerEpoch: this.epoch,
      epoch: 1,
      released: true,
      ...sessionState(s),
      takeovers: [],
      updated: Date.now(),
    };
  }

  /** The record as JSON, or undefined (logged) when it is larger than the bucket takes: the session stays local. */
  private encode(doc: SessionDoc, clientId: string): string | undefined {
    const json = JSON.stringify(doc);
    const bytes = Buffer.byteLength(json);
    if (bytes > this.cfg.sessionRecordMaxBytes) {
      this.log.warn(
        { clientId, bytes, max: this.cfg.sessionRecordMaxBytes },
        `cluster: the session record of ${clientId} is ${bytes} bytes, above the bucket's max value (Cluster.sessionRecordMaxBytes ${this.cfg.sessionRecordMaxBytes}): the session stays on this broker only`,
      );
      return undefined;
    }
    return json;
  }

  private own(s: MqttSession, o: Owned): void {
    this.owned.set(s.clientId, o);
    this.store?.mirror(s.sessionId, sessionKey(s.clientId));
  }

  // ------------------------------------------------------------------------------------------------------------
  // The broker's hooks (src/protocol/mqtt/broker.ts SessionCluster)

  /** A persistent session changed: its record follows (coalesced, one write at a time per session). */
  saved(s: MqttSession): void {
    const o = this.owned.get(s.clientId);
    if (o === undefined || this.broker()?.sessions.get(s.clientId) !== s) return;
    o.want = 'put';
    if (!o.writing) void this.writeLoop(s.clientId, o);
  }

  /** A session ended here (expired, clean start, user deleted): its record goes, and what JetStream held for it. */
  ended(s: MqttSession): void {
    const o = this.owned.get(s.clientId);
    if (o === undefined) return;
    o.want = 'delete';
    if (!o.writing) void this.writeLoop(s.clientId, o);
  }

  private async writeLoop(clientId: string, o: Owned): Promise<void> {
    o.writing = true;
    try {
      while (o.want !== undefined && this.owned.get(clientId) === o && this.kv !== undefined) {
        const want = o.want;
        o.want = undefined;
        const kv = this.kv;
        const key = sessionKey(clientId);
        const s = this.broker()?.sessions.get(clientId);
        try {
          if (want === 'delete' && (s === undefined || !s.persistent)) {
            await kv.delete(key, { previousSeq: o.rev });
            this.owned.delete(clientId);
            // the session ended: what the stream held for it goes too (a new session starts empty)
            await this.store?.jsm?.streams.purge(this.store.stream, { filter: `${this.store.prefix}.${key}.>` }).catch(() => undefined);
            return;
          }
          if (s === undefined) return;
          const doc: SessionDoc = {
            ...o.doc,
            ...sessionState(s),
            updated: Date.now(),
          };
          // the session is here and no takeover of it is still completing: a hand-over the record shows is over (the
          // write of its end failed, finishHandover), and left in, it would hold up every CONNECT on another broker
          if (doc.handover !== undefined && !this.taking.has(clientId)) delete doc.handover;
          const json = this.encode(doc, clientId);
          if (json === undefined) {
            // too large for the bucket: the session stays on this broker only (no record, nothing mirrored)
            this.owned.delete(clientId);
            this.store?.unmirror(s.sessionId);
            await kv.delete(key, { previousSeq: o.rev }).catch(() => undefined);
            await this.store?.jsm?.streams.purge(this.store.stream, { filter: `${this.store.prefix}.${key}.>` }).catch(() => undefined);
            return;
          }
          o.rev = await kv.update(key, json, o.rev);
          o.doc = doc;
        } catch (err) {
          if (!wrongSequence(err)) {
            this.log.warn({ clientId, err: messageOf(err) }, 'cluster: a session record could not be written');
            return;
          }
          // someone else wrote the record: this broker lost the session (the watch usually saw it first)
          const e = await kv.get(key).catch(() => null);
          const now = parseDoc(e);
          if (e !== null && now !== undefined && now.owner === this.nodeId) {
            // a write of this broker's own record it had not seen (the old owner marking it released): again on top
            o.rev = e.revision;
            o.doc = now;
            o.want ??= want;
            continue;
          }
          this.owned.delete(clientId);
          void this.release(clientId, e?.revision ?? 0);
          return;
        }
      }
    } finally {
      o.writing = false;
    }
  }

  // ------------------------------------------------------------------------------------------------------------
  // Watching the records: a session this broker holds and another broker took is let go

  private async watch(kv: KV): Promise<void> {
    const gen = ++this.watchGen;
    while (!this.stopped && gen === this.watchGen) {
      try {
        const it = await kv.watch({ include: KvWatchInclude.UpdatesOnly });
        this.watcher = it;
        // what changed before the watch began: each session held here against its record
        void this.recheck().catch(() => undefined);
        for await (const e of it) {
          if (gen !== this.watchGen) {
            it.stop();
            break;
          }
          this.changed(e);
        }
      } catch (err) {
        if (this.stopped) return;
        this.log.debug({ err: messageOf(err) }, 'cluster: the session watch ended; watching again');
      }
      await sleep(500);
      // records changed while the watch was down: compare every session held here with its record
      if (!this.stopped && gen === this.watchGen) await this.recheck().catch(() => undefined);
    }
  }

  /**
   * After a reconnect of the NATS connection the watch starts again (and every session held here is compared with its
   * record): the watch is an ordered push consumer without acknowledgements, and what the server had sent on the old
   * connection and this broker had not read yet is gone with it. The consumer notices a lost record change only from
   * a gap in a later delivery, and a takeover writes nothing more until the old owner answers, so the old owner never
   * handed the session over: the new owner gave up after HANDOVER_MAX_MS and every retry of the client got CONNACK
   * 0x88 (test/cluster/connect-timeout in CI under load; a frozen owner wakes up with its pings, every second and two
   * outstanding at most, unanswered and drops its connection as stale, the takeover's write unread in its socket).
   */
  private async watchReconnects(nc: NatsConnection): Promise<void> {
    this.statusIt?.stop?.();
    const it = nc.status() as AsyncIterable<Status> & { stop?: () => void };
    this.statusIt = it;
    for await (const st of it) {
      if (this.stopped || this.statusIt !== it) return;
      if (st.type !== 'reconnect') continue;
      this.log.info({ sessions: this.owned.size }, 'cluster: NATS connection back; the session watch starts again and each session held here is compared with its record');
      // the watch loop sees its iterator end, rechecks the sessions held here and watches again
      this.watcher?.stop();
    }
  }

  private changed(e: KvEntry): void {
    const doc = parseDoc(e);
    for (const [clientId, o] of this.owned) {
      if (sessionKey(clientId) !== e.key) continue;
      if (e.revision <= o.rev) return; // this broker's own write, or older
      if (doc !== undefined && doc.owner === this.nodeId) {
        o.rev = e.revision;
        o.doc = doc;
        return;
      }
      this.owned.delete(clientId);
      void this.release(clientId, e.revision);
      return;
    }
  }

  private async recheck(): Promise<void> {
    const kv = this.kv;
    if (kv === undefined) return;
    for (const [clientId, o] of [...this.owned]) {
      const e = await kv.get(sessionKey(clientId));
      if (e !== null && e.revision > o.rev) this.changed(e);
    }
  }

  /**
   * Another broker took the session: its client here is disconnected (v5 DISCONNECT 0x8E), the writes in flight
   * finish (so JetStream has the last state), the local copy goes without touching JetStream, and the record is
   * marked released.
   */
  private async release(clientId: string, seen: number): Promise<void> {
    if (this.releasing.has(clientId)) return;
    this.releasing.add(clientId);
    try {
      const kv = this.kv;
      const s = this.broker()?.sessions.get(clientId);
      if (s !== undefined) {
        // the new owner waits for this broker's last state only while the record is not marked released; once it is
        // (this broker was judged gone), the stream is the new owner's and is left alone. Read as of the version that
        // said the session is gone at least: an older one (this broker still the owner) would skip the hand-over
        const now = parseDoc(kv === undefined ? null : await this.readSince(kv, sessionKey(clientId), seen).catch(() => null));
        if (now !== undefined && !now.released && now.previousOwner === this.nodeId) await this.handOver(s, sessionKey(clientId), seen);
        // the client came back here during the hand-over and a CONNECT took the record back: the session stays
        if (this.owned.has(clientId)) return;
        // the stream is made to agree with this broker's store only while the record still waits for this broker's
        // release; once another broker marked it released (this one was judged gone: stopped, cut off) that broker may
        // have rebuilt the session from the stream already, and a late correction would undo what it wrote since
        const later = parseDoc((await kv?.get(sessionKey(clientId)).catch(() => null)) ?? null);
        const lastState = later !== undefined && later.owner !== this.nodeId && !later.released && later.previousOwner === this.nodeId;
        await this.dropLocal(s, 'the session was taken over by another broker of the cluster', lastState);
      }
      if (kv === undefined) return;
      // the new owner waits for this mark: a request that fails (NATS briefly unreachable) is made again, for a while
      let failure: unknown;
      for (let i = 0; i < 20 && !this.stopped; i++) {
        try {
          const e = await kv.get(sessionKey(clientId));
          const doc = parseDoc(e);
          // only the broker the record waits for marks it: a broker that was taking the session over and lost it to a
          // third one (which waits for the broker that still has the session's state) has nothing to release
          if (e === null || doc === undefined || doc.owner === this.nodeId || doc.released || doc.previousOwner !== this.nodeId) return;
          await kv.update(e.key, JSON.stringify({ ...doc, released: true, updated: Date.now() }), e.revision);
          this.log.info({ clientId, owner: doc.owner }, 'cluster: session released to another broker');
          return;
        } catch (err) {
          if (wrongSequence(err)) continue;
          failure = err;
          await sleep(250);
        }
      }
      if (failure !== undefined) throw failure;
    } catch (err) {
      this.log.warn({ clientId, err: messageOf(err) }, 'cluster: marking a session released failed');
    } finally {
      this.releasing.delete(clientId);
    }
  }

  /**
   * The old owner's half of a live takeover (the record names another owner, not yet released): its client is
   * disconnected (0x8E) at once, and the session goes on holding here, offline, while the record says how far this
   * broker's message-plane consumer had been given messages (`closedSeq`), until the new owner has made the session's
   * subscriptions and written `cutSeq`, and this broker's consumer has routed and stored everything up to it (its ack
   * floor: a message is acknowledged to the stream only once its copies are written, and a cluster session's copies
   * only once JetStream has them). Bounded: after 2 x sessionTakeoverWaitSeconds the session is let go as it is (WARN).
   */
  private async handOver(s: MqttSession, key: string, seen: number): Promise<void> {
    const kv = this.kv;
    if (kv === undefined) return;
    s.conn?.close(CloseReason.TakenOver, Reason.SessionTakenOver, 'the session was taken over by another broker of the cluster');
    // the session goes on elsewhere: a will waiting for its delay is not this broker's to publish
    s.pendingWill = undefined;
    const closedAt = Date.now();
    const end = closedAt + 2 * this.cfg.sessionTakeoverWaitSeconds * 1000;
    // what was published here before, and so may have gone to the client, reaches the stream first: then every message
    // of the stream this broker may have given its client is at or below the stream's last sequence
    if (!(await this.waitOutbox(closedAt, closedAt + this.cfg.sessionTakeoverWaitSeconds * 1000))) {
      this.log.warn({ clientId: s.clientId }, 'cluster: what this broker published had not all reached the stream at a takeover (a message may reach the client twice)');
    }
    const closedSeq = (await this.streamLast()) ?? (await this.planePosition('delivered')) ?? 0;
    let marked = false;
    let cut: number | undefined;
    while (!this.stopped && Date.now() < end) {
      try {
        const e = await this.readSince(kv, key, seen);
        const doc = parseDoc(e);
        if (e === null || doc === undefined || doc.owner === this.nodeId || doc.released || doc.previousOwner !== this.nodeId) return;
        const h = doc.handover;
        if (h?.from === this.nodeId && h.cutSeq !== undefined) {
          cut = h.cutSeq;
          break;
        }
        if (!marked && (h?.from !== this.nodeId || h.closedSeq === undefined)) {
          try {
            // `to` kept: the record says who is taking the session until that broker has it
            const handover: Handover = { ...(h?.from === this.nodeId ? h : {}), from: this.nodeId, closedSeq };
            await kv.update(key, JSON.stringify({ ...doc, handover, updated: Date.now() } satisfies SessionDoc), e.revision);
            marked = true;
          } catch (err) {
            if (!wrongSequence(err)) throw err;
            continue; // written meanwhile (the new owner, or a third broker taking it): read again
          }
        }
      } catch (err) {
        // NATS briefly unreachable, a request timed out: tried again until `end`, the session still holding here
        this.log.debug({ clientId: s.clientId, err: messageOf(err) }, 'cluster: a step of a hand-over failed; trying again');
      }
      await sleep(HANDOVER_POLL_MS);
    }
    if (cut === undefined) {
      if (!this.stopped) this.log.warn({ clientId: s.clientId }, 'cluster: the new owner of a session did not say where its subscriptions began; let go as it is (messages routed here meanwhile may be missing there)');
      return;
    }
    if (!(await this.waitPlane(cut, end))) {
      this.log.warn({ clientId: s.clientId, cutSeq: cut }, "cluster: this broker's message plane did not reach the hand-over point of a session in time; let go as it is (messages up to it may be missing on the new owner)");
    }
  }

  /**
   * The record as of revision `seen` or later (null when it is gone). The bucket is read from its stream's leader, which
   * has every write the watch delivered; should a read still come back older (a leader change), it is made again, for
   * at most a second, and then the older version is taken as it is.
   */
  private async readSince(kv: KV, key: string, seen: number): Promise<KvEntry | null> {
    const end = Date.now() + 1000;
    for (;;) {
      const e = await kv.get(key);
      if (e === null || e.revision >= seen || Date.now() >= end) return e;
      await sleep(HANDOVER_POLL_MS);
    }
  }

  /**
   * This node's message-plane consumer (`SY_<c>_MSG`): how far JetStream has given it messages (`delivered`) or how
   * far it has acknowledged them without a gap (`acked`: routed and stored). Undefined without a message plane; 0 while
   * the consumer cannot be read or does not exist yet (the cluster link not established since this node started): it
   * has routed nothing known, and a hand-over must not take that for "caught up" (test/cluster/sessions lost every
   * message from the other nodes up to the cut when the first hand-over came before the old owner's link was up).
   * (A request to JetStream each time, within the manager's 5 s timeout: a hand-over asks every HANDOVER_POLL_MS.)
   */
  private async planePosition(which: 'acked' | 'delivered'): Promise<number | undefined> {
    const jsm = this.store?.jsm;
    const rt = this.rt;
    if (jsm === undefined || rt === undefined || !this.cfg.messages.enabled) return undefined;
    try {
      const info = await jsm.consumers.info(messageStream(this.cfg.clusterName), planeConsumer(rt.serverName));
      return which === 'acked' ? info.ack_floor.stream_seq : info.delivered.stream_seq;
    } catch {
      return 0;
    }
  }

  /** Waits (until `end`, ms) until this node's message-plane consumer has routed and stored everything up to `seq`. */
  private async waitPlane(seq: number, end: number): Promise<boolean> {
    if (seq <= 0) return true;
    for (;;) {
      const at = await this.planePosition('acked');
      if (at === undefined) return true; // no message plane here: nothing to wait for
      if (at >= seq) return true;
      if (this.stopped || Date.now() >= end) return false;
      await sleep(HANDOVER_POLL_MS);
    }
  }

  /**
   * Waits (until `end`, ms) until this node's message-plane outbox (the cluster link's durable subscription) holds no
   * message created at or before `before` (ms): everything published here by then is in the stream (or refused by it).
   */
  private async waitOutbox(before: number, end: number): Promise<boolean> {
    const sub = this.deps.integrations.manager?.find(CLUSTER_LINK)?.push.find((ch) => ch.sub !== undefined)?.sub;
    if (sub === undefined) return true;
    for (;;) {
      let pending = (sub.held.peekMsg()?.creation ?? Infinity) <= before;
      if (!pending) {
        for (const f of sub.inFlight.values()) {
          if (f.msg.creation <= before) {
            pending = true;
            break;
          }
        }
      }
      if (!pending || sub.closed) return true;
      if (this.stopped || Date.now() >= end) return false;
      await sleep(HANDOVER_POLL_MS);
    }
  }

  /** The last sequence of the message stream now (0 without a message plane). */
  private async streamLast(): Promise<number | undefined> {
    const jsm = this.store?.jsm;
    if (jsm === undefined || !this.cfg.messages.enabled) return 0;
    try {
      return (await jsm.streams.info(messageStream(this.cfg.clusterName))).state.last_seq;
    } catch (err) {
      if (err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound) return 0;
      return undefined;
    }
  }

  /** The local copy of a session goes (its client disconnected with 0x8E), JetStream keeps what it held. */
  private async dropLocal(s: MqttSession, why: string, lastState = false): Promise<void> {
    const broker = this.broker();
    if (broker === undefined) return;
    this.owned.delete(s.clientId);
    const conn = s.conn;
    if (conn !== undefined) conn.close(CloseReason.TakenOver, Reason.SessionTakenOver, why);
    await this.engine()?.flush(); // every batch of the session mirrored
    if (lastState && this.store?.isMirrored(s.sessionId)) {
      // the last state: JetStream made to agree with the local store (a deletion it did not take is made now)
      const fixed = await this.store.sync(s.sessionId, sessionKey(s.clientId)).catch((err: unknown) => {
        this.log.warn({ clientId: s.clientId, err: messageOf(err) }, 'cluster: the last state of a released session could not be checked against JetStream');
        return 0;
      });
      if (fixed > 0) this.log.info({ clientId: s.clientId, corrections: fixed }, 'cluster: JetStream corrected to the last state of a released session');
    }
    this.store?.unmirror(s.sessionId);
    if (broker.sessions.get(s.clientId) !== s) return;
    // the session goes on elsewhere: a will waiting for its delay is not this broker's to publish
    s.pendingWill = undefined;
    broker.endSession(s);
  }

  // ------------------------------------------------------------------------------------------------------------
  // CONNECT

  /**
   * Who holds the session of `clientId`: this broker (taking it over or rebuilding it if needed), or refuse. Within
   * `budgetMs` (the CONNECT's connect timeout less what has passed) less CLAIM_MARGIN_MS: every wait on NATS here is
   * bounded (requests 5 s, the takeover Cluster.sessionTakeoverWaitSeconds), but together they can outlast the connect
   * timeout, and a CONNECT still waiting then is closed without CONNACK; so when the budget runs out the answer is a
   * refusal (CONNACK 0x88 Server unavailable: the client retries, and a takeover under way goes on meanwhile), and a
   * CONNACK delay for a client that keeps displacing itself is shortened to fit.
   */
  async claim(clientId: string, opts: { persistent: boolean; cleanStart: boolean; budgetMs?: number }): Promise<ClaimResult> {
    // where the claim is, for the line that says it did not finish in time
    const step = { what: 'starting' };
    const answer = this.claimSession(clientId, opts, step).catch((err: unknown): ClaimResult => {
      this.log.warn({ clientId, err: messageOf(err) }, 'cluster: the session plane could not answer a CONNECT');
      return { ok: false, reason: 'the cluster session store is unavailable' };
    });
    if (opts.budgetMs === undefined) return answer;
    const deadline = Date.now() + Math.max(0, opts.budgetMs - CLAIM_MARGIN_MS);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<ClaimResult>((resolve) => {
      timer = setTimeout(() => {
        this.log.info({ clientId, budgetMs: opts.budgetMs, step: step.what }, `cluster: a CONNECT could not be settled within its connect timeout (${step.what}); CONNACK 0x88`);
        resolve({ ok: false, reason: 'the cluster did not settle who holds this session in time; try again' });
      }, deadline - Date.now());
      timer.unref();
    });
    try {
      const r = await Promise.race([answer, late]);
      if (r.ok && r.delayMs !== undefined) return { ok: true, delayMs: Math.min(r.delayMs, Math.max(0, deadline - Date.now())) };
      return r;
    } finally {
      clearTimeout(timer);
    }
  }

  private async claimSession(clientId: string, opts: { persistent: boolean; cleanStart: boolean }, step: { what: string }): Promise<ClaimResult> {
    if (opts.persistent && !this.wasActive) {
      step.what = "waiting for this broker's session plane to open";
      // the broker is starting: its plane is usually active within a moment, and then the session's record decides
      // (another node may have adopted it meanwhile); the wait stays well inside the CONNECT's connection timeout
      const end = Date.now() + START_WAIT_MS;
      while (!this.wasActive && !this.stopped && Date.now() < end) await sleep(50);
    }
    const kv = this.kv;
    const broker = this.broker();
    if (!this.active || kv === undefined || broker === undefined) {
      // before this broker first joined it serves as a single broker (as the partition policy does): its sessions are
      // reconciled with the cluster when it joins (one held elsewhere is let go here, its client disconnected 0x8E).
      // After that no record can be checked or written: a session that outlives the connection is not served.
      if (!opts.persistent || !this.wasActive) return { ok: true };
      return { ok: false, reason: 'the cluster session store is not reachable' };
    }
    const key = sessionKey(clientId);
    let waited = false;
    for (let attempt = 0; attempt < 3; attempt++) {
      step.what = 'reading the session record';
      const e = await kv.get(key);
      const doc = parseDoc(e);
      if (doc === undefined) {
        if (!opts.persistent) return { ok: true };
        step.what = 'writing a new session record';
        const s = broker.sessions.get(clientId);
        const fresh: SessionDoc = { ...this.newDoc(s ?? new MqttSession(clientId)), connected: true };
        const json = this.encode(fresh, clientId);
        if (json === undefined) return { ok: true };
        try {
          const rev = e === null ? await kv.create(key, json) : await kv.update(key, json, e.revision);
          this.owned.set(clientId, { rev, doc: fresh, want: undefined, writing: false });
          this.store?.mirror(`mqtt:${clientId}`, key);
          return { ok: true };
        } catch (err) {
          if (!wrongSequence(err)) throw err;
          // a CONNECT on another broker made it at the same moment: the compare-and-set chose that one
          return { ok: false, reason: 'another broker of the cluster took this client id at the same moment' };
        }
      }
      if (doc.owner === this.nodeId) {
        const o = this.owned.get(clientId);
        if (o === undefined) this.owned.set(clientId, { rev: e!.revision, doc, want: undefined, writing: false });
        else if (e!.revision > o.rev) {
          o.rev = e!.revision;
          o.doc = doc;
        }
        const previous = doc.previousOwner ?? doc.handover?.from;
        if (previous !== undefined && (!doc.released || handoverUnderWay(doc))) {
          // a takeover still under way (an earlier CONNECT of this client gave up waiting, or this broker restarted
          // in the middle of one): the same hand-over goes on, or is completed from the stream
          step.what = `waiting for broker ${previous} to hand the session over`;
          const resumable = opts.persistent && !opts.cleanStart && broker.sessions.get(clientId) === undefined;
          const done = resumable ? await this.waitTakeOver(clientId, key, previous) : await this.waitRelease(key, previous);
          if (!done) return { ok: false, reason: `broker ${previous} has not released this session yet` };
          step.what = 'making the session here from JetStream';
          const r = await this.arrive(clientId, key, opts);
          // the retry completes a takeover its first CONNECT counted (doc.takeovers): a client that keeps displacing
          // itself is slowed on this path too
          const now = Date.now();
          return r.ok ? this.displaced(clientId, doc.takeovers.filter((t) => now - t < TAKEOVER_WINDOW_MS).length) : r;
        }
        step.what = 'making the session here from JetStream';
        return this.arrive(clientId, key, opts);
      }
      const underWay = handoverUnderWay(doc);
      if (underWay && this.isLive(doc.owner)) {
        // the owner is itself taking the session over from another broker: that hand-over ends first (bounded), and
        // the session then moves from the owner as any other; taking it now would leave the messages of the hand-over
        // (held on the broker it comes from, or provisionally on the owner) behind
        step.what = `waiting for broker ${doc.owner} to complete its takeover of the session from broker ${doc.handover!.from}`;
        if (waited || !(await this.waitHandover(key, doc.owner))) {
          return { ok: false, reason: `broker ${doc.owner} is still taking this session over from broker ${doc.handover!.from}` };
        }
        waited = true;
        attempt--;
        continue;
      }
      // held by another broker: take it (compare-and-set on the revision read)
      step.what = `taking the session record over from broker ${doc.owner}`;
      const now = Date.now();
      const recent = doc.takeovers.filter((t) => now - t < TAKEOVER_WINDOW_MS);
      recent.push(now);
      const resumes = opts.persistent && !opts.cleanStart;
      // who has the session's last state: the owner; or, when the owner died taking the session over from a broker
      // that has not released it yet and is live, that broker (the dead owner had nothing of it but provisional copies)
      const holder = underWay && !doc.released && doc.previousOwner !== undefined && this.isLive(doc.previousOwner) ? doc.previousOwner : doc.owner;
      const holderLive = holder !== doc.owner || this.isLive(doc.owner);
      const taken: SessionDoc = {
        ...doc,
        owner: this.nodeId,
        ownerEpoch: this.epoch,
        epoch: doc.epoch + 1,
        previousOwner: holder,
        released: !holderLive,
        connected: false,
        takeovers: recent.slice(-TAKEOVER_KEPT),
        // a session that starts afresh here needs none of the old owner's messages: it lets go at once. A hand-over
        // the dead owner left unfinished is completed here (where it was cut, takeOver replays from)
        handover: !resumes ? { from: holder, to: this.nodeId, cutSeq: 0 } : underWay ? { ...doc.handover!, to: this.nodeId } : { from: holder, to: this.nodeId },
        updated: now,
      };
      let rev: number;
      try {
        rev = await kv.update(key, JSON.stringify(taken), e!.revision);
      } catch (err) {
        if (!wrongSequence(err)) throw err;
        if (attempt === 2) return { ok: false, reason: 'another broker of the cluster took this session at the same moment' };
        continue;
      }
      this.owned.set(clientId, { rev, doc: taken, want: undefined, writing: false });
      this.log.info({ clientId, from: doc.owner, holder, epoch: taken.epoch }, 'cluster: session taken over from another broker');
      step.what = `waiting for broker ${holder} to hand the session over`;
      // a resumed session always goes through takeOver, which replays what an unfinished hand-over may have left out
      const released = resumes ? await this.waitTakeOver(clientId, key, holder) : !holderLive || (await this.waitRelease(key, holder));
      if (!released) {
        return { ok: false, reason: `broker ${holder} did not release this session in ${this.cfg.sessionTakeoverWaitSeconds} s` };
      }
      step.what = 'making the session here from JetStream';
      const r = await this.arrive(clientId, key, opts);
      return r.ok ? this.displaced(clientId, recent.length) : r;
    }
    return { ok: false, reason: 'the session record kept changing' };
  }

  /** A CONNECT that took the session over, the `takeovers`-th within TAKEOVER_WINDOW_MS: above the limit, its CONNACK waits. */
  private displaced(clientId: string, takeovers: number): ClaimResult {
    const over = takeovers - TAKEOVER_LIMIT;
    if (over <= 0) return { ok: true };
    const delayMs = Math.min(TAKEOVER_DELAY_FIRST_MS * 2 ** (over - 1), TAKEOVER_DELAY_MAX_MS);
    this.log.info({ clientId, takeovers, delayMs }, `cluster: client ${clientId} keeps displacing itself (${takeovers} takeovers in ${TAKEOVER_WINDOW_MS / 1000} s): CONNACK delayed ${delayMs} ms`);
    return { ok: true, delayMs };
  }

  /**
   * This broker holds the record: the session is rebuilt here if it is not (and the client asks to resume it); a
   * clean start or a session that ends with the connection empties what JetStream held for it.
   */
  private async arrive(clientId: string, key: string, opts: { persistent: boolean; cleanStart: boolean }): Promise<ClaimResult> {
    const broker = this.broker()!;
    const local = broker.sessions.get(clientId);
    if (opts.cleanStart || !opts.persistent) {
      if (local === undefined) await this.store?.jsm?.streams.purge(this.store.stream, { filter: `${this.store.prefix}.${key}.>` }).catch(() => undefined);
      if (!opts.persistent && local === undefined) {
        // a session that ends with its connection has no record; accept() makes it fresh
        const o = this.owned.get(clientId);
        this.owned.delete(clientId);
        if (o !== undefined) await this.kv?.delete(key, { previousSeq: o.rev }).catch(() => undefined);
        return { ok: true };
      }
      if (local === undefined) {
        this.store?.mirror(`mqtt:${clientId}`, key);
        if (this.owned.get(clientId)?.doc.handover !== undefined) await this.finishHandover(clientId, key);
        return { ok: true };
      }
    }
    if (local === undefined) {
      const o = this.owned.get(clientId);
      if (o !== undefined) await this.rebuild(o.doc, key);
    } else this.store?.mirror(local.sessionId, key);
    // a takeover that ends here (a clean start, a session taken from a dead owner) is complete before the CONNACK
    if (this.owned.get(clientId)?.doc.handover !== undefined) await this.finishHandover(clientId, key);
    return { ok: true };
  }

  /**
   * The provisional copies of a takeover appended to the old owner's (`held`, filter → copies read from the stream):
   * a message the old owner holds as well is left out (the old owner's copy may be in flight with a packet id), the
   * rest get ids above every id of both lists. QoS 0 messages cross nodes outside the stream, without an id to tell
   * the two brokers' copies apart: the provisional ones are left out (at most once: one published in the moment
   * between the old owner's stop and the rebuild is missing, none comes twice).
   */
  private mergeProvisional(held: Map<string, Array<[string, Message]>>, prov: Provisional, previousOwner: string | undefined): { added: number; twice: number; qos0: number } {
    const v = this.view();
    const oldServer = v !== undefined ? (v.nodes.find((n) => n.nodeId === previousOwner)?.serverName ?? '') : '';
    const here = this.rt?.serverName ?? '';
    const theirs = new Set<string>();
    let top = 0;
    for (const list of held.values()) {
      for (const [, m] of list) {
        const id = copyIdentity(m, oldServer);
        if (id !== undefined) theirs.add(id);
        if (m.id > top) top = m.id;
      }
    }
    for (const list of prov.held.values()) for (const [, m] of list) if (m.id > top) top = m.id;
    let added = 0;
    let twice = 0;
    let qos0 = 0;
    for (const [filter, list] of prov.held) {
      let into = held.get(filter);
      for (const [destination, m] of list) {
        if (m.qos === 0) {
          qos0++;
          continue;
        }
        const id = copyIdentity(m, here);
        if (id !== undefined && theirs.has(id)) {
          twice++;
          continue;
        }
        const copy: Message = { ...m, id: ++top };
        delete copy.subscriptionIds;
        if (into === undefined) held.set(filter, (into = []));
        into.push([destination, copy]);
        added++;
      }
    }
    prov.held.clear();
    return { added, twice, qos0 };
  }

  private isLive(nodeId: string): boolean {
    const v = this.view();
    if (v === undefined) return false;
    const n = v.nodes.find((x) => x.nodeId === nodeId);
    return n !== undefined && n.state === 'live' && !v.unreachable.includes(nodeId);
  }

  /** The takeover of `clientId` from `previous` under way here, or a new one (see takeOver); resolves true when the session is here. */
  private startTakeOver(clientId: string, key: string, previous: string): Promise<boolean> {
    const p = this.taking.get(clientId);
    if (p !== undefined) return p;
    const started = this.takeOver(clientId, key, previous)
      .catch((err: unknown) => {
        this.log.warn({ clientId, err: messageOf(err) }, 'cluster: a session takeover failed');
        return false;
      })
      .finally(() => {
        if (this.taking.get(clientId) === started) this.taking.delete(clientId);
      });
    this.taking.set(clientId, started);
    return started;
  }

  /**
   * Waits (Cluster.sessionTakeoverWaitSeconds) for the live takeover of `clientId` from `previous` to complete here: the
   * session rebuilt on this broker. The takeover itself goes on after a CONNECT stopped waiting (up to
   * HANDOVER_MAX_MS), so the client's retry finds it done or waits for the same one.
   */
  private async waitTakeOver(clientId: string, key: string, previous: string): Promise<boolean> {
    const p = this.startTakeOver(clientId, key, previous);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<boolean>((r) => {
      timer = setTimeout(() => r(false), this.cfg.sessionTakeoverWaitSeconds * 1000);
      timer.unref();
    });
    try {
      return await Promise.race([p, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * The new owner's half of a live takeover (the old owner's is handOver): once the old owner says its client is
   * disconnected (`closedSeq`), this broker waits until its own message-plane consumer has routed that far (so nothing
   * the old owner could still deliver to its client is also routed here), makes the session's subscriptions
   * provisionally (they route the session's messages into lists from now on) and writes `cutSeq`, the stream's last
   * sequence after that: every later message is routed here. Once the old owner has routed up to `cutSeq` and marked
   * the record released, the session is rebuilt from the stream with the provisional copies after the old owner's
   * (those both brokers hold are kept once). An old owner whose lease lapses releases it by that alone.
   * Resolves true when the session is on this broker.
   */
  private async takeOver(clientId: string, key: string, previous: string): Promise<boolean> {
    const kv = this.kv;
    if (kv === undefined) return false;
    const end = Date.now() + HANDOVER_MAX_MS;
    let prov: Provisional | undefined;
    try {
      while (!this.stopped) {
        try {
          const e = await kv.get(key);
          const doc = parseDoc(e);
          if (e === null || doc === undefined || doc.owner !== this.nodeId) return false;
          if (this.broker()?.sessions.get(clientId) !== undefined) return true;
          if (doc.released || !this.isLive(previous)) {
            const lapsed = !doc.released;
            if (lapsed) {
              // its lease lapsed: the stream is this broker's from now on (marked, so a late release leaves it alone)
              await kv.update(key, JSON.stringify({ ...doc, released: true, updated: Date.now() }), e.revision).catch(() => undefined);
            }
            const s = await this.rebuild(doc, key, prov);
            if (s === undefined) return false;
            const h = doc.handover;
            // this broker's own cut, released by the broker that had routed up to it, needs nothing more. Otherwise part
            // of the hand-over may be nowhere: copies another new owner held provisionally when it died, what a broker
            // that lapsed or let go without the cut had not routed. Those are in the message stream from where the old
            // owner's client stopped on: replayed, less what the session holds already
            const fresh = h !== undefined && h.cutSeq === 0 && h.closedSeq === undefined;
            if (!fresh && (prov === undefined || lapsed)) await this.replayHandover(s, h, previous);
            await this.finishHandover(clientId, key);
            // a record whose creating CONNECT had not saved the session yet says expiry 0 (the session's expiry comes
            // with that first save): ended at once here, it took its record with it while its client was being given
            // it (seen in test/cluster/sessions, two simultaneous CONNECTs). It waits for the CONNECT completing this
            // takeover, whose resume sets the client's expiry, or for its retry, HANDOVER_MAX_MS at most
            if (s.expiry === 0) s.expiry = HANDOVER_MAX_MS / 1000;
            this.broker()?.scheduleExpiry(s); // offline until its client comes (a CONNECT that gave up waiting retries)
            return true;
          }
          const h = doc.handover;
          if (h?.from === previous && h.closedSeq !== undefined && h.cutSeq === undefined) {
            if (prov === undefined) {
              if (!(await this.waitPlane(h.closedSeq, Math.min(end, Date.now() + this.cfg.sessionTakeoverWaitSeconds * 1000)))) {
                this.log.warn({ clientId, closedSeq: h.closedSeq }, "cluster: this broker's message plane is behind the old owner's at a takeover (a message may reach the client twice)");
              }
              prov = this.provisional(doc);
              // what was published here before the provisional subscriptions reaches the stream first, so it is at or
              // below cutSeq, for the old owner to route (this broker drops its own messages coming back)
              const madeAt = Date.now();
              if (!(await this.waitOutbox(madeAt, Math.min(end, madeAt + this.cfg.sessionTakeoverWaitSeconds * 1000)))) {
                this.log.warn({ clientId }, 'cluster: what this broker published had not all reached the stream at a takeover (a message published here just before may be missing)');
              }
            }
            const cutSeq = await this.streamLast();
            if (cutSeq !== undefined) {
              try {
                await kv.update(key, JSON.stringify({ ...doc, handover: { ...h, cutSeq }, updated: Date.now() } satisfies SessionDoc), e.revision);
              } catch (err) {
                if (!wrongSequence(err)) throw err;
                continue; // written meanwhile: read again
              }
            }
          }
        } catch (err) {
          // NATS briefly unreachable, a request timed out: tried again (until `end`), the provisional subscriptions kept
          this.log.debug({ clientId, err: messageOf(err) }, 'cluster: a step of a takeover failed; trying again');
        }
        if (Date.now() >= end) {
          this.log.warn({ clientId, from: previous }, `cluster: broker ${previous} did not hand a session over in ${HANDOVER_MAX_MS / 1000} s; the next CONNECT tries again`);
          return false;
        }
        await sleep(HANDOVER_POLL_MS);
      }
      return false;
    } finally {
      if (prov !== undefined) this.endProvisional(prov);
    }
  }

  /**
   * The hand-over is complete: the record's `handover` goes (compare-and-set), before the session is given to a client.
   * From then on a third broker takes the session from this one as from any owner, and an adopter of this broker's
   * sessions replays nothing for it (what its client acknowledged here would come again).
   */
  private async finishHandover(clientId: string, key: string): Promise<void> {
    const kv = this.kv;
    for (let i = 0; kv !== undefined && i < 5 && !this.stopped; i++) {
      try {
        const e = await kv.get(key);
        const doc = parseDoc(e);
        if (e === null || doc === undefined || doc.owner !== this.nodeId || doc.handover === undefined) return;
        const done: SessionDoc = { ...doc, updated: Date.now() };
        delete done.handover;
        const rev = await kv.update(key, JSON.stringify(done), e.revision);
        const o = this.owned.get(clientId);
        if (o !== undefined && rev > o.rev) {
          o.rev = rev;
          o.doc = done;
        }
        return;
      } catch (err) {
        if (wrongSequence(err)) continue; // written meanwhile (this broker's own record write): again on top
        this.log.warn({ clientId, err: messageOf(err) }, 'cluster: the end of a hand-over could not be written in the session record (if this broker dies, its adopter replays the hand-over: a message may come twice)');
        return;
      }
    }
  }

  /**
   * Waits (Cluster.sessionTakeoverWaitSeconds) until the record's owner `owner` is no longer taking the session over:
   * the hand-over finished, the record changed hands, or `owner` is not live. False when it is still under way.
   */
  private async waitHandover(key: string, owner: string): Promise<boolean> {
    const end = Date.now() + this.cfg.sessionTakeoverWaitSeconds * 1000;
    for (;;) {
      const doc = parseDoc((await this.kv?.get(key)) ?? null);
      if (doc === undefined || doc.owner !== owner || !handoverUnderWay(doc) || !this.isLive(owner)) return true;
      if (this.stopped || Date.now() >= end) return false;
      await sleep(50);
    }
  }

  /**
   * The messages of the stream from where the old owner's client stopped (`closedSeq`; without it, from the old
   * owner's message-plane ack floor) up to what this broker's consumer has been given, into the rebuilt session's
   * matching subscriptions (shared groups aside, ACL checked), each unless the subscription holds that message already
   * (copyIdentity: by origin server and id, as the rebuild tells two brokers' copies apart). Messages published on any
   * node, this one and the dead one included: copies routed provisionally are lost with their broker, and a message
   * published here before the session's subscriptions existed reached none of them. QoS 0 does not cross nodes in the
   * stream: not replayed (at most once).
   */
  private async replayHandover(s: MqttSession, h: Handover | undefined, previous: string): Promise<number> {
    const store = this.store;
    const engine = this.engine();
    const rt = this.rt;
    const v = this.view();
    if (store?.js === undefined || store.jsm === undefined || engine === undefined || rt === undefined || v === undefined || !this.cfg.messages.enabled) return 0;
    const cfg = this.cfg;
    const stream = messageStream(cfg.clusterName);
    const origin = h?.from ?? previous;
    let from: number;
    let upTo: number;
    try {
      const server = v.nodes.find((n) => n.nodeId === origin)?.serverName;
      if (h?.closedSeq !== undefined) from = h.closedSeq + 1;
      else if (server !== undefined) from = (await store.jsm.consumers.info(stream, planeConsumer(server))).ack_floor.stream_seq + 1;
      else return 0;
    } catch {
      return 0; // no message plane consumer yet: nothing crossed nodes
    }
    // up to the stream's end once what was published here before the session's subscriptions is in it (this broker
    // routed those at publish time, to none of the session's subscriptions, and drops them when they come back): every
    // later message reaches the subscriptions, from the stream or, published here, at once
    const madeAt = Date.now();
    if (!(await this.waitOutbox(madeAt, madeAt + cfg.sessionTakeoverWaitSeconds * 1000))) {
      this.log.warn({ clientId: s.clientId }, 'cluster: what this broker published had not all reached the stream when a hand-over was replayed (a message published here just before may be missing)');
    }
    upTo = (await this.streamLast()) ?? (await this.planePosition('delivered')) ?? 0;
    if (upTo < from) return 0;
    // what this broker's consumer was given up to `upTo` is routed (to the subscriptions just made) and stored first,
    // so the copies the session holds can be told from those it lacks
    if (!(await this.waitPlane(upTo, Date.now() + cfg.sessionTakeoverWaitSeconds * 1000))) {
      this.log.warn({ clientId: s.clientId, upTo }, "cluster: this broker's message plane did not catch up before a hand-over was replayed (a message may reach the client twice)");
    }
    await engine.flush();
    // the copies each subscription holds: `server|id` of those received from the message plane, and the ids of those
    // published on the node that holds them (its id is the id in the outbox id of the stream's message)
    const relayed = new Map<string, Set<string>>();
    const local = new Map<string, Set<number>>();
    const enc = encodeURIComponent(s.sessionId);
    for await (const [k, value] of store.iterate(`d!${enc}|`)) {
      const bang = k.lastIndexOf('!');
      const filter = k.slice(k.indexOf('|') + 1, bang);
      const { msg } = decodeHeld(value);
      const lid = msg.metaData[META_LINK_ID];
      if (lid !== undefined) {
        const id = copyIdentity(msg, '');
        if (id !== undefined) (relayed.get(filter) ?? relayed.set(filter, new Set()).get(filter)!).add(id);
      } else if (msg.metaData[META_ORIGIN] === undefined) (local.get(filter) ?? local.set(filter, new Set()).get(filter)!).add(msg.id);
    }
    const ns = `${messageSubjectPrefix(cfg.clusterName).replace(/\./g, '/')}/`;
    const byKey = new Map<string, Array<[string, Message]>>();
    let id = Date.now() * 1000 + 500_000; // above what the engine has handed out; adoptHeld raises its counter above these
    let n = 0;
    let held = 0;
    const consumer = await store.js.consumers.get(stream, { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: from });
    try {
      for (let m = await consumer.next({ expires: 1000 }); m !== null && m.seq <= upTo; m = m.info.pending === 0 ? null : await consumer.next({ expires: 1000 })) {
        const lm = decodeMessage(m.subject, m.data, headersOf(m), true);
        if (!lm.topic.startsWith(ns) || lm.id === undefined) continue;
        const topic = lm.topic.slice(ns.length);
        if (topic.startsWith('$')) continue;
        const ident = /^(.*):[^:]*:\d+:(\d+)$/.exec(lm.id);
        const localId = ident === null ? undefined : Number(ident[2]);
        const relayedId = ident === null ? lm.id : `${ident[1]}|${ident[2]}`;
        for (const { opts, sub } of s.subs.values()) {
          if (opts.filter.startsWith('$share/') || !topicMatchesFilter(opts.filter, topic)) continue;
          if (sub.authorize !== undefined && !sub.authorize(topic)) continue;
          if (relayed.get(opts.filter)?.has(relayedId) || (localId !== undefined && local.get(opts.filter)?.has(localId))) {
            held++;
            continue;
          }
          // the origin as the message plane gives it (src/links/link-manager.ts receiveOne): a later move tells the copy by it
          const init = replayInit(lm, opts.rap, { [META_ORIGIN]: lm.originServer || `link:${CLUSTER_LINK}`, [META_HOPS]: String(Math.max(1, lm.hops)), [META_LINK_ID]: lm.id });
          let list = byKey.get(sub.key);
          if (list === undefined) byKey.set(sub.key, (list = []));
          list.push([topic, createMessage(init, id++, Date.now())]);
          n++;
        }
      }
    } finally {
      await consumer.delete().catch(() => undefined);
    }
    for (const [key, list] of byKey) void engine.adoptHeld(key, list);
    await engine.flush();
    this.log.info({ clientId: s.clientId, from, upTo, replayed: n, held }, 'cluster: a hand-over completed here from the message stream (what the session lacked of it replayed)');
    return n;
  }

  /**
   * The session's subscriptions (shared groups aside: their messages wait in their group's consumer) made on this
   * broker before it holds the session: each routes what matches into a list (at most the broker's queue cap, the
   * rest counted), for the rebuild to take.
   */
  private provisional(doc: SessionDoc): Provisional {
    const p: Provisional = { subs: [], held: new Map(), dropped: 0 };
    const engine = this.engine();
    const broker = this.broker();
    if (engine === undefined || broker === undefined) return p;
    const cap = broker.maxQueued;
    const authorize = broker.host.security().deliveryAuthorizer?.({ username: doc.username });
    for (const o of doc.subscriptions) {
      if (o.filter.startsWith('$share/') || p.held.has(o.filter)) continue;
      const list: Array<[string, Message]> = [];
      p.held.set(o.filter, list);
      try {
        p.subs.push(
          engine.subscribe({
            sessionId: `${HANDOVER_SESSION_PREFIX}${doc.clientId}`,
            filter: o.filter,
            qos: 0, // each copy is taken as it comes (its own QoS is kept in the list)
            retainHandling: 2,
            ...(authorize !== undefined ? { authorize } : {}),
            sink: {
              kind: 'push',
              deliver: (_sub, msg, destination) => {
                if (list.length < cap) list.push([destination, msg]);
                else p.dropped++;
                return true;
              },
            },
          }),
        );
      } catch (err) {
        this.log.warn({ clientId: doc.clientId, filter: o.filter, err: messageOf(err) }, 'cluster: a provisional subscription of a takeover could not be made');
      }
    }
    return p;
  }

  private endProvisional(p: Provisional): void {
    const engine = this.engine();
    for (const sub of p.subs) if (!sub.closed) engine?.unsubscribe(sub, 'takeover completed');
    p.subs.length = 0;
  }

  /** Waits (Cluster.sessionTakeoverWaitSeconds) until the record is marked released or its previous owner is not live. */
  private async waitRelease(key: string, previous: string): Promise<boolean> {
    const end = Date.now() + this.cfg.sessionTakeoverWaitSeconds * 1000;
    for (;;) {
      const doc = parseDoc((await this.kv?.get(key)) ?? null);
      if (doc === undefined || doc.owner !== this.nodeId) return false;
      if (doc.released) return true;
      if (!this.isLive(previous)) {
        // its lease lapsed: the stream is this broker's from now on (marked, so a late release leaves it alone)
        const e = await this.kv?.get(key);
        if (e !== null && e !== undefined) await this.kv?.update(key, JSON.stringify({ ...doc, released: true, updated: Date.now() }), e.revision).catch(() => undefined);
        return true;
      }
      if (Date.now() >= end) return false;
      await sleep(50);
    }
  }

  /**
   * The session from its record and the stream: subscriptions (hibernated, holding), their held messages, the packet
   * ids in flight (unacknowledged PUBLISHes resent with DUP and their ids, PUBRELs awaiting PUBCOMP, inbound QoS 2
   * ids). Everything is written to this broker's store (and so mirrored again under the same subjects). `prov`: what a
   * takeover's provisional subscriptions routed here meanwhile, held after the old owner's copies, less those the old
   * owner holds as well (copyIdentity), under new ids above all of them (two brokers' ids may meet).
   */
  private async rebuild(doc: SessionDoc, key: string, prov?: Provisional): Promise<MqttSession | undefined> {
    const broker = this.broker();
    const engine = this.engine();
    const store = this.store;
    if (broker === undefined || engine === undefined || store?.js === undefined) return undefined;
    const s = new MqttSession(doc.clientId);
    s.expiry = doc.expiry;
    s.protocolVersion = doc.protocolVersion;
    s.username = doc.username;
    s.restored = true;
    s.disconnectedAt = doc.disconnectedAt ?? Date.now();
    store.mirror(s.sessionId, key);
    const byToken = new Map<string, string>();
    for (const o of doc.subscriptions) byToken.set(filterToken(o.filter), o.filter);
    const held = new Map<string, Array<[string, Message]>>();
    const state: Array<{ kind: string; pid: number; value: Uint8Array }> = [];
    const base = `${store.prefix}.${key}.`;
    let stale = 0;
    // how many the stream has for the session (an empty session needs no consumer, which would wait for its expiry)
    const info = await store.jsm!.streams.info(store.stream, { subjects_filter: `${base}>` });
    const count = Object.keys(info.state.subjects ?? {}).length;
    if (count > 0) {
      const consumer = await store.js.consumers.get(store.stream, { filter_subjects: `${base}>` });
      try {
        for (let read = 0; read < count; read++) {
          const m = await consumer.next({ expires: 1000 });
          if (m === null) break;
          const t = m.subject.slice(base.length).split('.');
          if (t[0] === 'd' && t.length === 3) {
            const filter = byToken.get(t[1]!);
            if (filter === undefined) {
              stale++;
              await store.remove(m.seq);
            } else {
              const { destination, msg } = decodeHeld(Buffer.from(m.data));
              let list = held.get(filter);
              if (list === undefined) held.set(filter, (list = []));
              list.push([destination, msg]);
            }
          } else if (t[0] === 's' && t.length === 3) state.push({ kind: t[1]!, pid: Number(t[2]), value: m.data });
          if (m.info.pending === 0) break;
        }
      } finally {
        await consumer.delete().catch(() => undefined);
      }
    }
    let messages = 0;
    const ids = new Map<string, Set<number>>();
    for (const [filter, list] of held) ids.set(filter, new Set(list.map(([, m]) => m.id)));
    // from here to the provisional subscriptions' end nothing awaits: no message falls between them and the session's
    const merged = prov === undefined ? { added: 0, twice: 0, qos0: 0 } : this.mergeProvisional(held, prov, doc.previousOwner);
    for (const [filter, list] of held) {
      messages += list.length;
      void engine.adoptHeld(subscriptionKey(s.sessionId, filter), list);
    }
    broker.sessions.set(s.clientId, s);
    broker.restoreSubscriptions(engine, s, doc.subscriptions);
    if (prov !== undefined) {
      this.endProvisional(prov);
      if (prov.dropped > 0) this.log.warn({ clientId: s.clientId, dropped: prov.dropped }, 'cluster: a session taken over got more messages during the hand-over than its queue holds; the rest were dropped');
      this.log.debug({ clientId: s.clientId, ...merged }, 'cluster: messages routed here during the hand-over added to the session');
    }
    for (const x of state) {
      if (x.pid < 1 || x.pid > 65535) continue;
      if (x.kind === 'i') {
        const accepted = x.value[0] === 1;
        if (accepted) s.inbound.add(x.pid);
        else s.released.add(x.pid);
        void storeInbound(engine, s, x.pid, accepted ? 1 : 2);
        continue;
      }
      let rec: OutboundRecord;
      try {
        rec = JSON.parse(Buffer.from(x.value).toString('utf8')) as OutboundRecord;
      } catch {
        continue;
      }
      if (rec.s === 2) {
        s.outbound.set(x.pid, { sub: undefined, msgId: 0, qos: 2, stage: 2 });
        void storeOutbound(engine, s, x.pid, rec);
        continue;
      }
      const sub = rec.f === undefined ? undefined : s.subs.get(rec.f)?.sub;
      if (sub === undefined || rec.m === undefined || !ids.get(rec.f!)?.has(rec.m)) continue; // acknowledged or gone
      s.reserved.add(x.pid);
      s.redeliver.set(`${sub.id}:${rec.m}`, x.pid);
      void storeOutbound(engine, s, x.pid, rec);
    }
    // packet ids of the record that the stream did not have (written before the session was mirrored)
    for (const pid of doc.inbound) if (!s.inbound.has(pid) && !s.released.has(pid)) s.inbound.add(pid);
    await engine.flush();
    this.log.debug({ clientId: s.clientId, subscriptions: doc.subscriptions.length, messages, stale, inFlight: s.reserved.size + s.outbound.size }, 'cluster: session rebuilt from JetStream');
    return s;
  }

  // ------------------------------------------------------------------------------------------------------------
  // Node failure

  /**
   * What the message plane had for the gone node but it never routed (its durable consumer's backlog above the ack
   * floor), and what reached this node before the adopted sessions had subscriptions here (up to what this node's own
   * consumer had been given when they were made): each message from another origin than the gone node (which routed
   * its own at publish time) goes to the matching subscriptions of the adopted sessions only. A message routed by
   * the gone node but not yet acknowledged can come twice (at least once).
   */
  private async replay(gone: string, sessions: MqttSession[]): Promise<number> {
    const store = this.store;
    const engine = this.engine();
    const v = this.view();
    if (sessions.length === 0 || store?.js === undefined || store.jsm === undefined || engine === undefined || v === undefined) return 0;
    const goneServer = v.nodes.find((n) => n.nodeId === gone)?.serverName;
    if (goneServer === undefined) return 0;
    const cfg = this.cfg;
    const stream = messageStream(cfg.clusterName);
    let from: number;
    let upTo: number;
    try {
      from = (await store.jsm.consumers.info(stream, planeConsumer(goneServer))).ack_floor.stream_seq + 1;
      upTo = (await store.jsm.consumers.info(stream, planeConsumer(this.rt!.serverName))).delivered.stream_seq;
    } catch {
      return 0; // no message plane consumer yet (nothing crossed nodes)
    }
    if (upTo < from) return 0;
    const ns = `${messageSubjectPrefix(cfg.clusterName).replace(/\./g, '/')}/`;
    const byKey = new Map<string, Array<[string, Message]>>();
    let id = Date.now() * 1000 + 500_000; // above what the engine has handed out; adoptHeld raises its counter above these
    let n = 0;
    const consumer = await store.js.consumers.get(stream, { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: from });
    try {
      for (let m = await consumer.next({ expires: 1000 }); m !== null && m.seq <= upTo; m = m.info.pending === 0 ? null : await consumer.next({ expires: 1000 })) {
        const lm = decodeMessage(m.subject, m.data, headersOf(m), true);
        if (lm.originServer === goneServer || !lm.topic.startsWith(ns)) continue;
        const topic = lm.topic.slice(ns.length);
        if (topic.startsWith('$')) continue;
        for (const s of sessions) {
          for (const { opts, sub } of s.subs.values()) {
            if (opts.filter.startsWith('$share/') || !topicMatchesFilter(opts.filter, topic)) continue;
            if (sub.authorize !== undefined && !sub.authorize(topic)) continue;
            const init = replayInit(lm, opts.rap, undefined);
            let list = byKey.get(sub.key);
            if (list === undefined) byKey.set(sub.key, (list = []));
            list.push([topic, createMessage(init, id++, Date.now())]);
            n++;
          }
        }
      }
    } finally {
      await consumer.delete().catch(() => undefined);
    }
    for (const [key, list] of byKey) void engine.adoptHeld(key, list);
    await engine.flush();
    return n;
  }

  /** This node declared `gone` gone (or it left): it takes every session record that node held, as offline sessions. */
  private async adopt(gone: string): Promise<void> {
    const kv = this.kv;
    const broker = this.broker();
    if (kv === undefined || broker === undefined) return;
    let adopted = 0;
    const sessions: MqttSession[] = [];
    const keys: string[] = [];
    for await (const k of await kv.keys()) keys.push(k);
    for (const key of keys) {
      const e = await kv.get(key);
      const doc = parseDoc(e);
      if (e === null || doc === undefined || doc.owner !== gone) continue;
      // the gone node was taking the session over when it died: the hand-over is completed here (takeOver), from the
      // broker that still has the session if it has not released it and is live, else from the stream with a replay
      const underWay = handoverUnderWay(doc);
      const holder = underWay && !doc.released && doc.previousOwner !== undefined && this.isLive(doc.previousOwner) ? doc.previousOwner : undefined;
      const taken: SessionDoc = {
        ...doc,
        owner: this.nodeId,
        ownerEpoch: this.epoch,
        epoch: doc.epoch + 1,
        previousOwner: holder ?? gone,
        released: holder === undefined,
        connected: false,
        disconnectedAt: doc.connected ? Date.now() : (doc.disconnectedAt ?? Date.now()),
        updated: Date.now(),
      };
      if (underWay) taken.handover = { ...doc.handover!, to: this.nodeId };
      else delete taken.handover;
      let rev: number;
      try {
        rev = await kv.update(key, JSON.stringify(taken), e.revision);
      } catch (err) {
        if (wrongSequence(err)) continue; // a client came back elsewhere first
        throw err;
      }
      if (broker.sessions.has(doc.clientId)) continue;
      this.owned.set(doc.clientId, { rev, doc: taken, want: undefined, writing: false });
      if (underWay) {
        // not in this adoption's replay below: the hand-over's own replay covers the dead node's part
        void this.startTakeOver(doc.clientId, key, holder ?? gone);
        adopted++;
        continue;
      }
      const s = await this.rebuild(taken, key);
      if (s !== undefined) {
        broker.scheduleExpiry(s);
        sessions.push(s);
      }
      adopted++;
    }
    const replayed = await this.replay(gone, sessions).catch((err: unknown) => {
      this.log.warn({ node: gone, err: messageOf(err) }, "cluster: the gone node's message backlog could not be replayed into its adopted sessions");
      return 0;
    });
    this.log.info({ node: gone, sessions: adopted, replayed }, 'cluster: sessions of a gone node adopted');
  }
}

/** The durable consumer of the message plane of a node (src/links/link-manager.ts: `<serverName>-<link>-<index>`). */
function planeConsumer(serverName: string): string {
  return `${serverName}-${CLUSTER_LINK}-1`.replace(/[^A-Za-z0-9_-]/g, '_');
}

export function clusterSessionsService(deps: ClusterSessionsDeps, hook: ClusterStoreHook): ClusterSessions {
  return new ClusterSessions(deps, hook);
}

/** The holder of the engine store's mirror, made before the messaging service (see ClusterStoreHook). */
export function clusterStoreHook(): ClusterStoreHook {
  return new ClusterStoreHook();
}
