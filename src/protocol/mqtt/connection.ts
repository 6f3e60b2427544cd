/**
 * One MQTT network connection: framing, dispatch to the packet handlers, the per-tick write batch, keep-alive and
 * closing with a reason. Transport-agnostic: the transport supplies a `Wire`. Not an actor: a connection is plain
 * state driven by socket events, so nothing per message goes through XState.
 */
import type { Message, Subscription } from '../../engine/index.js';
import type { MqttConfig } from '../../config/schema.js';
import type { LogLimiter } from '../../log-limit.js';
import type { Principal } from '../../security/types.js';
import { Framer, encodePacket, encodePublish, type OutboundProperties } from './codec.js';
import { dispatchFrame, handlePacket } from './handlers/index.js';
import { refuseLateConnect } from './handlers/connect.js';
import type { EncodeCache, WriteBatch } from './outbound.js';
import type { PacketParser, ParserSettings } from './parser.js';
import { CloseReason, MqttProtocolError, Reason } from './reason.js';
import { watchConnections } from './keep-alive.js';
import { stateEngine, storeOutbound, type MqttSession, type WillMessage } from './session.js';
import type { ConnState, EndpointView, MqttBrokerApi, MqttConn, PendingAuth, Wire } from './types.js';

export type { ConnState, Wire } from './types.js';

/** Per-endpoint counters (InterfaceStatusDTO). */
export class EndpointStats {
  bytesIn = 0;
  bytesOut = 0;
  messagesIn = 0;
  messagesOut = 0;
  errors = 0;
  readonly connections = new Set<MqttConnection>();
}

/** What a connection knows of its endpoint. */
export interface EndpointContext extends EndpointView {
  readonly name: string;
  readonly mqtt: MqttConfig;
  readonly connectTimeout: number;
  readonly stats: EndpointStats;
}

/**
 * The broker as a connection uses it (implemented by `MqttBroker`; declared here so this file does not import
 * broker.ts): the handlers' view plus the connection registry, the will and expiry scheduling, and the outbound
 * state every connection of the broker shares (write batch, encode-once cache, packet parser).
 */
export interface ConnectionOwner extends MqttBrokerApi {
  readonly connections: Map<number, MqttConnection>;
  connectionId(): number;
  readonly writes: WriteBatch;
  readonly encoded: EncodeCache;
  readonly parser: PacketParser;
  /** Rate-limited WARN lines of per-packet faults. */
  readonly faults: LogLimiter;
  publishWill(will: WillMessage, origin: string, clientId?: string): void;
  scheduleWill(s: MqttSession, will: WillMessage, origin: string): void;
  scheduleExpiry(s: MqttSession): void;
}

/**
 * The empty list every connection starts with for its outbound packets and its ordered acknowledgements, instead of
 * two arrays of its own (an idle connection keeps neither); frozen, so it is replaced, never pushed to.
 */
const NONE = Object.freeze([]) as unknown as never[];

const HIGH_WATER = 1 << 20; // bytes queued to a socket before deliveries wait for 'drain'
/** WARN lines per address and kind of fault that closes a connection, before one per interval (warnFault). */
const FAULT_BURST = 30;
const READ_AUTH = 1;
const READ_CONGESTED = 2;
const READ_TURN_WAIT = 4;
const READ_HELD = 8;
/**
 * Inbound QoS 1/2 PUBLISHes whose acknowledgement waits for the store (bytes of those packets, and how many): past
 * either cap the connection stops reading until half has been written, so a publisher faster than the store holds
 * at most this much here.
 */
const HELD_INBOUND_BYTES = 4 << 20;
const HELD_INBOUND_ACKS = 4096;

/**
 * Timer and setImmediate callbacks take the connection as their argument: one function for all connections instead
 * of a closure per connection (with esbuild's keepNames, which tsx and the bundle use, every closure also gets its
 * own property array for its renamed `name`, about 300 bytes; idle connections held several).
 */
function readTurnDue(c: MqttConnection): void {
  c.nextTurn();
}

