/**
 * The contract between an integration link (the link actor and the link manager, `src/links/link-manager.ts`) and
 * the protocol that carries its messages to the remote side: NATS (`nats-transport.ts`) or an MQTT bridge
 * (`mqtt-transport.ts`). The link owns lifecycle, namespaces, the persistent outbox, counters and the local engine;
 * a transport only moves messages and says when the remote side has taken them.
 *
 * Topics handed to a transport are already mapped into the remote namespace (`remoteNamespace` + rest of the local
 * topic), still in MQTT topic form (`/` separators, `+`/`#` wildcards); a NATS transport converts them to subjects.
 */

/** The optional fields a message carries, across a link (LinkMessage) as in the engine (MessageInit, Message). */
export type OptionalFields = Pick<LinkMessage, 'contentType' | 'correlationData' | 'userProperties' | 'responseTopic' | 'payloadFormat' | 'priority' | 'expiresAt'>;

/**
 * The optional fields of one message copied into another: a link's push (engine message to link message) and pull
 * (the reverse), and the cluster's hand-over replay. Set one by one, no spread, since this runs per message.
 */
export function copyOptionalFields(m: OptionalFields, to: Omit<OptionalFields, 'correlationData'> & { correlationData?: Buffer | Uint8Array }): void {
  if (m.contentType !== undefined) to.contentType = m.contentType;
  if (m.correlationData !== undefined) to.correlationData = m.correlationData;
  if (m.userProperties !== undefined) to.userProperties = m.userProperties;
  if (m.responseTopic !== undefined) to.responseTopic = m.responseTopic;
  if (m.payloadFormat !== undefined) to.payloadFormat = m.payloadFormat;
  if (m.priority !== undefined) to.priority = m.priority;
  if (m.expiresAt) to.expiresAt = m.expiresAt;
}

/** One message crossing a link, in either direction. */
export interface LinkMessage {
  /** Topic in the remote namespace (push) or as received from the remote side (pull), MQTT form. */
  topic: string;
  payload: Buffer;
  qos: 0 | 1 | 2;
  retain: boolean;
  contentType?: string;
  correlationData?: Buffer;
  userProperties?: Record<string, string | string[]>;
  responseTopic?: string;
  /** MQTT 5 payload format indicator: 1 = UTF-8 text (carried so a subscriber on the other side sees it). */
  payloadFormat?: 0 | 1;
  /** 0..10 (MAPS priority). */
  priority?: number;
  /** Epoch ms after which the message is void; 0 or absent = never. */
  expiresAt?: number;
  /** Server id of the broker where the message was first published (loop prevention). */
  originServer: string;
  /** How many links the message has crossed so far (the sender increments it). */
  hops: number;
  /**
   * Optional (added for NATS): a stable id of this message in the sender's outbox, the same on every retry. The NATS
   * transport sends it as JetStream `Nats-Msg-Id`, so a send retried after a lost PubAck is stored once, and the
   * receiving transport drops a redelivery of an id it has already handed over.
   */
  id?: string;
}

/**
 * Added for NATS: send() rejects with this when the message can never be taken by the transport (a topic with no
 * NATS subject form, see subject-mapping.ts): the link should drop and count it instead of retrying it forever.
 * Test with `isRefused(err)`: any error with `permanent === true` counts (a transport may throw its own class).
 */
export class LinkRefusedError extends Error {
  readonly permanent = true;
  constructor(message: string) {
    super(message);
    this.name = 'LinkRefusedError';
  }
}

export function isRefused(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { permanent?: unknown }).permanent === true;
}

/** Added for NATS: optional counters a transport keeps (shown with the link's status when present). */
export interface TransportCounters {
  /** Messages refused because their topic/subject has no form on the other side (both directions). */
  refused: number;
  /** Redeliveries dropped because the same message id was already handed to the receive handler. */
  duplicatesDropped: number;
}

/** What a transport reports about its connection; the link actor turns these into its connection state. */
export type TransportEvent =
  | { type: 'connected' }
  | { type: 'disconnected'; reason: string }
  /** `misbehaving`: the remote side broke a limit (nats-guard.ts, mqtt-guard.ts); the link backs off longer. */
  | { type: 'error'; reason: string; misbehaving?: boolean };

