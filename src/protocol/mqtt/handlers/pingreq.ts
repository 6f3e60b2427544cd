/** PINGREQ → PINGRESP (3.1.1 §3.12, 5 §3.12) [MQTT-3.12.4-1]. */
import type { MqttConnection } from '../connection.js';
import { PINGRESP } from '../codec.js';

export function handlePingreq(conn: MqttConnection): void {
  conn.send(PINGRESP);
}
