/**
 * CONNECT (3.1.1 §3.1, 5 §3.1): protocol level, client id, authentication, authorisation (connect, and
 * persistent_session for a session that outlives the connection), session present / clean start, session expiry,
 * keep alive, will, receive maximum, maximum packet size, topic alias maximum; answered by CONNACK.
 */
import { randomBytes } from 'node:crypto';
import { validateTopicName } from '../../../engine/index.js';
import { AddressBlockedError } from '../../../security/address-limits.js';
import { HashAbortedError, ServerBusyError } from '../../../security/hash-pool.js';
import { AuthenticationFailedError, type AuthContext, type Principal } from '../../../security/types.js';
import type { MqttConn } from '../types.js';
import { encodeConnackV3, encodePacket, type InboundConnect } from '../codec.js';
import { CloseReason, ConnackV3, MqttProtocolError, Reason } from '../reason.js';
import { MqttSession, type WillMessage } from '../session.js';
import { beginEnhancedAuth } from './auth.js';

/** The CONNECT as the codec decodes it (`decodeConnect`); bridge mode is read by the parser settings, not here. */
export type ConnectPacket = Omit<InboundConnect, 'bridgeMode'>;

/**
 * A CONNECT naming a protocol level the server does not speak gets CONNACK "unacceptable protocol version"
 * (3.1.1 return code 1 [MQTT-3.1.2-2]) and the connection closes. Returns true when it did so.
 */
export function refuseBadProtocolLevel(conn: MqttConn, frame: Buffer, body: number): boolean {
  if (frame.length < body + 2) return false;
  const nameLen = frame.readUInt16BE(body);
  const at = body + 2 + nameLen;
  if (at >= frame.length) return false;
  const name = frame.toString('utf8', body + 2, at);
  if (name !== 'MQTT' && name !== 'MQIsdp') return false; // the parser reports a bad protocol name [MQTT-3.1.2-1]
  const level = frame[at]! & 0x7f;
  if (level === 3 || level === 4 || level === 5) return false;
  conn.endpoint.stats.errors++;
  conn.send(Buffer.from([0x20, 0x02, 0x00, ConnackV3.UnacceptableProtocolVersion]));
  conn.close(CloseReason.ProtocolViolation);
  return true;
}

/**
 * Reason codes a v5 CONNACK may carry for a refusal (5 §3.2.2.2): a malformed or otherwise refused CONNECT is
 * answered with one of these before the connection closes (5 §4.13.1); any other code of the error becomes 0x81.
 */
const CONNACK_REFUSALS = new Set([0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8a, 0x8c, 0x90, 0x95, 0x97, 0x99, 0x9a, 0x9b, 0x9c, 0x9d, 0x9f]);

/**
 * A first CONNECT the parser or `handleConnect` found malformed or in error (the caller closes the connection and
 * rethrows): an MQTT 5 client gets CONNACK with the reason code first, e.g. 0x81 Malformed Packet for bytes its flags
 * do not announce [MQTT-3.1.4-1] (5 §4.13.1: "it MAY send a CONNACK ... with a Reason Code of 0x80 or greater
 * before closing"); 3.1 and 3.1.1 have no return code for it: the connection just closes [MQTT-3.1.4-1].
 */
export function refuseBrokenConnect(conn: MqttConn, frame: Buffer, body: number, err: unknown): void {
  if (!(err instanceof MqttProtocolError) || conn.state === 'closed' || conn.session !== undefined) return;
  if (frame.length < body + 2) return;
  const at = body + 2 + frame.readUInt16BE(body);
  if (at >= frame.length || (frame[at]! & 0x7f) !== 5) return;
  const reasonCode = CONNACK_REFUSALS.has(err.reason) ? err.reason : Reason.MalformedPacket;
  conn.send(encodePacket({ cmd: 'connack', sessionPresent: false, reasonCode, properties: {} }, 5));
}

