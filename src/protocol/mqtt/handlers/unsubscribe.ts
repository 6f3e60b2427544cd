/** UNSUBSCRIBE (3.1.1 §3.10, 5 §3.10): each filter is removed; UNSUBACK says (v5) whether it existed [MQTT-3.10.4-5]. */
import type { MqttConn } from '../types.js';
import { encodePacket } from '../codec.js';
import { MqttProtocolError, Reason } from '../reason.js';

export function handleUnsubscribe(conn: MqttConn, p: { messageId: number; unsubscriptions: string[] }): void {
  if (!p.unsubscriptions || p.unsubscriptions.length === 0) {
    throw new MqttProtocolError(Reason.ProtocolError, 'UNSUBSCRIBE without a topic filter [MQTT-3.10.3-2]');
  }
  // a non-zero packet identifier (3.1.1 [MQTT-2.3.1-1], 5 [MQTT-2.2.1-3])
  if (p.messageId === 0) throw new MqttProtocolError(Reason.MalformedPacket, 'UNSUBSCRIBE with packet identifier 0 [MQTT-2.2.1-3]');
  const s = conn.session!;
  const engine = conn.broker.host.engine();
  const codes: number[] = [];
  for (const filter of p.unsubscriptions) {
    const had = s.subs.get(filter);
    s.subs.delete(filter);
    const removed = engine !== undefined && had !== undefined ? engine.unsubscribe(had.sub) : false;
    codes.push(removed ? Reason.Success : Reason.NoSubscriptionExisted);
  }
  conn.send(encodePacket(conn.v5 ? { cmd: 'unsuback', messageId: p.messageId, granted: codes, properties: {} } : { cmd: 'unsuback', messageId: p.messageId }, conn.protocolVersion));
  conn.broker.save(s);
}
