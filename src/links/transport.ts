/**
 * The contract between an integration link (the link actor and the link manager, `src/links/link-manager.ts`) and
 * the protocol that carries its messages to the remote side: NATS (`nats-transport.ts`) or an MQTT bridge
 * (`mqtt-transport.ts`). The link owns lifecycle, namespaces, the persistent outbox, counters and the local engine;
 * a transport only moves messages and says when the remote side has taken them.
 *
 * Topics handed to a transport are already mapped into the remote namespace (`remoteNamespace` + rest of the local
 * topic), still in MQTT topic form (`/` separators, `+`/`#` wildcards); a NATS transport converts them to subjects.
 */

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
  /** 0..10 (MAPS priority). */
  priority?: number;
  /** Epoch ms after which the message is void; 0 or absent = never. */
  expiresAt?: number;
  /** Server id of the broker where the message was first published (loop prevention). */
  originServer: string;
  /** How many links the message has crossed so far (the sender increments it). */
  hops: number;
}

/** What a transport reports about its connection; the link actor turns these into its connection state. */
export type TransportEvent =
  | { type: 'connected' }
  | { type: 'disconnected'; reason: string }
  | { type: 'error'; reason: string };

/** Options of one pull subscription on the remote side. */
export interface ReceiveOptions {
  /** Remote filter in MQTT form (namespace applied): `site1/#`, `+/temp`. */
  filter: string;
  qos: 0 | 1 | 2;
  /** Stable name for durable state on the remote side (JetStream durable consumer, MQTT client session). */
  durableName: string;
  /** Shared-subscription group: one receiver in the group gets each message (NATS queue group / shared durable). */
  shareGroup?: string;
}

/**
 * A receive handler resolves once the message is stored or delivered locally; only then does the transport
 * acknowledge it to the remote side (JetStream ack, MQTT PUBACK/PUBCOMP). A rejection leaves it unacknowledged so
 * the remote side redelivers it.
 */
export type ReceiveHandler = (msg: LinkMessage) => Promise<void>;

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
