/**
 * PUBLISH from the client (3.1.1 §3.3, 5 §3.3): topic name and alias, QoS 0/1/2 with PUBACK / PUBREC, retain,
 * MQTT 5 properties mapped onto the engine's Message (user properties, response topic, correlation data, content
 * type, payload format, message expiry), authorization, and the server's Receive Maximum.
 */
import { refusePublish } from '../../../cluster/admission.js';
import { PUBLISHED, validateTopicName, type MessageInit } from '../../../engine/index.js';
import { IngressResult, ingress, ingressContext, type IngressContext } from '../../../engine/ingress.js';
import { ANONYMOUS, type Principal } from '../../../security/types.js';
import type { MqttConn } from '../types.js';
import { PacketType, decodePublish, encodeAck } from '../codec.js';
import { CloseReason, MqttProtocolError, Reason } from '../reason.js';
import { storeInbound } from '../session.js';

export function handlePublish(conn: MqttConn, flags: number, frame: Buffer, bodyOffset: number): void {
  const v5 = conn.v5;
  const p = decodePublish(frame, flags, bodyOffset, v5, conn.lastTopic);
  const cfg = conn.endpoint.mqtt;
  const props = p.properties;
  let topic = p.topic;

  // Topic alias (5 §3.3.2.3.4)
  const alias = props?.topicAlias;
  if (alias !== undefined) {
    if (alias === 0 || alias > cfg.serverMaximumTopicAlias) {
      throw new MqttProtocolError(Reason.TopicAliasInvalid, `topic alias ${alias} is outside 1..${cfg.serverMaximumTopicAlias} [MQTT-3.3.2-8, MQTT-3.3.2-9]`);
    }
    if (topic === '') {
      const known = conn.aliases.get(alias);
      if (known === undefined) throw new MqttProtocolError(Reason.ProtocolError, `topic alias ${alias} is not set on this connection`);
      topic = known;
    } else conn.aliases.set(alias, topic);
  }
  if (topic === '') throw new MqttProtocolError(Reason.ProtocolError, 'PUBLISH with an empty topic name and no topic alias [MQTT-4.7.3-1]');
  if (topic !== conn.lastTopic) {
    try {
      validateTopicName(topic); // no wildcards [MQTT-3.3.2-2]
    } catch (err) {
      throw new MqttProtocolError(Reason.TopicNameInvalid, (err as Error).message);
    }
    conn.lastTopic = topic; // the next PUBLISH to this topic reuses the string (decodePublish) and skips this check
  }
  // a Response Topic names where a reply is published: no wildcards [MQTT-3.3.2-14]; the packet is parsed, so it is
  // a protocol error (5 §4.13), not malformed
  const responseTopic = props?.responseTopic;
  if (responseTopic !== undefined && (responseTopic.includes('+') || responseTopic.includes('#'))) {
    throw new MqttProtocolError(Reason.ProtocolError, 'PUBLISH with a wildcard in its Response Topic [MQTT-3.3.2-14]');
  }

  const qos = p.qos;
  const s = conn.session!;
  if (qos > 0) {
    if (v5 && conn.inboundPending >= cfg.serverReceiveMaximum) {
      throw new MqttProtocolError(Reason.ReceiveMaximumExceeded, `more than ${cfg.serverReceiveMaximum} QoS 1/2 publishes unacknowledged [MQTT-3.3.4-9]`);
    }
    if (qos === 2 && s.inbound.has(p.packetId)) {
      // a resent QoS 2 PUBLISH is not delivered again (method A of 5 §4.3.3) [MQTT-4.3.3-9]; its PUBREC goes once
      // the first one's batch is written (it may still be pending, e.g. after a reconnect)
      conn.orderedAck(encodeAck(PacketType.PUBREC, p.packetId, 0, v5), s.lastStateWrite ?? ACK_NOW);
      return;
    }
  }
  if (refusePublish(conn, qos, p.packetId)) return; // cluster mode, cut off from NATS: QoS >= 1 is not acknowledged (0x80)
  conn.endpoint.stats.messagesIn++;

  const host = conn.broker.host;
  const engine = host.engine();
  let init: MessageInit;
  if (props === undefined) init = { payload: p.payload, qos, retain: p.retain };
  else
    init = {
      payload: p.payload,
      qos,
      retain: p.retain,
      contentType: props.contentType,
      correlationData: props.correlationData,
      responseTopic: props.responseTopic,
      userProperties: props.userProperties,
      payloadFormat: props.payloadFormatIndicator === undefined ? undefined : (props.payloadFormatIndicator as 0 | 1),
      expiresAt: props.messageExpiryInterval !== undefined ? Date.now() + props.messageExpiryInterval * 1000 : undefined,
    };
  // QoS 0 without properties, DUP or retain flag, with the shortest remaining length: this packet is byte for byte
  // what a subscriber of the same protocol class gets, so its deliveries send it as it came (outbound.ts EncodeCache)
  const asIs = flags === 0 && props === undefined && topic === p.topic && bodyOffset === varIntEnd(frame.length - bodyOffset);
  if (asIs) conn.broker.encoded.seed(topic, p.payload, frame, v5);
  // the one ingress path (src/engine/ingress.ts): $SYS, ACL publish/retain, payload format, payload schema, then the
  // engine with its flow control
  const cx = contextFor(engine, host.security(), conn.principal ?? ANONYMOUS, topic, init, s.publishOptions);
  let result: IngressResult;
  let durable: Promise<void>;
  try {
    result = ingress(cx);
    durable = cx.written!;
  } finally {
    if (asIs) conn.broker.encoded.unseed();
    release(cx);
  }
  if (result !== IngressResult.Accepted) {
    if (result === IngressResult.Unavailable) throw new MqttProtocolError(Reason.ServerUnavailable, 'the messaging engine is not running');
    if (result === IngressResult.QuotaExceeded) {
      // flow control: a subscription this message would reach is full (docs/messaging.md "Flow control and limits")
      if (refuseOverQuota(conn, qos, p.packetId)) return;
      durable = RESOLVED; // 3.1.1 with quotaExceededPolicy311 'drop': acknowledged and discarded (counted by the engine)
    } else {
      // refused: acknowledged with the reason (v5) or dropped (3.1.1 acknowledges and discards); the schema's refusal
      // is 0x99 for v5 QoS 1/2, QoS 0 and 3.1.1 are dropped (counted)
      const reason = result === IngressResult.SysTopic || result === IngressResult.NotAuthorized ? Reason.NotAuthorized : Reason.PayloadFormatInvalid;
      if (qos === 1) conn.send(encodeAck(PacketType.PUBACK, p.packetId, reason, v5));
      else if (qos === 2) conn.send(encodeAck(PacketType.PUBREC, p.packetId, reason, v5));
      return;
    }
  }
  if (qos === 0) {
    if (durable !== PUBLISHED) durable.catch(noop); // QoS 0: at most once (no promise per message when none waits)
    return;
  }
  // acknowledged once the message is durable, in the order received [MQTT-4.6.0-2]
  const ack = encodeAck(qos === 1 ? PacketType.PUBACK : PacketType.PUBREC, p.packetId, 0, v5);
  if (qos === 1 && durable === PUBLISHED) {
    // nothing to wait for (no store write: no persistent subscriber, queue or retain): the PUBACK goes now, or behind
    // the acknowledgements still waiting for the store. No promise, closure or queue entry per message: they were
    // most of the 2.6 KB a QoS 1 message allocated (sampling heap profiler, latency at 5 000 msg/s)
    conn.orderedAck(ack, undefined);
    return;
  }
  conn.inboundPending++;
  if (qos === 1) {
    conn.orderedAck(
      ack,
      durable.then(() => {
        conn.inboundPending--;
      }),
    );
    return;
  }
  // QoS 2: the accepted packet id goes into the same batch as the message (this runs in the same synchronous
  // step as engine.publish, so both land in the batch being gathered), and PUBREC waits for that batch: after a
  // crash the restored id set agrees with the stored messages (a resent PUBLISH with DUP is neither lost nor
  // delivered twice). A released id reused for a new message stops being released in the same write.
  s.released.delete(p.packetId);
  s.inbound.add(p.packetId);
  let written = durable;
  // accepted, so the engine was there (the route step answers Unavailable without it)
  if (engine!.hasStore && (s.persistent || s.stateStored)) {
    const idWritten = storeInbound(engine!, s, p.packetId, 1);
    written = durable === idWritten ? idWritten : Promise.all([durable, idWritten]).then(noop);
  }
  conn.orderedAck(ack, written);
}

