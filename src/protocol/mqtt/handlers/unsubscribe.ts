/**
 * UNSUBSCRIBE (3.1.1 §3.10, 5 §3.10): each filter is removed; UNSUBACK says (v5) whether it existed [MQTT-3.10.4-5].
 * A filter that breaks the topic filter rules (empty [MQTT-4.7.3-1], `#` not last or not a whole level
 * [MQTT-4.7.1-1], `+` not a whole level [MQTT-4.7.1-2], ...) makes the packet malformed: the connection closes, with
 * DISCONNECT 0x81 in v5. UNSUBACK 0x8F is not for it: that code means "the Topic Filter is correctly formed but is
 * not allowed for this Client" (5 §3.11.3).
 */
import { refuseUnsubscribe } from '../../../cluster/admission.js';
import { validateTopicFilter } from '../../../engine/index.js';
import type { MqttConn } from '../types.js';
import { encodePacket } from '../codec.js';
import { MqttProtocolError, Reason } from '../reason.js';

export function handleUnsubscribe(conn: MqttConn, p: { messageId: number; unsubscriptions: string[] }): void {
  if (!p.unsubscriptions || p.unsubscriptions.length === 0) {
    throw new MqttProtocolError(Reason.ProtocolError, 'UNSUBSCRIBE without a topic filter [MQTT-3.10.3-2]');
  }
  // a non-zero packet identifier (3.1.1 [MQTT-2.3.1-1], 5 [MQTT-2.2.1-3])
  if (p.messageId === 0) throw new MqttProtocolError(Reason.MalformedPacket, 'UNSUBSCRIBE with packet identifier 0 [MQTT-2.2.1-3]');
  for (const filter of p.unsubscriptions) {
    try {
      validateTopicFilter(filter);
    } catch (err) {
      throw new MqttProtocolError(Reason.MalformedPacket, `UNSUBSCRIBE with a malformed topic filter: ${(err as Error).message}`);
    }
  }
  if (refuseUnsubscribe(conn, p.messageId, p.unsubscriptions.length)) return; // cluster mode, cut off from NATS (0x80)
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
