/**
 * AUTH (5 §3.15). Switchyard offers no enhanced authentication method, so a client that did not negotiate one in
 * CONNECT must not send AUTH: protocol error [MQTT-3.15.0-?, MQTT-4.12.0-1].
 */
import type { MqttConnection } from '../connection.js';
import { MqttProtocolError, Reason } from '../reason.js';

export function handleAuth(conn: MqttConnection, _p: { cmd: 'auth' }): void {
  if (!conn.v5) throw new MqttProtocolError(Reason.MalformedPacket, 'AUTH is not an MQTT 3.1.1 packet');
  throw new MqttProtocolError(Reason.ProtocolError, 'AUTH without an authentication method in CONNECT [MQTT-4.12.0-1]');
}
