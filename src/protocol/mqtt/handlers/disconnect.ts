/**
 * DISCONNECT from the client (3.1.1 §3.14, 5 §3.14): the will is discarded [MQTT-3.14.4-3] unless the v5 reason
 * is 0x04 "Disconnect with Will Message"; a v5 client may change the session expiry (capped by the endpoint), but
 * setting a non-zero one when its CONNECT had 0 is a Protocol Error (5 §3.14.2.2.2).
 */
import type { MqttConn } from '../types.js';
import { MqttProtocolError, Reason } from '../reason.js';

export function handleDisconnect(conn: MqttConn, p: { cmd: 'disconnect'; reasonCode?: number; properties?: { sessionExpiryInterval?: number } }): void {
  const s = conn.session;
  const exp = p.properties?.sessionExpiryInterval;
  if (conn.v5 && exp !== undefined && s !== undefined) {
    // judged by what the CONNECT asked for, not the capped value (a CONNECT > 0 capped to 0 may still send one)
    if (conn.connectExpiry === 0 && exp !== 0) throw new MqttProtocolError(Reason.ProtocolError, 'session expiry changed from 0 in DISCONNECT (5 §3.14.2.2.2)');
    // without persistent_session the session stays non-persistent (handlers/connect.ts)
    s.expiry = conn.persistenceDenied ? 0 : Math.min(exp, conn.endpoint.mqtt.maximumSessionExpiry);
  }
  conn.clientDisconnected(conn.v5 && p.reasonCode === Reason.DisconnectWithWill);
}