function outboundProps(msg: Message, subscriptionId: number | number[] | undefined, now: number): OutboundProperties | undefined {
  let p: OutboundProperties | undefined;
  if (msg.payloadFormat !== undefined) (p ??= {}).payloadFormatIndicator = msg.payloadFormat;
  if (msg.expiresAt !== 0) (p ??= {}).messageExpiryInterval = Math.max(0, Math.ceil((msg.expiresAt - now) / 1000)); // [MQTT-3.3.2-6]
  if (msg.contentType !== undefined) (p ??= {}).contentType = msg.contentType;
  if (msg.responseTopic !== undefined) (p ??= {}).responseTopic = msg.responseTopic;
  if (msg.correlationData !== undefined) (p ??= {}).correlationData = msg.correlationData;
  if (msg.userProperties !== undefined) (p ??= {}).userProperties = msg.userProperties;
  if (subscriptionId !== undefined) (p ??= {}).subscriptionIdentifier = subscriptionId; // [MQTT-3.3.4-3]
  return p;
}

export class MqttConnection implements MqttConn {
  readonly kind = 'push' as const;
  readonly id: number;
  readonly connectedAt = Date.now();
  state: ConnState = 'new';
  protocolVersion = 4;
  v5 = false;
  clientId = '';
  principal: Principal | undefined;
  session: MqttSession | undefined;
  will: WillMessage | undefined;
  keepAlive = 0;
  /** Client's Receive Maximum capped by the endpoint (QoS > 0 in flight to the client). */
  sendQuota = 65535;
  /** Client's Maximum Packet Size (bytes); packets larger are not sent [MQTT-3.1.2-24]. */
  clientMaxPacket = 0x7fffffff;
  requestProblemInformation = true;
  lastTopic = '';
  private inAliases: Map<number, string> | undefined;
  /** Topic aliases the client set up (inbound); made on first use (most clients never set one). */
  get aliases(): Map<number, string> {
    return (this.inAliases ??= new Map());
  }
  /**
   * Topic aliases this server set up toward a v5 client (outbound), topic → alias, least recently used first; at most
   * `outAliasMax` (the client's Topic Alias Maximum capped by `clientMaximumTopicAlias`). Undefined: none are sent
   * [MQTT-3.1.2-27]. Per network connection, so a new connection starts with none [MQTT-3.3.2-7].
   */
  outAliases: Map<string, number> | undefined;
  outAliasMax = 0;
  /** Session Expiry Interval the v5 CONNECT asked for (before the endpoint's cap), for DISCONNECT's check. */
  connectExpiry = 0;
  /** The v5 CONNECT asked for a persistent session without persistent_session: the expiry stays 0 (DISCONNECT too). */
  persistenceDenied = false;
  /**
   * While the CONNECT waits for the cluster's answer (handlers/connect.ts inCluster): the refusal (CONNACK 0x88) the
   * connect timeout sends instead of closing without CONNACK. The session plane answers 0.3 s before the timeout, but
   * an event loop stalled past both deadlines can run an overdue sweep first (test/cluster/connect-timeout under load:
   * the connection closed without CONNACK after 5.02 s while the plane logged its 0x88).
   */
  onConnectTimeout: (() => void) | undefined = undefined;
  /** QoS 1/2 publishes received and not yet acknowledged. */
  inboundPending = 0;
  closeReason: string | undefined;
  lastRead = Date.now();
  lastWrite = 0;
  bytesRead = 0;
  bytesWritten = 0;
  /** QoS 0 messages dropped because the client's socket was full. */
  overflow = 0;
  /** Packets waiting while CONNECT is being authenticated. */
  queued: Array<[number, number, Buffer, number]> | undefined;
  /** Enhanced authentication method of the CONNECT (v5), e.g. 'SCRAM-SHA-256'; undefined without one. */
  authMethod: string | undefined;
  /** An enhanced-authentication exchange waiting for the client's AUTH (handlers/auth.ts). */
  authPending: PendingAuth | undefined;
  readonly framer: Framer;
  private out: Buffer[] = NONE;
  private outBytes = 0;
  private scheduled = false;
  private congested = false;
  /** Why reading is paused: READ_AUTH (CONNECT being authenticated) | READ_CONGESTED (outbound buffer full). */
  private readPause = 0;
  /** Started when the outbound buffer fills; disconnects when it is still full after writeStallTimeout. */
  private stallTimer: NodeJS.Timeout | undefined;
  /** In-order acknowledgements of inbound QoS 1/2 publishes (sent once the message is durable). */
  private acks: Array<{ buf: Buffer | undefined; ready: boolean; pub?: boolean; inbound?: number }> = NONE;
  /** Bytes of the inbound PUBLISHes whose acknowledgement waits in `acks` (see HELD_INBOUND_BYTES). */
  private heldInbound = 0;
  private heldInboundAcks = 0;
  /** Size of the packet being handled (its acknowledgement is weighed by it). */
  private frameBytes = 0;

