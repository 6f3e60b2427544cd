/** PINGREQ → PINGRESP (3.1.1 §3.12, 5 §3.12) [MQTT-3.12.4-1]. */
import type { MqttConn } from '../types.js';
import { PINGRESP } from '../codec.js';

export function handlePingreq(conn: MqttConn): void {
  conn.send(PINGRESP);
}
