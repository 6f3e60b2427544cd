import { z } from 'zod';

/**
 * The `LoRaDeviceManager` configuration section (MAPS LoRaDeviceManagerConfig, display name "LoRa"): LoRa radios on
 * serial ports (`loraSerial`, MAPS LoRa*ConfigDTO field names: `name`, `power`, `frequency`, `address`,
 * `transmissionRate`, `hexKey`, `serialConfig`), plus the radio settings and topics this driver needs. Default: no
 * radios. docs/devices.md "LoRa radios" explains every key.
 */
const NODE_PLACEHOLDER = '{node}';

/** The serial port of a radio (MAPS serialConfig / SerialDeviceDTO names); RN2483/RN2903 talk 57600 8N1. */
export const LoRaSerialPortSchema = z
  .object({
    port: z
      .string()
      .min(1, 'serialConfig.port is required (e.g. /dev/ttyUSB0)')
      .max(1024)
      .regex(/^[^\s\u0000]+$/, 'a serial port is a device path without whitespace (e.g. /dev/ttyUSB0)')
      .describe('device path, e.g. /dev/ttyUSB0 or /dev/serial/by-id/...; a bare name is taken under /dev'),
    baudRate: z.number().int().min(1200).max(921600).default(57600).describe('RN2483/RN2903 default: 57600'),
    dataBits: z.union([z.literal(5), z.literal(6), z.literal(7), z.literal(8)]).default(8),
    stopBits: z.union([z.literal(1), z.literal(1.5), z.literal(2)]).default(1),
    parity: z.enum(['none', 'even', 'odd', 'mark', 'space']).default('none'),
    flowControl: z.enum(['none', 'rtscts', 'xonxoff']).default('none'),
    serialNo: z.string().max(256).optional().describe('informational'),
    readTimeOut: z.number().int().min(0).max(3600000).optional().describe('accepted for MAPS compatibility (reads are event driven)'),
    writeTimeOut: z.number().int().min(0).max(3600000).optional().describe('accepted for MAPS compatibility (see commandTimeout)'),
  })
  .strict();

