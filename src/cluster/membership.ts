/**
 * Cluster membership over NATS JetStream (docs/cluster.md): each broker holds a lease, one key per node in the KV
 * bucket `switchyard_<clusterName>_nodes`, rewritten every `heartbeatSeconds` with compare-and-set on the key's
 * revision; every broker watches the bucket and reports a node whose lease lapsed (no heartbeat for `leaseSeconds`)
 * as gone, exactly once per lapse.
 *
 * Why compare-and-set everywhere:
 * - a lease write names the revision it replaces, so two processes configured with one nodeId cannot both hold it:
 *   the one that finds the key held by another process (another holder token) refuses, and a holder whose write is
 *   refused learns that someone else wrote its key;
 * - "gone" is itself a compare-and-set write of the lapsed lease (state gone, declaredBy): it succeeds only if the
 *   node wrote nothing since the revision the observer saw, so a slow watcher never declares a live node gone, and
 *   exactly one surviving node wins the declaration cluster-wide (`declaredHere`, for the will publishing that comes
 *   with the session work). Every node reports each lapse once (bus event `cluster.node.gone`, a WARN line).
 *
 * A lapse is measured on this node's clock from when this node last saw the lease change (never from the writer's
 * timestamps), so clocks need not agree. While this node cannot write its own lease it is Isolated and declares no
 * one gone; back in contact, it gives every node a full lease before judging it again.
 *
 * The epoch of a node grows by one on every start of its membership (also kept in {dataDirectory}/cluster-node.json,
 * so a lost bucket does not reset it) and when a node comes back after being declared gone while it was isolated:
 * a write from an older epoch is a stale writer.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { jetstream, JetStreamApiCodes, JetStreamApiError } from '@nats-io/jetstream';
import { Kvm, type KV, type KvEntry } from '@nats-io/kv';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import { ConflictError, NotFoundError, ServiceUnavailableError } from '../errors.js';
import type { ClusterConfig } from './config.js';

export const ClusterState = {
  /** Connecting to NATS, opening the bucket or taking the lease. */
  Connecting: 'Connecting',
  /** Holding the lease: heartbeats are written, other nodes are watched. */
  Member: 'Member',
  /** Lost NATS (the connection, or JetStream does not take the lease writes): not ready, judges no one. */
  Isolated: 'Isolated',
  /** Another process holds this nodeId: this one does not fight for it (restart to try again). */
  Refused: 'Refused',
  Stopped: 'Stopped',
} as const;
export type ClusterState = (typeof ClusterState)[keyof typeof ClusterState];

export type LeaseState = 'live' | 'gone' | 'left';

/** The value of a node's key in the bucket (JSON). */
export interface Lease {
  nodeId: string;
  epoch: number;
  /** Random token kept in the data directory: tells this broker's own earlier runs from another process with the same nodeId. */
  holder: string;
  serverName: string;
  restAddress: string;
  /** ISO times, the writer's clock (shown; lapses are judged on the observer's clock). */
  started: string;
  lastHeartbeat: string;
  state: LeaseState;
  goneAt?: string;
  /** The node that declared it gone (won the compare-and-set). */
  declaredBy?: string;
}

/** What `cluster.node.gone` carries. */
export interface GoneNode {
  nodeId: string;
  epoch: number;
  serverName: string;
  restAddress: string;
  lastHeartbeat: string;
  /** The node that declared it gone. */
  declaredBy: string;
  /** True on the one node in the cluster whose compare-and-set declared it (the one to act on it). */
  declaredHere: boolean;
}

export interface ClusterNodeView {
  nodeId: string;
  state: LeaseState;
  epoch: number;
  serverName: string;
  restAddress: string;
  started: string;
  lastHeartbeat: string;
  /** Seconds since this node last saw the lease change (its own clock). */
  heartbeatAge: number;
  /** This broker. */
  self: boolean;
  /** Times this broker reported the node gone (one per lapse). */
  goneReported: number;
  declaredBy?: string;
}