/** Optional CONNACK properties, in the order they are left out to fit the client's Maximum Packet Size. */
const DROPPABLE = [
  'reasonString', // [MQTT-3.2.2-19]
  'userProperties', // [MQTT-3.2.2-20]
  // their absence means what they say (5 §3.2.2.3.11..13, §3.2.2.3.5: "If not present, then ... are supported")
  'wildcardSubscriptionAvailable',
  'subscriptionIdentifiersAvailable',
  'sharedSubscriptionAvailable',
  'retainAvailable',
  // absent: the client sends no topic aliases (5 §3.2.2.3.8) and gets no response information (5 §3.2.2.3.15)
  'topicAliasMaximum',
  'responseInformation',
  // last: absent, the client assumes 65 535 and no limit; the server still enforces its own (0x93, 0x95)
  'receiveMaximum',
  'maximumPacketSize',
] as const;

/**
 * A v5 CONNACK that fits the client's Maximum Packet Size [MQTT-3.1.2-24]: optional properties are left out, in the
 * order of `DROPPABLE`, until it does. Assigned Client Identifier, Server Keep Alive, Session Expiry Interval and the
 * authentication properties are never dropped (the client must act on them); without them a CONNACK is at most a
 * few bytes more than the 5 of one with no properties at all.
 */
export function fitConnack(sessionPresent: boolean, reasonCode: number, props: Record<string, unknown>, max: number): Buffer {
  let bytes = encodePacket({ cmd: 'connack', sessionPresent, reasonCode, properties: props }, 5);
  if (bytes.length <= max) return bytes;
  const left = { ...props };
  for (const key of DROPPABLE) {
    if (left[key] === undefined) continue;
    delete left[key];
    bytes = encodePacket({ cmd: 'connack', sessionPresent, reasonCode, properties: left }, 5);
    if (bytes.length <= max) break;
  }
  return bytes;
}

const STRICT_ID = /^[0-9a-zA-Z]{1,23}$/;

/** The properties of a CONNECT without any (every 3.1.1 one): one frozen object, not an empty one per CONNECT. */
const NO_PROPERTIES: NonNullable<ConnectPacket['properties']> = Object.freeze({});

function refuse(conn: MqttConn, v3code: number, v5reason: number, why: string, closeReason: string = CloseReason.AuthFailed): void {
  conn.endpoint.stats.errors++;
  if (conn.v5) {
    // the Reason String is left out when it would exceed the client's Maximum Packet Size [MQTT-3.2.2-19]
    conn.send(fitConnack(false, v5reason, why && conn.requestProblemInformation ? { reasonString: why } : {}, conn.clientMaxPacket));
  } else conn.send(encodeConnackV3(false, v3code));
  conn.close(closeReason);
}

/**
 * The connect timeout ran out after the CONNECT arrived, while the server itself was still working on it (the password
 * check on a loaded machine; measured under load in test/cluster: 285 of 315 CONNECTs closed without CONNACK after
 * 5.07-5.26 s): CONNACK v5 0x89 Server busy, 3.1.1 3 Server unavailable, so the client knows to try again. A client
 * that leaves an enhanced-authentication exchange unanswered is closed without one, as before (the wait is its own).
 */
export function refuseLateConnect(conn: MqttConn): void {
  if (conn.authPending !== undefined) return conn.close(CloseReason.ConnectTimeout);
  conn.broker.log.debug({ address: conn.wire.remoteAddress }, 'MQTT connection refused: the CONNECT was not answered within the connect timeout');
  refuse(conn, ConnackV3.ServerUnavailable, Reason.ServerBusy, 'the server could not answer the CONNECT within the connect timeout; try again', CloseReason.ConnectTimeout);
}

