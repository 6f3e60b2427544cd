/**
 * The I²C bus as the drivers see it: the subset of `i2c-bus`'s `PromisifiedBus` they use. The real bus is opened by
 * importing `i2c-bus` lazily (`openI2cBus`), so a machine without `/dev/i2c-*` (or without the native module: it is
 * an optionalDependency) starts fine and only a configured bus reports that it cannot be opened. Tests pass a
 * register-level simulated bus with the same interface (test/devices/sim-bus.ts) through
 * `DevicesService.openBus`.
 */
import { access, constants } from 'node:fs/promises';

export interface BytesRead {
  bytesRead: number;
  buffer: Buffer;
}
export interface BytesWritten {
  bytesWritten: number;
  buffer: Buffer;
}

/** What the drivers and the scan use of `i2c-bus`'s PromisifiedBus (same names and signatures). */
export interface I2cBus {
  /** SMBus read byte: one register. */
  readByte(address: number, command: number): Promise<number>;
  /** SMBus write byte: one register. */
  writeByte(address: number, command: number, byte: number): Promise<void>;
  /** I²C block read starting at a register (a burst read of consecutive registers). */
  readI2cBlock(address: number, command: number, length: number, buffer: Buffer): Promise<BytesRead>;
  /** Plain I²C write (command-based chips such as the SHT3x). */
  i2cWrite(address: number, length: number, buffer: Buffer): Promise<BytesWritten>;
  /** Plain I²C read. */
  i2cRead(address: number, length: number, buffer: Buffer): Promise<BytesRead>;
  /** Addresses that acknowledge, in [startAddr, endAddr] (i2c-bus defaults to 0x03..0x77). */
  scan(startAddr: number, endAddr: number): Promise<number[]>;
  close(): Promise<void>;
}

/** Opens bus number N (`/dev/i2c-N`). */
export type I2cBusOpener = (busNumber: number) => Promise<I2cBus>;

/** The bus could not be opened (no device node, no permission, no native module). */
export class I2cBusUnavailableError extends Error {
  constructor(
    readonly busNumber: number,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`/dev/i2c-${busNumber}: ${message}`, options);
    this.name = 'I2cBusUnavailableError';
  }
}

/**
 * The production opener: checks that `/dev/i2c-N` exists and is readable and writable (i2c-bus opens the device file
 * only at the first transfer, and its scan reports an absent bus as an empty one), then imports `i2c-bus` on first
 * use and calls `openPromisified(busNumber)`.
 */
export const openI2cBus: I2cBusOpener = async (busNumber) => {
  try {
    await access(`/dev/i2c-${busNumber}`, constants.R_OK | constants.W_OK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why = code === 'ENOENT' ? 'no such device (is the I²C interface enabled? docs/devices.md)' : code === 'EACCES' ? 'permission denied (add the user to the i2c group)' : (err as Error).message;
    throw new I2cBusUnavailableError(busNumber, why, { cause: err });
  }
  let mod: typeof import('i2c-bus');
  try {
    mod = (await import('i2c-bus')) as typeof import('i2c-bus');
  } catch (err) {
    throw new I2cBusUnavailableError(busNumber, `the i2c-bus module is not installed (${(err as Error).message})`, { cause: err });
  }
  const open = mod.openPromisified ?? (mod as unknown as { default: typeof import('i2c-bus') }).default?.openPromisified;
  try {
    return (await open(busNumber)) as unknown as I2cBus;
  } catch (err) {
    throw new I2cBusUnavailableError(busNumber, (err as Error).message, { cause: err });
  }
};

/** Sleep (drivers wait for conversions). */
export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** 0x76 → "0x76". */
export const hex = (n: number): string => `0x${n.toString(16).padStart(2, '0')}`;
