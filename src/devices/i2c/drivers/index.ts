import type { DRIVER_IDS } from '../../config.js';
import { bme280Driver } from './bme280.js';
import type { SensorDriver } from './driver.js';
import { sht31Driver } from './sht31.js';

/** Every I²C driver by its config name. */
export const DRIVERS: Record<(typeof DRIVER_IDS)[number], SensorDriver> = { bme280: bme280Driver, sht31: sht31Driver };
export type { SensorDriver, SensorDevice, Reading } from './driver.js';