function noop(): void {}

type Writable<T> = { -readonly [K in keyof T]: T[K] };

/**
 * The ingress context every PUBLISH uses in turn (the ingress runs synchronously and its outcome is read before it
 * is released), instead of a 13-field object per message; a PUBLISH handled while it is taken, were one ever nested
 * in another's ingress, gets a fresh one.
 */
const SHARED: Writable<IngressContext> = ingressContext(undefined, undefined, undefined, '', { payload: Buffer.alloc(0) }, undefined);
const SHARED_INIT = SHARED.init;
let sharedTaken = false;

function contextFor(
  engine: IngressContext['engine'],
  security: IngressContext['security'],
  principal: Principal,
  topic: string,
  init: MessageInit,
  opts: IngressContext['opts'],
): IngressContext {
  if (sharedTaken) return ingressContext(engine, security, principal, topic, init, opts);
  sharedTaken = true;
  const cx = SHARED;
  cx.engine = engine;
  cx.security = security;
  cx.principal = principal;
  cx.topic = topic;
  cx.init = init;
  cx.opts = opts;
  return cx;
}

/** Gives the shared context back, holding nothing of this message (its outcome fields cleared for the next one). */
function release(cx: IngressContext): void {
  if (cx !== SHARED) return;
  const w = SHARED;
  w.engine = undefined;
  w.security = undefined;
  w.principal = undefined;
  w.topic = '';
  w.init = SHARED_INIT;
  w.opts = undefined;
  w.denied = undefined;
  w.resourceType = undefined;
  w.problem = undefined;
  w.written = undefined;
  sharedTaken = false;
}

