/**
 * The cluster service: when `Cluster.enabled`, this broker's membership of the cluster (src/cluster/membership.ts);
 * otherwise nothing at all (no NATS connection, no file, no status line). It gives the views the REST API, /health
 * and /readyz read, and the runtime events the session work builds on (docs/cluster.md).
 */
import type { NatsConnection } from '@nats-io/transport-node';
import { fromCallback } from 'xstate';
import { clusterMachine, clusterStateName, type ClusterEvent, type ClusterInput } from '../../actors/cluster/cluster.machine.js';
import { NotFoundError } from '../errors.js';
import { defineActorKind } from '../runtime/actor-kind.js';
import type { SubSystemStatus } from '../runtime/monitor.js';
import type { Runtime, Service } from '../runtime/runtime.js';
import { ClusterState, loadIdentity, Membership, type ClusterView, type GoneNode } from './membership.js';

declare module '../runtime/runtime.js' {
  interface RuntimeServices {
    cluster: ClusterService;
  }
}

declare module '../runtime/registry.js' {
  interface ActorKinds {
    cluster: typeof clusterMachine;
  }
}

/**
 * The cluster kind (src/runtime/actor-kind.ts): the singleton `cluster` under the `integrations` supervisor (it is
 * this broker's NATS connection for the cluster, as the links are for federation); nothing commands it over REST.
 */
export const clusterKind = defineActorKind({
  kind: 'cluster',
  machine: clusterMachine,
  supervisor: 'integrations',
  noun: 'Cluster membership',
  singletonLabel: 'The cluster membership',
  stateName: (snap) => (snap.status !== 'active' ? 'Stopped' : clusterStateName(snap.value)),
});

declare module '../runtime/events.js' {
  interface RuntimeEvents {
    /** A node's lease lapsed: emitted once per lapse on every member; `declaredHere` on exactly one of them. */
    'cluster.node.gone': [gone: GoneNode];
    /** A node wrote its lease as left (a clean stop): not a lapse. */
    'cluster.node.left': [nodeId: string, epoch: number];
    /** A node came back with a higher epoch before its old lease lapsed (a quick restart). */
    'cluster.node.restarted': [nodeId: string, oldEpoch: number, newEpoch: number];
    /** This node's membership changed state (Connecting, Member, Isolated, Refused, Stopped). */
    'cluster.state': [state: ClusterState, reason: string];
    /** This node was declared gone while isolated and holds its lease again under a new epoch. */
    'cluster.rejoined': [epoch: number];
  }
}

/** GET /api/v1/server/cluster when the cluster is off. */
export interface ClusterOff {
  enabled: false;
}

export class ClusterService implements Service {
  readonly name = 'cluster';
  private rt?: Runtime;
  /** The membership of the live `cluster` actor (the actor owns it; the service reads it for the views). */
  private membership?: Membership;
  private restAddress = '';
  /** Memberships stopping (their lease written as left, the connection closed); `stop` waits for them. */
  private readonly closing = new Set<Promise<void>>();

  async start(rt: Runtime): Promise<void> {
    this.rt = rt;
    const cfg = rt.config.Cluster;
    if (cfg.enabled) this.restAddress ||= cfg.restAddress ?? '';
  }

  /** Spawns the `cluster` actor (only when Cluster.enabled): it joins in the background, the broker serves meanwhile. */
  async running(rt: Runtime): Promise<void> {
    const cfg = rt.config.Cluster;
    if (!cfg.enabled) return;
    const input: ClusterInput = { nodeId: cfg.nodeId ?? loadIdentity(rt.config.MessageDaemon.dataDirectory).nodeId, clusterName: cfg.clusterName };
    clusterKind.spawn(rt, '', { logic: clusterMachine.provide({ actors: { membership: this.membershipLogic(rt) } }), input });
  }