const topicTemplate = (what: string) =>
  z
    .string()
    .min(1)
    .max(1024)
    .refine((t) => t.split('/').filter((l) => l === NODE_PLACEHOLDER).length === 1 && t.split(NODE_PLACEHOLDER).length === 2, `the ${what} topic has {node} once, as a whole level (e.g. lora/gw/{node}/up)`)
    .refine((t) => !/[+#\u0000]/.test(t), `the ${what} topic has no wildcard (+, #)`);

export const LoRaSerialDeviceSchema = z
  .object({
    type: z.literal('loraSerial').default('loraSerial').describe('a LoRa modem on a serial port (Microchip RN2483 / RN2903, radio mode)'),
    name: z
      .string()
      .trim()
      .min(1, 'name is required')
      .max(128)
      .regex(/^[^/+#\s]+$/, 'a LoRa device name has no /, +, # or whitespace'),
    power: z.number().int().min(-3).max(20).default(14).describe('transmit power in dBm (RN2483: -3..15, RN2903: 2..20)'),
    frequency: z
      .number()
      .refine((f) => (f >= 433.05 && f <= 434.79) || (f >= 863 && f <= 870) || (f >= 902 && f <= 928), 'frequency is in MHz: 433.05-434.79 or 863-870 (RN2483), 902-928 (RN2903)')
      .default(868.1)
      .describe('MHz'),
    address: z.number().int().min(0).max(254).default(1).describe('node id of this radio in the framing (255 is broadcast)'),
    transmissionRate: z
      .number()
      .int()
      .min(0)
      .max(60000)
      .default(60)
      .describe('packets this radio transmits per minute at most (a duty-cycle guard; 0 = no limit); downlinks wait in their node queue'),
    hexKey: z
      .string()
      .regex(/^([0-9A-Fa-f]{2})*$/, 'hexKey is hexadecimal')
      .max(128)
      .optional()
      .describe('accepted for MAPS compatibility; this driver does not encrypt (use an application-level scheme)'),
    serialConfig: LoRaSerialPortSchema,
    spreadingFactor: z.number().int().min(7).max(12).default(7),
    bandwidth: z.union([z.literal(125), z.literal(250), z.literal(500)]).default(125).describe('kHz'),
    codingRate: z.enum(['4/5', '4/6', '4/7', '4/8']).default('4/5'),
    syncWord: z.number().int().min(0).max(255).default(0x12).describe('LoRa sync word (0x12: private networks, RadioHead default; 0x34 is LoRaWAN)'),
    topic: z
      .string()
      .min(1)
      .max(1024)
      .refine((t) => !/[+#\u0000]/.test(t), 'topic has no wildcard (+, #)')
      .optional()
      .describe('topic root of this radio; default lora/<name>'),
    uplinkTopic: topicTemplate('uplink').optional().describe('where node N\'s packets are published; default <topic>/{node}/up'),
    downlinkTopic: topicTemplate('downlink').optional().describe('messages published here are sent to node N; default <topic>/{node}/down'),
    acknowledge: z
      .boolean()
      .default(false)
      .describe('answer each uplink addressed to this radio (not broadcasts) with a RadioHead ACK (flags 0x80, same id, payload "!"), as RHReliableDatagram nodes expect; ACKs are sent first and outside transmissionRate'),
    maxNodes: z.number().int().min(1).max(255).default(255).describe('nodes tracked at once; when full the least recently heard one is forgotten'),
    downlinkQueueSize: z.number().int().min(1).max(1000).default(16).describe('messages queued per node for the air; when full the oldest is dropped (counted)'),
    healthCheckInterval: z.number().int().min(0).max(3600000).default(30000).describe('ms between `sys get ver` checks of an idle modem (0 = off); no answer takes the radio offline'),
  })
  .strict();

export const LoRaDeviceManagerSchema = z
  .object({
    data: z
      .array(LoRaSerialDeviceSchema)
      .max(64)
      .default([])
      .refine((list) => new Set(list.map((d) => d.name)).size === list.length, 'LoRa device names must be unique')
      .refine((list) => new Set(list.map((d) => d.serialConfig.port)).size === list.length, 'two LoRa devices cannot share a serial port'),
    retryInitial: z.number().int().min(10).max(3600000).default(1000).describe('ms before the first retry of a radio that failed or went offline'),
    retryMax: z.number().int().min(10).max(3600000).default(30000).describe('longest wait between retries'),
    commandTimeout: z.number().int().min(50).max(60000).default(2000).describe('ms the modem has to answer a command'),
  })
  .strict();

export type LoRaSerialDevice = z.output<typeof LoRaSerialDeviceSchema>;
export type LoRaDeviceManagerConfig = z.output<typeof LoRaDeviceManagerSchema>;

/** The uplink and downlink topic templates of a device, with the defaults filled in. */
export function topicsOf(d: LoRaSerialDevice): { uplink: string; downlink: string } {
  const root = (d.topic ?? `lora/${d.name}`).replace(/\/+$/, '');
  return { uplink: d.uplinkTopic ?? `${root}/${NODE_PLACEHOLDER}/up`, downlink: d.downlinkTopic ?? `${root}/${NODE_PLACEHOLDER}/down` };
}

export function topicFor(template: string, node: number): string {
  return template.replace(NODE_PLACEHOLDER, String(node));
}

/** The node id in a topic that matches a template, or undefined. */
export function nodeOfTopic(template: string, topic: string): number | undefined {
  const t = template.split('/');
  const a = topic.split('/');
  if (t.length !== a.length) return undefined;
  let node: number | undefined;
  for (let i = 0; i < t.length; i++) {
    if (t[i] === NODE_PLACEHOLDER) {
      if (!/^\d{1,3}$/.test(a[i]!)) return undefined;
      node = Number(a[i]);
      if (node > 255) return undefined;
    } else if (t[i] !== a[i]) return undefined;
  }
  return node;
}

export function filterOf(template: string): string {
  return template.replace(NODE_PLACEHOLDER, '+');
}
