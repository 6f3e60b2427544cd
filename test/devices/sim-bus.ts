import type { BytesRead, BytesWritten, I2cBus, I2cBusOpener } from '../../src/devices/i2c/bus.js';
import type { Bme280Calibration } from '../../src/devices/i2c/drivers/bme280.js';
import { sht3xCrc } from '../../src/devices/i2c/drivers/sht31.js';

/**
 * A register-level simulated I²C bus implementing the drivers' bus interface (the subset of i2c-bus's
 * PromisifiedBus in src/devices/i2c/bus.ts). Chips sit at addresses; a detached chip NACKs everything as a real
 * one that lost power or its wiring does (i2c-bus rejects with `Remote I/O error`, errno EREMOTEIO).
 */
export interface SimChip {
  readByte(reg: number): number;
  writeByte(reg: number, value: number): void;
  /** Plain I²C write / read (command-based chips); register chips treat a 1-byte write as setting the pointer. */
  write(data: Buffer): void;
  read(length: number): Buffer;
}

export function nack(address: number): Error {
  return Object.assign(new Error(`Remote I/O error (address 0x${address.toString(16)})`), { code: 'EREMOTEIO', errno: 121 });
}

export class SimBus implements I2cBus {
  readonly chips = new Map<number, SimChip>();
  private readonly detached = new Set<number>();
  closed = false;
  /** Transactions per address (to see that a device keeps being read). */
  readonly transactions = new Map<number, number>();

  attach(address: number, chip: SimChip): this {
    this.chips.set(address, chip);
    return this;
  }
  /** The chip stops answering (unplugged, browned out). */
  detach(address: number): void {
    this.detached.add(address);
  }
  /** It answers again; `reset` powers it up fresh (registers back to their reset values). */
  reattach(address: number): void {
    this.detached.delete(address);
  }

  private chip(address: number): SimChip {
    if (this.closed) throw new Error('bus closed');
    const c = this.chips.get(address);
    if (!c || this.detached.has(address)) throw nack(address);
    this.transactions.set(address, (this.transactions.get(address) ?? 0) + 1);
    return c;
  }

  async readByte(address: number, command: number): Promise<number> {
    return this.chip(address).readByte(command);
  }
  async writeByte(address: number, command: number, byte: number): Promise<void> {
    this.chip(address).writeByte(command, byte);
  }
  async readI2cBlock(address: number, command: number, length: number, buffer: Buffer): Promise<BytesRead> {
    const c = this.chip(address);
    for (let i = 0; i < length; i++) buffer[i] = c.readByte((command + i) & 0xff);
    return { bytesRead: length, buffer };
  }
  async i2cWrite(address: number, length: number, buffer: Buffer): Promise<BytesWritten> {
    this.chip(address).write(buffer.subarray(0, length));
    return { bytesWritten: length, buffer };
  }
  async i2cRead(address: number, length: number, buffer: Buffer): Promise<BytesRead> {
    const data = this.chip(address).read(length);
    data.copy(buffer);
    return { bytesRead: data.length, buffer };
  }
  async scan(startAddr: number, endAddr: number): Promise<number[]> {
    if (this.closed) throw new Error('bus closed');
    return [...this.chips.keys()].filter((a) => a >= startAddr && a <= endAddr && !this.detached.has(a)).sort((a, b) => a - b);
  }
  async close(): Promise<void> {
    this.closed = true;
  }
}

/** An opener serving simulated buses by number; any other number fails as a missing /dev/i2c-N does. */
export function simOpener(buses: Record<number, SimBus>): I2cBusOpener & { opened: number[] } {
  const opened: number[] = [];
  const open = async (n: number) => {
    const b = buses[n];
    if (!b) throw Object.assign(new Error(`ENOENT: no such file or directory, open '/dev/i2c-${n}'`), { code: 'ENOENT' });
    b.closed = false;
    opened.push(n);
    return b;
  };
  return Object.assign(open, { opened });
}

