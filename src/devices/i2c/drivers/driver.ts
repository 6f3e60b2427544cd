import type { DeviceOptions } from '../../config.js';
import type { I2cBus } from '../bus.js';

/** One reading: quantity name → value in the unit the driver documents (null: the quantity was not measured). */
export type Reading = Record<string, number | null>;

/** A sensor opened at an address of a bus. */
export interface SensorDevice {
  /** Identify, reset and configure the chip (read calibration, set the mode); throws when it does not answer. */
  init(): Promise<void>;
  /** One measurement; throws when the chip does not answer or the data fails its check. */
  read(): Promise<Reading>;
}

/** A driver for one kind of I²C chip. */
export interface SensorDriver {
  /** The config name (`driver: bme280`). */
  readonly id: string;
  /** Human description (DeviceInfoDTO.description starts with it). */
  readonly description: string;
  /** The addresses the chip can sit at (its address pins); a scan probes these. */
  readonly addresses: readonly number[];
  /** Units of the reading's quantities (documentation and the published JSON's `units`). */
  readonly units: Readonly<Record<string, string>>;
  /** True when the chip at `address` is this kind (chip id, a status word with a valid CRC, ...). Never throws. */
  probe(bus: I2cBus, address: number): Promise<boolean>;
  open(bus: I2cBus, address: number, options: DeviceOptions): SensorDevice;
}
