import type { DeviceOptions } from '../../config.js';
import { sleep, type I2cBus } from '../bus.js';
import type { Reading, SensorDevice, SensorDriver } from './driver.js';

/**
 * Bosch BME280 (temperature, pressure, humidity), per the BME280 datasheet (BST-BME280-DS002):
 * chip id 0x60 at 0xD0; calibration ("trimming") words at 0x88–0xA1 and 0xE1–0xE7; ctrl_hum 0xF2, status 0xF3,
 * ctrl_meas 0xF4, config 0xF5; data 0xF7–0xFE (press msb/lsb/xlsb, temp msb/lsb/xlsb, hum msb/lsb).
 *
 * Compensation: the datasheet's integer formulas (§4.2.3 and §8.2): temperature in 32-bit integers
 * (`BME280_compensate_T_int32`, 0.01 °C), pressure in the **64-bit** version (`BME280_compensate_P_int64`, Pa in
 * Q24.8) done with BigInt, humidity in 32-bit integers (`bme280_compensate_H_int32`, %RH in Q22.10). 32-bit
 * arithmetic is C's (Math.imul and `| 0` wrap like int32), shifts of negative numbers are arithmetic as on every
 * compiler Bosch supports, and BigInt division truncates toward zero like C's.
 */

export const BME280_CHIP_ID = 0x60;
export const REG = {
  calib00: 0x88, // 0x88..0xA1: dig_T1..dig_P9, (0xA0 reserved), dig_H1
  chipId: 0xd0,
  reset: 0xe0,
  calib26: 0xe1, // 0xE1..0xE7: dig_H2..dig_H6
  ctrlHum: 0xf2,
  status: 0xf3,
  ctrlMeas: 0xf4,
  config: 0xf5,
  data: 0xf7, // 0xF7..0xFE
} as const;
export const RESET_WORD = 0xb6;
export const STATUS_MEASURING = 0x08;
export const STATUS_IM_UPDATE = 0x01;
export const MODE = { sleep: 0b00, forced: 0b01, normal: 0b11 } as const;

export interface Bme280Calibration {
  T1: number;
  T2: number;
  T3: number;
  P1: number;
  P2: number;
  P3: number;
  P4: number;
  P5: number;
  P6: number;
  P7: number;
  P8: number;
  P9: number;
  H1: number;
  H2: number;
  H3: number;
  H4: number;
  H5: number;
  H6: number;
}

const s8 = (b: number) => (b << 24) >> 24;

/** Parses the two calibration blocks: 26 bytes from 0x88, 7 bytes from 0xE1 (datasheet table 16). */
export function parseCalibration(a: Buffer, e: Buffer): Bme280Calibration {
  return {
    T1: a.readUInt16LE(0),
    T2: a.readInt16LE(2),
    T3: a.readInt16LE(4),
    P1: a.readUInt16LE(6),
    P2: a.readInt16LE(8),
    P3: a.readInt16LE(10),
    P4: a.readInt16LE(12),
    P5: a.readInt16LE(14),
    P6: a.readInt16LE(16),
    P7: a.readInt16LE(18),
    P8: a.readInt16LE(20),
    P9: a.readInt16LE(22),
    H1: a[25]!, // 0xA1 (0xA0 is not used)
    H2: e.readInt16LE(0), // 0xE1/0xE2
    H3: e[2]!, // 0xE3
    H4: (s8(e[3]!) * 16) | (e[4]! & 0x0f), // 0xE4 [11:4], 0xE5 [3:0]: signed 12 bits
    H5: (s8(e[5]!) * 16) | (e[4]! >> 4), // 0xE6 [11:4], 0xE5 [7:4]: signed 12 bits
    H6: s8(e[6]!), // 0xE7
  };
}

/** `BME280_compensate_T_int32`: returns { T in 0.01 °C, t_fine }. */
export function compensateTemperature(adcT: number, c: Bme280Calibration): { T: number; tFine: number } {
  const var1 = Math.imul((adcT >> 3) - (c.T1 << 1), c.T2) >> 11;
  const d = (adcT >> 4) - c.T1;
  const var2 = Math.imul(Math.imul(d, d) >> 12, c.T3) >> 14;
  const tFine = (var1 + var2) | 0;
  const T = (Math.imul(tFine, 5) + 128) >> 8;
  return { T, tFine };
}