// ---------------------------------------------------------------------------------------------------------------
// BME280

export interface Bme280Trim {
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

/**
 * A BME280 register map: chip id 0x60 at 0xD0, reset 0xE0, calibration 0x88–0xA1 and 0xE1–0xE7 (little-endian
 * words, dig_H4/dig_H5 as 12-bit values sharing 0xE5), ctrl_hum 0xF2 (latched by a ctrl_meas write), status 0xF3
 * (measuring bit 3 while a forced conversion runs, for `conversionReads` status reads), ctrl_meas 0xF4, config 0xF5,
 * data 0xF7–0xFE. A forced measurement loads the ADC values into the data registers and returns to sleep; in normal
 * mode every read sees the current values; a skipped quantity (oversampling 0) reads 0x80000 / 0x8000.
 */
export class SimBme280 implements SimChip {
  readonly regs = new Uint8Array(256);
  adc = { T: 0x80000, P: 0x80000, H: 0x8000 };
  /** Status reads that still show "measuring" after a forced measurement is started. */
  conversionReads = 1;
  private measuringLeft = 0;
  private pointer = 0;
  private ctrlHumLatched = 0;
  forcedMeasurements = 0;

  constructor(readonly trim: Bme280Trim) {
    this.powerOn();
  }

  powerOn(): void {
    this.regs.fill(0);
    const t = this.trim;
    const w = (reg: number, v: number) => {
      this.regs[reg] = v & 0xff;
      this.regs[reg + 1] = (v >> 8) & 0xff;
    };
    w(0x88, t.T1);
    w(0x8a, t.T2);
    w(0x8c, t.T3);
    w(0x8e, t.P1);
    [t.P2, t.P3, t.P4, t.P5, t.P6, t.P7, t.P8, t.P9].forEach((v, i) => w(0x90 + 2 * i, v));
    this.regs[0xa1] = t.H1;
    w(0xe1, t.H2);
    this.regs[0xe3] = t.H3;
    this.regs[0xe4] = (t.H4 >> 4) & 0xff;
    this.regs[0xe5] = (t.H4 & 0x0f) | ((t.H5 & 0x0f) << 4);
    this.regs[0xe6] = (t.H5 >> 4) & 0xff;
    this.regs[0xe7] = t.H6 & 0xff;
    this.regs[0xd0] = 0x60;
    this.loadData(0x80000, 0x80000, 0x8000); // reset values of the data registers
    this.measuringLeft = 0;
    this.ctrlHumLatched = 0;
  }

  private loadData(P: number, T: number, H: number): void {
    const r = this.regs;
    r[0xf7] = (P >> 12) & 0xff;
    r[0xf8] = (P >> 4) & 0xff;
    r[0xf9] = (P & 0x0f) << 4;
    r[0xfa] = (T >> 12) & 0xff;
    r[0xfb] = (T >> 4) & 0xff;
    r[0xfc] = (T & 0x0f) << 4;
    r[0xfd] = (H >> 8) & 0xff;
    r[0xfe] = H & 0xff;
  }

  /** Loads the data registers as the chip would after a conversion with the current settings. */
  private convert(): void {
    const meas = this.regs[0xf4]!;
    const osT = meas >> 5;
    const osP = (meas >> 2) & 7;
    const osH = this.ctrlHumLatched & 7;
    this.loadData(osP ? this.adc.P : 0x80000, osT ? this.adc.T : 0x80000, osH ? this.adc.H : 0x8000);
  }

  get mode(): number {
    return this.regs[0xf4]! & 3;
  }

  readByte(reg: number): number {
    if (reg === 0xf3) {
      if (this.measuringLeft > 0) {
        this.measuringLeft--;
        if (this.measuringLeft === 0) {
          this.convert();
          this.regs[0xf4] = this.regs[0xf4]! & ~3; // back to sleep
        }
        return 0x08;
      }
      return 0x00;
    }
    if (reg >= 0xf7 && reg <= 0xfe && this.mode === 3) this.convert();
    return this.regs[reg]!;
  }