  constructor(
    readonly broker: ConnectionOwner,
    readonly endpoint: EndpointContext,
    readonly wire: Wire,
  ) {
    this.id = broker.connectionId();
    this.framer = new Framer(this, endpoint.mqtt.maximumBufferSize);
    broker.connections.set(this.id, this);
    endpoint.stats.connections.add(this);
    const net = broker.host.network;
    net.totalConnections++;
    net.currentConnections++;
    if (net.currentConnections > net.peakConnections) net.peakConnections = net.currentConnections;
    // the connect timeout and keep alive are checked by the one sweep of all connections (keep-alive.ts)
    watchConnections(broker.connections);
  }

  get stopped(): boolean {
    return this.state === 'closed';
  }

  /** The packet type being parsed, for the error message of a malformed one. */
  parsingType = 'packet';
  /** How the shared parser reads this connection's packets: protocol version (and bridge mode) of its CONNECT. */
  parserSettings: ParserSettings | undefined;

  // ------------------------------------------------------------------------------------------------------------
  // Reading

  /** Bytes from the transport. */
  onData(chunk: Buffer): void {
    if (this.state === 'closed') return;
    this.lastRead = Date.now();
    this.bytesRead += chunk.length;
    this.endpoint.stats.bytesIn += chunk.length;
    this.broker.host.network.totalReadBytes += chunk.length;
    if (this.state !== 'connected' && this.bytesRead > this.endpoint.mqtt.maxPreAuthBytes) {
      // bounded memory before authentication: CONNECT, AUTH and whatever is pipelined behind them
      this.endpoint.stats.errors++;
      this.broker.log.debug({ connection: this.id, bytes: this.bytesRead }, 'more than maxPreAuthBytes before CONNACK; connection closed');
      this.close(CloseReason.PreAuthLimit);
      this.wire.destroy();
      return;
    }
    if (this.unframed !== undefined) {
      // read while the rest of the last read waits for its turn (a transport that delivers after pause()): it queues
      this.unframed = Buffer.concat([this.unframed, chunk]);
      return;
    }
    this.frameTurn(chunk);
  }

  /**
   * Frame at most `readTurnBytes` now; the rest of the read waits for a later turn of the event loop with the socket
   * paused. So a client that floods small packets is handled in bounded turns: other connections get their turn in
   * between, and the objects made for one turn's packets (promises, acknowledgements) are gone before the next turn,
   * instead of a whole 64 KiB read's worth living across several young-generation collections (and being promoted).
   */
  private frameTurn(chunk: Buffer): void {
    let now = chunk;
    // the endpoint's readTurnBytes, 16 KiB by default: each turn's deliveries leave in one write per subscriber, and
    // on loopback a write's fixed cost dominates (8 KiB turns spent 18 % of the broker's CPU in writeBuffer in the
    // QoS 0 pairs bench, --cpu-prof). CPU per message there (bench/mqtt/compare.ts): 8 KiB 0.593 µs, 16 KiB 0.544,
    // 32 KiB 0.513. The price of larger turns: a light client beside publishers that flood waits for their turns
    // (p50 at 5 000 msg/s beside 8 flooding QoS 0 pairs, load 8-13: 8 KiB 1.0 ms, 16 KiB 1.8 ms, 32 KiB 4.1 ms)
    const turn = this.endpoint.mqtt.readTurnBytes;
    if (chunk.length > turn) {
      now = chunk.subarray(0, turn);
      this.unframed = chunk.subarray(turn);
    }
    try {
      this.framer.push(now);
    } catch (err) {
      this.violation(err);
    }
    if (this.stopped) {
      this.unframed = undefined;
      return;
    }
    // CONNECT is being authenticated: read nothing more until it is decided (the peer sees TCP backpressure)
    if (this.queued !== undefined && (this.readPause & READ_AUTH) === 0) this.pauseReading(READ_AUTH);
    if (this.unframed !== undefined) {
      this.pauseReading(READ_TURN_WAIT);
      if (this.readPause === READ_TURN_WAIT) this.scheduleTurn();
    }
  }

  /** Bytes of the last read not framed yet (at most one read: the socket is paused while there are any). */
  private unframed: Buffer | undefined;
  private turnScheduled = false;

  private scheduleTurn(): void {
    if (this.turnScheduled) return;
    this.turnScheduled = true;
    setImmediate(readTurnDue, this);
  }