/** `BME280_compensate_P_int64`: pressure in Pa as Q24.8 (divide by 256), 0 when var1 is 0 (no division by zero). */
export function compensatePressure(adcP: number, tFine: number, c: Bme280Calibration): number {
  const B = BigInt;
  let var1 = B(tFine) - 128000n;
  let var2 = var1 * var1 * B(c.P6);
  var2 = var2 + ((var1 * B(c.P5)) << 17n);
  var2 = var2 + (B(c.P4) << 35n);
  var1 = ((var1 * var1 * B(c.P3)) >> 8n) + ((var1 * B(c.P2)) << 12n);
  var1 = (((1n << 47n) + var1) * B(c.P1)) >> 33n;
  if (var1 === 0n) return 0;
  let p = 1048576n - B(adcP);
  p = (((p << 31n) - var2) * 3125n) / var1;
  var1 = (B(c.P9) * (p >> 13n) * (p >> 13n)) >> 25n;
  var2 = (B(c.P8) * p) >> 19n;
  p = ((p + var1 + var2) >> 8n) + (B(c.P7) << 4n);
  return Number(BigInt.asUintN(32, p)); // (BME280_U32_t)p
}

/** `bme280_compensate_H_int32`: relative humidity in %RH as Q22.10 (divide by 1024), clamped to 0..100 %. */
export function compensateHumidity(adcH: number, tFine: number, c: Bme280Calibration): number {
  let v = (tFine - 76800) | 0;
  const a = ((((adcH << 14) - (c.H4 << 20) - Math.imul(c.H5, v)) | 0) + 16384) >> 15;
  const b =
    (Math.imul(
      (((Math.imul(Math.imul(v, c.H6) >> 10, (Math.imul(v, c.H3) >> 11) + 32768) >> 10) + 2097152) | 0),
      c.H2,
    ) +
      8192) >>
    14;
  v = Math.imul(a, b);
  v = (v - (Math.imul(Math.imul(v >> 15, v >> 15) >> 7, c.H1) >> 4)) | 0;
  v = v < 0 ? 0 : v;
  v = v > 419430400 ? 419430400 : v;
  return v >>> 12;
}

/** Oversampling factor → the 3-bit register code (0 = measurement skipped). */
const OSRS: Record<number, number> = { 0: 0, 1: 1, 2: 2, 4: 3, 8: 4, 16: 5 };
const FILTER: Record<number, number> = { 0: 0, 2: 1, 4: 2, 8: 3, 16: 4 };
/** Standby time in normal mode (ms) → t_sb code (datasheet table 27). */
const STANDBY: Record<number, number> = { 0.5: 0, 62.5: 1, 125: 2, 250: 3, 500: 4, 1000: 5, 10: 6, 20: 7 };

/** A skipped measurement leaves 0x80000 (temperature, pressure) or 0x8000 (humidity) in the data registers. */
const SKIPPED_20 = 0x80000;
const SKIPPED_16 = 0x8000;

/** Datasheet §9.1: the maximum measurement time in ms for the given oversampling factors. */
export function maxMeasurementMs(t: number, p: number, h: number): number {
  return 1.25 + (t ? 2.3 * t : 0) + (p ? 2.3 * p + 0.575 : 0) + (h ? 2.3 * h + 0.575 : 0);
}

/** Decodes the 8 data bytes (0xF7–0xFE) into the raw ADC values. */
export function decodeData(d: Buffer): { adcP: number; adcT: number; adcH: number } {
  return {
    adcP: (d[0]! << 12) | (d[1]! << 4) | (d[2]! >> 4),
    adcT: (d[3]! << 12) | (d[4]! << 4) | (d[5]! >> 4),
    adcH: (d[6]! << 8) | d[7]!,
  };
}

const round = (x: number, digits: number) => Math.round(x * 10 ** digits) / 10 ** digits;