  writeByte(reg: number, value: number): void {
    if (reg === 0xe0) {
      if (value === 0xb6) this.powerOn();
      return;
    }
    if (reg === 0xf2) {
      this.regs[0xf2] = value & 7;
      return;
    }
    if (reg === 0xf4) {
      this.regs[0xf4] = value;
      this.ctrlHumLatched = this.regs[0xf2]!; // ctrl_hum takes effect after a ctrl_meas write
      if ((value & 3) === 1 || (value & 3) === 2) {
        this.forcedMeasurements++;
        this.measuringLeft = this.conversionReads;
        if (this.measuringLeft === 0) {
          this.convert();
          this.regs[0xf4] = value & ~3;
        }
      }
      return;
    }
    if (reg === 0xf5) {
      this.regs[0xf5] = value;
      return;
    }
    // calibration, id and data registers are read-only
  }

  write(data: Buffer): void {
    if (data.length === 1) this.pointer = data[0]!;
    else for (let i = 1; i < data.length; i += 2) this.writeByte(data[i - 1]!, data[i]!);
  }
  read(length: number): Buffer {
    const out = Buffer.alloc(length);
    for (let i = 0; i < length; i++) out[i] = this.readByte((this.pointer + i) & 0xff);
    return out;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// SHT31

/**
 * A Sensirion SHT31 at the command level: soft reset 0x30A2, status 0xF32D (status word + CRC), clear status
 * 0x3041, single-shot measurements 0x2400/0x240B/0x2416 (no clock stretching: a read before the result is ready
 * NACKs, as the datasheet says). Results are T word, CRC, RH word, CRC. `corruptNextCrc` flips one CRC.
 */
export class SimSht31 implements SimChip {
  raw = { T: 0, RH: 0 };
  status = 0x8010;
  private pending: Buffer | undefined;
  corruptNextCrc = false;
  measurements = 0;

  private word(v: number): Buffer {
    const b = Buffer.from([v >> 8, v & 0xff]);
    return Buffer.concat([b, Buffer.from([sht3xCrc(b)])]);
  }

  readByte(): number {
    throw nack(0x44); // SMBus register reads are not part of the command set
  }
  writeByte(): void {
    throw nack(0x44);
  }
  write(data: Buffer): void {
    if (data.length !== 2) throw nack(0x44);
    const cmd = data.readUInt16BE(0);
    switch (cmd) {
      case 0x30a2:
        this.status = 0x8010;
        this.pending = undefined;
        return;
      case 0xf32d:
        this.pending = this.word(this.status);
        return;
      case 0x3041:
        this.status &= ~0x0013;
        return;
      case 0x2400:
      case 0x240b:
      case 0x2416: {
        this.measurements++;
        const out = Buffer.concat([this.word(this.raw.T), this.word(this.raw.RH)]);
        if (this.corruptNextCrc) {
          out[2] = out[2]! ^ 0xff;
          this.corruptNextCrc = false;
        }
        this.pending = out;
        return;
      }
      default:
        throw nack(0x44);
    }
  }
  read(length: number): Buffer {
    const p = this.pending;
    if (!p) throw nack(0x44);
    this.pending = undefined;
    return p.subarray(0, length);
  }
}

/** The datasheet's worked-example trimming (BMP280 datasheet §3.12; humidity words typical of real parts: drivers.test.ts). */
export const DATASHEET_TRIM: Bme280Calibration = {
  T1: 27504,
  T2: 26435,
  T3: -1000,
  P1: 36477,
  P2: -10685,
  P3: 3024,
  P4: 2855,
  P5: 140,
  P6: -7,
  P7: 15500,
  P8: -14600,
  P9: 6000,
  H1: 75,
  H2: 362,
  H3: 0,
  H4: 313,
  H5: 50,
  H6: 30,
};
export const ADC = { T: 519888, P: 415148, H: 30000 };
