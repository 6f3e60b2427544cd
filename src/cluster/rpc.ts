/**
 * REST lists across the cluster (`scope=cluster`, docs/cluster.md "REST across the cluster"): every node answers
 * NATS requests on `sy.<cluster>.rpc.<nodeId>.<what>` with its own entries of a list (connections, actors), built
 * by the same function as its local REST answer; the node a REST client asks sends one request to every live node
 * over the cluster's NATS connection, waits a bounded time and merges the answers, each entry naming its `node`.
 * A node that does not answer in time (or has no responder: stopped, not started) is named in `unreachableNodes`;
 * it is never a 500.
 *
 * Bounds: a node answers at most `MAX_ITEMS_PER_NODE` entries and at most `maxReplyBytes` of JSON (entries beyond
 * are cut and the node is listed in `truncatedNodes`); one fan-out waits at most `RPC_TIMEOUT_MS`; the merged
 * answer holds at most `MAX_CLUSTER_ITEMS` entries.
 *
 * The REST permission is checked where the request arrives (the same permission as the local list); the nodes trust
 * each other's requests as they trust the cluster's NATS account, which only the brokers hold.
 */
import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import { BrokerError } from '../errors.js';
import type { Logger } from 'pino';

/** How long one fan-out waits for the other nodes. */
export const RPC_TIMEOUT_MS = 2000;
/** Entries one node puts in its answer at most. */
export const MAX_ITEMS_PER_NODE = 1000;
/** Entries of a merged answer at most. */
export const MAX_CLUSTER_ITEMS = 10_000;
/** A node's reply stays below this (and below the server's max_payload). */
export const MAX_REPLY_BYTES = 512 * 1024;

/** The lists that can be asked across the cluster. */
export const ClusterList = { Connections: 'connections', Actors: 'actors' } as const;
export type ClusterList = (typeof ClusterList)[keyof typeof ClusterList];

/** One node's entries of a list: its total, the entries it sends, and whether a cap left entries out. */
export interface NodeListPage {
  total: number;
  items: unknown[];
  /** Entries the query asked for were left out by the cap (paging is not truncation). */
  truncated?: boolean;
}

/** Builds this node's entries of a list from the query parameters (plain JSON values) and a cap on entries. */
export type LocalListFn = (query: Record<string, unknown>, cap: number) => NodeListPage;

/** A node's reply on the wire. */
interface NodeReply {
  node: string;
  total?: number;
  items?: unknown[];
  truncated?: boolean;
  /** An error building the list (a BrokerError's message and status). */
  error?: { status: number; message: string };
}

/** The merged answer of a `scope=cluster` list. */
export interface ClusterListAnswer {
  scope: 'cluster';
  /** The nodes whose entries are in `items`, this one included, sorted. */
  nodes: string[];
  /** Live nodes that did not answer in time, and nodes gone (lease lapsed). */
  unreachableNodes: string[];
  /** Nodes that had more entries than they could send (per-node cap, reply size, the answer's cap). */
  truncatedNodes: string[];
  /** Sum of the answering nodes' totals. */
  total: number;
  /** Every answering node's entries, node by node (sorted by node id), each with its `node`. */
  items: Array<Record<string, unknown> & { node: string }>;
}

/** Where the rpc finds the cluster: filled by the views service from the cluster service. */
export interface RpcScope {
  clusterName: string;
  nodeId: string;
  /** Nodes to ask (live, not this one) and nodes known unreachable (gone, lapsed). */
  peers(): { live: string[]; unreachable: string[] };
}

export const rpcSubject = (clusterName: string, nodeId: string, what: string): string => `sy.${clusterName}.rpc.${nodeId}.${what}`;

const encoder = new TextEncoder();

/** JSON of a reply, entries dropped from the end until it fits `maxBytes`. */
export function boundedReply(reply: NodeReply, maxBytes: number): Uint8Array {
  let body = encoder.encode(JSON.stringify(reply));
  if (body.length <= maxBytes || !reply.items?.length) return body;
  // keep the share of entries that fits, then trim one by one (entries of a list have similar sizes)
  let keep = Math.floor((reply.items.length * maxBytes) / body.length);
  for (;;) {
    const cut: NodeReply = { ...reply, items: reply.items.slice(0, keep), truncated: true };
    body = encoder.encode(JSON.stringify(cut));
    if (body.length <= maxBytes || keep === 0) return body;
    keep = Math.max(0, Math.min(keep - 1, Math.floor((keep * maxBytes) / body.length)));
  }
}

/** This node's side of the rpc: the responder, and the fan-out for REST. */
export class ClusterRpc {
  private nc?: NatsConnection;
  private sub?: Subscription;