export interface ClusterView {
  enabled: true;
  clusterName: string;
  bucket: string;
  nodeId: string;
  epoch: number;
  state: ClusterState;
  /** Why this node is not a member (absent when it is). */
  reason?: string;
  replicas: number;
  leaseSeconds: number;
  heartbeatSeconds: number;
  nats: { connected: boolean; server?: string; lastError?: string };
  nodes: ClusterNodeView[];
  /** Nodes gone, or live whose lease has lapsed without being declared yet. */
  unreachable: string[];
}

export interface MembershipHooks {
  log: Logger;
  dataDirectory: string;
  serverName: string;
  /** The REST API's address as others reach it ('' until known). */
  restAddress: () => string;
  onGone: (gone: GoneNode) => void;
  onLeft: (nodeId: string, epoch: number) => void;
  onRestarted: (nodeId: string, oldEpoch: number, newEpoch: number) => void;
  onState: (state: ClusterState, reason: string) => void;
  onRejoined: (epoch: number) => void;
}

/** At most this many nodes are kept in the table (the bucket's byte cap bounds it as well). */
export const MAX_NODES = 1024;
const MAX_VALUE = 16 * 1024;

interface Known {
  lease: Lease;
  revision: number;
  /** Local epoch ms when this node last saw the lease change. */
  seenAt: number;
  goneEpoch?: number;
  goneReported: number;
  claiming?: boolean;
}

interface IdentityFile {
  nodeId: string;
  holder: string;
  /** Last epoch per `<clusterName>/<nodeId>`. */
  epochs: Record<string, number>;
}

const wrongSequence = (err: unknown): boolean =>
  err instanceof JetStreamApiError && (err.code === JetStreamApiCodes.StreamWrongLastSequence || err.code === JetStreamApiCodes.StreamWrongLastSequenceUnknown);
const messageOf = (err: unknown): string => (err instanceof Error ? err.message : String(err));
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms).unref());

function parseLease(e: KvEntry): Lease | undefined {
  if (e.operation !== 'PUT') return undefined;
  try {
    const v = e.json<Lease>();
    if (!v || typeof v.nodeId !== 'string' || typeof v.epoch !== 'number' || typeof v.holder !== 'string') return undefined;
    if (v.state !== 'live' && v.state !== 'gone' && v.state !== 'left') return undefined;
    return v;
  } catch {
    return undefined;
  }
}

/** The node's identity, kept in {dataDirectory}/cluster-node.json (generated once). */
export function loadIdentity(dataDirectory: string): IdentityFile {
  const path = join(dataDirectory, 'cluster-node.json');
  if (existsSync(path)) {
    try {
      const v = JSON.parse(readFileSync(path, 'utf8')) as Partial<IdentityFile>;
      if (typeof v.nodeId === 'string' && /^[A-Za-z0-9_-]{1,64}$/.test(v.nodeId) && typeof v.holder === 'string' && v.holder.length >= 16) {
        return { nodeId: v.nodeId, holder: v.holder, epochs: typeof v.epochs === 'object' && v.epochs ? v.epochs : {} };
      }
    } catch {
      // unreadable: a new identity is written below (the epoch then comes from the bucket alone)
    }
  }
  const id: IdentityFile = { nodeId: `node-${randomBytes(5).toString('hex')}`, holder: randomBytes(16).toString('hex'), epochs: {} };
  saveIdentity(dataDirectory, id);
  return id;
}

function saveIdentity(dataDirectory: string, id: IdentityFile): void {
  const path = join(dataDirectory, 'cluster-node.json');
  writeFileSync(`${path}.tmp`, JSON.stringify(id, null, 2) + '\n');
  renameSync(`${path}.tmp`, path);
}

export class Membership {
  readonly nodeId: string;
  readonly bucket: string;
  private readonly identity: IdentityFile;
  private readonly epochKey: string;
  private stateValue: ClusterState = ClusterState.Connecting;
  private reasonText = 'connecting to NATS';
  private nc?: NatsConnection;
  private kv?: KV;
  private lease?: Lease;
  private revision = 0;
  private lastWriteOk = 0;
  private lastError?: string;
  private connected = false;
  private readonly nodes = new Map<string, Known>();
  private watching = false;
  private watchGen = 0;
  private watcher?: { stop(): void };
  private stopped = false;
  private timer?: NodeJS.Timeout;
  private isolateTimer?: NodeJS.Timeout;
  private ticking?: Promise<void>;
  private tableFullWarned = false;

