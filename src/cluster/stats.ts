/**
 * Cluster totals (docs/cluster.md "Cluster totals"): every member publishes its own counters each heartbeat on
 * `sy.<cluster>.stats.<nodeId>` (core NATS, fire and forget: a lost sample is replaced by the next); every member
 * keeps the latest sample of each node and sums the fresh ones with its own current figures. A node's sample counts
 * while it is newer than a lease (on this broker's clock) and the membership does not hold the node gone or left, so
 * a dead node drops out of the totals after at most a lease. At most `MAX_TRACKED_NODES` nodes are kept.
 *
 * The sums appear as `$SYS/broker/cluster/...` topics (through the `$SYS` publisher) and as `switchyard_cluster_*`
 * gauges on /metrics. They are gauges, not counters: a sum of running totals goes down when a node leaves it.
 */
import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import { Gauge, type Registry } from 'prom-client';
import type { Runtime } from '../runtime/runtime.js';

/** Nodes whose samples are kept at most (the membership tracks at most 1 024 nodes too). */
export const MAX_TRACKED_NODES = 1024;

/** One node's counters, as its own /metrics shows them. */
export interface NodeFigures {
  connections: number;
  connectionsAccepted: number;
  subscriptions: number;
  destinations: number;
  messagesPublished: number;
  messagesDelivered: number;
  messagesDropped: number;
  bytesReceived: number;
  bytesSent: number;
}
type FigureKey = keyof NodeFigures;

/** Each figure: its `$SYS` topic, its Prometheus gauge (without the `switchyard_` prefix) and what it is. */
export const CLUSTER_FIGURES: ReadonlyArray<{ key: FigureKey; topic: string; metric: string; help: string }> = [
  { key: 'connections', topic: '$SYS/broker/cluster/clients/connected', metric: 'cluster_connections', help: 'Client connections open now on the live nodes' },
  { key: 'connectionsAccepted', topic: '$SYS/broker/cluster/clients/total', metric: 'cluster_connections_accepted', help: 'Client connections the live nodes accepted since each started' },
  { key: 'subscriptions', topic: '$SYS/broker/cluster/subscriptions/count', metric: 'cluster_subscriptions', help: 'Subscriptions on the live nodes' },
  { key: 'destinations', topic: '$SYS/broker/cluster/destinations/count', metric: 'cluster_destinations', help: 'Destinations on the live nodes (a topic known to several nodes counts once per node)' },
  { key: 'messagesPublished', topic: '$SYS/broker/cluster/messages/received', metric: 'cluster_messages_published', help: 'Messages published on the live nodes since each started' },
  { key: 'messagesDelivered', topic: '$SYS/broker/cluster/messages/sent', metric: 'cluster_messages_delivered', help: 'Messages delivered to subscribers by the live nodes since each started' },
  { key: 'messagesDropped', topic: '$SYS/broker/cluster/publish/messages/dropped', metric: 'cluster_messages_dropped', help: 'Message copies the live nodes dropped since each started' },
  { key: 'bytesReceived', topic: '$SYS/broker/cluster/load/bytes/received', metric: 'cluster_bytes_received', help: 'Bytes the live nodes read from clients since each started' },
  { key: 'bytesSent', topic: '$SYS/broker/cluster/load/bytes/sent', metric: 'cluster_bytes_sent', help: 'Bytes the live nodes wrote to clients since each started' },
];
/** The number of nodes whose figures are in the sums. */
export const CLUSTER_NODES_TOPIC = '$SYS/broker/cluster/nodes';

const KEYS = CLUSTER_FIGURES.map((f) => f.key);

/** This broker's figures now (the same values as its own /metrics). */
export function localFigures(rt: Runtime): NodeFigures {
  const t = rt.engineStats();
  const n = rt.network;
  return {
    connections: n.currentConnections,
    connectionsAccepted: n.totalConnections,
    subscriptions: rt.engine?.stats().subscriptions ?? 0,
    destinations: rt.destinationCount(),
    messagesPublished: t.totalPublishedMessages,
    messagesDelivered: t.totalDeliveredMessages,
    messagesDropped: t.totalDroppedMessages,
    bytesReceived: n.totalReadBytes,
    bytesSent: n.totalWriteBytes,
  };
}