  /** The `membership` callback: creates the Membership, reports its states to the actor, stops it on exit. */
  private membershipLogic(rt: Runtime) {
    return fromCallback<ClusterEvent, ClusterInput>(({ sendBack }) => {
      const cfg = rt.config.Cluster;
      const log = rt.log.child({ actor: 'cluster' });
      const m: Membership = new Membership(cfg, {
        log,
        dataDirectory: rt.config.MessageDaemon.dataDirectory,
        serverName: rt.serverName,
        restAddress: () => this.restAddress,
        onGone: (g) => rt.emit('cluster.node.gone', g),
        onLeft: (id, epoch) => rt.emit('cluster.node.left', id, epoch),
        onRestarted: (id, from, to) => rt.emit('cluster.node.restarted', id, from, to),
        onState: (state, reason) => {
          rt.emit('cluster.state', state, reason);
          if (state === ClusterState.Member) sendBack({ type: 'membership.member', epoch: m.epoch });
          else if (state === ClusterState.Isolated) sendBack({ type: 'membership.isolated', reason });
          else if (state === ClusterState.Refused) sendBack({ type: 'membership.refused', reason });
          else if (state === ClusterState.Connecting) sendBack({ type: 'membership.connecting', reason });
        },
        onRejoined: (epoch) => {
          rt.emit('cluster.rejoined', epoch);
          sendBack({ type: 'membership.member', epoch });
        },
      });
      this.membership = m;
      m.start();
      return () => {
        // the views keep reading it (Stopped) until the next one replaces it
        const done = m.stop().catch((err) => log.warn({ err }, 'cluster: stopping the membership failed'));
        this.closing.add(done);
        void done.finally(() => this.closing.delete(done));
      };
    });
  }

  async stop(): Promise<void> {
    // the actor was stopped with the tree (its membership writes the lease as left); wait for that
    await Promise.all([...this.closing]);
  }

  get enabled(): boolean {
    return this.rt?.config.Cluster.enabled === true;
  }

  /** This node's id in the cluster (undefined when the cluster is off or not started). */
  get nodeId(): string | undefined {
    return this.membership?.nodeId;
  }

  /** This node's membership state (Stopped when the cluster is off). */
  get state(): ClusterState {
    return this.membership?.state ?? ClusterState.Stopped;
  }

  /** This node's epoch (0 before it holds its lease). */
  get epoch(): number {
    return this.membership?.epoch ?? 0;
  }

  /**
   * The membership's NATS connection, for the cluster's planes (sessions, messages, wills): undefined while the
   * cluster is off or not connected. Not to be closed by its users; listen to `cluster.state` for changes.
   */
  nats(): NatsConnection | undefined {
    return this.membership?.connection;
  }

  /** The REST API's bound address (from the listening server), unless Cluster.restAddress names one. */
  setRestAddress(url: string): void {
    if (!this.enabled || this.restAddress) return;
    this.restAddress = url;
  }

  /** DELETE /api/v1/server/cluster/nodes/{nodeId}: a gone or left node removed from the bucket. */
  async forget(nodeId: string): Promise<void> {
    if (!this.membership) throw new NotFoundError('The cluster is not enabled (Cluster.enabled)');
    await this.membership.forget(nodeId);
  }

  view(): ClusterView | ClusterOff {
    return this.membership ? this.membership.view() : { enabled: false };
  }

  /** The membership's view (nodes, leases, the unreachable), or undefined while the cluster is off or not started. */
  memberView(): ClusterView | undefined {
    return this.membership?.view();
  }

  /** Why this node is not ready as a cluster member (empty when it is, or when the cluster is off). */
  readinessReasons(): string[] {
    const m = this.membership;
    if (!m || m.state === ClusterState.Member || m.state === ClusterState.Stopped) return [];
    return [`cluster: ${m.state}: ${m.reason ?? ''}`];
  }

  /** The nodes this node cannot reach (gone, or their lease lapsed and not declared yet). */
  unreachable(): string[] {
    const v = this.membership?.view();
    return v ? v.unreachable : [];
  }

  /** The `Cluster` line of GET /api/v1/server/status (and so of /health); absent when the cluster is off. */
  subsystemStatus(): SubSystemStatus | undefined {
    const m = this.membership;
    if (!m) return undefined;
    const v = m.view();
    const live = v.nodes.filter((n) => n.state === 'live' && !v.unreachable.includes(n.nodeId)).length;
    if (v.state === ClusterState.Member) {
      if (v.unreachable.length) return { name: 'Cluster', comment: `member ${v.nodeId} (epoch ${v.epoch}); unreachable nodes: ${v.unreachable.join(', ')}`, status: 'WARN' };
      return { name: 'Cluster', comment: `member ${v.nodeId} (epoch ${v.epoch}) of ${v.clusterName}; ${live} node(s) live`, status: 'OK' };
    }
    const status = v.state === ClusterState.Connecting ? 'WARN' : v.state === ClusterState.Stopped ? 'STOPPED' : 'ERROR';
    return { name: 'Cluster', comment: `${v.state}: ${v.reason ?? ''}`, status };
  }
}

export function clusterService(): ClusterService {
  return new ClusterService();
}
