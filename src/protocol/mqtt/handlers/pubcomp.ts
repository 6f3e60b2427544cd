/** PUBCOMP from the client (5 §3.7): the outbound QoS 2 exchange is over; its packet id is free [MQTT-4.3.3-?]. */
import type { MqttConn } from '../types.js';
import { stateEngine, storeOutbound } from '../session.js';

export function handlePubcomp(conn: MqttConn, p: { messageId: number }): void {
  const s = conn.session!;
  const o = s.outbound.get(p.messageId);
  if (o === undefined || o.stage !== 2) return;
  s.outbound.delete(p.messageId);
  // nothing waits: if this deletion is lost in a crash, PUBREL is sent again and the client answers PUBCOMP
  const engine = stateEngine(conn.broker.host.engine(), s);
  if (engine !== undefined) storeOutbound(engine, s, p.messageId, undefined);
  s.resumeBlocked();
}
