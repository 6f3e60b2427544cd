import { z } from 'zod';

/**
 * The `NetworkConnectionManager` configuration section: integration links to other brokers (MAPS
 * EndPointConnectionServerConfigDTO, maps-rest-api §4.6), one `integration:<name>` actor each. `data` is the list of
 * links, `globalConfig` what applies to all of them (reconnect backoff, outbox cap). The shipped default has no links.
 *
 * A link's `url` scheme picks the transport: `nats://` (NATS, JetStream for QoS >= 1), `mqtt://`, `mqtts://`, `ws://`,
 * `wss://` (an MQTT bridge to any MQTT 3.1.1/5 broker). docs/federation.md describes every key.
 */

const millis = z.number().int().nonnegative();

export const LINK_URL_PATTERN = /^(nats|tls|mqtt|mqtts|ws|wss):\/\/\S+$/i;

/** A MAPS-style topic namespace: a topic prefix in MQTT form (`site-a/`, `sensors/#`), or '' for the whole tree. */
const namespace = z
  .string()
  .max(1024)
  .refine((v) => !v.includes('\u0000'), 'must not contain NUL');

export const LinkConfigSchema = z
  .object({
    direction: z.enum(['push', 'pull']).describe('push: local messages go to the remote side; pull: remote messages come in'),
    localNamespace: namespace.describe("local topic filter (push) or prefix (pull), e.g. 'site-a/#' or 'site-a/'"),
    remoteNamespace: namespace.describe("remote topic prefix / filter, e.g. 'federation/site-a/#'"),
    selector: z.string().max(4096).optional().describe('JMS / SQL-92 selector on the messages that cross (push: evaluated locally)'),
    qualityOfService: z.number().int().min(0).max(2).default(1).describe('QoS of the link subscription and of the messages it forwards'),
    includeSchema: z.boolean().default(false).describe('MAPS key, accepted and shown; Switchyard sends the content type, not the schema'),
    namespaceFilters: z
      .array(
        z
          .object({
            namespace: namespace,
            depth: z.number().int().min(0).max(100).default(0),
            selector: z.string().max(4096).optional(),
            forcePriority: z.number().int().min(0).max(10).optional(),
          })
          .strict(),
      )
      .max(100)
      .default([])
      .describe('MAPS key, accepted and shown; not applied by Switchyard'),
    transformer: z.array(z.unknown()).max(100).optional().describe('MAPS key, accepted and shown; not applied'),
    statistics: z.unknown().optional(),
    linkProperties: z.record(z.string(), z.unknown()).optional(),
    shareGroup: z.string().min(1).max(256).optional().describe('pull: receive as a member of this shared group (NATS queue group / shared durable)'),
  })
  .strict();

export const LinkAuthConfigSchema = z
  .object({
    username: z.string().max(1024).optional(),
    password: z.string().max(4096).optional(),
    sessionId: z.string().max(1024).optional(),
    tokenGenerator: z.string().max(1024).optional(),
    tokenConfig: z.record(z.string(), z.unknown()).optional(),
  })
  .strict();

export const WillConfigSchema = z
  .object({
    topic: z.string().min(1).max(65535),
    payload: z.string().max(1048576).default(''),
    payloadEncoding: z.enum(['string', 'base64']).default('string'),
    qos: z.number().int().min(0).max(2).default(0),
    retain: z.boolean().default(false),
    delayInterval: z.number().int().min(0).max(4294967295).default(0).describe('s (MQTT 5 will delay)'),
    messageExpiryInterval: z.number().int().min(0).max(4294967295).default(0).describe('s; 0 = none'),
    contentType: z.string().max(1024).optional(),
    payloadFormatIndicator: z.boolean().default(false),
  })
  .strict();

/** Protocol options of a link's transport: `type` plus what that transport reads (docs/federation.md). */
export const LinkProtocolConfigSchema = z
  .object({
    type: z.string().min(1).max(64),
  })
  .catchall(z.unknown());

export const LinkBackoffSchema = z
  .object({
    initial: millis.min(10).default(1000).describe('ms before the first reconnect attempt'),
    max: millis.min(10).default(30000).describe('ms: the longest wait between attempts (the cap); also how long a started link may be unestablished before /health warns'),
    jitter: z.number().min(0).max(1).default(0.2).describe('fraction of each wait taken away at random (0 = exact doubling)'),
  })
  .strict();