  /** The next turn of a read held back by `readTurnBytes` (scheduled by `scheduleTurn`). */
  nextTurn(): void {
    this.turnScheduled = false;
    if (this.stopped) return;
    // paused for another reason too (authentication, congestion): its resume schedules the next turn
    if (this.readPause !== READ_TURN_WAIT) return;
    const rest = this.unframed;
    this.unframed = undefined;
    if (rest !== undefined) this.frameTurn(rest);
    if (this.unframed === undefined) this.resumeReading(READ_TURN_WAIT);
  }

  private pauseReading(why: number): void {
    const was = this.readPause;
    this.readPause |= why;
    if (was === 0) {
      try {
        this.wire.pause();
      } catch {
        /* gone */
      }
    }
  }

  private resumeReading(why: number): void {
    if ((this.readPause & why) === 0) return;
    this.readPause &= ~why;
    if (this.readPause === READ_TURN_WAIT && this.state !== 'closed') this.scheduleTurn(); // the rest of a read first
    if (this.readPause === 0 && this.state !== 'closed') {
      try {
        this.wire.resume();
      } catch {
        /* gone */
      }
    }
  }

  /** One complete packet (called by the framer). */
  frame(type: number, flags: number, frame: Buffer, bodyOffset: number): void {
    if (this.state === 'closed') return; // closed by an earlier packet of the same read: the rest is not processed
    this.broker.host.network.packetsReceived++;
    if (this.queued !== undefined) {
      this.queued.push([type, flags, Buffer.from(frame), bodyOffset]);
      return;
    }
    this.frameBytes = frame.length;
    dispatchFrame(this, type, flags, frame, bodyOffset);
    this.frameBytes = 0;
  }

  /** A packet other than PUBLISH and the acknowledgements: parsed by the broker's mqtt-packet parser. */
  parse(frame: Buffer): void {
    this.broker.parser.parse(this, frame);
  }

  /** A packet as the parser gives it (called by `PacketParser.parse`). */
  onPacket(p: Record<string, unknown>): void {
    handlePacket(this, p);
  }

  /** Replay packets that arrived while CONNECT was being authenticated. */
  drainQueued(): void {
    const q = this.queued;
    this.queued = undefined;
    this.resumeReading(READ_AUTH);
    if (q === undefined) return;
    try {
      for (const [type, flags, frame, off] of q) {
        if (this.state === 'closed') return;
        this.broker.host.network.packetsReceived--;
        this.frame(type, flags, frame, off);
      }
    } catch (err) {
      this.violation(err);
    }
  }

  /**
   * A WARN line for a fault this client can repeat at will, rate-limited (src/log-limit.ts): one line per connection
   * and kind per interval (10 s), the others counted in a summary line. A fault that closes the connection is limited
   * per address instead (the next one comes on a new connection): FAULT_BURST lines, then one per interval.
   */
  warnFault(kind: string, fields: Record<string, unknown>, msg: string, scope: 'connection' | 'address' = 'connection'): void {
    if (scope === 'connection') this.broker.faults.warn(this.broker.log, kind, this.id, fields, msg, 1);
    else this.broker.faults.warn(this.broker.log, kind, this.wire.remoteAddress, fields, msg, FAULT_BURST);
  }

  /** A protocol violation closes this connection only, with the reason code (v5), and is counted. */
  violation(err: unknown): void {
    if (this.state === 'closed') return;
    this.endpoint.stats.errors++;
    if (err instanceof MqttProtocolError) {
      this.broker.log.debug({ connection: this.id, clientId: this.clientId, reason: err.reason }, err.message);
      this.close(CloseReason.ProtocolViolation, err.reason, err.message);
    } else {
      this.warnFault('internal-error', { err, connection: this.id, clientId: this.clientId, address: this.wire.remoteAddress }, 'MQTT connection failed', 'address');
      this.close(CloseReason.ProtocolViolation, Reason.UnspecifiedError, 'internal error');
    }
  }

  // ------------------------------------------------------------------------------------------------------------
  // Keep alive: closed when nothing arrives within 1.5 × the keep-alive interval [MQTT-3.1.2-24]

  startKeepAlive(seconds: number): void {
    this.keepAlive = seconds;
    // 3.1.1 keep alive 0: no keep-alive mechanism, so the server's own idle limit applies (maxIdleKeepAliveZero);
    // v5 clients always get a Server Keep Alive when maxServerKeepAlive is set
    const idleCap = seconds <= 0 && !this.v5 ? this.endpoint.mqtt.maxIdleKeepAliveZero : 0;
    this.keepAliveLimit = seconds > 0 ? seconds * 1500 : idleCap > 0 ? idleCap * 1000 : 0;
  }