/** Raw values → reading: temperature °C (0.01), pressure Pa (two decimals of the Q24.8 value), humidity %RH. */
export function compensate(raw: { adcP: number; adcT: number; adcH: number }, c: Bme280Calibration): Reading {
  if (raw.adcT === SKIPPED_20) return { temperature: null, pressure: null, humidity: null }; // nothing without t_fine
  const { T, tFine } = compensateTemperature(raw.adcT, c);
  return {
    temperature: T / 100,
    pressure: raw.adcP === SKIPPED_20 ? null : round(compensatePressure(raw.adcP, tFine, c) / 256, 2),
    humidity: raw.adcH === SKIPPED_16 ? null : round(compensateHumidity(raw.adcH, tFine, c) / 1024, 3),
  };
}

class Bme280 implements SensorDevice {
  private calib?: Bme280Calibration;
  private readonly osrs: { t: number; p: number; h: number };
  private readonly mode: 'forced' | 'normal';

  constructor(
    private readonly bus: I2cBus,
    private readonly address: number,
    private readonly options: DeviceOptions,
  ) {
    const o = options.oversampling ?? {};
    this.osrs = { t: o.temperature ?? 1, p: o.pressure ?? 1, h: o.humidity ?? 1 };
    this.mode = options.mode ?? 'forced';
  }

  private ctrlMeas(mode: number): number {
    return (OSRS[this.osrs.t]! << 5) | (OSRS[this.osrs.p]! << 2) | mode;
  }

  async init(): Promise<void> {
    const id = await this.bus.readByte(this.address, REG.chipId);
    if (id !== BME280_CHIP_ID) throw new Error(`chip id 0x${id.toString(16)} is not a BME280 (0x60)`);
    await this.bus.writeByte(this.address, REG.reset, RESET_WORD);
    await sleep(2); // start-up time after a reset: 2 ms (datasheet table 1)
    for (let i = 0; i < 10; i++) {
      if (((await this.bus.readByte(this.address, REG.status)) & STATUS_IM_UPDATE) === 0) break; // NVM copied
      await sleep(1);
    }
    const a = Buffer.alloc(26);
    const e = Buffer.alloc(7);
    await this.bus.readI2cBlock(this.address, REG.calib00, 26, a);
    await this.bus.readI2cBlock(this.address, REG.calib26, 7, e);
    this.calib = parseCalibration(a, e);
    // config is written in sleep mode (writes in normal mode may be ignored); ctrl_hum takes effect with ctrl_meas
    const tsb = STANDBY[this.options.standbyMs ?? 1000] ?? 5;
    await this.bus.writeByte(this.address, REG.config, (tsb << 5) | ((FILTER[this.options.filter ?? 0] ?? 0) << 2));
    await this.bus.writeByte(this.address, REG.ctrlHum, OSRS[this.osrs.h]!);
    await this.bus.writeByte(this.address, REG.ctrlMeas, this.ctrlMeas(this.mode === 'normal' ? MODE.normal : MODE.sleep));
  }

  async read(): Promise<Reading> {
    if (!this.calib) throw new Error('not initialised');
    if (this.mode === 'forced') {
      await this.bus.writeByte(this.address, REG.ctrlHum, OSRS[this.osrs.h]!);
      await this.bus.writeByte(this.address, REG.ctrlMeas, this.ctrlMeas(MODE.forced));
      await sleep(Math.ceil(maxMeasurementMs(this.osrs.t, this.osrs.p, this.osrs.h)));
      let done = false;
      for (let i = 0; i < 10 && !done; i++) {
        done = ((await this.bus.readByte(this.address, REG.status)) & STATUS_MEASURING) === 0;
        if (!done) await sleep(2);
      }
      if (!done) throw new Error('measurement did not complete (status.measuring stays set)');
    }
    const d = Buffer.alloc(8);
    const { bytesRead } = await this.bus.readI2cBlock(this.address, REG.data, 8, d);
    if (bytesRead !== 8) throw new Error(`short read of the data registers (${bytesRead} of 8 bytes)`);
    return compensate(decodeData(d), this.calib);
  }
}

export const bme280Driver: SensorDriver = {
  id: 'bme280',
  description: 'Bosch BME280 temperature, pressure and humidity sensor',
  addresses: [0x76, 0x77],
  units: { temperature: '°C', pressure: 'Pa', humidity: '%RH' },
  async probe(bus, address) {
    try {
      return (await bus.readByte(address, REG.chipId)) === BME280_CHIP_ID;
    } catch {
      return false;
    }
  },
  open: (bus, address, options) => new Bme280(bus, address, options),
};
