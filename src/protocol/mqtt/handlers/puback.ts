/** PUBACK from the client (3.1.1 §3.4, 5 §3.4): a QoS 1 delivery is done; its packet id is free again [MQTT-4.3.2-?]. */
import type { MqttConn } from '../types.js';
import { stateEngine, storeOutbound } from '../session.js';

export function handlePuback(conn: MqttConn, p: { messageId: number }): void {
  pubackOf(conn, p.messageId);
}

/** The PUBACK of packet id `pid` (a PUBACK of remaining length 2 has its id read straight from the frame: handlers/index.ts). */
export function pubackOf(conn: MqttConn, pid: number): void {
  const s = conn.session!;
  const o = s.outbound.get(pid);
  if (o === undefined || o.qos !== 1) return; // unknown id: nothing to do (5 §4.3.2)
  s.outbound.delete(pid);
  if (o.sub !== undefined) {
    s.forgetRedelivery(o.sub.id, o.msgId);
    o.sub.ack(o.msgId);
  }
  // the held copy's deletion (sub.ack) and the packet id's record go in one batch; nothing waits for it
  const engine = stateEngine(conn.broker.host.engine(), s);
  if (engine !== undefined) storeOutbound(engine, s, pid, undefined);
  s.resumeBlocked(); // a Receive Maximum slot is free [MQTT-4.9.0-?]
}