  /** Milliseconds without a packet after which the connection is closed (startKeepAlive); 0: never. */
  private keepAliveLimit = 0;

  /**
   * The keep-alive sweep (keep-alive.ts, every SWEEP_MS): a client that has not sent CONNECT within the connect
   * timeout is closed [MQTT-3.1.4-?]; a connected one when nothing arrived within its limit.
   */
  sweep(now: number): void {
    const state = this.state;
    if (state === 'new' || state === 'connecting') {
      if (now - this.connectedAt < this.endpoint.connectTimeout) return;
      const reply = this.onConnectTimeout;
      this.onConnectTimeout = undefined;
      if (reply !== undefined) reply();
      else if (state === 'connecting') refuseLateConnect(this);
      else this.close(CloseReason.ConnectTimeout);
      return;
    }
    const limit = this.keepAliveLimit;
    if (state !== 'connected' || limit === 0 || now - this.lastRead < limit) return;
    this.endpoint.stats.errors++;
    if (this.keepAlive > 0) this.close(CloseReason.KeepAliveTimeout, Reason.KeepAliveTimeout, `no packet within 1.5 × keep alive (${this.keepAlive} s)`);
    else this.close(CloseReason.IdleTimeout);
  }

  // ------------------------------------------------------------------------------------------------------------
  // Writing: gathered per tick, one write per socket

  send(buf: Buffer): void {
    if (this.state === 'closed') return;
    if (this.out === NONE) this.out = [buf];
    else this.out.push(buf);
    this.outBytes += buf.length;
    this.broker.host.network.packetsSent++;
    if (!this.scheduled) {
      this.scheduled = true;
      this.broker.writes.add(this);
    }
  }

  /** Insert bytes before the ones queued since `mark` (SUBACK goes before the retained messages it caused). */
  sendAt(mark: number, buf: Buffer): void {
    if (this.state === 'closed') return;
    if (mark >= this.out.length) return this.send(buf);
    this.out.splice(mark, 0, buf);
    this.outBytes += buf.length;
    this.broker.host.network.packetsSent++;
  }

  get outMark(): number {
    return this.out.length;
  }

  sendPacket(packet: Record<string, unknown>): void {
    this.send(encodePacket(packet, this.protocolVersion));
  }

  flush(): void {
    this.scheduled = false;
    const n = this.out.length;
    if (n === 0) return;
    const buf = n === 1 ? this.out[0]! : this.broker.writes.join(this.out, this.outBytes);
    this.out = NONE;
    const bytes = this.outBytes;
    this.outBytes = 0;
    this.bytesWritten += bytes;
    this.lastWrite = Date.now();
    this.endpoint.stats.bytesOut += bytes;
    this.broker.host.network.totalWriteBytes += bytes;
    if (this.state === 'closed' && !this.closing) return;
    let ok = true;
    try {
      ok = this.wire.write(buf);
    } catch {
      ok = true;
    }
    if (!ok && !this.congested) {
      // write-side backpressure: stop reading this peer until its buffer drains; disconnect it if it stays full
      this.congested = true;
      this.pauseReading(READ_CONGESTED);
      if (this.stallTimer === undefined) {
        const ms = this.endpoint.mqtt.writeStallTimeout;
        this.stallTimer = setTimeout(() => {
          this.stallTimer = undefined;
          if (!this.congested || this.state === 'closed') return;
          this.endpoint.stats.errors++;
          this.broker.log.debug({ connection: this.id, clientId: this.clientId, ms }, 'outbound buffer full for writeStallTimeout; disconnected');
          this.close(CloseReason.WriteStalled, Reason.QuotaExceeded, `outbound buffer full for ${ms} ms`);
          this.wire.destroy(); // what is queued (the DISCONNECT too) cannot reach a peer that does not read
        }, ms);
        this.stallTimer.unref();
      }
    }
  }

  /** The transport drained its buffer: deliveries may go on. */
  onDrain(): void {
    if (!this.congested) return;
    this.congested = false;
    if (this.stallTimer !== undefined) clearTimeout(this.stallTimer);
    this.stallTimer = undefined;
    this.resumeReading(READ_CONGESTED);
    this.session?.resumeBlocked();
  }

