/**
 * Packet dispatch (as Aedes's lib/handlers/index.js): one table from packet name to handler, and the checks every
 * frame goes through before its handler. Handlers depend on the `MqttConn` interface (../types.ts), never on
 * connection.ts or broker.ts.
 *
 * How a frame is read: PUBLISH is decoded straight from its frame (handlers/publish.ts, the hot path);
 * PUBACK / PUBREC / PUBREL / PUBCOMP by `decodeAck`; CONNECT by `decodeConnect`; every other packet by mqtt-packet (`conn.parse`), which hands
 * the packet back to `handlePacket`.
 */
import { PacketType, decodeAck, decodeConnect, type InboundAck } from '../codec.js';
import { settingsFor } from '../parser.js';
import { CloseReason, MqttProtocolError, Reason } from '../reason.js';
import type { MqttConn } from '../types.js';
import { handleAuth } from './auth.js';
import { handleConnect, refuseBadProtocolLevel, refuseBrokenConnect } from './connect.js';
import { handleDisconnect } from './disconnect.js';
import { handlePingreq } from './pingreq.js';
import { handlePuback, pubackOf } from './puback.js';
import { handlePubcomp } from './pubcomp.js';
import { handlePublish } from './publish.js';
import { handlePubrec } from './pubrec.js';
import { handlePubrel } from './pubrel.js';
import { handleSubscribe } from './subscribe.js';
import { handleUnsubscribe } from './unsubscribe.js';

type Handler = (conn: MqttConn, packet: never) => void;

/**
 * The packets a client may send, by name (`cmd` as mqtt-packet and `decodeAck` give it). PUBLISH is not here: it
 * is decoded from its frame by `dispatchFrame`. CONNACK, SUBACK, UNSUBACK and PINGRESP are server-to-client only.
 */
export const handlers: Readonly<Record<string, Handler>> = {
  connect: handleConnect,
  puback: handlePuback,
  pubrec: handlePubrec,
  pubrel: handlePubrel,
  pubcomp: handlePubcomp,
  subscribe: handleSubscribe,
  unsubscribe: handleUnsubscribe,
  pingreq: handlePingreq,
  disconnect: handleDisconnect,
  auth: handleAuth,
};

/** The same handlers for the acknowledgements, by packet type − PUBACK (no look-up by name on the delivery path). */
const ACKS: readonly Handler[] = [handlePuback, handlePubrec, handlePubrel, handlePubcomp];

/** A decoded packet to its handler; a packet a client must not send is a protocol error. */
export function handlePacket(conn: MqttConn, p: { readonly cmd?: unknown }): void {
  const h = typeof p.cmd === 'string' && Object.hasOwn(handlers, p.cmd) ? handlers[p.cmd] : undefined;
  if (h === undefined) throw new MqttProtocolError(Reason.ProtocolError, `a client must not send ${String(p.cmd).toUpperCase()}`);
  h(conn, p as never);
}

const NAMES = ['RESERVED', 'CONNECT', 'CONNACK', 'PUBLISH', 'PUBACK', 'PUBREC', 'PUBREL', 'PUBCOMP', 'SUBSCRIBE', 'SUBACK', 'UNSUBSCRIBE', 'UNSUBACK', 'PINGREQ', 'PINGRESP', 'DISCONNECT', 'AUTH'];

export function packetTypeName(type: number): string {
  return NAMES[type] ?? 'packet';
}

/**
 * One complete frame of a connection that is not waiting for its CONNECT to be authenticated: the ordering rules
 * (CONNECT first and once, only AUTH or DISCONNECT during enhanced authentication), then its handler.
 */
export function dispatchFrame(conn: MqttConn, type: number, flags: number, frame: Buffer, bodyOffset: number): void {
  if (conn.authPending !== undefined && conn.state === 'connecting' && type !== PacketType.AUTH && type !== PacketType.DISCONNECT) {
    throw new MqttProtocolError(Reason.ProtocolError, `${packetTypeName(type)} during enhanced authentication: only AUTH or DISCONNECT before CONNACK [MQTT-3.1.2-30]`);
  }
  if (conn.state === 'new') {
    // the first packet must be CONNECT [MQTT-3.1.0-1]
    if (type !== PacketType.CONNECT) throw new MqttProtocolError(Reason.ProtocolError, `first packet is type ${type}, not CONNECT [MQTT-3.1.0-1]`);
    if (refuseBadProtocolLevel(conn, frame, bodyOffset)) return;
  } else if (type === PacketType.CONNECT) {
    throw new MqttProtocolError(Reason.ProtocolError, 'second CONNECT on one connection [MQTT-3.1.0-2]');
  }
  if (type === PacketType.PUBLISH) {
    handlePublish(conn, flags, frame, bodyOffset);
    return;
  }
  if (type >= PacketType.PUBACK && type <= PacketType.PUBCOMP) {
    acknowledgement(conn, type, flags, frame, bodyOffset);
    return;
  }
  conn.parsingType = packetTypeName(type);
  if (type !== PacketType.CONNECT) return conn.parse(frame);
  try {
    const p = decodeConnect(frame, flags, bodyOffset);
    // the packets after it are read by the shared parser with this CONNECT's protocol level (and bridge mode)
    conn.parserSettings = settingsFor(p.protocolVersion, p.bridgeMode);
    handleConnect(conn, p);
  } catch (err) {
    refuseBrokenConnect(conn, frame, bodyOffset, err); // v5: CONNACK 0x81 (or the error's code) before the close
    throw err;
  }
}

/**
 * PUBACK / PUBREC / PUBREL / PUBCOMP, decoded by `decodeAck`. A malformed one closes the connection (v5:
 * DISCONNECT 0x81) with one WARN line naming the client and the reason (rate-limited per address), no stack trace.
 */
function acknowledgement(conn: MqttConn, type: number, flags: number, frame: Buffer, bodyOffset: number): void {
  if (conn.session === undefined) throw new MqttProtocolError(Reason.ProtocolError, `${packetTypeName(type)} before CONNACK [MQTT-3.1.0-1]`);
  if (type === PacketType.PUBACK && flags === 0 && frame.length - bodyOffset === 2 && (frame[bodyOffset]! | frame[bodyOffset + 1]!) !== 0) {
    // the common PUBACK (no reason code, no properties, a packet id that is not 0): what decodeAck would accept,
    // without the decoded object per delivery acknowledged
    pubackOf(conn, frame.readUInt16BE(bodyOffset));
    return;
  }
  let p: InboundAck;
  try {
    p = decodeAck(type, flags, frame, bodyOffset, conn.v5);
  } catch (err) {
    if (!(err instanceof MqttProtocolError)) throw err;
    conn.endpoint.stats.errors++;
    const reason = `0x${err.reason.toString(16)}`;
    // rate-limited per address (a client reconnecting in a loop wrote 20 330 of these in 10 minutes)
    conn.warnFault('malformed-ack', { connection: conn.id, clientId: conn.clientId, address: conn.wire.remoteAddress, reason, packet: packetTypeName(type) }, `malformed acknowledgement, connection closed: ${err.message}`, 'address');
    conn.close(CloseReason.ProtocolViolation, err.reason, err.message);
    return;
  }
  ACKS[type - PacketType.PUBACK]!(conn, p as never);
}