  constructor(
    private readonly cfg: ClusterConfig,
    private readonly hooks: MembershipHooks,
  ) {
    this.identity = loadIdentity(hooks.dataDirectory);
    this.nodeId = cfg.nodeId ?? this.identity.nodeId;
    this.bucket = `switchyard_${cfg.clusterName}_nodes`;
    this.epochKey = `${cfg.clusterName}/${this.nodeId}`;
  }

  get state(): ClusterState {
    return this.stateValue;
  }

  get epoch(): number {
    return this.lease?.epoch ?? 0;
  }

  /**
   * The membership's NATS connection (undefined until connected and after stop), shared by the cluster's session,
   * message and will planes so a broker holds one connection to the cluster. They must not close it.
   */
  get connection(): NatsConnection | undefined {
    return this.nc;
  }

  get reason(): string | undefined {
    return this.stateValue === ClusterState.Member ? undefined : this.reasonText;
  }

  /** Starts connecting in the background: boot never waits for NATS. */
  start(): void {
    void this.run().catch((err) => this.hooks.log.error({ err }, 'cluster membership stopped on an unexpected error'));
  }

  /** Writes the lease as left (so the others do not wait for it to lapse) and closes the connection. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    clearTimeout(this.isolateTimer);
    await this.ticking?.catch(() => {});
    if (this.kv && this.lease && this.stateValue === ClusterState.Member) {
      try {
        const left: Lease = { ...this.lease, state: 'left', lastHeartbeat: new Date().toISOString() };
        await this.kv.update(this.nodeId, JSON.stringify(left), this.revision, Math.min(2000, this.cfg.heartbeatSeconds * 1000));
        this.hooks.log.info({ nodeId: this.nodeId, epoch: this.lease.epoch }, 'cluster: left the cluster');
      } catch (err) {
        this.hooks.log.warn({ err: messageOf(err) }, 'cluster: could not write the lease as left; the others will see it lapse');
      }
    }
    this.setState(ClusterState.Stopped, 'stopped');
    await this.nc?.close().catch(() => {});
  }

  /**
   * Removes a gone or left node's lease from the bucket (a node taken out of service for good), with compare-and-set
   * on the revision this broker saw: every member drops it from its table when the watch shows the delete. A live
   * node is refused (409): it would write its lease again at its next heartbeat.
   */
  async forget(nodeId: string): Promise<void> {
    const k = this.nodes.get(nodeId);
    if (!k) throw new NotFoundError(`Cluster node not found: ${nodeId}`);
    if (!this.kv || this.stateValue !== ClusterState.Member) throw new ServiceUnavailableError(`This broker is not a cluster member (${this.stateValue}); ask a member`);
    if (k.lease.state === 'live') throw new ConflictError(`Cluster node ${nodeId} is live (epoch ${k.lease.epoch}); only a gone or left node can be forgotten`);
    try {
      await this.kv.delete(nodeId, { previousSeq: k.revision });
    } catch (err) {
      if (wrongSequence(err)) throw new ConflictError(`Cluster node ${nodeId} changed meanwhile; look again`);
      throw new ServiceUnavailableError(`JetStream did not take the delete: ${messageOf(err)}`);
    }
    if (this.nodes.get(nodeId) === k) this.nodes.delete(nodeId);
    this.hooks.log.info({ nodeId, epoch: k.lease.epoch }, `cluster: node ${nodeId} forgotten (its lease removed from the bucket)`);
  }

