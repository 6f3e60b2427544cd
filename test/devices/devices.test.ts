import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import mqtt, { type MqttClient } from 'mqtt';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/api/app.js';
import { loadConfig } from '../../src/config/load.js';
import { ConfigError } from '../../src/errors.js';
import { Runtime } from '../../src/runtime/runtime.js';
import { registerServices } from '../../src/compose.js';
import { compensateHumidity, compensateTemperature } from '../../src/devices/i2c/drivers/bme280.js';
import { CONFIG_DIR, MQTT_TEST_ENV, removeDir, startServer, tempDir, waitUntil } from '../helpers.js';
import { ADC, DATASHEET_TRIM, SimBme280, SimBus, SimSht31, simOpener } from './sim-bus.js';

/**
 * The device manager in a running broker (in process): the simulated bus is passed through the service's
 * injectable opener (`rt.service('devices').openBus`, set before `rt.start()`; production uses i2c-bus). Readings
 * are received by a real MQTT client on the broker's MQTT endpoint.
 */
describe('devices - device manager in a running broker', () => {
  let rt: Runtime;
  let app: FastifyInstance;
  let dataDir: string;
  let client: MqttClient;
  const bus = new SimBus();
  const bme = new SimBme280(DATASHEET_TRIM);
  const sht = new SimSht31();
  const messages: Array<{ topic: string; body: Record<string, unknown> }> = [];
  const transitions: Array<{ from: string; to: string }> = [];
  const commands: Array<{ systemId: string; event: string; outcome: string }> = [];

  before(async () => {
    bme.adc = { ...ADC };
    sht.raw = { T: 0x6666, RH: 0x8000 }; // 25.00 °C, 50.00 %RH
    bus.attach(0x76, bme).attach(0x44, sht);
    dataDir = tempDir();
    rt = await Runtime.create({
      configDir: CONFIG_DIR,
      env: MQTT_TEST_ENV,
      stdoutLogs: false,
      overrides: {
        MessageDaemon: { dataDirectory: dataDir },
        RestApi: { port: 0, hostnames: '127.0.0.1' },
        AuthManager: { authenticationEnabled: false },
        DeviceManager: {
          buses: [
            { bus: 1, scan: true, devices: [{ name: 'weather', address: 0x76, driver: 'bme280', topic: 'sensors/weather', interval: 150 }] },
            { bus: 7, devices: [] }, // configured but absent (/dev/i2c-7 does not exist): logged, the scan goes on
          ],
          interval: 150,
          retryInitial: 50,
          retryMax: 300,
          offlineAfter: 4,
        },
      },
    });
    registerServices(rt);
    rt.service('devices')!.openBus = simOpener({ 1: bus });
    rt.on('actor.command', (c) => commands.push(c));
    rt.on('actor.transition', (t) => {
      if (t.systemId === 'device:weather') transitions.push({ from: t.from, to: t.to });
    });
    await rt.start();
    app = await buildApp(rt);
    const port = rt.service('endpoints')!.entries.get('MQTT Interface')!.handle!.port;
    client = mqtt.connect(`mqtt://127.0.0.1:${port}`, { clientId: 'device-watcher', reconnectPeriod: 0 });
    await new Promise<void>((resolve, reject) => {
      client.once('connect', () => resolve());
      client.once('error', reject);
    });
    client.on('message', (topic, payload) => messages.push({ topic, body: JSON.parse(payload.toString()) }));
    await client.subscribeAsync(['sensors/#', 'devices/#']);
  });

  after(async () => {
    await client?.endAsync();
    await app?.close();
    await rt?.stop();
    if (dataDir) removeDir(dataDir);
  });

  const hardware = async () => {
    const r = await app.inject({ url: '/api/v1/server/hardware' });
    assert.equal(r.statusCode, 200, r.body);
    return r.json() as Array<{ name: string; description: string; type: string; state: string }>;
  };
  const stateOf = async (name: string) => (await hardware()).find((d) => d.name === name)?.state;

  test('devices - a scan finds the simulated BME280 and SHT31 (a real scan every time)', async () => {
    const before = sht.measurements;
    const r = await app.inject({ method: 'POST', url: '/api/v1/server/hardware/scan' });
    assert.equal(r.statusCode, 200, r.body);
    assert.deepEqual(r.json(), ['sht31-1-0x44', 'weather']);
    // a second scan right away scans again (MAPS would answer its cached result): a chip added in between is found
    bus.attach(0x45, new SimSht31());
    const again = await app.inject({ method: 'POST', url: '/api/v1/server/hardware/scan' });
    assert.deepEqual(again.json(), ['sht31-1-0x44', 'sht31-1-0x45', 'weather']);
    bus.chips.delete(0x45);
    const third = await app.inject({ method: 'POST', url: '/api/v1/server/hardware/scan' });
    assert.deepEqual(third.json(), ['sht31-1-0x44', 'weather'], 'a scanned device no longer there is removed');
    assert.ok(
      commands.some((c) => c.systemId === 'device:sht31-1-0x45' && c.event === 'device.gone' && c.outcome === 'sent'),
      'the scan told the removed device through the command helper (POST /api/v1/server/hardware/scan is a lifecycle route)',
    );
    assert.ok(sht.measurements >= before);
    const list = await hardware();
    assert.deepEqual(
      list.map((d) => d.name),
      ['sht31-1-0x44', 'weather'],
    );
    const w = list.find((d) => d.name === 'weather')!;
    assert.equal(w.type, 'SENSOR');
    assert.match(w.description, /BME280 .* on \/dev\/i2c-1 at 0x76/);
    assert.ok(['Online', 'Polling'].includes(w.state), w.state);
  });

  test('devices - concurrent scan requests all answer (one scan runs, at most one waits and is shared)', async () => {
    const answers = await Promise.all(Array.from({ length: 20 }, () => app.inject({ method: 'POST', url: '/api/v1/server/hardware/scan' })));
    for (const r of answers) {
      assert.equal(r.statusCode, 200, r.body);
      assert.deepEqual(r.json(), ['sht31-1-0x44', 'weather']);
    }
  });

  test('devices - readings are published as JSON with datasheet-correct values', async () => {
    await waitUntil(() => messages.some((m) => m.topic === 'sensors/weather') && messages.some((m) => m.topic === 'devices/sht31-1-0x44'), 10000, 'readings');
    const w = messages.find((m) => m.topic === 'sensors/weather')!.body;
    const { tFine } = compensateTemperature(ADC.T, DATASHEET_TRIM);
    assert.equal(w.device, 'weather');
    assert.equal(w.driver, 'bme280');
    assert.equal(w.temperature, 25.08);
    assert.equal(w.pressure, 100653.25);
    assert.equal(w.humidity, Math.round((compensateHumidity(ADC.H, tFine, DATASHEET_TRIM) / 1024) * 1000) / 1000);
    assert.ok(!Number.isNaN(Date.parse(String(w.time))));
    const s = messages.find((m) => m.topic === 'devices/sht31-1-0x44')!.body;
    assert.equal(s.temperature, 25);
    assert.equal(s.humidity, 50);
    // at the configured interval: more readings keep coming
    const n = messages.filter((m) => m.topic === 'sensors/weather').length;
    await waitUntil(() => messages.filter((m) => m.topic === 'sensors/weather').length >= n + 2, 10000, 'further readings');
  });

  test('devices - a device that stops answering goes to error, backs off, goes offline, and comes back', async () => {
    bus.detach(0x76);
    await waitUntil(async () => (await stateOf('weather')) === 'Error', 10000, 'weather in Error');
    await waitUntil(async () => (await stateOf('weather')) === 'Offline', 10000, 'weather Offline after offlineAfter attempts');
    const ctx = rt.actor('device', 'weather')!.getSnapshot().context;
    assert.ok(ctx.attempts >= 4, `attempts ${ctx.attempts}`);
    assert.match(ctx.lastError ?? '', /Remote I\/O error/);
    // it retried (error → detected → error ...) instead of polling on
    const retries = transitions.filter((t) => t.from === 'error' && t.to === 'detected').length;
    assert.ok(retries >= 2, `retries ${retries}`);
    // the chip comes back with its registers at their reset values (power cycle): the device re-initialises
    bme.powerOn();
    bme.adc.T = 500000;
    bus.reattach(0x76);
    const seen = messages.length;
    // an offline device retries every retryMax, or at once when a scan finds it
    const scan = await app.inject({ method: 'POST', url: '/api/v1/server/hardware/scan' });
    assert.ok((scan.json() as string[]).includes('weather'));
    await waitUntil(() => messages.slice(seen).some((m) => m.topic === 'sensors/weather'), 10000, 'readings again');
    const back = messages.slice(seen).find((m) => m.topic === 'sensors/weather')!.body;
    assert.ok((back.temperature as number) < 25.08, `${back.temperature}`);
    assert.equal(rt.actor('device', 'weather')!.getSnapshot().context.attempts, 0);
    assert.ok(['Online', 'Polling'].includes((await stateOf('weather'))!));
  });

  test('devices - a device in error comes back by itself after its backoff (no scan)', async () => {
    bus.detach(0x44);
    await waitUntil(async () => (await stateOf('sht31-1-0x44')) === 'Error', 10000, 'sht31 in Error');
    sht.raw = { T: 0x7000, RH: 0x4000 };
    bus.reattach(0x44);
    const seen = messages.length;
    await waitUntil(() => messages.slice(seen).some((m) => m.topic === 'devices/sht31-1-0x44'), 10000, 'sht31 readings again');
    const r = messages.slice(seen).find((m) => m.topic === 'devices/sht31-1-0x44')!.body;
    assert.equal(r.temperature, Math.round((-45 + (175 * 0x7000) / 65535) * 100) / 100);
    assert.equal(r.humidity, 25);
  });

  test('devices - the device actors sit under the devices supervisor as device:<name>', async () => {
    const ids = rt.childActors('devices').map(([id]) => id).sort();
    assert.deepEqual(ids, ['device:sht31-1-0x44', 'device:weather']);
  });
});

