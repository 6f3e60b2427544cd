/**
 * Serial endpoints over real pseudo-terminals (socat pty pairs): MQTT over a serial line, NMEA-0183 sentences from a
 * "GPS" published as JSON, and a device that disappears (socat killed: its links vanish, as when a USB adapter is
 * unplugged) failing the endpoint until it returns.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import mqtt from 'mqtt';
import type { SerialPort } from 'serialport';
import { nmeaSentence } from '../../src/devices/nmea.js';
import { removeDir, startServer, tempDir, waitUntil, type TestServer } from '../helpers.js';
import { closeEnd, openEnd, ptyPair, type PtyPair } from './pty.js';
import { SerialMqttPeer } from './peer.js';

interface Info {
  name: string;
  port: number;
  host: string;
  state: string;
}

async function get(s: TestServer, url: string): Promise<{ status: number; json: any }> {
  await s.inject({ method: 'DELETE', url: '/api/v1/server/cache' });
  const r = await s.inject({ method: 'GET', url });
  return { status: r.statusCode, json: r.body ? JSON.parse(r.body) : undefined };
}

async function info(s: TestServer, name: string): Promise<Info> {
  const r = await get(s, '/api/v1/server/interfaces');
  assert.equal(r.status, 200, JSON.stringify(r.json));
  const e = (r.json as Info[]).find((i) => i.name === name);
  assert.ok(e, `endpoint ${name} listed`);
  return e;
}

async function waitState(s: TestServer, name: string, state: string): Promise<void> {
  await waitUntil(async () => (await info(s, name)).state === state, 15000, `${name} ${state}`);
}

async function tcpClient(s: TestServer): Promise<mqtt.MqttClient> {
  const port = (await info(s, 'tcp')).port;
  return mqtt.connectAsync(`mqtt://127.0.0.1:${port}`, { username: 'admin', password: s.adminPassword, reconnectPeriod: 0, connectTimeout: 5000 });
}

function collect(c: mqtt.MqttClient): Array<{ topic: string; payload: string }> {
  const got: Array<{ topic: string; payload: string }> = [];
  c.on('message', (topic, payload) => got.push({ topic, payload: payload.toString() }));
  return got;
}

describe('serial - MQTT over a serial line', () => {
  let dir: string;
  let pair: PtyPair | undefined;
  let s: TestServer;
  let end: SerialPort | undefined;
  let tcp: mqtt.MqttClient | undefined;

  before(async () => {
    dir = tempDir('switchyard-serial-');
    pair = await ptyPair(join(dir, 'broker-side'), join(dir, 'client-side'));
    s = await startServer({
      overrides: {
        NetworkManager: {
          retryInitial: 100,
          retryMax: 300,
          data: [
            { name: 'tcp', url: 'tcp://127.0.0.1:0/', protocolConfigs: [{ type: 'mqtt' }] },
            { name: 'serial-mqtt', url: `serial://${pair.a}`, endPointConfig: { type: 'serial', serialDevice: { baudRate: 115200 } }, protocolConfigs: [{ type: 'mqtt' }] },
            // a device that does not exist: listed with its path, Failed, retried
            { name: 'absent', url: 'serial://ttySWITCHYARD-NONE0/', protocolConfigs: [{ type: 'mqtt' }] },
          ],
        },
      },
    });
  });

  after(async () => {
    await tcp?.endAsync(true).catch(() => {});
    await closeEnd(end);
    await s?.close();
    await pair?.stop();
    removeDir(dir);
  });

  test('serial - interfaces routes show a serial endpoint with its device path (200, no port)', async () => {
    await waitState(s, 'serial-mqtt', 'Started');
    const list = await get(s, '/api/v1/server/interfaces');
    assert.equal(list.status, 200);
    const serial = (list.json as Info[]).find((i) => i.name === 'serial-mqtt')!;
    assert.equal(serial.host, `serial://${pair!.a}`);
    assert.equal(serial.port, 0);
    const absent = await info(s, 'absent');
    assert.equal(absent.host, 'serial:///dev/ttySWITCHYARD-NONE0');
    assert.equal(absent.port, 0);
    assert.equal(absent.state, 'Failed');
    for (const url of ['/api/v1/server/interface/serial-mqtt', '/api/v1/server/interface/absent', '/api/v1/server/interface/serial-mqtt/status', '/api/v1/server/interfaces/status', '/api/v1/server/interface/absent/connections']) {
      const r = await get(s, url);
      assert.equal(r.status, 200, `${url}: ${JSON.stringify(r.json)}`);
    }
    const one = await get(s, '/api/v1/server/interface/absent');
    assert.equal(one.json.host, 'serial:///dev/ttySWITCHYARD-NONE0');
    assert.equal(one.json.config.endPointConfig.serialDevice, undefined);
  });

  test('serial - an MQTT client on the line connects, subscribes and publishes; TCP clients see it', async () => {
    end = await openEnd(pair!.b);
    const peer = new SerialMqttPeer(end);
    peer.connect('gps-node-1', 'admin', s.adminPassword);
    assert.equal((await peer.next('connack')).returnCode, 0);
    peer.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: 'to/serial', qos: 1 }] });
    assert.deepEqual((await peer.next('suback')).granted, [1]);

    tcp = await tcpClient(s);
    const got = collect(tcp);
    await tcp.subscribeAsync('from/serial', { qos: 1 });
    peer.send({ cmd: 'publish', topic: 'from/serial', payload: Buffer.from('hello over the wire'), qos: 1, messageId: 7, retain: false, dup: false });
    assert.equal((await peer.next('puback')).messageId, 7);
    await waitUntil(() => got.length === 1, 10000, 'TCP subscriber gets the serial publish');
    assert.deepEqual(got[0], { topic: 'from/serial', payload: 'hello over the wire' });

    await tcp.publishAsync('to/serial', 'hello down the line', { qos: 1 });
    const pub = await peer.next('publish');
    assert.equal(pub.topic, 'to/serial');
    assert.equal(pub.payload.toString(), 'hello down the line');
    peer.send({ cmd: 'puback', messageId: pub.messageId });

    const conns = await get(s, '/api/v1/server/interface/serial-mqtt/connections');
    assert.equal(conns.status, 200);
    assert.equal(conns.json.length, 1);
    assert.equal(conns.json[0].adapter, 'serial');
    assert.equal(conns.json[0].name, `serial_${pair!.a}`);
    assert.equal(conns.json[0].clientId, 'gps-node-1');
    const all = await get(s, '/api/v1/server/connections');
    assert.equal(all.status, 200);
    const one = await get(s, `/api/v1/server/connections/${conns.json[0].id}`);
    assert.equal(one.status, 200);
    assert.equal(one.json.endPointSummary.name, `serial_${pair!.a}`);

    // DISCONNECT ends this connection; the next CONNECT on the same line is a new one
    peer.send({ cmd: 'disconnect' });
    await waitUntil(async () => (await get(s, '/api/v1/server/interface/serial-mqtt/connections')).json.length === 0, 10000, 'connection gone');
    peer.connect('gps-node-2', 'admin', s.adminPassword);
    assert.equal((await peer.next('connack')).returnCode, 0);
    const again = await get(s, '/api/v1/server/interface/serial-mqtt/connections');
    assert.equal(again.json[0].clientId, 'gps-node-2');
  });

  test('serial - stopped closes the line and its connection; started opens it again', async () => {
    const patch = (state: string) => s.inject({ method: 'PATCH', url: '/api/v1/server/interface/serial-mqtt', payload: { state } });
    assert.equal((await patch('paused')).statusCode, 200);
    assert.equal((await info(s, 'serial-mqtt')).state, 'Paused');
    assert.equal((await patch('resumed')).statusCode, 200);
    assert.equal((await patch('stopped')).statusCode, 200);
    assert.equal((await info(s, 'serial-mqtt')).state, 'Stopped');
    assert.equal((await get(s, '/api/v1/server/interface/serial-mqtt/connections')).json.length, 0);
    assert.equal((await patch('started')).statusCode, 200);
    assert.equal((await info(s, 'serial-mqtt')).state, 'Started');
    const peer = new SerialMqttPeer(end!);
    peer.connect('gps-node-3', 'admin', s.adminPassword);
    assert.equal((await peer.next('connack')).returnCode, 0);
  });

  test('serial - unplugging the line ends the connection and fails the endpoint; it recovers when the device returns', async () => {
    assert.equal((await get(s, '/api/v1/server/interface/serial-mqtt/connections')).json.length, 1);
    await closeEnd(end);
    end = undefined;
    await pair!.stop();
    await waitState(s, 'serial-mqtt', 'Failed');
    assert.equal((await get(s, '/api/v1/server/interface/serial-mqtt/connections')).json.length, 0);

    pair = await ptyPair(pair!.a, pair!.b);
    await waitState(s, 'serial-mqtt', 'Started');
    end = await openEnd(pair.b);
    const peer = new SerialMqttPeer(end);
    peer.connect('gps-node-4', 'admin', s.adminPassword);
    assert.equal((await peer.next('connack')).returnCode, 0);
  });

  test('serial - PUT changes the line settings and restarts the endpoint; bad settings are a 400', async () => {
    const base = { name: 'serial-mqtt', url: `serial://${pair!.a}`, authenticationRealm: 'default', protocolConfigs: [{ type: 'mqtt' }] };
    const put = (endPointConfig: unknown) => s.inject({ method: 'PUT', url: '/api/v1/server/interface/serial-mqtt', payload: { ...base, endPointConfig } });
    for (const bad of [{ baudRate: 'fast' }, { parity: 'weird' }, { stopBits: 3 }, { port: '' }]) {
      const r = await put({ type: 'serial', serialDevice: bad });
      assert.equal(r.statusCode, 400, `${JSON.stringify(bad)}: ${r.body}`);
      assert.equal(typeof r.json().status, 'string');
    }
    const ok = await put({ type: 'serial', serialDevice: { baudRate: 57600, parity: 'even' } });
    assert.equal(ok.statusCode, 200, ok.body);
    await waitState(s, 'serial-mqtt', 'Started');
    const one = await get(s, '/api/v1/server/interface/serial-mqtt');
    assert.equal(one.json.config.endPointConfig.serialDevice.baudRate, 57600);
    assert.equal(one.json.host, `serial://${pair!.a}`);
    const peer = new SerialMqttPeer(end!);
    peer.connect('gps-node-5', 'admin', s.adminPassword);
    assert.equal((await peer.next('connack')).returnCode, 0);
  });
});

describe('serial - NMEA-0183 from a GPS', () => {
  let dir: string;
  let pair: PtyPair | undefined;
  let s: TestServer;
  let gps: SerialPort | undefined;
  let sub: mqtt.MqttClient | undefined;

  before(async () => {
    dir = tempDir('switchyard-gps-');
    pair = await ptyPair(join(dir, 'ttyGPS'), join(dir, 'gps-side'));
    s = await startServer({
      overrides: {
        NetworkManager: {
          retryInitial: 100,
          retryMax: 300,
          data: [
            { name: 'tcp', url: 'tcp://127.0.0.1:0/', protocolConfigs: [{ type: 'mqtt' }] },
            { name: 'gps', url: 'serial://gps/', endPointConfig: { serialDevice: { port: pair.a, baudRate: 9600 } }, protocolConfigs: [{ type: 'NMEA-0183', maxLineLength: 120 }] },
          ],
        },
      },
    });
  });

  after(async () => {
    await sub?.endAsync(true).catch(() => {});
    await closeEnd(gps);
    await s?.close();
    await pair?.stop();
    removeDir(dir);
  });

  test('serial - NMEA sentences become JSON messages per sentence type; bad ones are counted and dropped', async () => {
    await waitState(s, 'gps', 'Started');
    assert.equal((await info(s, 'gps')).host, `serial://${pair!.a}`);
    sub = await tcpClient(s);
    const got = collect(sub);
    await sub.subscribeAsync('nmea/#', { qos: 0 });
    gps = await openEnd(pair!.b);
    const lines = [
      '$GPGGA,123519,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,*47',
      '$GPRMC,123519,A,4807.038,N,01131.000,E,022.4,084.4,230394,003.1,W*6A',
      '$GPGGA,123520,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,*00', // bad checksum
      '$GPGSA,A,3,04,05,,09,12,,,24,,,,,2.5,1.3,2.1*39',
      `$GPTXT,${'x'.repeat(200)}*00`, // longer than maxLineLength
      '$GPGSV,2,1,08,01,40,083,46,02,17,308,41,12,07,344,39,14,22,228,45*75',
      '$GPVTG,054.7,T,034.4,M,005.5,N,010.2,K*48',
    ];
    gps.write(lines.map((l) => `${l}\r\n`).join(''));
    await waitUntil(() => got.length >= 5, 10000, 'five NMEA messages');
    await new Promise((r) => setTimeout(r, 300)); // nothing more arrives
    assert.deepEqual(
      got.map((m) => m.topic),
      ['nmea/GPGGA', 'nmea/GPRMC', 'nmea/GPGSA', 'nmea/GPGSV', 'nmea/GPVTG'],
    );
    const gga = JSON.parse(got[0]!.payload);
    assert.equal(gga.time, '12:35:19');
    assert.equal(gga.latitude, 48.1173);
    assert.equal(gga.longitude, 11.516667);
    assert.equal(gga.satellites, 8);
    const rmc = JSON.parse(got[1]!.payload);
    assert.equal(rmc.timestamp, '1994-03-23T12:35:19.000Z');
    assert.equal(rmc.speedKnots, 22.4);
    assert.deepEqual(JSON.parse(got[2]!.payload).satellites, [4, 5, 9, 12, 24]);
    assert.equal(JSON.parse(got[3]!.payload).satellitesInView, 8);
    assert.equal(JSON.parse(got[4]!.payload).speedKmh, 10.2);
    const status = await get(s, '/api/v1/server/interface/gps/status');
    assert.equal(status.status, 200);
    assert.equal(status.json.errors, 2, 'the bad checksum and the overlong line are counted');
    assert.equal(status.json.totalMessagesReceived, 5);
  });

  test('serial - the GPS unplugged fails the endpoint (REST shows it); plugged back, its fixes are published again', async () => {
    await closeEnd(gps);
    gps = undefined;
    await pair!.stop();
    await waitState(s, 'gps', 'Failed');
    const down = await s.inject({ method: 'GET', url: '/readyz' });
    assert.equal(down.statusCode, 503);
    assert.match(down.body, /gps/);
    pair = await ptyPair(pair!.a, pair!.b);
    await waitState(s, 'gps', 'Started');
    assert.equal((await s.inject({ method: 'GET', url: '/readyz' })).statusCode, 200);
    const got = collect(sub!);
    gps = await openEnd(pair.b);
    gps.write(`${nmeaSentence('GNGGA,235959.50,3345.1234,S,15112.5000,W,2,11,0.7,12.0,M,-20.1,M,,')}\r\n`);
    await waitUntil(() => got.some((m) => m.topic === 'nmea/GNGGA'), 10000, 'GNGGA after the GPS returned');
    const fix = JSON.parse(got.find((m) => m.topic === 'nmea/GNGGA')!.payload);
    assert.deepEqual([fix.time, fix.latitude, fix.longitude, fix.fixType], ['23:59:59.50', -33.752057, -151.208333, 'dgps']);
  });
});
