/**
 * The one ingress path (docs/architecture.md, "One ingress path"): every message that enters the engine from outside the server
 * (MQTT PUBLISH, REST publish, NMEA lines of a serial endpoint, device readings, LoRa uplinks, messages an integration
 * link receives from its peer) passes the steps of `INGRESS_STEPS`, in that order, and gets one `IngressResult`. Each
 * protocol maps the result to its own answer (MQTT 5 reason code, 3.1.1 behaviour, REST status, link counter); none
 * of them writes a policy check of its own. As NATS's one inbound path and Aedes's `publishActions`.
 *
 * It is on the QoS 0 hot path: plain step functions over one context object per publish, no closures or promises
 * made here (the route step hands back the engine's own promise, often the shared resolved one).
 */
import { isUtf8 } from 'node:buffer';
import type { Permission, Principal, ResourceType } from '../security/types.js';
import { QUOTA_EXCEEDED, type Engine, type PublishOptions } from './engine.js';
import type { MessageInit } from './message.js';

/** What the steps decided. Every value but Accepted is a refusal: nothing was published. */
export const IngressResult = {
  /** Routed by the engine; `written` says when it is durable. */
  Accepted: 0,
  /** A `$SYS` topic: only the server publishes there. */
  SysTopic: 1,
  /** The ACL refuses publish (or retain, for a retained message): `denied` and `resourceType` say which. */
  NotAuthorized: 2,
  /** The publisher declared the payload UTF-8 (payload format indicator 1) and it is not. */
  PayloadFormatInvalid: 3,
  /** The destination's payload schema rejects it (enforcement reject): `problem` says why. */
  SchemaRejected: 4,
  /** Flow control: a subscription it would reach is full, or a paused topic's hold is (QoS >= 1 only). */
  QuotaExceeded: 5,
  /** No messaging engine (the server is restarting). */
  Unavailable: 6,
} as const;
export type IngressResult = (typeof IngressResult)[keyof typeof IngressResult];

/** The part of the security service the ingress uses. */
export interface IngressAuthorizer {
  readonly enabled: boolean;
  isAllowed(principal: Principal, permission: Permission, resourceType: ResourceType, resourceKey: string): boolean;
}

/** The part of the engine the ingress uses. */
export type IngressEngine = Pick<Engine, 'publish' | 'publishToGroup' | 'checkSchema' | 'isQueueName'>;

/** One publish on its way in: what the caller gives, and what the steps found. */
export interface IngressContext {
  readonly engine: IngressEngine | undefined;
  readonly security: IngressAuthorizer | undefined;
  /**
   * The publisher whose ACL decides. `undefined`: a publisher the operator configured (a device, a serial line, an
   * integration link): its configuration is its authority, so the ACL step passes; every other step applies.
   */
  readonly principal: Principal | undefined;
  readonly topic: string;
  /** The message; `decode` may fill it in once the publisher is authorized. */
  init: MessageInit;
  readonly opts: PublishOptions | undefined;
  /** Set for a message a link received for one federated shared group (`Engine.publishToGroup`). */
  readonly group: string | undefined;
  readonly groupFilter: string | undefined;
  /**
   * Decodes the message body after the ACL step (REST: the Base64 DTO, so an unauthorized caller learns nothing
   * about its body); may throw a BrokerError, which reaches the caller. Undefined when `init` is complete.
   */
  readonly decode: ((cx: IngressContext) => void) | undefined;
  /** Out: the permission the ACL refused (NotAuthorized). */
  denied: Permission | undefined;
  /** Out: Topic or Queue, as the ACL step judged the destination. */
  resourceType: ResourceType | undefined;
  /** Out: the schema's first problem (SchemaRejected). */
  problem: string | undefined;
  /** Out: the engine's promise (Accepted; QuotaExceeded: the shared rejected QUOTA_EXCEEDED). */
  written: Promise<void> | undefined;
}

/**
 * A context with every field present (one object shape for every caller), from positional arguments so the MQTT
 * path makes no second object per publish. `decode`, `group` and `groupFilter`: see IngressContext.
 */
export function ingressContext(
  engine: IngressEngine | undefined,
  security: IngressAuthorizer | undefined,
  principal: Principal | undefined,
  topic: string,
  init: MessageInit,
  opts: PublishOptions | undefined,
  decode?: (cx: IngressContext) => void,
  group?: string,
  groupFilter?: string,
): IngressContext {
  return { engine, security, principal, topic, init, opts, group, groupFilter, decode, denied: undefined, resourceType: undefined, problem: undefined, written: undefined };
}

/** A step: IngressResult.Accepted to go on to the next one, anything else ends the publish. */
export type IngressStep = (cx: IngressContext) => IngressResult;

/** `$SYS/...` belongs to the server (src/messaging/sys-topics.ts), on every path: never published by anyone else. */
export function refuseSysTopic(cx: IngressContext): IngressResult {
  return cx.topic.startsWith('$SYS') ? IngressResult.SysTopic : IngressResult.Accepted;
}

