/**
 * SUBSCRIBE (3.1.1 §3.8, 5 §3.8): each topic filter is validated, authorized (subscribe on the topic or queue,
 * wildcard_subscription on the server for a wildcard filter, and durable on the topic or queue when the session is
 * persistent: its subscriptions are durable) and made in the engine with its options (QoS,
 * no local, retain as published, retain handling, subscription identifier). SUBACK lists one code per filter in
 * order [MQTT-3.8.4-6] and goes out before the retained messages the subscription causes. Each subscription also
 * checks subscribe on every topic it delivers (the security service's delivery authorizer), so `#`, `+` and
 * `$share/...` filters never deliver a topic the user is denied.
 *
 * A filter that breaks the topic filter rules (empty [MQTT-4.7.3-1], `#` not last or not a whole level
 * [MQTT-4.7.1-1], `+` not a whole level [MQTT-4.7.1-2], a malformed `$share/` filter [MQTT-4.8.2-1, MQTT-4.8.2-2])
 * makes the packet malformed, as in UNSUBSCRIBE: the connection closes, with DISCONNECT 0x81 in v5, and no filter
 * of that packet is subscribed. SUBACK 0x8F is not for it: that code says "the Topic Filter is correctly formed,
 * but is not allowed for this Client" (5 §3.9.3); 3.1.1's SUBACK 0x80 is for a subscription the server refuses.
 */
import { refuseSubscribe } from '../../../cluster/admission.js';
import { hasWildcard, parseSharedFilter, validateTopicFilter } from '../../../engine/index.js';
import type { MqttConn } from '../types.js';
import { encodePacket } from '../codec.js';
import { MqttProtocolError, Reason } from '../reason.js';
import type { StoredSubscription } from '../session.js';

export interface SubscribePacket {
  cmd: 'subscribe';
  messageId: number;
  subscriptions: Array<{ topic: string; qos: number; nl?: boolean; rap?: boolean; rh?: number }>;
  properties?: { subscriptionIdentifier?: number | number[]; userProperties?: Record<string, unknown> };
}

export function handleSubscribe(conn: MqttConn, p: SubscribePacket): void {
  if (!p.subscriptions || p.subscriptions.length === 0) {
    throw new MqttProtocolError(Reason.ProtocolError, 'SUBSCRIBE without a topic filter [MQTT-3.8.3-3]');
  }
  // a non-zero packet identifier (3.1.1 [MQTT-2.3.1-1], 5 [MQTT-2.2.1-3])
  if (p.messageId === 0) throw new MqttProtocolError(Reason.MalformedPacket, 'SUBSCRIBE with packet identifier 0 [MQTT-2.2.1-3]');
  for (const req of p.subscriptions) {
    try {
      validateTopicFilter(req.topic);
    } catch (err) {
      throw new MqttProtocolError(Reason.MalformedPacket, `SUBSCRIBE with a malformed topic filter: ${(err as Error).message}`);
    }
  }
  const v5 = conn.v5;
  let subId: number | undefined;
  const rawId = p.properties?.subscriptionIdentifier;
  if (rawId !== undefined) {
    if (Array.isArray(rawId)) throw new MqttProtocolError(Reason.ProtocolError, 'more than one subscription identifier in SUBSCRIBE');
    if (rawId === 0) throw new MqttProtocolError(Reason.ProtocolError, 'subscription identifier 0 [MQTT-3.8.2-?]');
    subId = rawId;
  }
  if (refuseSubscribe(conn, p.messageId, p.subscriptions.length)) return; // cluster mode, cut off from NATS (0x80)
  const host = conn.broker.host;
  const engine = host.engine();
  if (engine === undefined) throw new MqttProtocolError(Reason.ServerUnavailable, 'the messaging engine is not running');
  const security = host.security();
  const s = conn.session!;
  const codes: number[] = [];
  const mark = conn.outMark;
  let changed = false;
  for (const req of p.subscriptions) {
    const filter = req.topic;
    const qos = Math.min(req.qos, 2) as 0 | 1 | 2;
    const shared = parseSharedFilter(filter);
    if (v5 && shared !== null && req.nl) {
      throw new MqttProtocolError(Reason.ProtocolError, 'no local on a shared subscription [MQTT-3.8.3-4]');
    }
    const plain = shared !== null ? shared.filter : filter;
    if (security.enabled) {
      const type = engine.isQueueName(plain) ? 'Queue' : 'Topic';
      const ok =
        security.isAllowed(conn.principal!, 'subscribe', type, plain) &&
        (!hasWildcard(plain) || security.isAllowed(conn.principal!, 'wildcard_subscription', 'Server', host.serverName)) &&
        // a subscription of a persistent session is durable: it also needs durable on the same resource
        (!s.persistent || security.isAllowed(conn.principal!, 'durable', type, plain));
      if (!ok) {
        codes.push(v5 ? Reason.NotAuthorized : 0x80);
        continue;
      }
    }
    const opts: StoredSubscription = { filter, qos, nl: v5 ? req.nl === true : false, rap: v5 ? req.rap === true : false, rh: (v5 ? (req.rh ?? 0) : 0) as 0 | 1 | 2 };
    if (subId !== undefined) opts.id = subId;
    try {
      const sub = engine.subscribe({
        sessionId: s.sessionId,
        filter,
        qos,
        noLocal: opts.nl,
        retainAsPublished: opts.rap,
        retainHandling: opts.rh,
        // per delivered topic: a wildcard or shared filter never delivers a topic this user may not read
        authorize: security.deliveryAuthorizer?.({ uniqueId: conn.principal!.uniqueId }),
        durable: s.persistent,
        subscriptionId: subId,
        oneCopyPerSession: true, // overlapping subscriptions: one copy at the highest QoS, with every identifier [MQTT-3.3.4-2]
        maxDepth: conn.broker.maxQueued,
        refuseWhenFull: true, // flow control: a full queue refuses QoS 1/2 publishes (docs/messaging.md)
        sink: conn,
      });
      s.subs.set(filter, { opts, sub });
      changed = true;
      codes.push(qos); // granted QoS [MQTT-3.8.4-?]
    } catch (err) {
      conn.broker.log.debug({ err, filter }, 'subscription refused');
      codes.push(v5 ? Reason.ImplementationSpecificError : 0x80);
    }
  }
  const suback = encodePacket({ cmd: 'suback', messageId: p.messageId, granted: codes, properties: {} }, conn.protocolVersion);
  conn.sendAt(mark, suback);
  if (changed) conn.broker.save(s);
}