/** Options of one pull subscription on the remote side. */
export interface ReceiveOptions {
  /** Remote filter in MQTT form (namespace applied): `site1/#`, `+/temp`. */
  filter: string;
  qos: 0 | 1 | 2;
  /** Stable name for durable state on the remote side (JetStream durable consumer, MQTT client session). */
  durableName: string;
  /** Shared-subscription group: one receiver in the group gets each message (NATS queue group / shared durable). */
  shareGroup?: string;
  /**
   * The ids this durable consumer already handed over (received-ids.ts), kept by the link manager across reconnects
   * and restarts; a transport without it keeps its own for the connection.
   */
  seen?: import('./received-ids.js').ReceivedIds;
  /**
   * Called for each message the transport dropped without handing it over because this receiver was behind (NATS:
   * QoS 0 on `qos0Subjects`, at most once); the link counts them (`qos0Dropped`).
   */
  dropped?: () => void;
}

/**
 * A receive handler resolves once the message is stored or delivered locally; only then does the transport
 * acknowledge it to the remote side (JetStream ack, MQTT PUBACK/PUBCOMP). A rejection leaves it unacknowledged so
 * the remote side redelivers it. A handler that took the message before it returned (delivered to connected clients,
 * nothing to write) returns `HANDED`, which a transport may recognise to acknowledge without waiting for a promise.
 */
export type ReceiveHandler = (msg: LinkMessage) => Promise<void>;

/** What a receive handler returns for a message it has taken already (see ReceiveHandler): a resolved promise. */
export const HANDED: Promise<void> = Promise.resolve();

export interface LinkTransport {
  /** Connect once; rejects with a readable reason when the remote side cannot be reached or refuses. */
  connect(): Promise<void>;
  /**
   * Send one message. Resolves when the remote side has taken it: for QoS ≥ 1 after the remote acknowledgement
   * (JetStream PubAck / MQTT PUBACK or PUBCOMP), for QoS 0 once written. Rejects when not taken (the link keeps it
   * in its outbox and retries).
   */
  send(msg: LinkMessage): Promise<void>;
  /** Start receiving from the remote side; may be called several times (one per pull linkConfig). */
  receive(opts: ReceiveOptions, handler: ReceiveHandler): Promise<void>;
  /** Connection events after `connect()` resolved (loss, reconnect). */
  onEvent(listener: (e: TransportEvent) => void): void;
  /** Stop receiving and sending and close the connection; idempotent. Durable remote state is kept. */
  close(): Promise<void>;
}

// ------------------------------------------------------------------------------------------------------------------
// Additions (backward compatible; the link manager uses them, a transport may ignore them):

/** What the link manager hands a transport factory besides the link's configuration. */
export interface TransportContext {
  /** This broker's server id (`MessageDaemon.serverName`, generated once and kept in the store): origin marks. */
  serverId: string;
  /** A pino-style child logger for the link. */
  log: { info(obj: unknown, msg?: string): void; warn(obj: unknown, msg?: string): void; error(obj: unknown, msg?: string): void; debug(obj: unknown, msg?: string): void };
  /** ms a connection attempt may take (NetworkConnectionManager.globalConfig.connectTimeout). */
  connectTimeout?: number;
  /** Largest message (MQTT: packet) taken from the remote side, bytes (the link's maxMessageSize). */
  maxMessageSize?: number;
}

/** `createNatsTransport(link, ctx)` / `createMqttTransport(link, ctx)`: one transport per connection attempt. */
export type TransportFactory = (link: import('./link-config.js').LinkConfig, ctx: TransportContext) => LinkTransport;

/**
 * Optional: what the transport can say about its connection for `GET /api/v1/server/integration/{name}/connection`
 * (EndPointSummaryDTO). A transport that does not implement it is shown with the link's own figures.
 */
export interface TransportDescription {
  protocolName: string;
  protocolVersion: string;
  /** The client id / connection name used on the remote side. */
  clientId: string;
  /** The remote address actually connected to (host:port). */
  remoteAddress?: string;
}
export interface DescribedTransport extends LinkTransport {
  describe(): TransportDescription;
}
export function isDescribed(t: LinkTransport): t is DescribedTransport {
  return typeof (t as Partial<DescribedTransport>).describe === 'function';
}
