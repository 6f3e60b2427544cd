/**
 * The cluster's views (docs/cluster.md "REST across the cluster" and "Cluster totals"): the rpc that answers this
 * node's lists to the others and gathers theirs for `scope=cluster` (src/cluster/rpc.ts), and the cluster totals of
 * `$SYS` and /metrics (src/cluster/stats.ts). Both use the membership's NATS connection (ClusterService.nats()),
 * never one of their own, and follow it when the membership makes a new one (a restart of the `cluster` actor).
 * With the cluster off this service opens nothing; `scope=cluster` then answers this broker's entries alone.
 */
import { ServiceUnavailableError } from '../errors.js';
import type { Runtime, Service } from '../runtime/runtime.js';
import type { ClusterService } from './cluster.service.js';
import { ClusterState } from './membership.js';
import { ClusterRpc, type ClusterList, type ClusterListAnswer, type LocalListFn, type RpcScope } from './rpc.js';
import { ClusterStats, clusterSysTopics, localFigures, type ClusterTotals } from './stats.js';

declare module '../runtime/runtime.js' {
  interface RuntimeServices {
    clusterViews: ClusterViewsService;
  }
}

/** What the cluster views are given (src/compose.ts): the membership, for the node list and its NATS connection. */
export interface ClusterViewsDeps {
  cluster: ClusterService;
}

export class ClusterViewsService implements Service {
  readonly name = 'clusterViews';
  readonly dependsOn: readonly string[];
  private rt?: Runtime;
  private rpc?: ClusterRpc;
  /** The lists this node serves, registered by the REST route modules (once per app, kept over restarts). */
  private readonly lists = new Map<ClusterList, LocalListFn>();
  private stats?: ClusterStats;
  private timer?: NodeJS.Timeout;
  private readonly onState = (): void => this.bind();

  constructor(private readonly deps: ClusterViewsDeps) {
    this.dependsOn = Object.keys(deps);
  }

  async start(rt: Runtime): Promise<void> {
    this.rt = rt;
    const log = rt.log.child({ actor: 'cluster-views' });
    this.rpc = new ClusterRpc(log, this.lists);
    if (!rt.config.Cluster.enabled) return;
    const cfg = rt.config.Cluster;
    this.stats = new ClusterStats(cfg.clusterName, log, cfg.leaseSeconds * 1000);
    rt.on('cluster.state', this.onState);
    // one sample per heartbeat; the same tick picks up a connection the membership made since
    this.timer = setInterval(() => this.tick(), cfg.heartbeatSeconds * 1000);
    this.timer.unref();
  }

  async stop(rt: Runtime): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    rt.off('cluster.state', this.onState);
    this.rpc?.unbind();
    this.stats?.unbind();
    this.stats = undefined;
  }

  /** Registers the function that builds this node's entries of a list (called by the REST route modules). */
  serve(what: ClusterList, fn: LocalListFn): void {
    this.lists.set(what, fn);
  }

  private cluster() {
    const c = this.deps.cluster;
    return this.rt !== undefined && c.enabled ? c : undefined;
  }

  private bind(): void {
    const c = this.cluster();
    const nodeId = c?.nodeId;
    if (!c || !nodeId) return;
    const nc = c.nats();
    this.rpc?.bind(nc, this.scope());
    this.stats?.bind(nc, nodeId);
  }

  private tick(): void {
    this.bind();
    const c = this.cluster();
    if (!c?.nodeId || c.state !== ClusterState.Member || !this.rt) return;
    this.stats?.publish(c.nodeId, localFigures(this.rt));
  }

  /** Who to ask: live nodes other than this one that the membership does not hold unreachable. */
  private scope(): RpcScope | undefined {
    const c = this.cluster();
    const rt = this.rt;
    if (!rt) return undefined;
    if (!c?.nodeId) return { clusterName: rt.config.Cluster.clusterName, nodeId: rt.serverName, peers: () => ({ live: [], unreachable: [] }) };
    const nodeId = c.nodeId;
    return {
      clusterName: rt.config.Cluster.clusterName,
      nodeId,
      peers: () => {
        const v = c.memberView();
        if (v === undefined) return { live: [], unreachable: [] };
        const unreachable = new Set(v.unreachable);
        return { live: v.nodes.filter((n) => n.state === 'live' && !n.self && !unreachable.has(n.nodeId)).map((n) => n.nodeId), unreachable: [...unreachable] };
      },
    };
  }

  /** A list across the cluster (`scope=cluster`); this broker's entries alone when the cluster is off. */
  async list(what: ClusterList, query: Record<string, unknown>): Promise<ClusterListAnswer> {
    const scope = this.scope();
    if (!scope || !this.rpc) throw new ServiceUnavailableError('The cluster views are not running (the server is starting or stopping); try again');
    return this.rpc.list(what, query, scope);
  }

  /** The cluster totals now (undefined with the cluster off or before this node has an id). */
  totals(): ClusterTotals | undefined {
    const c = this.cluster();
    if (!c?.nodeId || !this.stats || !this.rt) return undefined;
    const v = c.memberView();
    const live = new Set(v !== undefined ? v.nodes.filter((n) => n.state === 'live' && !v.unreachable.includes(n.nodeId)).map((n) => n.nodeId) : []);
    return this.stats.totals(c.nodeId, localFigures(this.rt), (id) => live.has(id));
  }

  /** The `$SYS/broker/cluster/...` topics for the `$SYS` publisher (none with the cluster off). */
  sysTopics(): Array<[topic: string, payload: string]> {
    const t = this.totals();
    return t ? clusterSysTopics(t) : [];
  }
}

export function clusterViewsService(deps: ClusterViewsDeps): ClusterViewsService {
  return new ClusterViewsService(deps);
}