describe('devices - configuration and no hardware', () => {
  test('devices - the shipped configuration has no buses: empty list and empty scan, nothing opened', async () => {
    const dataDir = tempDir();
    const rt = await Runtime.create({ configDir: CONFIG_DIR, env: MQTT_TEST_ENV, stdoutLogs: false, overrides: { MessageDaemon: { dataDirectory: dataDir }, AuthManager: { authenticationEnabled: false } } });
    registerServices(rt);
    const opener = simOpener({});
    rt.service('devices')!.openBus = opener;
    await rt.start();
    const app = await buildApp(rt);
    try {
      assert.deepEqual((await app.inject({ url: '/api/v1/server/hardware' })).json(), []);
      const scan = await app.inject({ method: 'POST', url: '/api/v1/server/hardware/scan' });
      assert.equal(scan.statusCode, 200);
      assert.deepEqual(scan.json(), []);
      assert.deepEqual(opener.opened, []);
    } finally {
      await app.close();
      await rt.stop();
      removeDir(dataDir);
    }
  });

  test('devices - a scan when no configured bus can be opened answers 409 with the reason (real i2c-bus path, no /dev/i2c-*)', async () => {
    const dataDir = tempDir();
    const rt = await Runtime.create({
      configDir: CONFIG_DIR,
      env: MQTT_TEST_ENV,
      stdoutLogs: false,
      overrides: { MessageDaemon: { dataDirectory: dataDir }, AuthManager: { authenticationEnabled: false }, DeviceManager: { buses: [{ bus: 42 }] } },
    });
    registerServices(rt); // the production opener: i2c-bus imported lazily; /dev/i2c-42 does not exist here
    await rt.start();
    const app = await buildApp(rt);
    try {
      const scan = await app.inject({ method: 'POST', url: '/api/v1/server/hardware/scan' });
      assert.equal(scan.statusCode, 409, scan.body);
      assert.match(scan.json().status, /\/dev\/i2c-42/);
      assert.deepEqual((await app.inject({ url: '/api/v1/server/hardware' })).json(), []);
    } finally {
      await app.close();
      await rt.stop();
      removeDir(dataDir);
    }
  });

  test('devices - both routes are in the OpenAPI document with their permission, and need credentials', async () => {
    const s = await startServer();
    try {
      const doc = (await s.inject('/openapi.json')).json() as { paths: Record<string, Record<string, { 'x-required-permission'?: { permission: string } }>> };
      assert.equal(doc.paths['/api/v1/server/hardware']!.get!['x-required-permission']!.permission, 'view_stats');
      assert.equal(doc.paths['/api/v1/server/hardware/scan']!.post!['x-required-permission']!.permission, 'manage_interfaces');
      const anon = await s.app.inject({ method: 'POST', url: '/api/v1/server/hardware/scan' });
      assert.equal(anon.statusCode, 401);
      assert.equal(typeof anon.json().status, 'string');
      assert.deepEqual((await s.inject('/api/v1/server/hardware')).json(), []);
    } finally {
      await s.close();
    }
  });

  test('devices - a wrong DeviceManager section stops start-up with one line naming the key', () => {
    const bad = (DeviceManager: Record<string, unknown>) => {
      try {
        loadConfig({ configDir: CONFIG_DIR, env: {}, overrides: { DeviceManager } });
      } catch (err) {
        assert.ok(err instanceof ConfigError);
        assert.ok(!err.message.includes('\n'), err.message);
        return err.message;
      }
      assert.fail('accepted');
    };
    assert.match(bad({ buses: [{ bus: 1, devices: [{ name: 'x', address: 0x80, driver: 'bme280' }] }] }), /DeviceManager.*buses\.0\.devices\.0\.address.*0x77/);
    assert.match(bad({ buses: [{ bus: 1, devices: [{ name: 'x', address: 0x76, driver: 'bmp999' }] }] }), /driver/);
    assert.match(bad({ buses: [{ bus: 1, devices: [{ name: 'x', address: 0x76, driver: 'bme280', options: { mode: 'turbo' } }] }] }), /mode/);
    assert.match(bad({ buses: [{ bus: 1, devices: [{ name: 'x', address: 0x76, driver: 'bme280', options: { oversampling: { pressure: 3 } } }] }] }), /an oversampling of 0 \(skip\), 1, 2, 4, 8 or 16; got 3/);
    assert.match(bad({ buses: [{ bus: 1 }, { bus: 1 }] }), /each bus number may appear once/);
    assert.match(bad({ buses: [{ bus: 1, devices: [{ name: 'x', address: 0x76, driver: 'bme280', topic: 'sensors/#' }] }] }), /without MQTT wildcards/);
  });
});
