/**
 * PUBREL from the client (5 §3.6): the inbound QoS 2 exchange ends with PUBCOMP [MQTT-4.3.3-11]. For a persistent
 * session PUBCOMP goes once the id's release is written: a client that reconnects before (or after a crash) sends
 * PUBREL again and gets PUBCOMP 0 (the id is kept as released until the client uses it for a new PUBLISH).
 */
import type { MqttConn } from '../types.js';
import { PacketType, encodeAck } from '../codec.js';
import { Reason } from '../reason.js';
import { releaseInbound } from '../session.js';

const RESOLVED: Promise<void> = Promise.resolve();

export function handlePubrel(conn: MqttConn, p: { messageId: number }): void {
  const s = conn.session!;
  const pid = p.messageId;
  if (s.inbound.has(pid)) {
    if (conn.inboundPending > 0) conn.inboundPending--;
    const written = releaseInbound(conn.broker.host.engine(), s, pid);
    conn.orderedAck(encodeAck(PacketType.PUBCOMP, pid, 0, conn.v5), written ?? RESOLVED);
    return;
  }
  // released before (PUBCOMP lost with a connection or a restart): completed again; otherwise unknown (0x92, v5)
  const known = s.released.has(pid);
  conn.orderedAck(encodeAck(PacketType.PUBCOMP, pid, known ? 0 : Reason.PacketIdentifierNotFound, conn.v5), known ? (s.lastStateWrite ?? RESOLVED) : RESOLVED);
}