  /**
   * Queue a packet that must go out after the ones queued here before it, once `durable` resolves (acknowledgements
   * once the message is stored; QoS 2 PUBLISHes of a persistent session once their packet id is stored). Without
   * `durable` it goes at once unless something before it is still waiting.
   */
  orderedAck(buf: Buffer, durable: Promise<void> | undefined, pub = false): void {
    if (durable === undefined) {
      if (this.acks.length === 0) this.send(buf);
      else {
        this.acks.push({ buf, ready: true, pub });
        this.heldBytes += buf.length;
        if (pub) this.queuedPublishes++;
      }
      return;
    }
    const inbound = pub ? 0 : this.frameBytes; // the acknowledgement of the PUBLISH being handled: it waits with it
    const entry = { buf: buf as Buffer | undefined, ready: false, pub, inbound };
    if (this.acks === NONE) this.acks = [entry];
    else this.acks.push(entry);
    this.heldBytes += buf.length;
    if (pub) this.queuedPublishes++;
    if (inbound > 0) {
      this.heldInbound += inbound;
      this.heldInboundAcks++;
      if (this.heldInbound > HELD_INBOUND_BYTES || this.heldInboundAcks > HELD_INBOUND_ACKS) this.pauseReading(READ_HELD);
    }
    durable.then(
      () => {
        entry.ready = true;
        this.releaseAcks();
      },
      (err: unknown) => {
        // not stored: no acknowledgement, the client sends it again after reconnecting
        this.warnFault('store-failure', { err, connection: this.id, clientId: this.clientId }, 'publish failed; closing the connection without acknowledging', 'address');
        entry.buf = undefined;
        entry.ready = true;
        this.releaseAcks();
        this.close(CloseReason.WriteError, Reason.UnspecifiedError, 'the message could not be stored');
      },
    );
  }

  private releaseAcks(): void {
    const a = this.acks;
    let i = 0;
    let released = 0;
    while (i < a.length && a[i]!.ready) {
      const b = a[i]!.buf;
      if (a[i]!.pub === true) this.queuedPublishes--;
      const w = a[i]!.inbound ?? 0;
      if (w > 0) {
        this.heldInbound -= w;
        this.heldInboundAcks--;
      }
      if (b !== undefined) {
        released += b.length;
        this.send(b);
      }
      i++;
    }
    if (i > 0) this.acks.splice(0, i);
    if ((this.readPause & READ_HELD) !== 0 && this.heldInbound <= HELD_INBOUND_BYTES / 2 && this.heldInboundAcks <= HELD_INBOUND_ACKS / 2) {
      this.resumeReading(READ_HELD);
    }
    if (released > 0) {
      const before = this.heldBytes;
      this.heldBytes -= released;
      // deliveries held back by bytes waiting here (not by the socket) go on
      if (before > HIGH_WATER && this.heldBytes <= HIGH_WATER && !this.congested) this.session?.resumeBlocked();
    }
  }

  /** Bytes of packets queued in `acks` (waiting for a store write), counted with `outBytes` against HIGH_WATER. */
  private heldBytes = 0;
  /** PUBLISHes queued in `acks`: while there are any, later deliveries queue behind them (PUBLISH order). */
  private queuedPublishes = 0;

  /** A delivery: at once, unless an earlier PUBLISH still waits in `acks` or this one must wait for `written`. */
  private sendPublish(bytes: Buffer, written: Promise<void> | undefined): void {
    if (written === undefined && this.queuedPublishes === 0) this.send(bytes);
    else this.orderedAck(bytes, written, true);
  }

  // ------------------------------------------------------------------------------------------------------------
  // Delivery (PushSink): called synchronously by the engine for every message routed to this session.