export function handleConnect(conn: MqttConn, p: ConnectPacket): void {
  const v = p.protocolVersion;
  if ((p.protocolId === 'MQIsdp') !== (v === 3)) {
    throw new MqttProtocolError(Reason.UnsupportedProtocolVersion, `protocol name ${p.protocolId} does not go with level ${v} [MQTT-3.1.2-1]`);
  }
  conn.protocolVersion = v === 5 ? 5 : 4;
  conn.v5 = v === 5;
  const cfg = conn.endpoint.mqtt;
  const props = p.properties ?? NO_PROPERTIES;
  if (conn.v5) {
    conn.requestProblemInformation = props.requestProblemInformation !== false;
    if (props.receiveMaximum === 0) throw new MqttProtocolError(Reason.ProtocolError, 'Receive Maximum 0 [MQTT-3.1.2-?]');
    if (props.maximumPacketSize === 0) throw new MqttProtocolError(Reason.ProtocolError, 'Maximum Packet Size 0');
    if (props.maximumPacketSize !== undefined) conn.clientMaxPacket = props.maximumPacketSize; // a refusing CONNACK respects it too
  } else if (p.password !== undefined && p.username === undefined) {
    // 3.1.1: password flag without user name flag [MQTT-3.1.2-22]
    throw new MqttProtocolError(Reason.ProtocolError, 'password without a user name [MQTT-3.1.2-22]');
  }
  // Will QoS 3 (both bits set) is malformed (3.1.1 [MQTT-3.1.2-14], 5 [MQTT-3.1.2-12]); mqtt-packet passes it on
  if (p.will !== undefined && (p.will.qos as number) > 2) throw new MqttProtocolError(Reason.MalformedPacket, 'Will QoS 3 [MQTT-3.1.2-14]');
  conn.state = 'connecting';
  conn.queued = [];
  // cluster mode, cut off from NATS: no new connection (docs/cluster.md "Partitions"; src/cluster/admission.ts)
  const isolated = conn.broker.admission?.refusal();
  if (isolated !== undefined) return refuse(conn, ConnackV3.ServerUnavailable, Reason.ServerUnavailable, isolated);

  let clientId = p.clientId ?? '';
  let assigned: string | undefined;
  if (clientId === '' && v === 3) {
    // MQTT 3.1 (§3.1, Client Identifier): "between 1 and 23 characters long ... If the Client ID contains more than
    // 23 characters, the server responds to the CONNECT message with a CONNACK return code 2: Identifier Rejected".
    // An empty one is refused; a longer one is accepted, as 3.1.1 allows ([MQTT-3.1.3-5]; docs/messaging.md).
    return refuse(conn, ConnackV3.IdentifierRejected, Reason.ClientIdentifierNotValid, 'MQTT 3.1 needs a client id');
  }
  if (clientId === '') {
    if (!conn.v5 && !p.clean) {
      // 3.1.1: an empty client id needs clean session [MQTT-3.1.3-8]
      return refuse(conn, ConnackV3.IdentifierRejected, Reason.ClientIdentifierNotValid, 'an empty client id needs clean session');
    }
    clientId = assigned = `switchyard-${randomBytes(8).toString('hex')}`; // [MQTT-3.1.3-6]
  } else if (cfg.strictClientId && !STRICT_ID.test(clientId)) {
    return refuse(conn, ConnackV3.IdentifierRejected, Reason.ClientIdentifierNotValid, 'client id must be 1..23 characters of 0-9a-zA-Z');
  }
  if (conn.v5 && props.authenticationData !== undefined && props.authenticationMethod === undefined) {
    // a protocol error (5 §3.1.2.11.10), answered with CONNACK so the client learns why
    conn.closeReason = CloseReason.ProtocolViolation;
    return refuse(conn, ConnackV3.NotAuthorized, Reason.ProtocolError, 'Authentication Data without an Authentication Method');
  }

  let will: WillMessage | undefined;
  if (p.will) {
    try {
      validateTopicName(p.will.topic);
    } catch (err) {
      throw new MqttProtocolError(Reason.TopicNameInvalid, `will topic: ${(err as Error).message}`);
    }
    const wp = (p.will.properties ?? {}) as Record<string, unknown>;
    will = {
      topic: p.will.topic,
      payload: Buffer.from(p.will.payload ?? Buffer.alloc(0)),
      qos: p.will.qos,
      retain: p.will.retain,
      delay: Number(wp.willDelayInterval ?? 0),
      properties: {
        payloadFormatIndicator: wp.payloadFormatIndicator === true ? 1 : wp.payloadFormatIndicator === false ? 0 : (wp.payloadFormatIndicator as number | undefined),
        messageExpiryInterval: wp.messageExpiryInterval as number | undefined,
        contentType: wp.contentType as string | undefined,
        responseTopic: wp.responseTopic as string | undefined,
        correlationData: wp.correlationData as Buffer | undefined,
        userProperties: wp.userProperties as Record<string, string | string[]> | undefined,
      },
    };
  }

  if (conn.v5 && props.authenticationMethod !== undefined) {
    // enhanced authentication (handlers/auth.ts); unsupported method: 0x8C [MQTT-4.12.0-1]
    return beginEnhancedAuth(
      conn,
      props.authenticationMethod,
      props.authenticationData,
      p.username,
      (principal, authAck) => {
        if (!admit(conn, p, principal)) return;
        inCluster(conn, p, clientId, assigned, () => accept(conn, p, clientId, assigned, will, authAck));
      },
      (reason, why) => refuse(conn, ConnackV3.NotAuthorized, reason, why),
    );
  }
  void authenticateThenAccept(conn, p, clientId, assigned, will);
}

