import { z } from 'zod';

/**
 * Config section `Cluster` (Switchyard's own; MAPS has no cluster): brokers that share a NATS cluster with JetStream
 * hold leases in one JetStream KV bucket and see each other as members (docs/cluster.md). Off by default: a broker
 * without this section behaves exactly as a single broker always has, and opens no NATS connection for it.
 */
const name = (what: string) =>
  z
    .string()
    .min(1)
    .max(64)
    .regex(/^[A-Za-z0-9_-]+$/, `${what}: letters, digits, '_' and '-' only (it becomes part of a JetStream name or key)`);

const natsUrl = z
  .string()
  .min(1)
  .max(1024)
  .refine((u) => /^(nats|tls):\/\/[^\s/]+(:\d+)?\/?$/i.test(u), 'a NATS server URL: nats://host:port or tls://host:port');

export const ClusterSchema = z
  .object({
    enabled: z.boolean().default(false).describe('join the cluster: hold a lease in JetStream and see the other brokers; default off (a single broker)'),
    servers: z
      .array(natsUrl)
      .max(64)
      .default(['nats://127.0.0.1:4222'])
      .describe('NATS servers of the cluster (JetStream enabled); the client connects to one and fails over to the others'),
    clusterName: name('clusterName').default('main').describe("the cluster's name: the leases live in the KV bucket switchyard_<clusterName>_nodes"),
    nodeId: name('nodeId')
      .optional()
      .describe('this broker in the cluster; default: generated on first start and kept in {dataDirectory}/cluster-node.json'),
    replicas: z.number().int().min(1, 'JetStream replicas: 1 to 5').max(5, 'JetStream replicas: 1 to 5').default(3).describe('replicas of the cluster bucket (JetStream R1..R5); at most the number of NATS servers'),
    leaseSeconds: z.number().min(1).max(3600).default(15).describe('s without a heartbeat after which a node is reported gone'),
    heartbeatSeconds: z.number().min(0.1).max(600).default(3).describe('s between two writes of this node\'s lease; must be less than leaseSeconds'),
    restAddress: z
      .string()
      .max(1024)
      .regex(/^https?:\/\/\S+$/i, 'an http:// or https:// URL')
      .optional()
      .describe("the REST API's address as the other nodes and operators reach it; default: from RestApi.hostnames and the bound port"),
    sessionTakeoverWaitSeconds: z
      .number()
      .min(0.1)
      .max(60)
      .default(2)
      .describe('s a CONNECT waits for the broker that held the session to release it (live but silent: CONNACK 0x88 Server unavailable, the client retries)'),
    sessionRecordMaxBytes: z
      .number()
      .int()
      .min(1024)
      .max(1024 * 1024)
      .default(256 * 1024)
      .describe('largest session record in the sessions bucket (its max value size); a larger session stays on this broker only (WARN)'),
    heldMaxBytes: z
      .number()
      .int()
      .min(1024 * 1024)
      .max(2 ** 40)
      .default(1024 * 1024 * 1024)
      .describe('bytes of the stream holding QoS >= 1 messages and packet-id state of persistent sessions; when full, publishes to those sessions are refused'),
    messages: z
      .object({
        enabled: z.boolean().default(true).describe('messages published on any node reach the subscribers of every node (the internal integration link `cluster`)'),
        maxAgeSeconds: z
          .number()
          .int()
          .min(60)
          .max(365 * 86400)
          .default(86400)
          .describe('s a message stays in the stream SY_<clusterName>_MSG: how long a node may be down and still catch up'),
        maxBytes: z
          .number()
          .int()
          .min(1048576)
          .max(1099511627776)
          .default(1073741824)
          .describe('bytes the stream SY_<clusterName>_MSG holds at most (the oldest messages are discarded first)'),
      })
      .strict()
      .prefault({})
      .describe('the message plane across nodes (docs/cluster.md, "Messages across nodes")'),
    user: z.string().max(1024).optional().describe('NATS user'),
    password: z.string().max(1024).optional().describe('NATS password'),
  })
  .strict()
  .refine((c) => c.heartbeatSeconds < c.leaseSeconds, { message: 'heartbeatSeconds must be less than leaseSeconds', path: ['heartbeatSeconds'] })
  .refine((c) => !c.enabled || c.servers.length > 0, { message: 'at least one NATS server when enabled', path: ['servers'] });

export type ClusterConfig = z.output<typeof ClusterSchema>;