  view(now = Date.now()): ClusterView {
    const leaseMs = this.cfg.leaseSeconds * 1000;
    const nodes: ClusterNodeView[] = [];
    const unreachable: string[] = [];
    for (const [id, k] of this.nodes) {
      const self = id === this.nodeId && k.lease.holder === this.identity.holder;
      const age = self && this.lastWriteOk ? now - this.lastWriteOk : now - k.seenAt;
      nodes.push({
        nodeId: id,
        state: k.lease.state,
        epoch: k.lease.epoch,
        serverName: k.lease.serverName,
        restAddress: k.lease.restAddress,
        started: k.lease.started,
        lastHeartbeat: k.lease.lastHeartbeat,
        heartbeatAge: Math.max(0, Math.round(age / 100) / 10),
        self,
        goneReported: k.goneReported,
        ...(k.lease.declaredBy ? { declaredBy: k.lease.declaredBy } : {}),
      });
      if (!self && (k.lease.state === 'gone' || (k.lease.state === 'live' && now - k.seenAt > leaseMs))) unreachable.push(id);
    }
    nodes.sort((a, b) => a.nodeId.localeCompare(b.nodeId));
    unreachable.sort();
    return {
      enabled: true,
      clusterName: this.cfg.clusterName,
      bucket: this.bucket,
      nodeId: this.nodeId,
      epoch: this.lease?.epoch ?? 0,
      state: this.stateValue,
      ...(this.reason ? { reason: this.reason } : {}),
      replicas: this.cfg.replicas,
      leaseSeconds: this.cfg.leaseSeconds,
      heartbeatSeconds: this.cfg.heartbeatSeconds,
      nats: { connected: this.connected, ...(this.connected && this.nc ? { server: this.nc.getServer() } : {}), ...(this.lastError ? { lastError: this.lastError } : {}) },
      nodes,
      unreachable,
    };
  }

  private setState(state: ClusterState, reason: string): void {
    if (this.stopped && state !== ClusterState.Stopped) return; // an attempt that fails because stop() closed the connection
    const changed = state !== this.stateValue;
    this.stateValue = state;
    this.reasonText = reason;
    if (changed) this.hooks.onState(state, reason);
  }

  private get hbMs(): number {
    return this.cfg.heartbeatSeconds * 1000;
  }

  /** A lease write may take this long (JetStream replicates it before it answers). */
  private get writeTimeout(): number {
    return Math.max(2000, this.hbMs);
  }

  private async run(): Promise<void> {
    const log = this.hooks.log;
    // 1. connect (the client then reconnects by itself, to any of the servers)
    let warned = false;
    while (!this.stopped && !this.nc) {
      try {
        this.nc = await connect({
          servers: this.cfg.servers,
          name: `switchyard-cluster-${this.nodeId}`,
          reconnect: true,
          maxReconnectAttempts: -1,
          reconnectTimeWait: Math.min(1000, this.hbMs),
          pingInterval: Math.max(1000, this.hbMs),
          maxPingOut: 2,
          // only the configured servers: a node told to use one server loses NATS when that server goes, instead of
          // following the cluster's gossip to servers the operator did not list (docs/cluster.md "Partitions")
          ignoreClusterUpdates: true,
          timeout: Math.max(2000, this.hbMs),
          ...(this.cfg.user !== undefined ? { user: this.cfg.user } : {}),
          ...(this.cfg.password !== undefined ? { pass: this.cfg.password } : {}),
        });
      } catch (err) {
        this.lastError = messageOf(err);
        this.setState(ClusterState.Connecting, `cannot connect to NATS (${this.cfg.servers.join(', ')}): ${this.lastError}`);
        if (!warned) log.warn({ servers: this.cfg.servers, err: this.lastError }, 'cluster: cannot connect to NATS yet; retrying');
        warned = true;
        await sleep(this.hbMs);
      }
    }
    const nc = this.nc;
    if (!nc || this.stopped) {
      await nc?.close().catch(() => {});
      return;
    }
    this.connected = true;
    void this.watchStatus(nc);
    // 2. the bucket (JetStream may still be electing its leader right after the NATS cluster starts)
    const js = jetstream(nc, { timeout: Math.max(2000, this.hbMs) });
    const kvm = new Kvm(js);
    warned = false;
    while (!this.stopped && !this.kv) {
      try {
        this.kv = await kvm.create(this.bucket, { replicas: this.cfg.replicas, history: 1, maxValueSize: MAX_VALUE, max_bytes: MAX_NODES * MAX_VALUE });
      } catch (err) {
        const msg = messageOf(err);
        if (/already in use|different configuration/i.test(msg)) {
          // made earlier with other settings (another replica count): use it as it is
          this.kv = await kvm.open(this.bucket).catch(() => undefined);
          if (this.kv) log.warn({ bucket: this.bucket, err: msg }, 'cluster: the bucket exists with other settings; using it as it is');
          continue;
        }
        this.lastError = msg;
        this.setState(ClusterState.Connecting, `cannot open the JetStream bucket ${this.bucket}: ${msg}`);
        if (!warned) log.warn({ bucket: this.bucket, err: msg }, 'cluster: cannot open the JetStream bucket yet; retrying');
        warned = true;
        await sleep(this.hbMs);
      }
    }
    // 3. the lease
    while (!this.stopped && !this.lease && this.stateValue !== ClusterState.Refused) {
      try {
        await this.acquire();
      } catch (err) {
        this.lastError = messageOf(err);
        this.setState(ClusterState.Connecting, `cannot take the lease of ${this.nodeId}: ${this.lastError}`);
        await sleep(this.hbMs);
      }
    }
    if (this.stopped || this.stateValue === ClusterState.Refused) return;
    this.schedule(this.hbMs);
  }

