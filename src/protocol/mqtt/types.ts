/**
 * What the MQTT packet handlers (handlers/) see of a connection and of the broker: two small interfaces, so the
 * handlers depend on these types and not on `connection.ts` / `broker.ts` (which import the handlers). The
 * concrete classes (`MqttConnection`, `MqttBroker`) implement them; the import graph of this folder has no cycle
 * (`npx tsx scripts/import-cycles.ts src --only src/protocol/mqtt`).
 */
import type { Logger } from 'pino';
import type { MqttConfig } from '../../config/schema.js';
import type { Engine, PushSink } from '../../engine/index.js';
import type { NetworkCounters } from '../../runtime/runtime.js';
import type { AuthExchange, Principal, SecurityService } from '../../security/types.js';
import type { Sub } from '../../store/store.js';
import type { EncodeCache } from './outbound.js';
import type { ParserSettings } from './parser.js';
import type { MqttSession, WillMessage } from './session.js';

/** What a transport gives a connection. */
export interface Wire {
  /** Returns false when the transport's buffer is full (wait for `onDrain`). */
  write(buf: Buffer): boolean;
  /** Close after what was written is flushed. */
  end(): void;
  destroy(): void;
  /** Stop reading from the peer (backpressure) / read again. */
  pause(): void;
  resume(): void;
  /** The client's address: the socket peer's, or the one a PROXY protocol header gave (`proxied`). */
  readonly remoteAddress: string;
  readonly remotePort: number;
  /** 'tcp', 'ssl', 'ws', 'wss'. */
  readonly transport: string;
  /** The address came from a PROXY protocol header (no lockout exemption applies to it). */
  readonly proxied?: boolean;
  /** With `proxied`: the proxy's own address and port (`host:port`), as GET /api/v1/server/connections shows it. */
  readonly proxyAddress?: string;
  /** Fires when the transport closed (a password check still waiting for its turn is dropped). */
  readonly closed?: AbortSignal;
}

/** Per-endpoint counters the handlers add to (InterfaceStatusDTO). */
export interface EndpointCounters {
  bytesIn: number;
  bytesOut: number;
  messagesIn: number;
  messagesOut: number;
  errors: number;
}

/** What a handler knows of the endpoint a connection came in on. */
export interface EndpointView {
  readonly name: string;
  readonly mqtt: MqttConfig;
  readonly connectTimeout: number;
  readonly stats: EndpointCounters;
}

/** What the broker is given by the runtime (src/protocol/mqtt/mqtt-broker.service.ts). */
export interface BrokerHost {
  engine(): Engine | undefined;
  security(): SecurityService;
  readonly serverName: string;
  readonly network: NetworkCounters;
  readonly log: Logger;
  /** The store's `sessions` sublevel (undefined: sessions are not persisted). */
  readonly sessions?: Sub;
  /** Cap of every MQTT subscription (DestinationManager.maxQueuedMessages); default MAX_QUEUED. */
  readonly maxQueuedMessages?: number;
}

/**
 * The cluster's hooks (src/cluster/wills.ts, src/cluster/admission.ts), set on the broker only in cluster mode: the
 * wills of this node's clients kept in JetStream, and what a node cut off from NATS refuses.
 */
export interface ClusterWillRegistry {
  /** A client connected here: its will (or none) replaces what the cluster held under its client id. */
  connected(clientId: string, will: WillMessage | undefined, sessionExpiry: number, principal: Principal | undefined): void;
  /** Its connection ended and no will is to be published (clean DISCONNECT). */
  discarded(clientId: string): void;
  /** The will is due here: true when the registry takes it (it calls `publish` unless the cluster published it already). */
  publishing(clientId: string, publish: () => void): boolean;
}

export interface ClusterAdmission {
  /** Why this node refuses cluster changes now (undefined while it is a member, or the cluster is off). */
  refusal(): string | undefined;
}

/** The broker as the handlers use it: the session registry and session lifecycle. */
/** What the cluster's session plane answers a CONNECT: go on (after `delayMs`, a client that keeps displacing itself), or refuse. */
export type ClaimResult = { ok: true; delayMs?: number } | { ok: false; reason: string };

/**
 * The cluster's session plane (src/cluster/sessions.ts) as the broker sees it: asked who holds a session at CONNECT
 * (`claim`), told when a persistent session's state changes (`saved`) and when a session ends (`ended`).
 */
export interface SessionCluster {
  /**
   * `budgetMs`: how long the CONNECT may still wait (its endpoint's connect timeout less what has passed; a connection
   * still waiting then is closed without CONNACK): the answer, a refusal if need be, comes within it.
   */
  claim(clientId: string, opts: { persistent: boolean; cleanStart: boolean; budgetMs?: number }): Promise<ClaimResult>;
  saved(s: MqttSession): void;
  ended(s: MqttSession): void;
}