  deliver(sub: Subscription, msg: Message, destinationName: string): boolean {
    const s = this.session;
    if (this.state !== 'connected' || s === undefined) return false;
    const qos = sub.qos < msg.qos ? sub.qos : msg.qos;
    if (this.congested || this.outBytes + this.heldBytes > HIGH_WATER) {
      if (qos === 0) {
        // at most once: a QoS 0 message for a client whose socket is full is dropped (counted as overflow)
        this.overflow++;
        return true;
      }
      s.blocked.add(sub);
      return false;
    }
    let pid = 0;
    let dup = false;
    if (qos > 0) {
      if (s.outboundSize >= this.sendQuota) {
        s.blocked.add(sub); // Receive Maximum reached [MQTT-3.3.4-7]
        return false;
      }
      // the packet id is kept for a resend only by a persistent session (MqttSession.redeliver): one that is not ends
      // with this connection, so most QoS 1 subscribers make no key (a 16-digit id as text) per delivery and PUBACK
      const keep = s.persistent;
      const key = keep || s.hasRedeliveries ? `${sub.id}:${msg.id}` : '';
      const again = key === '' ? undefined : s.redeliver.get(key);
      if (again !== undefined && !s.outbound.has(again)) {
        pid = again;
        dup = true; // resent with DUP and its original packet id [MQTT-4.4.0-1]
        s.reserved.delete(pid);
      } else {
        pid = s.allocatePid();
        if (pid === 0) {
          s.blocked.add(sub);
          return false;
        }
      }
      s.outbound.set(pid, { sub, msgId: msg.id, qos: qos as 1 | 2, stage: 1 });
      if (keep) s.redeliver.set(key, pid);
    }
    const v5 = this.v5;
    let bytes: Buffer;
    if (v5 && (this.outAliases !== undefined || sub.subscriptionId !== undefined || msg.expiresAt !== 0 || msg.subscriptionIds !== undefined)) {
      // this connection's own bytes: per-delivery properties, or topic aliases
      const props = outboundProps(msg, msg.subscriptionIds ?? sub.subscriptionId, Date.now());
      bytes =
        this.outAliases === undefined
          ? encodePublish(destinationName, msg.payload, qos, msg.retain, dup, pid, true, props).bytes
          : this.aliased(destinationName, msg, qos, dup, pid, props);
    } else {
      const cacheBytes = this.broker.encoded.for(msg, destinationName);
      const slot = (v5 ? 6 : 0) + qos * 2 + (msg.retain ? 1 : 0);
      let t = cacheBytes[slot];
      let first = false;
      if (t === undefined) {
        t = encodePublish(destinationName, msg.payload, qos, msg.retain, false, 0, v5, v5 ? outboundProps(msg, undefined, 0) : undefined);
        cacheBytes[slot] = t;
        first = true;
      }
      if (qos === 0) bytes = t.bytes;
      else if (first && !dup) {
        // the first delivery of this message at this QoS sends the bytes just encoded with its own packet id; later
        // ones copy them and write theirs over it (so a message with one subscriber, the common case, is encoded
        // once and not copied: a buffer less per QoS 1 delivery). Never written again once handed to the socket.
        bytes = t.bytes;
        bytes.writeUInt16BE(pid, t.pidOffset);
      } else {
        bytes = Buffer.allocUnsafe(t.bytes.length);
        t.bytes.copy(bytes);
        bytes.writeUInt16BE(pid, t.pidOffset);
        if (dup) bytes[0] = bytes[0]! | 8;
      }
    }
    if (bytes.length > this.clientMaxPacket) {
      // too large for this client: discarded as if delivered [MQTT-3.1.2-25]
      if (qos > 0) {
        s.outbound.delete(pid);
        s.forgetRedelivery(sub.id, msg.id);
        queueMicrotask(() => sub.ack(msg.id));
      }
      return true;
    }
    this.endpoint.stats.messagesOut++;
    const engine = qos > 0 && sub.durable ? stateEngine(this.broker.host.engine(), s) : undefined;
    if (engine !== undefined) {
      // persistent session: the packet id goes to the store, so a resumed session resends this message with DUP
      // and this id even after a restart. QoS 2 waits for that write (the receiver de-duplicates by packet id);
      // QoS 1 does not (a lost record only means a resend with a new id, which QoS 1 allows).
      const written = storeOutbound(engine, s, pid, { s: 1, q: qos as 1 | 2, f: sub.filter, m: msg.id });
      this.sendPublish(bytes, qos === 2 ? written : undefined);
    } else this.sendPublish(bytes, undefined);
    return true;
  }

  /**
   * A PUBLISH with an outbound topic alias [MQTT-3.3.2-11]: a topic seen before goes as an empty topic name plus its
   * alias; a new one gets the next free alias, or, once all are taken, the least recently used one (the PUBLISH
   * carries the topic name, which re-maps that alias, MQTT 5 §3.3.2.3.4). A DUP resend always carries the topic name
   * so it stands on its own. The mapping is only changed when the packet fits the client's Maximum Packet Size
   * (a packet that does not is never sent [MQTT-3.1.2-25]).
   */
  private aliased(topic: string, msg: Message, qos: number, dup: boolean, pid: number, props: OutboundProperties | undefined): Buffer {
    const a = this.outAliases!;
    let alias = a.get(topic);
    const known = alias !== undefined;
    let evict: string | undefined;
    if (!known) {
      if (a.size < this.outAliasMax) alias = a.size + 1;
      else alias = a.get((evict = a.keys().next().value!));
    }
    const p = props ?? {};
    p.topicAlias = alias;
    const bytes = encodePublish(known && !dup ? '' : topic, msg.payload, qos, msg.retain, dup, pid, true, p).bytes;
    if (bytes.length <= this.clientMaxPacket) {
      a.delete(evict ?? topic); // most recently used goes last
      a.set(topic, alias!);
    }
    return bytes;
  }

