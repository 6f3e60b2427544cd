/**
 * What a serial endpoint's configuration says, without opening anything (so the REST views can show a serial
 * endpoint without loading `serialport`): its device path and its line settings.
 */
import { SerialDeviceSchema, type EndPointServerConfig, type NmeaConfig, type SerialDevice } from '../config/schema.js';

/** A device name or path as the configuration gives it → a path: `ttyUSB0` → `/dev/ttyUSB0`; `dev/x` → `/dev/x`. */
function devicePath(raw: string): string {
  const r = raw.length > 1 ? raw.replace(/\/+$/, '') : raw;
  if (r.startsWith('/') || r.startsWith('.')) return r;
  if (!r.includes('/')) return `/dev/${r}`;
  return `/${r}`;
}

export function isSerialEndpoint(cfg: EndPointServerConfig): boolean {
  return /^serial:\/\//i.test(cfg.url);
}

/** The NMEA-0183 protocol entry of an endpoint, if it has one. */
export function nmeaConfigOf(cfg: EndPointServerConfig): NmeaConfig | undefined {
  return cfg.protocolConfigs.find((p) => p.type === 'NMEA-0183') as NmeaConfig | undefined;
}

/**
 * The line settings: `endPointConfig.serialDevice`, else the NMEA-0183 entry's `serial` (MAPS NmeaConfigDTO), else
 * the defaults (9600 8N1, no flow control).
 */
export function serialDeviceOf(cfg: EndPointServerConfig): SerialDevice {
  return cfg.endPointConfig.serialDevice ?? nmeaConfigOf(cfg)?.serial ?? SerialDeviceSchema.parse({});
}

/**
 * The device a serial endpoint opens: `serialDevice.port` when set, else what follows `serial://` in the URL
 * (`serial:///dev/ttyUSB0`, `serial://ttyUSB0/`). `''` when neither names one.
 */
export function serialDevicePath(cfg: EndPointServerConfig): string {
  const port = serialDeviceOf(cfg).port;
  if (port) return devicePath(port);
  const rest = cfg.url.replace(/^serial:\/\//i, '');
  return rest === '' || rest === '/' ? '' : devicePath(rest);
}
