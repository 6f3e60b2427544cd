/**
 * The cluster's message plane (issue 26 item 5, docs/cluster.md "Messages across nodes"): a message published on any
 * node reaches the matching subscribers of every node, as on one broker.
 *
 * It is the federation machinery of src/links/ with one link of its own, the integration `cluster`, built from the
 * `Cluster` section (no NetworkConnectionManager entry):
 *
 * - **push**: the whole local topic tree (`#`, which never matches `$SYS/...`; the outbox also refuses `$` topics and
 *   what came from a link) goes to `sy.<clusterName>.m.<topic as subject>` as a JetStream publish confirmed by its
 *   PubAck, de-duplicated by `Nats-Msg-Id` (the outbox id), for QoS 1 and 2; QoS 0 goes as a core NATS publish to
 *   `sy.<clusterName>.q0.<topic as subject>`, which the stream does not capture (the transport's `qos0Subjects`). The
 *   link's outbox is the engine's durable subscription `link:cluster#0`, so what a publisher was acknowledged for
 *   survives a crash.
 * - **pull**: one durable pull consumer per node (`<serverName>-cluster-1`) on the stream `SY_<clusterName>_MSG`
 *   (subjects `sy.<clusterName>.m.>`, `Cluster.replicas` replicas, bounded by `Cluster.messages.maxAgeSeconds` and
 *   `maxBytes`): a node that was down resumes where it stopped. Each message is published into the local engine
 *   through the one ingress path with the origin `link:cluster`, so the local subscriptions decide QoS downgrade,
 *   retain handling, subscription identifiers, no local, expiry and their ACLs, as for a local publish. QoS 0 comes
 *   from a core subscription to `sy.<clusterName>.q0.>` into the same handler: at most once, never stored in
 *   JetStream (every stored message costs a replicated write and one acknowledged delivery per node: QoS 0 through
 *   the stream ran at about 500 msg/s in bench/cluster), dropped and counted (`qos0Dropped`) by a node that is behind.
 * - **loops**: a message carries its origin server (`Sy-Origin`); a node drops (and acknowledges) its own messages when
 *   they come back from the stream or its QoS 0 subscription, and never pushes out what it received (its metaData has `sy.hops`). So each
 *   message is routed once on every node: locally on the node it was published on, from the stream on the others.
 * - **retained**: a retained message is also kept in `SY_RETAINED` (last value per subject); a node that starts reads
 *   the set under `sy.<clusterName>.m.>` first. An empty retained payload clears it on every node.
 * - **shared groups**: `$share/<g>/<filter>` is fed by one JetStream consumer per group for the whole cluster, and
 *   its QoS 0 messages by one NATS queue group (src/links/nats-shares.ts): each message goes to one node's members only.
 *
 * Why a visible integration (`integration:cluster` in the actor tree, GET /api/v1/server/integrations, /metrics):
 * shared groups must be fed by the same link manager as any other NATS link (one engine hook for external groups), and
 * operators get its connection state, outbox depth, counters and last error with the tools they already use. It has
 * a NATS connection of its own, not the membership's: the link reads with back-pressure (nats-guard.ts), which must
 * never hold up a lease heartbeat.
 */
import type { IntegrationsService } from '../links/integrations.service.js';
import type { LinkConfig } from '../links/link-config.js';
import type { Runtime, Service } from '../runtime/runtime.js';
import type { ClusterConfig } from './config.js';

/** The name of the cluster's integration link (so a NetworkConnectionManager link may not use it with the cluster on). */
export const CLUSTER_LINK = 'cluster';

/** `SY_<clusterName>_MSG`: the stream of the messages crossing nodes. */
export function messageStream(clusterName: string): string {
  return `SY_${clusterName}_MSG`;
}

/** `sy.<clusterName>.m`: the subject prefix of the messages crossing nodes (a topic `a/b` is `sy.<c>.m.a.b`). */
export function messageSubjectPrefix(clusterName: string): string {
  return `sy.${clusterName}.m`;
}

/** `sy.<clusterName>.q0`: where QoS 0 messages cross instead (core NATS, outside the stream): `a/b` is `sy.<c>.q0.a.b`. */
export function qos0SubjectPrefix(clusterName: string): string {
  return `sy.${clusterName}.q0`;
}

/**
 * The link of the message plane. QoS 2 both ways: the link never lowers a message's QoS (each message keeps its own,
 * carried in `Sy-Qos`); subscribers downgrade where they are.
 */
export function clusterLinkConfig(cfg: ClusterConfig): LinkConfig {
  const remote = `sy/${cfg.clusterName}/m/`;
  const direction = (d: 'push' | 'pull') => ({ direction: d, localNamespace: '', remoteNamespace: remote, qualityOfService: 2, includeSchema: false, namespaceFilters: [] });
  return {
    schemaLoadingVersion: 1,
    name: CLUSTER_LINK,
    url: cfg.servers.join(','),
    protocolConfigs: [
      {
        type: 'nats',
        stream: messageStream(cfg.clusterName),
        subjects: [`${messageSubjectPrefix(cfg.clusterName)}.>`],
        maxAgeSeconds: cfg.messages.maxAgeSeconds,
        maxBytes: cfg.messages.maxBytes,
        replicas: cfg.replicas,
        qos0Subjects: { from: messageSubjectPrefix(cfg.clusterName), to: qos0SubjectPrefix(cfg.clusterName) },
      },
    ],
    ...(cfg.user !== undefined ? { authConfig: { username: cfg.user, ...(cfg.password !== undefined ? { password: cfg.password } : {}) } } : {}),
    linkConfigs: [direction('push'), direction('pull')],
    pluginConnection: false,
    cost: 10,
    autoStart: true,
    // a lost NATS server is replaced by another of Cluster.servers at once; the cap keeps a cluster without NATS quiet
    backoff: { initial: 250, max: 5000, jitter: 0.2 },
  };
}

/** What the message plane needs: the integrations service, whose link manager runs the `cluster` link. */
export interface ClusterMessagesDeps {
  integrations: IntegrationsService;
}

/**
 * Adds the `cluster` link to the integrations' link manager at every boot when `Cluster.enabled` and
 * `Cluster.messages.enabled` (its outbox opens at once, before any endpoint listens); the integrations service spawns
 * its actor with the others and stops it with them. Off: nothing at all.
 */
export class ClusterMessagesService implements Service {
  readonly name = 'clusterMessages';
  readonly dependsOn: readonly string[];

  constructor(private readonly deps: ClusterMessagesDeps) {
    this.dependsOn = Object.keys(deps);
  }

  async start(rt: Runtime): Promise<void> {
    const cfg = rt.config.Cluster;
    if (!cfg.enabled || !cfg.messages.enabled) return;
    const manager = this.deps.integrations.manager;
    if (!manager) return;
    if (manager.find(CLUSTER_LINK)) {
      rt.log.error(
        { integration: CLUSTER_LINK },
        `cluster: messages do not cross nodes: the integration name "${CLUSTER_LINK}" is taken by a NetworkConnectionManager link (rename that link)`,
      );
      return;
    }
    manager.add(clusterLinkConfig(cfg));
  }

  async stop(): Promise<void> {
    // the link belongs to the integrations service from start() on: its actor and outbox stop with the others
  }
}

export function clusterMessagesService(deps: ClusterMessagesDeps): ClusterMessagesService {
  return new ClusterMessagesService(deps);
}
