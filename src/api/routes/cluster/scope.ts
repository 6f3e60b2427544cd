import { z } from 'zod';
import type { ClusterList, ClusterListAnswer, LocalListFn } from '../../../cluster/rpc.js';
import { MAX_CLUSTER_ITEMS, MAX_ITEMS_PER_NODE, RPC_TIMEOUT_MS } from '../../../cluster/rpc.js';
import { ServiceUnavailableError } from '../../../errors.js';
import type { Runtime } from '../../../runtime/runtime.js';

/**
 * `scope=cluster` on REST lists (Switchyard extension; docs/cluster.md "REST across the cluster"): the query
 * parameter, the answer's schema around a list's entry schema, and the adapter from a route to the cluster views
 * service (src/cluster/views.service.ts), which asks every live node over NATS.
 */
export const ScopeParam = z
  .enum(['node', 'cluster'])
  .default('node')
  .describe(
    `Switchyard extension. node (default): this broker's entries. cluster: the entries of every live node of the cluster, each naming its node; a node that does not answer within ${RPC_TIMEOUT_MS} ms is listed in unreachableNodes. Each node sends at most ${MAX_ITEMS_PER_NODE} entries, the answer holds at most ${MAX_CLUSTER_ITEMS} (truncatedNodes names the nodes cut).`,
  );

/** The answer of a `scope=cluster` list whose entries are `item`, each with its `node`. */
export function clusterListDTO<T extends z.ZodObject>(item: T, id: string) {
  return z
    .object({
      scope: z.literal('cluster'),
      nodes: z.array(z.string()).describe('the nodes whose entries are listed, this one included'),
      unreachableNodes: z.array(z.string()).describe('live nodes that did not answer in time, and nodes gone (lease lapsed)'),
      truncatedNodes: z.array(z.string()).describe('nodes with more entries than the answer could hold'),
      total: z.number().int().describe("sum of the listed nodes' totals"),
      items: z.array(item.extend({ node: z.string().describe('the cluster node (Cluster.nodeId) the entry lives on') })),
    })
    .meta({ id });
}

/** Registers a route's local list for the other nodes' requests (nothing when the views service is absent). */
export function serveClusterList(rt: Runtime, what: ClusterList, fn: LocalListFn): void {
  rt.service('clusterViews')?.serve(what, fn);
}

/** This list across the cluster. */
export async function clusterList(rt: Runtime, what: ClusterList, query: Record<string, unknown>): Promise<ClusterListAnswer> {
  const views = rt.service('clusterViews');
  if (!views) throw new ServiceUnavailableError('The cluster views are not running (the server is starting or stopping); try again');
  return views.list(what, query);
}