  /** Takes this node's key: created, or replaced (compare-and-set) when it is ours or lapsed. */
  private async acquire(): Promise<void> {
    const kv = this.kv!;
    const entry = await kv.get(this.nodeId);
    const prev = entry ? parseLease(entry) : undefined;
    if (entry && prev && prev.holder !== this.identity.holder && prev.state === 'live') {
      // another process's live lease: held if it is rewritten within a lease (watched here on this node's clock, so
      // no clock needs to agree with the server's); taken over only when it stays silent for a whole lease
      const since = Date.now();
      this.setState(ClusterState.Connecting, `node id ${this.nodeId} has a lease of another process (server ${prev.serverName || '?'}); waiting up to ${this.cfg.leaseSeconds} s to see whether it is held`);
      while (!this.stopped && Date.now() - since <= this.cfg.leaseSeconds * 1000) {
        await sleep(Math.min(this.hbMs, 1000));
        const now = await kv.get(this.nodeId);
        if (now && now.revision !== entry.revision) {
          const cur = parseLease(now);
          if (cur && cur.holder === this.identity.holder) return; // ours after all: look again
          const why = `node id ${this.nodeId} is held by another process (server ${cur?.serverName || '?'}, ${cur?.restAddress || 'no REST address'}, epoch ${cur?.epoch ?? '?'}); this broker does not join (configure another Cluster.nodeId)`;
          this.setState(ClusterState.Refused, why);
          this.hooks.log.error({ nodeId: this.nodeId, holder: cur?.serverName, epoch: cur?.epoch }, `cluster: ${why}`);
          await this.nc?.close().catch(() => {});
          this.connected = false;
          return;
        }
      }
      if (this.stopped) return;
    }
    const epoch = Math.max(prev?.epoch ?? 0, this.identity.epochs[this.epochKey] ?? 0) + 1;
    const now = new Date().toISOString();
    const lease: Lease = {
      nodeId: this.nodeId,
      epoch,
      holder: this.identity.holder,
      serverName: this.hooks.serverName,
      restAddress: this.hooks.restAddress(),
      started: now,
      lastHeartbeat: now,
      state: 'live',
    };
    let rev: number;
    try {
      rev = entry ? await kv.update(this.nodeId, JSON.stringify(lease), entry.revision) : await kv.create(this.nodeId, JSON.stringify(lease));
    } catch (err) {
      if (wrongSequence(err)) return; // someone wrote the key meanwhile: look again (the loop calls acquire again)
      throw err;
    }
    this.lease = lease;
    this.revision = rev;
    this.lastWriteOk = Date.now();
    this.identity.epochs[this.epochKey] = epoch;
    try {
      saveIdentity(this.hooks.dataDirectory, this.identity);
    } catch (err) {
      this.hooks.log.warn({ err: messageOf(err) }, 'cluster: cannot keep the epoch in the data directory');
    }
    this.observe(this.nodeId, lease, rev, Date.now());
    this.setState(ClusterState.Member, '');
    this.hooks.log.info({ nodeId: this.nodeId, epoch, cluster: this.cfg.clusterName, bucket: this.bucket }, `cluster: joined ${this.cfg.clusterName} as ${this.nodeId} (epoch ${epoch})`);
    await this.startWatch();
  }

