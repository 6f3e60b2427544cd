/** PUBREL from the client (5 §3.6): the inbound QoS 2 exchange ends with PUBCOMP [MQTT-4.3.3-11]. */
import type { MqttConnection } from '../connection.js';
import { PacketType, encodeAck } from '../codec.js';
import { Reason } from '../reason.js';

export function handlePubrel(conn: MqttConnection, p: { messageId: number }): void {
  const s = conn.session!;
  if (!s.inbound.delete(p.messageId)) {
    conn.send(encodeAck(PacketType.PUBCOMP, p.messageId, Reason.PacketIdentifierNotFound, conn.v5));
    return;
  }
  if (conn.inboundPending > 0) conn.inboundPending--;
  if (s.persistent) conn.broker.save(s);
  conn.send(encodeAck(PacketType.PUBCOMP, p.messageId, 0, conn.v5));
}
