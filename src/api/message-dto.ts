import { isUtf8 } from 'node:buffer';
import { z } from 'zod';
import type { Message, MessageInit } from '../engine/index.js';
import { ValidationError } from '../errors.js';

/**
 * The REST wire form of a message (MAPS MessageDTO): payload and correlationData as standard Base64, `expiry` as a
 * time to live in ms (-1 or 0: never), `priority` 0..10 (default 4), `qualityOfService` 0..2, `creation` as an
 * ISO-8601 date-time on output. Beyond MAPS, the MQTT 5 publish properties travel both ways: `userProperties`,
 * `responseTopic`, `payloadFormatIndicator` (and `contentType`, `correlationData`, `expiry` as the message expiry).
 */
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/**
 * MQTT 5 strings: at most 65 535 UTF-8 bytes (21 845 UTF-16 units never exceed that) and no U+0000
 * [MQTT-1.5.4-2], so whatever REST accepts can be sent to an MQTT 5 subscriber.
 */
const mqttString = (what: string) =>
  z
    .string()
    .max(21845, `${what} is too long for MQTT (at most 21 845 characters)`)
    .refine((v) => !v.includes('\u0000'), `${what} must not contain U+0000`);

/** MQTT 5 publish properties carried by REST messages both ways (Switchyard's extension of the MAPS MessageDTO). */
const Mqtt5In = {
  userProperties: z
    .record(mqttString('a user property name'), z.union([mqttString('a user property value'), z.array(mqttString('a user property value')).max(1000)]))
    .refine((r) => Object.keys(r).length <= 1000, 'at most 1000 user property names')
    .optional()
    .describe('MQTT 5 user properties: name → value, or → list of values for a name given several times'),
  responseTopic: mqttString('responseTopic')
    .refine((v) => v.length > 0 && !/[+#]/.test(v), 'responseTopic must be a topic name without wildcards')
    .optional()
    .describe('MQTT 5 response topic (request / response)'),
  payloadFormatIndicator: z
    .union([z.literal(0), z.literal(1)], { error: 'payloadFormatIndicator must be 0 (bytes) or 1 (UTF-8 text)' })
    .optional()
    .describe('MQTT 5 payload format indicator: 0 unspecified bytes, 1 UTF-8 text'),
};

export const MessageIn = z
  .object({
    identifier: z.number().int().optional().describe('ignored on publish'),
    payload: z.string().describe('standard Base64'),
    contentType: z.string().max(256).optional(),
    correlationData: z
      .union([z.string(), z.array(z.number().int().min(-128).max(255))])
      .optional()
      .describe('Base64, or an array of bytes (MAPS form)'),
    expiry: z.number().int().min(-1).optional().describe('time to live in ms; -1 or 0 = never expires'),
    priority: z.number().int().min(0, 'priority must be between 0 and 10').max(10, 'priority must be between 0 and 10').optional(),
    qualityOfService: z.number().int().min(0, 'qualityOfService must be 0, 1 or 2').max(2, 'qualityOfService must be 0, 1 or 2').optional(),
    creation: z.string().optional().describe('ignored on publish'),
    dataMap: z.record(z.string(), z.unknown()).optional(),
    metaData: z.record(z.string(), z.string()).optional(),
    ...Mqtt5In,
  })
  .meta({ id: 'MessageDTO' });

export const MessageOut = z
  .object({
    identifier: z.number().int(),
    payload: z.string(),
    contentType: z.string().optional(),
    correlationData: z.string().optional(),
    expiry: z.number().int(),
    priority: z.number().int(),
    qualityOfService: z.number().int(),
    creation: z.string(),
    dataMap: z.record(z.string(), z.unknown()),
    metaData: z.record(z.string(), z.string()),
    userProperties: z.record(z.string(), z.union([z.string(), z.array(z.string())])).optional(),
    responseTopic: z.string().optional(),
    payloadFormatIndicator: z.number().int().optional(),
    destinationName: z.string(),
  })
  .meta({ id: 'AsyncMessageDTO' });

export type MessageInDTO = z.infer<typeof MessageIn>;
export type MessageOutDTO = z.infer<typeof MessageOut>;

export function decodeBase64(value: string, field: string): Buffer {
  const clean = value.replace(/\s+/g, '');
  if (!BASE64.test(clean)) throw new ValidationError(`${field} is not valid standard Base64`);
  return Buffer.from(clean, 'base64');
}

/** Validated wire message → engine MessageInit. */
export function fromDto(dto: MessageInDTO, now: number): MessageInit {
  let correlationData: Buffer | undefined;
  if (typeof dto.correlationData === 'string') correlationData = decodeBase64(dto.correlationData, 'message.correlationData');
  else if (Array.isArray(dto.correlationData)) correlationData = Buffer.from(dto.correlationData.map((b) => b & 0xff));
  const payload = decodeBase64(dto.payload, 'message.payload');
  if (dto.payloadFormatIndicator === 1 && !isUtf8(payload)) throw new ValidationError('message.payload is not UTF-8 text although payloadFormatIndicator is 1');
  return {
    payload,
    contentType: dto.contentType,
    correlationData,
    expiresAt: dto.expiry !== undefined && dto.expiry > 0 ? now + dto.expiry : 0,
    priority: dto.priority,
    qos: dto.qualityOfService ?? 0,
    creation: now,
    dataMap: dto.dataMap ?? {},
    metaData: dto.metaData ?? {},
    userProperties: dto.userProperties,
    responseTopic: dto.responseTopic,
    payloadFormat: dto.payloadFormatIndicator,
  };
}

/** Engine message → wire message (what consume and SSE deliver). */
export function toDto(msg: Message, destinationName: string): MessageOutDTO {
  const out: MessageOutDTO = {
    identifier: msg.id,
    payload: msg.payload.toString('base64'),
    expiry: msg.expiresAt > 0 ? Math.max(0, msg.expiresAt - msg.creation) : -1,
    priority: msg.priority,
    qualityOfService: msg.qos,
    creation: new Date(msg.creation).toISOString(),
    dataMap: msg.dataMap ?? {},
    metaData: msg.metaData ?? {},
    destinationName,
  };
  if (msg.contentType !== undefined) out.contentType = msg.contentType;
  if (msg.correlationData !== undefined) out.correlationData = msg.correlationData.toString('base64');
  if (msg.userProperties !== undefined) out.userProperties = msg.userProperties;
  if (msg.responseTopic !== undefined) out.responseTopic = msg.responseTopic;
  if (msg.payloadFormat !== undefined) out.payloadFormatIndicator = msg.payloadFormat;
  return out;
}

// The selector view of a message lives with the runtime, which restores persistent REST subscriptions with it.
export { messageSelector, selectorView } from '../messaging/message-selector.js';