  constructor(
    private readonly log: Logger,
    /** The functions that build this node's entries of each list (registered by the REST route modules). */
    private readonly lists: ReadonlyMap<ClusterList, LocalListFn>,
  ) {}

  /** Answers this node's rpc subjects on `nc` (the cluster's connection); a new connection replaces the old. */
  bind(nc: NatsConnection | undefined, scope: RpcScope | undefined): void {
    if (nc === this.nc) return;
    this.unbind();
    if (!nc || !scope || nc.isClosed()) return;
    this.nc = nc;
    const prefix = rpcSubject(scope.clusterName, scope.nodeId, '');
    this.sub = nc.subscribe(`${prefix}*`, { callback: (err, msg) => (err ? this.log.debug({ err }, 'cluster rpc: subscription error') : this.answer(scope.nodeId, msg.subject.slice(prefix.length), msg)) });
  }

  unbind(): void {
    // the connection belongs to the membership: only our subscription is ours to end
    if (this.sub && this.nc && !this.nc.isClosed()) this.sub.unsubscribe();
    this.sub = undefined;
    this.nc = undefined;
  }

  private local(what: string, query: Record<string, unknown>, cap: number): NodeListPage {
    const fn = this.lists.get(what as ClusterList);
    if (!fn) throw new BrokerError(`no list '${what}' on this node`, 404);
    return fn(query, cap);
  }

  private answer(nodeId: string, what: string, msg: Msg): void {
    if (!msg.reply) return;
    let reply: NodeReply;
    try {
      const req = msg.json<{ query?: Record<string, unknown> }>();
      const page = this.local(what, req.query ?? {}, MAX_ITEMS_PER_NODE);
      reply = { node: nodeId, total: page.total, items: page.items, truncated: page.truncated === true };
    } catch (err) {
      const status = err instanceof BrokerError ? err.statusCode : 500;
      if (status >= 500) this.log.warn({ err, what }, 'cluster rpc: building a list failed');
      reply = { node: nodeId, error: { status, message: (err as Error).message } };
    }
    const max = Math.min(MAX_REPLY_BYTES, (this.nc?.info?.max_payload ?? MAX_REPLY_BYTES) - 1024);
    msg.respond(boundedReply(reply, max));
  }

  /**
   * A list across the cluster: this node's entries (built here), and every live peer's from a request on its
   * subject, all in parallel, bounded by `timeoutMs`. Without a connection (cluster off, isolated) every peer is
   * unreachable and the answer still holds this node's entries.
   */
  async list(what: ClusterList, query: Record<string, unknown>, scope: RpcScope, timeoutMs = RPC_TIMEOUT_MS): Promise<ClusterListAnswer> {
    const { live, unreachable } = scope.peers();
    const mine = this.local(what, query, MAX_ITEMS_PER_NODE); // a bad query fails here, before any request leaves
    const replies: NodeReply[] = [{ node: scope.nodeId, total: mine.total, items: mine.items, truncated: mine.truncated === true }];
    const missing = new Set(unreachable);
    const nc = this.nc;
    const payload = encoder.encode(JSON.stringify({ query }));
    await Promise.all(
      live.map(async (node) => {
        if (!nc || nc.isClosed()) return void missing.add(node);
        try {
          const r = (await nc.request(rpcSubject(scope.clusterName, node, what), payload, { timeout: timeoutMs })).json<NodeReply>();
          if (r.error) {
            // the same code and query on every node: an error there is that node's trouble, not the caller's
            this.log.debug({ node, error: r.error }, 'cluster rpc: a node could not build its list');
            missing.add(node);
          } else replies.push({ ...r, node });
        } catch (err) {
          this.log.debug({ err, node, what }, 'cluster rpc: no answer');
          missing.add(node);
        }
      }),
    );
    replies.sort((a, b) => (a.node < b.node ? -1 : a.node > b.node ? 1 : 0));
    const answer: ClusterListAnswer = { scope: 'cluster', nodes: [], unreachableNodes: [...missing].sort(), truncatedNodes: [], total: 0, items: [] };
    for (const r of replies) {
      const items = Array.isArray(r.items) ? r.items : [];
      answer.nodes.push(r.node);
      answer.total += typeof r.total === 'number' ? r.total : items.length;
      const room = MAX_CLUSTER_ITEMS - answer.items.length;
      if (r.truncated || items.length > room) answer.truncatedNodes.push(r.node);
      for (const it of items.slice(0, Math.max(0, room))) answer.items.push({ ...(it as Record<string, unknown>), node: r.node });
    }
    return answer;
  }
}