/**
 * What the CONNECT's password check knows of the client: read through getters on the prototype, so a CONNECT makes
 * one small object instead of an object literal with an accessor (and the socket's AbortSignal is made only by a
 * password check that asks for it, not for every connection).
 */
class ConnectAuthContext implements AuthContext {
  readonly protocol = 'MQTT';
  constructor(private readonly conn: MqttConn) {}
  get clientAddress(): string {
    return this.conn.wire.remoteAddress;
  }
  get proxied(): boolean {
    return this.conn.wire.proxied === true;
  }
  get signal(): AbortSignal | undefined {
    return this.conn.wire.closed;
  }
}

/**
 * Password authentication, then authorisation, the cluster's claim and CONNACK. An async function rather than a
 * chain of closures: a connect burst leaves less garbage (each closure also carries its own `name` property under
 * esbuild's keepNames, which tsx and the bundle use).
 */
async function authenticateThenAccept(conn: MqttConn, p: ConnectPacket, clientId: string, assigned: string | undefined, will: WillMessage | undefined): Promise<void> {
  let principal: Principal;
  try {
    principal = await conn.broker.host.security().authenticate(p.username, p.password, new ConnectAuthContext(conn));
  } catch (err) {
    if (conn.state === 'closed' || err instanceof HashAbortedError) return;
    if (err instanceof ServerBusyError) {
      // the password-hashing queue is full (AuthManager.passwordHashQueue): v5 0x89 Server busy; 3.1.1: 3 Server unavailable
      conn.broker.log.debug({ clientId, username: p.username, address: conn.wire.remoteAddress }, `MQTT connection refused: ${err.message}`);
      return refuse(conn, ConnackV3.ServerUnavailable, Reason.ServerBusy, err.message);
    }
    if (err instanceof AddressBlockedError) {
      // login limits: too many failed logins from this address, refused before any password check
      // (v5 0x9F Connection rate exceeded; 3.1.1 has no such code: 3 Server unavailable, "not now, retry later")
      conn.broker.log.info({ clientId, username: p.username, address: conn.wire.remoteAddress }, `MQTT connection refused: ${err.message}`);
      return refuse(conn, ConnackV3.ServerUnavailable, Reason.ConnectionRateExceeded, err.message);
    }
    if (err instanceof AuthenticationFailedError) {
      conn.broker.log.info({ clientId, username: p.username, address: conn.wire.remoteAddress }, `MQTT authentication failed: ${err.message}`);
      return refuse(conn, ConnackV3.BadUserNameOrPassword, Reason.BadUserNameOrPassword, 'bad user name or password');
    }
    conn.broker.log.error({ err }, 'MQTT authentication error');
    return refuse(conn, ConnackV3.ServerUnavailable, Reason.ServerUnavailable, 'authentication is unavailable');
  }
  if (conn.state === 'closed') return;
  if (!admit(conn, p, principal)) return;
  if (conn.broker.cluster === undefined || assigned !== undefined) {
    // no cluster (or a new, assigned id): accepted at once, without the closure `inCluster` takes
    accept(conn, p, clientId, assigned, will);
    conn.drainQueued();
    return;
  }
  inCluster(conn, p, clientId, assigned, () => {
    accept(conn, p, clientId, assigned, will);
    conn.drainQueued();
  });
}

/** A refused authorisation, in the audit log (`access.denied`). */
function auditDenied(conn: MqttConn, p: ConnectPacket, principal: Principal, permission: string, outcome: string): void {
  const rt = conn.broker.host;
  rt.security().audit?.denied(
    { username: principal.username, protocol: 'MQTT', clientId: p.clientId || undefined, clientAddress: conn.wire.remoteAddress, permission, resourceType: 'Server', resourceKey: rt.serverName, outcome },
    `MQTT ${outcome}: ${principal.username} lacks ${permission}`,
  );
}