export const EndPointConnectionServerConfigSchema = z
  .object({
    schemaLoadingVersion: z.number().int().min(0).max(10).default(1),
    name: z
      .string()
      .trim()
      .min(1, 'name is required')
      .max(256)
      .refine((v) => !/[\u0000-\u001f]/.test(v), 'must not contain control characters'),
    url: z
      .string()
      .max(2048)
      .regex(LINK_URL_PATTERN, 'url must be nats://, tls://, mqtt://, mqtts://, ws:// or wss:// followed by host:port'),
    protocolConfigs: z.array(LinkProtocolConfigSchema).max(10).default([]),
    authConfig: LinkAuthConfigSchema.optional(),
    linkTransformation: z.unknown().optional(),
    linkConfigs: z.array(LinkConfigSchema).max(100).default([]),
    pluginConnection: z.boolean().default(false),
    cost: z.number().int().min(0).max(1000000).default(10),
    groupName: z.string().max(256).optional(),
    willConfig: WillConfigSchema.optional(),
    autoStart: z.boolean().default(true).describe('start the link when the server boots'),
    backoff: LinkBackoffSchema.optional().describe('overrides globalConfig.backoff for this link'),
    maxOutbox: z.number().int().min(1).max(10000000).optional().describe('overrides globalConfig.maxOutbox for this link'),
    maxOutboxBytes: z.number().int().min(1024).max(17179869184).optional().describe('overrides globalConfig.maxOutboxBytes for this link'),
    maxMessageSize: z.number().int().min(1024).max(268435456).optional().describe('overrides globalConfig.maxMessageSize for this link'),
  })
  .strict();

export const NetworkConnectionManagerSchema = z
  .object({
    data: z
      .array(EndPointConnectionServerConfigSchema)
      .max(1000)
      .default([])
      .refine((list) => new Set(list.map((e) => e.name.toLowerCase())).size === list.length, 'integration names must be unique (case-insensitively)'),
    globalConfig: z
      .object({
        backoff: LinkBackoffSchema.prefault({}),
        maxOutbox: z
          .number()
          .int()
          .min(1)
          .max(10000000)
          .default(100000)
          .describe(
            'messages one push linkConfig may hold in its persistent outbox (waiting + sent unacknowledged); when full, QoS >= 1 publishes that would enter it are refused to their publisher (MQTT 5 PUBACK 0x97, REST 429) and QoS 0 copies replace the oldest QoS 0 copy',
          ),
        maxOutboxBytes: z
          .number()
          .int()
          .min(1024)
          .max(17179869184)
          .default(268435456)
          .describe(
            'bytes one push linkConfig may hold in its outbox (counted as DestinationManager.maxQueuedBytes counts them; the outbox is kept in memory as well as in the store): the outbox is full at maxOutbox messages or at this many bytes, whichever comes first',
          ),
        inFlight: z.number().int().min(1).max(65535).default(256).describe('messages a push linkConfig may have sent and not yet acknowledged by the remote side'),
        connectTimeout: z.number().int().min(100).max(600000).default(10000).describe('ms a connection attempt may take'),
        maxMessageSize: z
          .number()
          .int()
          .min(1024)
          .max(268435456)
          .default(10485760)
          .describe(
            'bytes: the largest message a link takes from the remote side (NATS: lowered to the server\'s max_payload; MQTT: the largest packet, sent as Maximum Packet Size in an MQTT 5 CONNECT); a peer that sends more is disconnected, with the reason in lastError, and backed off',
          ),
        outboxWriteBehind: z
          .number()
          .int()
          .min(0)
          .max(10000)
          .default(100)
          .describe(
            'ms a message sent over an established link may wait for the remote acknowledgement before it is written to the persistent outbox (a link that keeps up writes nothing; its publisher is acknowledged once the remote side or the store has the message); 0: written when sent',
          ),
      })
      .strict()
      .prefault({}),
  })
  .strict();

export type NetworkConnectionManagerConfig = z.output<typeof NetworkConnectionManagerSchema>;
export type LinkConfig = z.output<typeof EndPointConnectionServerConfigSchema>;
export type LinkDirectionConfig = z.output<typeof LinkConfigSchema>;
export type LinkBackoff = z.output<typeof LinkBackoffSchema>;
export type WillConfig = z.output<typeof WillConfigSchema>;
