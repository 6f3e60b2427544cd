/**
 * PUBREC from the client (5 §3.5): the receiver owns the QoS 2 message; the server answers PUBREL and never sends
 * that PUBLISH again [MQTT-4.3.3-4]. A PUBREC with a failure reason (≥ 0x80) ends the exchange.
 *
 * For a persistent session the deletion of the held copy and the PUBREL-stage record of the packet id go in one
 * batch, and PUBREL is sent once that batch is written: after a crash the broker either still has the message
 * (and resends it with DUP and the same id) or knows the id is at the PUBREL stage (and resends PUBREL).
 */
import type { MqttConn } from '../types.js';
import { PacketType, encodeAck } from '../codec.js';
import { Reason } from '../reason.js';
import { stateEngine, storeOutbound } from '../session.js';

const RESOLVED: Promise<void> = Promise.resolve();

export function handlePubrec(conn: MqttConn, p: { messageId: number; reasonCode?: number }): void {
  const s = conn.session!;
  const pid = p.messageId;
  const o = s.outbound.get(pid);
  if (o === undefined || o.qos !== 2) {
    conn.send(encodeAck(PacketType.PUBREL, pid, Reason.PacketIdentifierNotFound, conn.v5));
    return;
  }
  const engine = stateEngine(conn.broker.host.engine(), s);
  if (o.stage === 2) {
    // a repeated PUBREC: PUBREL again, once the stage is written
    conn.orderedAck(encodeAck(PacketType.PUBREL, pid, 0, conn.v5), s.lastStateWrite ?? RESOLVED);
    return;
  }
  if (o.sub !== undefined) {
    s.forgetRedelivery(o.sub.id, o.msgId);
    o.sub.ack(o.msgId); // deletes the held copy (in the batch being gathered)
  }
  if (conn.v5 && (p.reasonCode ?? 0) >= 0x80) {
    s.outbound.delete(pid);
    if (engine !== undefined) storeOutbound(engine, s, pid, undefined);
    s.resumeBlocked();
    return;
  }
  o.stage = 2;
  const written = engine !== undefined ? storeOutbound(engine, s, pid, { s: 2, q: 2 }) : RESOLVED;
  conn.orderedAck(encodeAck(PacketType.PUBREL, pid, 0, conn.v5), written);
}