/**
 * Authorisation of an authenticated CONNECT: `connect` on the Server, and `persistent_session` on the Server for a
 * session that outlives the connection (3.1.1 clean session 0, 5 Session Expiry Interval > 0). Without
 * persistent_session a 3.1.1 client is refused (return code 5: it has no way to learn that its session would not be
 * kept); a v5 client is accepted with Session Expiry Interval 0 (`conn.persistenceDenied`; CONNACK says so,
 * 5 §3.2.2.3.2). Refusals are audited (`access.denied`). Returns false when the CONNECT was refused.
 */
function admit(conn: MqttConn, p: ConnectPacket, principal: Principal): boolean {
  const rt = conn.broker.host;
  const security = rt.security();
  if (!security.isAllowed(principal, 'connect', 'Server', rt.serverName)) {
    auditDenied(conn, p, principal, 'connect', 'connection refused');
    refuse(conn, ConnackV3.NotAuthorized, Reason.NotAuthorized, 'not authorized to connect');
    return false;
  }
  // A session belongs to the user who made it: another user may neither take it over nor cut its connection by
  // reusing the client id (the standard leaves authorization to the server, 5 §5.4.2).
  const owner = p.clientId ? conn.broker.sessions.get(p.clientId)?.username : undefined;
  if (security.enabled && owner !== undefined && owner !== principal.username) {
    security.audit?.denied(
      { username: principal.username, protocol: 'MQTT', clientId: p.clientId, clientAddress: conn.wire.remoteAddress, resourceType: 'Server', resourceKey: rt.serverName, outcome: 'connection refused (client id of another user)' },
      `MQTT connection refused: client id ${p.clientId} belongs to a session of another user`,
    );
    refuse(conn, ConnackV3.NotAuthorized, Reason.NotAuthorized, 'this client id belongs to a session of another user');
    return false;
  }
  const persistent = conn.v5 ? (p.properties?.sessionExpiryInterval ?? 0) > 0 : !p.clean;
  if (persistent && !security.isAllowed(principal, 'persistent_session', 'Server', rt.serverName)) {
    if (!conn.v5) {
      auditDenied(conn, p, principal, 'persistent_session', 'connection refused (clean session 0)');
      refuse(conn, ConnackV3.NotAuthorized, Reason.NotAuthorized, 'not authorized to use a persistent session');
      return false;
    }
    auditDenied(conn, p, principal, 'persistent_session', 'session expiry set to 0');
    conn.persistenceDenied = true;
  }
  conn.principal = principal;
  return true;
}

/**
 * In a cluster (src/cluster/sessions.ts) the session plane decides first who holds the session: it may take it
 * over from another broker (which disconnects its client with 0x8E) and rebuild it here, delay a client that keeps
 * displacing itself, or refuse (CONNACK 0x88 Server unavailable, 3.1.1 return code 3: the client retries).
 * Without a cluster, `go` runs at once.
 */
function inCluster(conn: MqttConn, p: ConnectPacket, clientId: string, assigned: string | undefined, go: () => void): void {
  const cluster = conn.broker.cluster;
  if (cluster === undefined || assigned !== undefined) return go(); // an assigned id is new: no broker holds it
  const persistent = !conn.persistenceDenied && (conn.v5 ? (p.properties?.sessionExpiryInterval ?? 0) > 0 : !p.clean);
  // the answer should the connect timeout come before the cluster's (a stalled event loop): always a CONNACK
  conn.onConnectTimeout = () => refuse(conn, ConnackV3.ServerUnavailable, Reason.ServerUnavailable, 'the cluster did not settle who holds this session in time; try again');
  cluster.claim(clientId, { persistent, cleanStart: p.clean, budgetMs: conn.endpoint.connectTimeout - (Date.now() - conn.connectedAt) }).then(
    (r) => {
      conn.onConnectTimeout = undefined;
      if (conn.state === 'closed') return;
      if (!r.ok) return refuse(conn, ConnackV3.ServerUnavailable, Reason.ServerUnavailable, r.reason);
      if (r.delayMs === undefined || r.delayMs <= 0) return go();
      setTimeout(() => {
        if (conn.state !== 'closed') go();
      }, r.delayMs).unref();
    },
    (err: unknown) => {
      conn.onConnectTimeout = undefined;
      if (conn.state === 'closed') return;
      conn.broker.log.warn({ err, clientId }, 'cluster: the session plane could not answer a CONNECT');
      refuse(conn, ConnackV3.ServerUnavailable, Reason.ServerUnavailable, 'the cluster session store is unavailable');
    },
  );
}