/** Where the body starts after a fixed header whose remaining length `n` is written in the fewest bytes. */
function varIntEnd(n: number): number {
  return n < 128 ? 2 : n < 16384 ? 3 : n < 2097152 ? 4 : 5;
}
const ACK_NOW: Promise<void> = Promise.resolve();

const RESOLVED: Promise<void> = Promise.resolve();

/**
 * A QoS 1/2 publish refused by flow control. v5: PUBACK / PUBREC 0x97 Quota exceeded, in order with the other
 * acknowledgements (a refused QoS 2 exchange ends there, its id is not kept) [MQTT-3.4.2-?]. 3.1.1 has no negative
 * acknowledgement: with quotaExceededPolicy311 'disconnect' (default) the publisher is closed without an
 * acknowledgement, so it sends the message again after reconnecting; returns false for 'drop'.
 */
function refuseOverQuota(conn: MqttConn, qos: number, packetId: number): boolean {
  if (qos === 0) return true; // never refused (the engine only refuses QoS >= 1); nothing to answer
  if (conn.v5) {
    conn.orderedAck(encodeAck(qos === 1 ? PacketType.PUBACK : PacketType.PUBREC, packetId, Reason.QuotaExceeded, true), RESOLVED);
    return true;
  }
  if (conn.endpoint.mqtt.quotaExceededPolicy311 === 'drop') return false;
  conn.close(CloseReason.QuotaExceeded);
  return true;
}