  private async watchStatus(nc: NatsConnection): Promise<void> {
    for await (const s of nc.status()) {
      if (this.stopped) return;
      if (s.type === 'disconnect') {
        this.connected = false;
        this.lastError = `NATS connection to ${s.server} lost`;
        // isolated unless the client is back within a heartbeat (it fails over to another listed server at once)
        const server = s.server;
        clearTimeout(this.isolateTimer);
        this.isolateTimer = setTimeout(() => {
          if (!this.connected && !this.stopped && this.lease && this.stateValue !== ClusterState.Refused) this.isolate(`NATS connection lost (${server}); reconnecting`);
        }, this.hbMs);
        this.isolateTimer.unref();
      } else if (s.type === 'reconnect') {
        this.connected = true;
        clearTimeout(this.isolateTimer);
        this.restartWatch();
        this.hooks.log.info({ server: s.server }, 'cluster: NATS connection back');
        this.schedule(0); // write the lease at once: Member again as soon as JetStream takes it
      }
    }
  }

  private isolate(reason: string): void {
    if (this.stateValue === ClusterState.Isolated) {
      this.reasonText = reason;
      return;
    }
    this.setState(ClusterState.Isolated, reason);
    this.hooks.log.warn({ nodeId: this.nodeId, reason }, `cluster: this node is isolated from NATS (${reason}); not ready, and it judges no other node until it is back`);
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      if (this.ticking) {
        this.schedule(this.hbMs);
        return;
      }
      this.ticking = this.tick()
        .catch((err) => this.hooks.log.error({ err }, 'cluster: heartbeat failed unexpectedly'))
        .finally(() => {
          this.ticking = undefined;
          this.schedule(this.hbMs);
        });
    }, ms);
    this.timer.unref();
  }

  private async tick(): Promise<void> {
    if (this.stopped || !this.kv || !this.lease || this.stateValue === ClusterState.Refused) return;
    if (!this.connected) return; // Isolated already (the status watcher); the client reconnects
    const lease: Lease = { ...this.lease, restAddress: this.hooks.restAddress(), lastHeartbeat: new Date().toISOString(), state: 'live' };
    try {
      this.revision = await this.kv.update(this.nodeId, JSON.stringify(lease), this.revision, this.writeTimeout);
      this.lease = lease;
      this.lastWriteOk = Date.now();
      this.lastError = undefined;
      this.observe(this.nodeId, lease, this.revision, Date.now());
      if (this.stateValue !== ClusterState.Member) this.backInContact();
    } catch (err) {
      if (wrongSequence(err)) {
        await this.leaseConflict();
      } else {
        this.lastError = messageOf(err);
        // a blip (a JetStream leader election) is not isolation: two heartbeats and half a lease without a write are
        if (Date.now() - this.lastWriteOk > Math.max(2 * this.hbMs, (this.cfg.leaseSeconds * 1000) / 2)) this.isolate(`JetStream does not take this node's lease (NATS quorum lost?): ${this.lastError}`);
      }
    }
    if (this.stateValue === ClusterState.Member) {
      if (!this.watching) await this.startWatch();
      await this.refreshQuiet();
      await this.judgeLapses();
    }
  }

  private backInContact(): void {
    const was = this.stateValue;
    // no one was judged while this node could not see; each node gets a full lease from now
    const now = Date.now();
    for (const k of this.nodes.values()) if (k.lease.state === 'live') k.seenAt = Math.max(k.seenAt, now);
    this.setState(ClusterState.Member, '');
    if (was === ClusterState.Isolated) this.hooks.log.info({ nodeId: this.nodeId, epoch: this.lease?.epoch }, 'cluster: in contact with NATS again; member');
  }

  /** The lease write was refused: someone else wrote this node's key. */
  private async leaseConflict(): Promise<void> {
    const kv = this.kv!;
    const entry = await kv.get(this.nodeId).catch(() => null);
    const cur = entry ? parseLease(entry) : undefined;
    if (!entry || !cur || cur.holder !== this.identity.holder) {
      const why = `node id ${this.nodeId} was taken by another process (server ${cur?.serverName ?? '?'}, epoch ${cur?.epoch ?? '?'}); this broker stops holding it (configure another Cluster.nodeId)`;
      this.setState(ClusterState.Refused, why);
      this.hooks.log.error({ nodeId: this.nodeId }, `cluster: ${why}`);
      this.lease = undefined;
      return;
    }
    if (cur.state === 'gone') {
      // declared gone while it could not write (isolated longer than the lease): a new epoch, as after a restart
      const epoch = Math.max(cur.epoch, this.identity.epochs[this.epochKey] ?? 0) + 1;
      const now = new Date().toISOString();
      const lease: Lease = { ...cur, epoch, state: 'live', started: now, lastHeartbeat: now, restAddress: this.hooks.restAddress(), serverName: this.hooks.serverName };
      delete lease.goneAt;
      delete lease.declaredBy;
      this.revision = await kv.update(this.nodeId, JSON.stringify(lease), entry.revision, this.writeTimeout);
      this.lease = lease;
      this.lastWriteOk = Date.now();
      this.identity.epochs[this.epochKey] = epoch;
      try {
        saveIdentity(this.hooks.dataDirectory, this.identity);
      } catch {
        // the bucket holds the epoch too
      }
      this.observe(this.nodeId, lease, this.revision, Date.now());
      this.hooks.log.warn({ nodeId: this.nodeId, epoch, declaredBy: cur.declaredBy }, `cluster: this node was declared gone by ${cur.declaredBy ?? 'another node'} while it was isolated; rejoined with epoch ${epoch}`);
      this.hooks.onRejoined(epoch);
      this.backInContact();
      return;
    }
    // our own write, whose acknowledgement was lost (a timeout that still got stored): carry on from it
    this.revision = entry.revision;
    this.lease = { ...cur };
    this.lastWriteOk = Date.now();
    this.backInContact();
  }

  private async startWatch(): Promise<void> {
    if (this.watching || !this.kv) return;
    this.watching = true;
    const gen = ++this.watchGen;
    try {
      const it = await this.kv.watch();
      if (gen !== this.watchGen) {
        it.stop();
        return;
      }
      this.watcher = it;
      void (async () => {
        try {
          for await (const e of it) {
            const lease = parseLease(e);
            const key = e.key;
            if (!lease) {
              if (e.operation !== 'PUT') this.nodes.delete(key);
              continue;
            }
            if (lease.nodeId !== key) continue;
            // a lease seen for the first time gets a whole lease from now (the server's timestamps are not compared with
            // this node's clock): a node that died before this one started is judged one lease after it started
            this.observe(key, lease, e.revision, Date.now(), !e.isUpdate);
          }
        } finally {
          if (gen === this.watchGen) {
            this.watching = false; // the next heartbeat starts it again
            this.watcher = undefined;
          }
        }
      })();
    } catch (err) {
      if (gen === this.watchGen) this.watching = false;
      this.lastError = messageOf(err);
    }
  }

  /** Drops the watcher (after a reconnect its consumer may have lived on the server that went); the next heartbeat starts another. */
  private restartWatch(): void {
    this.watchGen++;
    this.watcher?.stop();
    this.watcher = undefined;
    this.watching = false;
  }

  /**
   * Reads the leases the watch has not shown changing for two heartbeats (a watcher being re-created after a server
   * went, a slow consumer): the heartbeat ages shown stay true, and a lapse is judged on what the bucket holds.
   */
  private async refreshQuiet(): Promise<void> {
    const now = Date.now();
    const quiet = [...this.nodes].filter(([key, k]) => key !== this.nodeId && k.lease.state === 'live' && now - k.seenAt > 2 * this.hbMs).slice(0, 32); // the rest at the next heartbeats
    await Promise.all(
      quiet.map(async ([key]) => {
        const e = await this.kv!.get(key).catch(() => null);
        const cur = e ? parseLease(e) : undefined;
        if (e && cur && cur.nodeId === key) this.observe(key, cur, e.revision, Date.now());
      }),
    );
  }

  /** A lease seen (watch, a read after a refused write, or this node's own write). */
  private observe(key: string, lease: Lease, revision: number, seenAt: number, initial = false): void {
    const log = this.hooks.log;
    const known = this.nodes.get(key);
    const self = key === this.nodeId;
    if (!known) {
      if (this.nodes.size >= MAX_NODES) {
        if (!this.tableFullWarned) log.warn({ max: MAX_NODES }, 'cluster: node table full; further nodes are not tracked');
        this.tableFullWarned = true;
        return;
      }
      const k: Known = { lease, revision, seenAt, goneReported: 0 };
      // a node found gone when this node starts was reported by whoever saw it lapse
      if (lease.state === 'gone') k.goneEpoch = lease.epoch;
      this.nodes.set(key, k);
      if (!initial && !self && lease.state === 'live') log.info({ nodeId: key, epoch: lease.epoch }, `cluster: node ${key} joined (epoch ${lease.epoch})`);
      return;
    }
    if (revision <= known.revision) return;
    const before = known.lease;
    known.lease = lease;
    known.revision = revision;
    if (lease.state === 'live') known.seenAt = Math.max(known.seenAt, seenAt);
    if (self) return;
    if (lease.state === 'live' && lease.epoch > before.epoch) {
      if (before.state === 'live') {
        log.info({ nodeId: key, from: before.epoch, to: lease.epoch }, `cluster: node ${key} restarted before its lease lapsed (epoch ${before.epoch} -> ${lease.epoch})`);
        this.hooks.onRestarted(key, before.epoch, lease.epoch);
      } else log.info({ nodeId: key, epoch: lease.epoch }, `cluster: node ${key} is back (epoch ${lease.epoch})`);
    } else if (lease.state === 'gone' && before.state !== 'gone') {
      this.reportGone(known);
    } else if (lease.state === 'left' && before.state === 'live') {
      log.info({ nodeId: key, epoch: lease.epoch }, `cluster: node ${key} left (epoch ${lease.epoch})`);
      this.hooks.onLeft(key, lease.epoch);
    }
  }

  private reportGone(k: Known): void {
    if (k.goneEpoch === k.lease.epoch) return; // once per lapse
    k.goneEpoch = k.lease.epoch;
    k.goneReported++;
    const l = k.lease;
    // the compare-and-set that stored this record was this node's (its watch may show it before the write answers)
    const declaredHere = l.declaredBy === this.nodeId;
    const silent = Math.round((Date.now() - k.seenAt) / 100) / 10;
    this.hooks.log.warn(
      { nodeId: l.nodeId, epoch: l.epoch, declaredBy: l.declaredBy, declaredHere },
      `cluster: node ${l.nodeId} (epoch ${l.epoch}) is gone: no heartbeat for ${silent} s${declaredHere ? '; declared by this node' : `; declared by ${l.declaredBy ?? '?'}`}`,
    );
    this.hooks.onGone({ nodeId: l.nodeId, epoch: l.epoch, serverName: l.serverName, restAddress: l.restAddress, lastHeartbeat: l.lastHeartbeat, declaredBy: l.declaredBy ?? '', declaredHere });
  }

  /** Declares gone, with compare-and-set, every node this node has not seen write for a whole lease (in parallel: one slow write does not hold up the heartbeat). */
  private async judgeLapses(): Promise<void> {
    const kv = this.kv!;
    const now = Date.now();
    const lapsed = [...this.nodes].filter(([key, k]) => key !== this.nodeId && k.lease.state === 'live' && !k.claiming && now - k.seenAt > this.cfg.leaseSeconds * 1000);
    await Promise.all(
      lapsed.map(async ([key, k]) => {
        if (this.stateValue !== ClusterState.Member) return;
        k.claiming = true;
        const gone: Lease = { ...k.lease, state: 'gone', goneAt: new Date().toISOString(), declaredBy: this.nodeId };
        try {
          const rev = await kv.update(key, JSON.stringify(gone), k.revision, this.writeTimeout);
          if (rev > k.revision) {
            k.lease = gone;
            k.revision = rev;
            this.reportGone(k);
          }
        } catch (err) {
          if (wrongSequence(err)) {
            // it wrote meanwhile (alive after all), or another node declared it first: read which
            const e = await kv.get(key).catch(() => null);
            const cur = e ? parseLease(e) : undefined;
            if (e && cur) this.observe(key, cur, e.revision, Date.now());
          } else this.lastError = messageOf(err); // JetStream unavailable: judged again at the next heartbeat
        } finally {
          k.claiming = false;
        }
      }),
    );
  }
}
