/** Serial endpoint configuration: MAPS SerialConfigDTO fields and defaults, the device path, one protocol per line. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { EndPointServerConfigSchema } from '../../src/config/schema.js';
import { serialDeviceOf, serialDevicePath } from '../../src/transport/serial-config.js';
import { serialProtocolOf } from '../../src/transport/serial.js';

const cfg = (extra: Record<string, unknown>) => EndPointServerConfigSchema.parse({ name: 'gps', url: 'serial:///dev/ttyUSB0', protocolConfigs: [{ type: 'NMEA-0183' }], ...extra });

test('serial - serialDevice takes the MAPS field names with their defaults (9600 8N1, no flow control, 60 s timeouts, 256 KiB buffer)', () => {
  assert.deepEqual(serialDeviceOf(cfg({ endPointConfig: { type: 'serial', serialDevice: { port: 'ttyS0' } } })), {
    port: 'ttyS0',
    baudRate: 9600,
    dataBits: 8,
    stopBits: 1,
    parity: 'none',
    flowControl: 'none',
    readTimeOut: 60000,
    writeTimeOut: 60000,
    bufferSize: 262144,
  });
  const c = cfg({ endPointConfig: { serialDevice: { baudRate: 115200, dataBits: 7, stopBits: 1.5, parity: 'E', flowControl: 1, serialNo: 'A10K' } } });
  assert.deepEqual(serialDeviceOf(c), { ...serialDeviceOf(cfg({})), baudRate: 115200, dataBits: 7, stopBits: 1.5, parity: 'e', flowControl: 1, serialNo: 'A10K' });
  for (const bad of [{ baudRate: 'fast' }, { dataBits: 9 }, { stopBits: 3 }, { parity: 'weird' }, { flowControl: 'dtr' }, { port: 'tty USB0' }, { speed: 9600 }]) {
    assert.equal(EndPointServerConfigSchema.safeParse({ name: 'x', url: 'serial://x', protocolConfigs: [{ type: 'mqtt' }], endPointConfig: { serialDevice: bad } }).success, false, JSON.stringify(bad));
  }
});

test('serial - the device path comes from serialDevice.port, else the URL; a bare name is under /dev', () => {
  assert.equal(serialDevicePath(cfg({})), '/dev/ttyUSB0');
  assert.equal(serialDevicePath(cfg({ url: 'serial://ttyACM0/' })), '/dev/ttyACM0');
  assert.equal(serialDevicePath(cfg({ url: 'serial://dev/serial0' })), '/dev/serial0');
  assert.equal(serialDevicePath(cfg({ url: 'serial://gps/', endPointConfig: { serialDevice: { port: '/dev/serial/by-id/usb-u-blox_GNSS-if00' } } })), '/dev/serial/by-id/usb-u-blox_GNSS-if00');
  assert.equal(serialDevicePath(cfg({ url: 'serial://gps/', endPointConfig: { serialDevice: { port: 'serial0' } } })), '/dev/serial0');
  // MAPS NmeaConfigDTO.serial is used when endPointConfig.serialDevice is absent
  assert.equal(serialDevicePath(cfg({ url: 'serial://gps/', protocolConfigs: [{ type: 'NMEA-0183', serial: { port: 'ttyAMA0', baudRate: 4800 } }] })), '/dev/ttyAMA0');
  assert.equal(serialDeviceOf(cfg({ protocolConfigs: [{ type: 'NMEA-0183', serial: { baudRate: 4800 } }] })).baudRate, 4800);
  assert.equal(serialDevicePath(cfg({ url: 'serial:///' })), '');
});

test('serial - a line carries one protocol: mqtt or NMEA-0183', () => {
  assert.equal(serialProtocolOf(cfg({})), 'NMEA-0183');
  assert.equal(serialProtocolOf(cfg({ protocolConfigs: [{ type: 'mqtt' }] })), 'mqtt');
  assert.throws(() => serialProtocolOf(cfg({ protocolConfigs: [{ type: 'mqtt' }, { type: 'NMEA-0183' }] })), /one protocol/);
  assert.throws(() => serialProtocolOf(cfg({ protocolConfigs: [{ type: 'ws' }] })), /no supported protocol/);
  assert.equal(EndPointServerConfigSchema.safeParse({ name: 'x', url: 'serial://x', protocolConfigs: [{ type: 'NMEA-0183', topicPrefix: 'gps/#' }] }).success, false);
});