export interface MqttBrokerApi {
  /** Cluster mode only: the will registry and the partition policy's admission. */
  wills?: ClusterWillRegistry;
  admission?: ClusterAdmission;
  /** Cluster mode only: the session plane (src/cluster/sessions.ts). */
  cluster?: SessionCluster;
  readonly host: BrokerHost;
  readonly log: Logger;
  /** Client id → session. */
  readonly sessions: Map<string, MqttSession>;
  /** Cap of every MQTT subscription. */
  readonly maxQueued: number;
  /** Write the session's record (batched per tick). */
  save(s: MqttSession): void;
  /** The session ends now (subscriptions, held messages, pending will published). */
  endSession(s: MqttSession, expired?: boolean): void;
  /** A new connection took the session over: a delayed will is not sent. */
  cancelWill(s: MqttSession): void;
  /** The encode-once cache of outbound PUBLISHes (the PUBLISH handler seeds it with an inbound QoS 0 packet). */
  readonly encoded: EncodeCache;
}

/** An enhanced-authentication exchange waiting for the client's AUTH 0x18 (handlers/auth.ts). */
export interface PendingAuth {
  exchange: AuthExchange;
  /** Re-authentication of a connected client (otherwise the CONNECT's exchange). */
  reauth: boolean;
  /** Initial exchange: what to do when it succeeds or fails (CONNACK). */
  succeeded?: (principal: Principal, ack: { authenticationMethod: string; authenticationData: Buffer }) => void;
  refuse?: (reason: number, why: string) => void;
  timer?: NodeJS.Timeout;
}

export type ConnState = 'new' | 'connecting' | 'connected' | 'closed';

/**
 * One MQTT network connection as the handlers use it (implemented by `MqttConnection`): its negotiated state,
 * its session, and the ways to answer (send now, in order after a store write, close with a reason). It is the
 * engine's push sink for the session's subscriptions.
 */
export interface MqttConn extends PushSink {
  readonly id: number;
  readonly broker: MqttBrokerApi;
  readonly endpoint: EndpointView;
  /** When the socket was accepted (ms): the connect timeout counts from here. */
  readonly connectedAt: number;
  readonly wire: Wire;
  state: ConnState;
  protocolVersion: number;
  v5: boolean;
  clientId: string;
  principal: Principal | undefined;
  session: MqttSession | undefined;
  will: WillMessage | undefined;
  /** Client's Receive Maximum capped by the endpoint. */
  sendQuota: number;
  /** Client's Maximum Packet Size (bytes). */
  clientMaxPacket: number;
  requestProblemInformation: boolean;
  /** Topic aliases the client set up (inbound). */
  readonly aliases: Map<number, string>;
  /** The topic name of the client's last PUBLISH, validated ('' for none): decodePublish's memo. */
  lastTopic: string;
  /** Topic aliases toward a v5 client, topic → alias (undefined: none are sent). */
  outAliases: Map<string, number> | undefined;
  outAliasMax: number;
  /** Session Expiry Interval the v5 CONNECT asked for (before the endpoint's cap). */
  connectExpiry: number;
  /** The v5 CONNECT asked for a persistent session without persistent_session. */
  persistenceDenied: boolean;
  /** While the CONNECT waits for the cluster's answer: the refusal sent should the connect timeout come first. */
  onConnectTimeout: (() => void) | undefined;
  /** QoS 1/2 publishes received and not yet acknowledged. */
  inboundPending: number;
  closeReason: string | undefined;
  /** Packets waiting while CONNECT is being authenticated. */
  queued: Array<[number, number, Buffer, number]> | undefined;
  authMethod: string | undefined;
  authPending: PendingAuth | undefined;
  /** The packet type being parsed (for the error message of a malformed one). */
  parsingType: string;
  /** How the shared parser reads this connection's packets after CONNECT (protocol level, bridge mode). */
  parserSettings: ParserSettings | undefined;
  /** Position in the outbound queue (for `sendAt`). */
  readonly outMark: number;
  send(buf: Buffer): void;
  /** Insert bytes before the ones queued since `mark`. */
  sendAt(mark: number, buf: Buffer): void;
  sendPacket(packet: Record<string, unknown>): void;
  /** Send `buf` after what was queued before it, once `durable` resolves. */
  orderedAck(buf: Buffer, durable: Promise<void> | undefined, pub?: boolean): void;
  close(why: string, reasonCode?: number, reasonString?: string): void;
  /**
   * A WARN line for a per-packet fault, rate-limited (src/log-limit.ts): one line per connection and `kind` per
   * interval; `'address'` for a fault that closes the connection (a burst of lines per address, then one per interval).
   */
  warnFault(kind: string, fields: Record<string, unknown>, msg: string, scope?: 'connection' | 'address'): void;
  startKeepAlive(seconds: number): void;
  /** Replay packets that arrived while CONNECT was being authenticated. */
  drainQueued(): void;
  /** DISCONNECT received: normal close. */
  clientDisconnected(sendWill: boolean): void;
  /** Parse a non-PUBLISH frame with mqtt-packet; the packet comes back through `handlePacket`. */
  parse(frame: Buffer): void;
}
