/**
 * PUBREC from the client (5 §3.5): the receiver owns the QoS 2 message; the server answers PUBREL and never sends
 * that PUBLISH again [MQTT-4.3.3-4]. A PUBREC with a failure reason (≥ 0x80) ends the exchange.
 */
import type { MqttConnection } from '../connection.js';
import { PacketType, encodeAck } from '../codec.js';
import { Reason } from '../reason.js';

export function handlePubrec(conn: MqttConnection, p: { messageId: number; reasonCode?: number }): void {
  const s = conn.session!;
  const o = s.outbound.get(p.messageId);
  if (o === undefined || o.qos !== 2) {
    conn.send(encodeAck(PacketType.PUBREL, p.messageId, Reason.PacketIdentifierNotFound, conn.v5));
    return;
  }
  if (o.stage === 1 && o.sub !== undefined) {
    s.redeliver.delete(`${o.sub.id}:${o.msgId}`);
    o.sub.ack(o.msgId);
  }
  if (conn.v5 && (p.reasonCode ?? 0) >= 0x80) {
    s.outbound.delete(p.messageId);
    s.resumeBlocked();
    return;
  }
  o.stage = 2;
  if (s.persistent) conn.broker.save(s);
  conn.send(encodeAck(PacketType.PUBREL, p.messageId, 0, conn.v5));
}