function accept(
  conn: MqttConn,
  p: ConnectPacket,
  clientId: string,
  assigned: string | undefined,
  will: WillMessage | undefined,
  authAck?: { authenticationMethod: string; authenticationData: Buffer },
): void {
  const broker = conn.broker;
  const cfg = conn.endpoint.mqtt;
  const props = p.properties ?? NO_PROPERTIES;
  conn.clientId = clientId;
  conn.will = will;

  // Session Expiry: 3.1.1 clean session 0 → persistent; v5 from the property, capped by the endpoint
  let expiry: number;
  let expiryCapped = false;
  if (conn.v5) {
    expiry = conn.connectExpiry = props.sessionExpiryInterval ?? 0;
    if (conn.persistenceDenied) {
      expiry = 0; // no persistent_session: the session ends with the connection
      expiryCapped = true;
    } else if (expiry > cfg.maximumSessionExpiry) {
      expiry = cfg.maximumSessionExpiry;
      expiryCapped = true;
    }
  } else expiry = p.clean ? 0 : cfg.maximumSessionExpiry;

  // Take over a connected client with the same id [MQTT-3.1.4-3]
  let session = broker.sessions.get(clientId);
  if (session?.conn !== undefined) {
    const old = session.conn;
    old.close(CloseReason.TakenOver, Reason.SessionTakenOver, 'another connection uses this client id');
  }
  session = broker.sessions.get(clientId); // the takeover may have ended a non-persistent session
  const cleanStart = p.clean;
  let sessionPresent = false;
  if (session !== undefined) {
    if (cleanStart) {
      // A new session replaces the old one [MQTT-3.1.2-4]. A will still waiting for its Will Delay Interval is
      // discarded, not published: "The Will Message MUST be published after the Network Connection is subsequently
      // closed and either the Will Delay Interval has elapsed or the Session ends, unless the Will Message has been
      // deleted by the Server on receipt of a DISCONNECT packet with Reason Code 0x00 (Normal disconnection) or a new
      // Network Connection for the ClientID is opened before the Will Delay Interval has elapsed" [MQTT-3.1.2-8].
      // [MQTT-3.1.3-9] ("If a new Network Connection to this Session is made before the Will Delay Interval has
      // passed, the Server MUST NOT send the Will Message") covers Clean Start 0; it does not require the will when
      // Clean Start 1 ends the session, and [MQTT-3.1.2-8] names exactly this case (a new connection for the
      // ClientID within the delay) as one where it is not published. The client is back: its will would announce a
      // death that did not happen (docs/messaging.md, "Will messages").
      broker.cancelWill(session);
      broker.endSession(session);
      session = undefined;
    } else {
      broker.cancelWill(session); // [MQTT-3.1.3-9]
      sessionPresent = true; // [MQTT-3.2.2-2]
    }
  }
  if (session === undefined) {
    session = new MqttSession(clientId);
    broker.sessions.set(clientId, session);
  }
  if (session.expiryTimer) clearTimeout(session.expiryTimer);
  session.expiryTimer = undefined;
  session.expiry = expiry;
  session.protocolVersion = conn.protocolVersion;
  session.username = conn.principal?.username;
  session.conn = conn;
  session.restored = false;
  session.disconnectedAt = undefined;
  conn.session = session;
  broker.wills?.connected(clientId, will, expiry, conn.principal); // cluster mode: the will record (src/cluster/wills.ts)

  // Flow control and limits
  conn.sendQuota = Math.min(conn.v5 ? (props.receiveMaximum ?? 65535) : 65535, cfg.clientReceiveMaximum);
  if (conn.v5 && props.maximumPacketSize !== undefined) conn.clientMaxPacket = props.maximumPacketSize;
  // server-to-client topic aliases: only up to the client's Topic Alias Maximum [MQTT-3.1.2-26], none without one [MQTT-3.1.2-27]
  const aliasMax = conn.v5 ? Math.min(props.topicAliasMaximum ?? 0, cfg.clientMaximumTopicAlias) : 0;
  if (aliasMax > 0) {
    conn.outAliases = new Map();
    conn.outAliasMax = aliasMax;
  }
  let keepAlive = p.keepalive;
  let serverKeepAlive: number | undefined;
  if (conn.v5 && cfg.maxServerKeepAlive > 0 && keepAlive > cfg.maxServerKeepAlive) serverKeepAlive = keepAlive = cfg.maxServerKeepAlive;
  if (conn.v5 && keepAlive > 0 && keepAlive < cfg.minServerKeepAlive) serverKeepAlive = keepAlive = cfg.minServerKeepAlive;

  conn.state = 'connected';
  if (conn.v5) {
    const ack: Record<string, unknown> = {
      receiveMaximum: cfg.serverReceiveMaximum,
      maximumPacketSize: cfg.maximumBufferSize,
      topicAliasMaximum: cfg.serverMaximumTopicAlias,
      wildcardSubscriptionAvailable: true,
      subscriptionIdentifiersAvailable: true,
      sharedSubscriptionAvailable: true,
      retainAvailable: true,
    };
    if (assigned !== undefined) ack.assignedClientIdentifier = assigned; // [MQTT-3.2.2-16]
    if (serverKeepAlive !== undefined) ack.serverKeepAlive = serverKeepAlive; // [MQTT-3.2.2-21]
    if (expiryCapped) ack.sessionExpiryInterval = expiry;
    if (cfg.serverMaximumTopicAlias === 0) delete ack.topicAliasMaximum;
    // Response Information only when asked for [MQTT-3.1.2-28]: the prefix plus the client id, one topic level
    // (percent-encoded, so `/`, `+` and `#` in a client id cannot escape it), e.g. `response/sensor-1/` (5 §4.10)
    if (props.requestResponseInformation === true && cfg.responseInformationPrefix !== '') {
      ack.responseInformation = `${cfg.responseInformationPrefix}${encodeURIComponent(clientId)}/`;
    }
    if (authAck !== undefined) Object.assign(ack, authAck); // the CONNECT's method and the last server message [MQTT-4.12.0-5]
    if (conn.persistenceDenied && conn.requestProblemInformation) {
      ack.reasonString = `Session Expiry Interval set to 0: ${conn.principal?.username ?? 'this user'} lacks the persistent_session permission, so the session ends with the connection`;
    }
    // not beyond the client's Maximum Packet Size: optional properties are left out until it fits [MQTT-3.1.2-24]
    conn.send(fitConnack(sessionPresent, 0, ack, conn.clientMaxPacket));
  } else {
    // MQTT 3.1 has no session present flag: byte 1 of its CONNACK is reserved (0)
    conn.send(encodeConnackV3(p.protocolVersion === 3 ? false : sessionPresent, 0));
  }
  conn.startKeepAlive(keepAlive);
  // the fields are built only when the line is written (a connect burst otherwise leaves them all as garbage)
  if (broker.log.isLevelEnabled('debug')) {
    broker.log.debug(
      { clientId, connection: conn.id, protocol: conn.v5 ? 'MQTT 5' : conn.protocolVersion === 4 ? 'MQTT 3.1.1' : 'MQTT 3.1', transport: conn.wire.transport, address: `${conn.wire.remoteAddress}:${conn.wire.remotePort}`, endpoint: conn.endpoint.name, sessionPresent },
      'MQTT client connected',
    );
  }

  // Resume the session: PUBRELs first, then the held and unacknowledged messages [MQTT-4.4.0-1]
  if (sessionPresent) {
    for (const [pid, o] of session.outbound) if (o.stage === 2) conn.send(Buffer.from([0x62, 0x02, pid >> 8, pid & 0xff]));
    for (const { sub } of session.subs.values()) sub.attach(conn);
  }
  broker.save(session);
}
