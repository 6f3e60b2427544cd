import type { DeviceOptions } from '../../config.js';
import { sleep, type I2cBus } from '../bus.js';
import type { Reading, SensorDevice, SensorDriver } from './driver.js';

/**
 * Sensirion SHT3x (SHT30/31/35) humidity and temperature sensor, per the SHT3x-DIS datasheet. Unlike the BME280
 * it has no register map: the host writes 16-bit commands and reads words, each followed by a CRC-8 (polynomial
 * 0x31, init 0xFF, no reflection, no final XOR; datasheet §4.12: CRC(0xBEEF) = 0x92). A word with a bad CRC fails
 * the reading (the device goes to error and retries) instead of publishing a corrupted value.
 *
 * Conversion (§4.13): T = -45 + 175 · S_T / (2^16 − 1) °C, RH = 100 · S_RH / (2^16 − 1) %.
 */

export const SHT31_CMD = {
  /** Single shot, no clock stretching: high / medium / low repeatability (table 9). */
  measure: { high: 0x2400, medium: 0x240b, low: 0x2416 },
  softReset: 0x30a2,
  readStatus: 0xf32d,
  clearStatus: 0x3041,
} as const;
/** Maximum measurement duration in ms per repeatability (table 4), rounded up. */
const DURATION_MS = { high: 16, medium: 7, low: 5 } as const;

/** CRC-8 of the SHT3x (poly 0x31, init 0xFF). */
export function sht3xCrc(data: Uint8Array): number {
  let crc = 0xff;
  for (const byte of data) {
    crc ^= byte;
    for (let i = 0; i < 8; i++) crc = crc & 0x80 ? ((crc << 1) ^ 0x31) & 0xff : (crc << 1) & 0xff;
  }
  return crc;
}

/** Reads the 16-bit word at `offset` of a response, checking the CRC that follows it. */
export function wordWithCrc(buf: Buffer, offset: number, what: string): number {
  const crc = sht3xCrc(buf.subarray(offset, offset + 2));
  if (crc !== buf[offset + 2]) throw new Error(`${what}: CRC mismatch (got 0x${buf[offset + 2]!.toString(16)}, computed 0x${crc.toString(16)})`);
  return buf.readUInt16BE(offset);
}

export const sht31Temperature = (raw: number): number => -45 + (175 * raw) / 65535;
export const sht31Humidity = (raw: number): number => (100 * raw) / 65535;

async function command(bus: I2cBus, address: number, cmd: number): Promise<void> {
  const b = Buffer.from([cmd >> 8, cmd & 0xff]);
  const { bytesWritten } = await bus.i2cWrite(address, 2, b);
  if (bytesWritten !== 2) throw new Error(`command 0x${cmd.toString(16)} not written`);
}

async function readWords(bus: I2cBus, address: number, words: number): Promise<Buffer> {
  const buf = Buffer.alloc(words * 3);
  const { bytesRead } = await bus.i2cRead(address, buf.length, buf);
  if (bytesRead !== buf.length) throw new Error(`short read (${bytesRead} of ${buf.length} bytes)`);
  return buf;
}

const round = (x: number, digits: number) => Math.round(x * 10 ** digits) / 10 ** digits;

class Sht31 implements SensorDevice {
  private readonly repeatability: 'high' | 'medium' | 'low';
  constructor(
    private readonly bus: I2cBus,
    private readonly address: number,
    options: DeviceOptions,
  ) {
    this.repeatability = options.repeatability ?? 'high';
  }

  async init(): Promise<void> {
    await command(this.bus, this.address, SHT31_CMD.softReset);
    await sleep(2); // soft reset time: 1.5 ms max (table 4)
    await command(this.bus, this.address, SHT31_CMD.readStatus);
    wordWithCrc(await readWords(this.bus, this.address, 1), 0, 'status');
    await command(this.bus, this.address, SHT31_CMD.clearStatus);
  }

  async read(): Promise<Reading> {
    await command(this.bus, this.address, SHT31_CMD.measure[this.repeatability]);
    await sleep(DURATION_MS[this.repeatability]);
    const buf = await readWords(this.bus, this.address, 2);
    const t = wordWithCrc(buf, 0, 'temperature');
    const rh = wordWithCrc(buf, 3, 'humidity');
    return { temperature: round(sht31Temperature(t), 2), humidity: round(sht31Humidity(rh), 2) };
  }
}

export const sht31Driver: SensorDriver = {
  id: 'sht31',
  description: 'Sensirion SHT31 humidity and temperature sensor',
  addresses: [0x44, 0x45],
  units: { temperature: '°C', humidity: '%RH' },
  async probe(bus, address) {
    try {
      await command(bus, address, SHT31_CMD.readStatus);
      const buf = await readWords(bus, address, 1);
      wordWithCrc(buf, 0, 'status');
      return true;
    } catch {
      return false;
    }
  },
  open: (bus, address, options) => new Sht31(bus, address, options),
};