/** A sample off the wire, or undefined when it is not one (every figure a finite number >= 0). */
function parseSample(msg: Msg): { nodeId: string; figures: NodeFigures } | undefined {
  let raw: unknown;
  try {
    raw = msg.json();
  } catch {
    return undefined;
  }
  if (typeof raw !== 'object' || raw === null) return undefined;
  const { nodeId, figures } = raw as { nodeId?: unknown; figures?: Record<string, unknown> };
  if (typeof nodeId !== 'string' || nodeId.length === 0 || nodeId.length > 64 || typeof figures !== 'object' || figures === null) return undefined;
  const out = {} as NodeFigures;
  for (const k of KEYS) {
    const v = figures[k];
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) return undefined;
    out[k] = v;
  }
  return { nodeId, figures: out };
}

export interface ClusterTotals {
  /** The nodes in the sums, this one included, sorted. */
  nodes: string[];
  figures: NodeFigures;
}

export const statsSubject = (clusterName: string, nodeId: string): string => `sy.${clusterName}.stats.${nodeId}`;

export class ClusterStats {
  private readonly latest = new Map<string, { figures: NodeFigures; seenAt: number }>();
  private nc?: NatsConnection;
  private sub?: Subscription;

  constructor(
    private readonly clusterName: string,
    private readonly log: Logger,
    /** How long a sample counts (the lease). */
    private readonly freshMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** Listens to every node's samples on `nc` (the cluster's connection); a new connection replaces the old. */
  bind(nc: NatsConnection | undefined, selfId: string): void {
    if (nc === this.nc) return;
    this.unbind();
    if (!nc || nc.isClosed()) return;
    this.nc = nc;
    this.sub = nc.subscribe(statsSubject(this.clusterName, '*'), {
      callback: (err, msg) => {
        if (err) return;
        const s = parseSample(msg);
        if (!s || s.nodeId === selfId || msg.subject !== statsSubject(this.clusterName, s.nodeId)) return;
        if (!this.latest.has(s.nodeId) && this.latest.size >= MAX_TRACKED_NODES) this.prune();
        if (!this.latest.has(s.nodeId) && this.latest.size >= MAX_TRACKED_NODES) return;
        this.latest.set(s.nodeId, { figures: s.figures, seenAt: this.now() });
      },
    });
  }

  unbind(): void {
    if (this.sub && this.nc && !this.nc.isClosed()) this.sub.unsubscribe();
    this.sub = undefined;
    this.nc = undefined;
  }

  /** Sends this node's sample (nothing while there is no connection: the others drop it after a lease). */
  publish(nodeId: string, figures: NodeFigures): void {
    const nc = this.nc;
    if (!nc || nc.isClosed()) return;
    try {
      nc.publish(statsSubject(this.clusterName, nodeId), JSON.stringify({ nodeId, figures }));
    } catch (err) {
      this.log.debug({ err }, 'cluster stats: publish failed');
    }
  }

  /** Forgets samples older than a lease. */
  private prune(): void {
    const oldest = this.now() - this.freshMs;
    for (const [id, s] of this.latest) if (s.seenAt < oldest) this.latest.delete(id);
  }

  /** This node's figures plus the fresh samples of the nodes `counts(nodeId)` admits (live in the membership). */
  totals(selfId: string, self: NodeFigures, counts: (nodeId: string) => boolean): ClusterTotals {
    this.prune();
    const figures = { ...self };
    const nodes = [selfId];
    for (const [id, s] of this.latest) {
      if (id === selfId || !counts(id)) continue;
      nodes.push(id);
      for (const k of KEYS) figures[k] += s.figures[k];
    }
    nodes.sort();
    return { nodes, figures };
  }
}

/** The `$SYS/broker/cluster/...` topics and their payloads (decimal strings). */
export function clusterSysTopics(t: ClusterTotals): Array<[topic: string, payload: string]> {
  return [[CLUSTER_NODES_TOPIC, String(t.nodes.length)], ...CLUSTER_FIGURES.map((f): [string, string] => [f.topic, String(t.figures[f.key])])];
}

/** The `switchyard_cluster_*` gauges, read at scrape time; registered only when the cluster is on. */
export function registerClusterMetrics(register: Registry, read: () => ClusterTotals | undefined): void {
  new Gauge({
    name: 'switchyard_cluster_nodes',
    help: 'Cluster nodes whose figures are in the switchyard_cluster_* sums (this one and every live node heard within a lease)',
    registers: [register],
    collect() {
      this.set(read()?.nodes.length ?? 0);
    },
  });
  for (const f of CLUSTER_FIGURES) {
    new Gauge({
      name: `switchyard_${f.metric}`,
      help: `${f.help} (sum over the cluster; drops when a node leaves the sum)`,
      registers: [register],
      collect() {
        const t = read();
        this.set(t ? t.figures[f.key] : 0);
      },
    });
  }
}