  closed(sub: Subscription): void {
    this.session?.blocked.delete(sub);
  }

  // ------------------------------------------------------------------------------------------------------------
  // Closing

  private closing = false;

  /**
   * Close with a reason. A v5 client gets DISCONNECT with the reason code first (after CONNACK; before it, the
   * CONNACK carries the refusal). The socket closes once the bytes are written.
   */
  close(why: string, reasonCode?: number, reasonString?: string): void {
    if (this.state === 'closed') return;
    this.closeReason ??= why;
    if (reasonCode !== undefined && this.v5 && this.state === 'connected') {
      const props: Record<string, unknown> = {};
      if (reasonString && this.requestProblemInformation) props.reasonString = reasonString.slice(0, 200);
      let disconnect = encodePacket({ cmd: 'disconnect', reasonCode, properties: props }, 5);
      // no Reason String that would take DISCONNECT past the client's Maximum Packet Size [MQTT-3.14.2-3]
      if (disconnect.length > this.clientMaxPacket) disconnect = encodePacket({ cmd: 'disconnect', reasonCode, properties: {} }, 5);
      this.send(disconnect);
    }
    this.closing = true;
    this.flush();
    this.closing = false;
    this.state = 'closed';
    try {
      this.wire.end();
    } catch {
      /* already gone */
    }
    // a peer that does not close its side is cut after a moment (the timer goes when the transport closes, so a
    // closed connection is not kept alive by it: 96 clients at a time closed ~900 connections in those 2 s, 6 MB)
    this.destroyTimer ??= setTimeout(() => this.wire.destroy(), 2000).unref();
    this.cleanup(true);
  }

  private destroyTimer: NodeJS.Timeout | undefined;

  /** The transport closed (by the peer, an error, or after `close`). */
  onClose(): void {
    if (this.destroyTimer) clearTimeout(this.destroyTimer);
    this.destroyTimer = undefined;
    if (this.state !== 'closed') {
      this.closeReason ??= CloseReason.ClientClosed;
      this.state = 'closed';
    }
    this.cleanup(true);
  }

  private cleanedUp = false;
  private cleanup(abnormal: boolean): void {
    if (this.cleanedUp) return;
    this.cleanedUp = true;
    if (this.stallTimer) clearTimeout(this.stallTimer);
    this.stallTimer = undefined;
    if (this.authPending?.timer) clearTimeout(this.authPending.timer); // a re-authentication left unanswered
    this.authPending = undefined;
    const broker = this.broker;
    broker.connections.delete(this.id);
    this.endpoint.stats.connections.delete(this);
    const net = broker.host.network;
    net.currentConnections--;
    net.totalDisconnections++;
    const s = this.session;
    if (s === undefined || s.conn !== this) {
      return;
    }
    s.conn = undefined;
    s.disconnectedAt = Date.now();
    if (s.hasBlocked) s.blocked.clear();
    // in-flight PUBLISHes are sent again on reconnect with their ids (kept reserved); PUBREL-stage entries stay
    if (s.outboundSize > 0) {
      for (const [pid, o] of s.outbound) {
        if (o.stage !== 1) continue;
        s.outbound.delete(pid);
        s.reserved.add(pid);
      }
    }
    const will = abnormal ? this.will : undefined;
    this.will = undefined;
    if (will === undefined) broker.wills?.discarded(s.clientId); // cluster mode: its will record goes
    if (s.persistent) {
      for (const { sub } of s.subs.values()) sub.hibernate();
      broker.save(s);
      if (will !== undefined) broker.scheduleWill(s, will, s.sessionId);
      broker.scheduleExpiry(s);
    } else {
      if (will !== undefined) broker.publishWill(will, s.sessionId, s.clientId);
      broker.endSession(s);
    }
  }

  /** DISCONNECT received: normal close, no will unless asked (v5 0x04) [MQTT-3.14.4-3]. */
  clientDisconnected(sendWill: boolean): void {
    if (!sendWill) this.will = undefined;
    this.closeReason = CloseReason.ClientDisconnect;
    if (this.state === 'closed') return;
    this.flush();
    this.state = 'closed';
    try {
      this.wire.end();
    } catch {
      /* gone */
    }
    this.cleanup(true);
  }
}

