import { z } from 'zod';

/**
 * The `DeviceManager` configuration section (I²C sensors; docs/devices.md). Shipped default: no buses, so nothing is
 * opened or scanned. Kept here, next to the drivers, and listed in src/config/schema.ts with the other sections.
 */

const address = z.number().int().min(0x03, 'a 7-bit I²C address between 0x03 and 0x77').max(0x77, 'a 7-bit I²C address between 0x03 and 0x77');
const oversampling = z.union([z.literal(0), z.literal(1), z.literal(2), z.literal(4), z.literal(8), z.literal(16)], 'an oversampling of 0 (skip), 1, 2, 4, 8 or 16');

export const DeviceOptionsSchema = z
  .object({
    mode: z.enum(['forced', 'normal']).optional().describe('BME280: forced (one measurement per poll, sleeps between; default) or normal (continuous)'),
    oversampling: z
      .object({ temperature: oversampling.optional(), pressure: oversampling.optional(), humidity: oversampling.optional() })
      .strict()
      .optional()
      .describe('BME280: oversampling per quantity (0 skips it; default 1)'),
    filter: z.union([z.literal(0), z.literal(2), z.literal(4), z.literal(8), z.literal(16)], 'a filter coefficient of 0 (off), 2, 4, 8 or 16').optional().describe('BME280: IIR filter coefficient (default 0: off)'),
    standbyMs: z
      .union(
        [z.literal(0.5), z.literal(62.5), z.literal(125), z.literal(250), z.literal(500), z.literal(1000), z.literal(10), z.literal(20)],
        'a standby of 0.5, 10, 20, 62.5, 125, 250, 500 or 1000 ms',
      )
      .optional()
      .describe('BME280 normal mode: standby between measurements in ms (default 1000)'),
    repeatability: z.enum(['high', 'medium', 'low']).optional().describe('SHT3x: single-shot repeatability (default high)'),
  })
  .strict();
export type DeviceOptions = z.output<typeof DeviceOptionsSchema>;

export const DRIVER_IDS = ['bme280', 'sht31'] as const;

export const I2cDeviceConfigSchema = z
  .object({
    name: z.string().trim().min(1).max(128).regex(/^[^/#+\s][^#+]*$/, 'a device name without MQTT wildcards (+ #) that does not start with / or a space'),
    address,
    driver: z.enum(DRIVER_IDS),
    topic: z
      .string()
      .min(1)
      .max(1024)
      .regex(/^[^#+$][^#+]*$/, 'a topic name without MQTT wildcards (+ #) that does not start with $')
      .optional()
      .describe('where readings are published (default: topicPrefix + name)'),
    interval: z.number().int().min(100).max(86400000).optional().describe('ms between readings (default: the section interval)'),
    options: DeviceOptionsSchema.prefault({}),
  })
  .strict();
export type I2cDeviceConfig = z.output<typeof I2cDeviceConfigSchema>;

export const I2cBusConfigSchema = z
  .object({
    bus: z.number().int().min(0).max(255).describe('bus number N of /dev/i2c-N (1 on a Raspberry Pi)'),
    scan: z.boolean().default(true).describe('also add the sensors a scan identifies at addresses no configured device names'),
    devices: z.array(I2cDeviceConfigSchema).default([]),
  })
  .strict();

export const DeviceManagerSchema = z
  .object({
    buses: z
      .array(I2cBusConfigSchema)
      .default([])
      .refine((l) => new Set(l.map((b) => b.bus)).size === l.length, 'each bus number may appear once')
      .refine((l) => {
        const names = l.flatMap((b) => b.devices.map((d) => d.name));
        return new Set(names).size === names.length;
      }, 'device names must be unique across buses')
      .refine((l) => l.every((b) => new Set(b.devices.map((d) => d.address)).size === b.devices.length), 'two devices on one bus cannot share an address')
      .describe('I²C buses to use; none by default'),
    topicPrefix: z
      .string()
      .max(512)
      .regex(/^([^#+$][^#+]*)?$/, 'a topic prefix without MQTT wildcards (+ #) that does not start with $')
      .default('devices/').describe('topic of a device without its own: topicPrefix + device name'),
    interval: z.number().int().min(100).max(86400000).default(10000).describe('ms between readings of a device without its own interval'),
    retryInitial: z.number().int().min(10).default(1000).describe('ms before the first retry of a device that stopped answering (doubling)'),
    retryMax: z.number().int().min(10).default(60000).describe('longest wait between retries, and the retry period of an offline device'),
    offlineAfter: z.number().int().min(1).max(1000).default(5).describe('consecutive failed attempts after which a device is offline'),
    scanOnStart: z.boolean().default(true).describe('scan the buses when the server starts'),
    maxDevices: z.number().int().min(1).max(1024).default(128).describe('most devices tracked at once (a scan adds no more beyond)'),
  })
  .strict();
export type DeviceManagerConfig = z.output<typeof DeviceManagerSchema>;