/** publish on the topic or queue, and retain as well for a retained message (docs/security.md). */
export function authorize(cx: IngressContext): IngressResult {
  const security = cx.security;
  const principal = cx.principal;
  if (principal === undefined || security === undefined || !security.enabled) return IngressResult.Accepted;
  const topic = cx.topic;
  const type: ResourceType = cx.engine?.isQueueName(topic) ? 'Queue' : 'Topic';
  cx.resourceType = type;
  if (!security.isAllowed(principal, 'publish', type, topic)) cx.denied = 'publish';
  else if (cx.init.retain === true && !security.isAllowed(principal, 'retain', type, topic)) cx.denied = 'retain';
  else return IngressResult.Accepted;
  return IngressResult.NotAuthorized;
}

/** The caller's body decoding, now that the publisher may publish here. */
export function decodeBody(cx: IngressContext): IngressResult {
  if (cx.decode !== undefined) cx.decode(cx);
  return IngressResult.Accepted;
}

/** A payload declared UTF-8 text (MQTT 5 payload format indicator, REST payloadFormatIndicator) must be (5 §3.3.2.3.2: 0x99 Payload format invalid). */
export function checkPayloadFormat(cx: IngressContext): IngressResult {
  const init = cx.init;
  if (init.payloadFormat !== 1) return IngressResult.Accepted;
  return isUtf8(payloadBuffer(init)) ? IngressResult.Accepted : IngressResult.PayloadFormatInvalid;
}

/** The destination's payload schema (docs/schemas.md); counts valid/invalid/rejected per destination. */
export function checkPayloadSchema(cx: IngressContext): IngressResult {
  const engine = cx.engine;
  if (engine === undefined) return IngressResult.Accepted; // the route step answers Unavailable
  const problem = engine.checkSchema(cx.topic, payloadBuffer(cx.init));
  if (problem === undefined) return IngressResult.Accepted;
  cx.problem = problem;
  return IngressResult.SchemaRejected;
}

/**
 * Hands the message to the engine. Flow control is decided there, in the same call (it needs the routes the message
 * would take): a full refuseWhenFull subscription or a full paused hold refuses QoS >= 1 with QUOTA_EXCEEDED.
 */
export function route(cx: IngressContext): IngressResult {
  const engine = cx.engine;
  if (engine === undefined) return IngressResult.Unavailable;
  const written = cx.group === undefined ? engine.publish(cx.topic, cx.init, cx.opts) : engine.publishToGroup(cx.group, cx.groupFilter!, cx.topic, cx.init, cx.opts);
  cx.written = written;
  return written === QUOTA_EXCEEDED ? IngressResult.QuotaExceeded : IngressResult.Accepted;
}

/** The steps, in order. A protocol publishes only through `ingress()`, which runs all of them. */
export const INGRESS_STEPS: readonly IngressStep[] = Object.freeze([refuseSysTopic, authorize, decodeBody, checkPayloadFormat, checkPayloadSchema, route]);

/**
 * Runs the steps of INGRESS_STEPS in that order; the first refusal ends the publish. They are called one by one, not
 * by a loop over the array: a call site that sees one function gets it inlined, while a loop's single call site sees
 * six and calls each through the generic path (measured in-process: about 20 ns against 150 ns per publish, which
 * showed on the MQTT QoS 0 benchmark). test/engine/ingress.test.ts checks that this follows INGRESS_STEPS.
 */
export function ingress(cx: IngressContext): IngressResult {
  let r = refuseSysTopic(cx);
  if (r !== IngressResult.Accepted) return r;
  r = authorize(cx);
  if (r !== IngressResult.Accepted) return r;
  r = decodeBody(cx);
  if (r !== IngressResult.Accepted) return r;
  r = checkPayloadFormat(cx);
  if (r !== IngressResult.Accepted) return r;
  r = checkPayloadSchema(cx);
  if (r !== IngressResult.Accepted) return r;
  return route(cx);
}

/** The payload as a Buffer, converted once in place (a device reading or NMEA line arrives as a string). */
function payloadBuffer(init: MessageInit): Buffer {
  const p = init.payload;
  if (Buffer.isBuffer(p)) return p;
  const b = typeof p === 'string' ? Buffer.from(p) : Buffer.from(p.buffer, p.byteOffset, p.byteLength);
  init.payload = b;
  return b;
}

/** Why a publish was refused, in words (logs of the publishers that have no protocol answer: devices, links). */
export function refusalText(cx: IngressContext, result: IngressResult): string {
  switch (result) {
    case IngressResult.SysTopic:
      return `${cx.topic} is a $SYS topic; only the server publishes there`;
    case IngressResult.NotAuthorized:
      return `${cx.principal?.username ?? 'the publisher'} lacks ${cx.denied} on ${cx.resourceType} ${cx.topic}`;
    case IngressResult.PayloadFormatInvalid:
      return 'the payload is not UTF-8 text although its payload format indicator is 1';
    case IngressResult.SchemaRejected:
      return `Payload does not match the schema of ${cx.topic}: ${cx.problem}`;
    case IngressResult.QuotaExceeded:
      return 'Quota exceeded: a subscription this message would reach holds its maximum of queued messages or bytes';
    case IngressResult.Unavailable:
      return 'the messaging engine is not running';
    default:
      return 'accepted';
  }
}
