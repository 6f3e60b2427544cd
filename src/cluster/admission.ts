/**
 * The partition policy (docs/cluster.md "Partitions"): consistency first. While this node's membership is not
 * `Member` after having been one (Isolated, or Connecting again: its NATS connection or JetStream's quorum is gone),
 * it changes no cluster state:
 *
 * - a new CONNECT gets CONNACK 0x88 Server unavailable (3.1.1: return code 3), so the client tries another broker;
 * - SUBSCRIBE and UNSUBSCRIBE of a persistent session get 0x80 for every filter (its subscriptions are cluster
 *   state); 3.1.1 UNSUBACK carries no reason code, so a 3.1.1 UNSUBSCRIBE is applied as before;
 * - a QoS >= 1 PUBLISH gets PUBACK / PUBREC 0x80 (v5): in cluster mode its subscribers' sessions and the other nodes
 *   are reached through JetStream, so acknowledging it here would acknowledge what nothing stored. 3.1.1 has no
 *   negative acknowledgement: the publish is left unacknowledged and its client resends it on its next connection.
 *
 * Connected clients stay connected and QoS 0 between them flows locally. Before the first membership (the broker is
 * starting and has not joined yet) nothing is refused: there is no cluster state to disagree with.
 *
 * The handlers call the `refuse*` functions below, one line each; they cost one property read while the cluster is
 * off (`broker.admission` undefined).
 */
import { encodeAck, encodePacket, PacketType } from '../protocol/mqtt/codec.js';
import { Reason } from '../protocol/mqtt/reason.js';
import type { ClusterAdmission, MqttConn } from '../protocol/mqtt/types.js';
import { ClusterState } from './membership.js';

/** The MQTT 5 reason code of every refusal but CONNECT's (0x80 Unspecified error; 3.1.1 SUBACK's failure code too). */
const REFUSED = 0x80;

/** Follows this node's membership (the runtime event `cluster.state`) and answers `refusal()`. */
export class PartitionAdmission implements ClusterAdmission {
  private wasMember = false;
  private refusing: string | undefined;

  /** The membership changed state (ClusterService's `cluster.state`). */
  onState(state: ClusterState, reason: string): void {
    if (state === ClusterState.Member) {
      this.wasMember = true;
      this.refusing = undefined;
    } else if (state === ClusterState.Stopped) this.refusing = undefined;
    else if (this.wasMember || state === ClusterState.Isolated || state === ClusterState.Refused) {
      this.refusing = `this broker is cut off from the cluster (${state}: ${reason}); connect to another broker`;
    }
  }

  refusal(): string | undefined {
    return this.refusing;
  }
}

/** SUBSCRIBE while refusing, for a persistent session: SUBACK 0x80 for every filter. True when it answered. */
export function refuseSubscribe(conn: MqttConn, messageId: number, filters: number): boolean {
  if (conn.broker.admission?.refusal() === undefined || conn.session?.persistent !== true) return false;
  const codes = new Array<number>(filters).fill(REFUSED);
  conn.send(encodePacket({ cmd: 'suback', messageId, granted: codes, properties: conn.v5 ? { reasonString: conn.broker.admission.refusal() } : {} }, conn.protocolVersion));
  return true;
}

/** UNSUBSCRIBE while refusing, for a persistent MQTT 5 session: UNSUBACK 0x80 for every filter. True when it answered. */
export function refuseUnsubscribe(conn: MqttConn, messageId: number, filters: number): boolean {
  if (!conn.v5 || conn.broker.admission?.refusal() === undefined || conn.session?.persistent !== true) return false;
  const codes = new Array<number>(filters).fill(REFUSED);
  conn.send(encodePacket({ cmd: 'unsuback', messageId, granted: codes, properties: { reasonString: conn.broker.admission.refusal() } }, 5));
  return true;
}

/**
 * A QoS >= 1 PUBLISH while refusing: v5 PUBACK / PUBREC 0x80, in order with the other acknowledgements; 3.1.1 gets
 * none (see above). True when the publish is not to be routed.
 */
export function refusePublish(conn: MqttConn, qos: number, packetId: number): boolean {
  if (qos === 0 || conn.broker.admission?.refusal() === undefined) return false;
  if (conn.v5) conn.orderedAck(encodeAck(qos === 1 ? PacketType.PUBACK : PacketType.PUBREC, packetId, REFUSED, true), RESOLVED);
  return true;
}

const RESOLVED: Promise<void> = Promise.resolve();
