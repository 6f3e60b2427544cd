import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, tempDir, removeDir, waitUntil, type TestServer } from '../helpers.js';
import { b64, RestClient, unb64 } from '../rest-client.js';
import mqtt from 'mqtt';
import { mqttPort } from '../mqtt/helpers.js';
import { PtyPair, Rn2483Sim } from './rn2483-sim.js';

/**
 * A LoRa radio end to end: the real RN2483 driver on serialport, on one end of a socat pty pair; the simulated
 * RN2483 (test/lora/rn2483-sim.ts) on the other, playing nodes on the air.
 */
const frame = (to: number, from: number, id: number, payload: string, flags = 0) => Buffer.concat([Buffer.from([to, from, id, flags]), Buffer.from(payload)]);

describe('LoRa radio over a pty', () => {
  let s: TestServer;
  let dir: string;
  let pty: PtyPair;
  let sim: Rn2483Sim;
  const device = async (name = 'gw') => (await s.inject(`/api/v1/device/lora/${name}`)).json();

  before(async () => {
    dir = tempDir('switchyard-lora-');
    pty = new PtyPair(dir);
    await pty.start();
    sim = await Rn2483Sim.open(pty.sim);
    s = await startServer({
      overrides: {
        LoRaDeviceManager: {
          data: [
            { name: 'gw', address: 1, frequency: 868.1, power: 14, spreadingFactor: 9, transmissionRate: 0, healthCheckInterval: 0, serialConfig: { port: pty.radio } },
            { name: 'absent', address: 2, serialConfig: { port: `${dir}/no-such-port` } },
          ],
          retryInitial: 100,
          retryMax: 400,
          commandTimeout: 2000,
        },
      },
    });
    await waitUntil(async () => (await device()).state === 'Online' && sim.listening, 10000, 'the radio is online and listening');
  });
  after(async () => {
    await s?.close();
    await sim?.close();
    await pty?.stop();
    if (dir) removeDir(dir);
  });

  test('lora - the driver configures the modem with the documented commands', () => {
    const start = sim.commands.lastIndexOf('sys get ver');
    assert.ok(start >= 0, 'the driver asks the module what it is');
    assert.equal(sim.commands[start + 1], 'mac pause', 'then pauses the LoRaWAN stack for raw radio use');
    assert.equal(sim.settings.get('mod'), 'lora');
    assert.equal(sim.settings.get('freq'), '868100000');
    assert.equal(sim.settings.get('pwr'), '14');
    assert.equal(sim.settings.get('sf'), 'sf9');
    assert.equal(sim.settings.get('bw'), '125');
    assert.equal(sim.settings.get('cr'), '4/5');
    assert.equal(sim.settings.get('sync'), '12');
    assert.equal(sim.settings.get('wdt'), '0');
    assert.ok(sim.commands.includes('radio rx 0'));
  });

  test('lora - nodes appear with their counters; uplinks are published; missed packets come from packet id gaps', async () => {
    const c = new RestClient(s.app, s.auth);
    assert.equal((await c.post('/api/v1/messaging/subscribe', { destinationName: 'lora/gw/+/up', maxDepth: 100 })).statusCode, 200);
    await sim.inject(frame(1, 7, 0, 'temp=20'), -71, 8);
    await sim.inject(frame(1, 7, 1, 'temp=21'), -72, 7);
    await sim.inject(frame(1, 7, 4, 'temp=22'), -73, 6); // ids 2 and 3 were lost
    await sim.inject(frame(1, 7, 4, 'temp=22', 0x40), -74, 6); // a retransmission of 4: not published again
    await sim.inject(frame(255, 9, 200, 'broadcast hello'), -90, -3); // broadcast: for us too
    await sim.inject(frame(3, 8, 0, 'not for us'), -80, 1); // addressed to node 3: not ours
    await waitUntil(async () => (await device()).packetsReceived === 6, 5000, 'six packets received');

    const got: Array<{ destinationName: string; payload: string; metaData: Record<string, string> }> = [];
    await waitUntil(async () => {
      const r = await c.post('/api/v1/messaging/consume', { destination: 'lora/gw/+/up' });
      got.push(...r.json().consumedMessages);
      return got.length >= 4;
    }, 5000, 'four uplinks consumed');
    assert.deepEqual(
      got.map((m) => [m.destinationName, unb64(m.payload)]),
      [
        ['lora/gw/7/up', 'temp=20'],
        ['lora/gw/7/up', 'temp=21'],
        ['lora/gw/7/up', 'temp=22'],
        ['lora/gw/9/up', 'broadcast hello'],
      ],
    );
    assert.equal(got[2]!.metaData.loraRssi, '-73');
    assert.equal(got[2]!.metaData.loraSnr, '6');
    assert.equal(got[2]!.metaData.loraPacketId, '4');

    const d = await device();
    assert.equal(d.name, 'gw');
    assert.equal(d.radio, 'Serial');
    assert.match(d.module, /^RN2483 1\.0\.5/);
    assert.equal(d.packetsReceived, 6);
    assert.equal(d.bytesReceived, [11, 11, 11, 11, 19, 14].reduce((a, b) => a + b));
    assert.deepEqual(
      d.endPointInfoList.map((e: { nodeId: number; lastRSSI: number; connectionSize: number }) => [e.nodeId, e.lastRSSI, e.connectionSize]),
      [
        [7, -74, 1],
        [9, -90, 1],
      ],
    );
    const [n7] = (await s.inject('/api/v1/device/lora/gw/7')).json();
    assert.equal(n7.remoteNodeId, 7);
    assert.equal(n7.receivedPackets, 3);
    assert.equal(n7.missedPackets, 2);
    assert.equal(n7.lastPacketId, 4);
    assert.equal(n7.rssi, -74);
    assert.ok(n7.lastReadTime > 0 && n7.lastReadTime <= Date.now());
    assert.equal(n7.lastWriteTime, 0);
    const all = (await s.inject('/api/v1/device/lora/gw/1')).json(); // the radio's own address: every node heard
    assert.deepEqual(all.map((x: { remoteNodeId: number }) => x.remoteNodeId), [7, 9]);
  });

  test('lora - a message published on a node downlink topic reaches the node with the framing header', async () => {
    const before = sim.transmissions.length;
    const c = new RestClient(s.app, s.auth);
    for (const text of ['set interval 60', 'reboot']) {
      const r = await c.post('/api/v1/messaging/publish', { destinationName: 'lora/gw/7/down', message: { payload: b64(text) } });
      assert.equal(r.statusCode, 200, r.body);
    }
    await waitUntil(() => sim.transmissions.length >= before + 2, 5000, 'two downlinks on the air');
    const [a, b] = sim.transmissions.slice(before);
    assert.deepEqual([...a!.subarray(0, 4)], [7, 1, 0, 0], 'to 7, from 1 (the radio), packet id 0, no flags');
    assert.equal(a!.subarray(4).toString(), 'set interval 60');
    assert.deepEqual([...b!.subarray(0, 4)], [7, 1, 1, 0], 'the next packet id');
    assert.equal(b!.subarray(4).toString(), 'reboot');
    assert.ok(sim.commands.includes('radio rxstop'), 'reception is left to transmit');
    await waitUntil(() => sim.listening, 5000, 'listening again after the transmission');
    await waitUntil(async () => (await device()).packetsSent === 2, 5000, 'two packets counted as sent');
    const [n7] = (await s.inject('/api/v1/device/lora/gw/7')).json();
    assert.ok(n7.lastWriteTime > 0);
  });

  test('lora - an MQTT client receives a node uplink and its publish on the downlink topic goes on the air', async () => {
    const c = await mqtt.connectAsync(`mqtt://127.0.0.1:${await mqttPort(s)}`, { clientId: 'lora-app', username: 'admin', password: s.adminPassword, reconnectPeriod: 0 });
    try {
      const got: Array<[string, string]> = [];
      c.on('message', (topic, payload) => got.push([topic, payload.toString()]));
      await c.subscribeAsync('lora/gw/+/up');
      await sim.inject(frame(1, 9, 201, 'door=open'), -88, 2);
      await waitUntil(() => got.length === 1, 5000, 'the MQTT client gets the uplink');
      assert.deepEqual(got[0], ['lora/gw/9/up', 'door=open']);
      const before = sim.transmissions.length;
      await c.publishAsync('lora/gw/9/down', 'lock', { qos: 1 });
      await waitUntil(() => sim.transmissions.length > before, 5000, 'the downlink on the air');
      assert.deepEqual([...sim.transmissions[before]!], [9, 1, 0, 0, ...Buffer.from('lock')]);
    } finally {
      await c.endAsync();
    }
  });

  test('lora - the three routes and their errors', async () => {
    const list = await s.inject('/api/v1/device/lora');
    assert.equal(list.statusCode, 200);
    assert.deepEqual(list.json().map((d: { name: string }) => d.name), ['gw', 'absent']);
    const absent = list.json()[1];
    assert.equal(absent.state, 'Failed', 'a radio whose port does not exist keeps retrying');
    assert.match(absent.lastError, /no-such-port/);
    const cases: Array<[string, number, string]> = [
      ['/api/v1/device/lora/%20', 400, 'Device name must not be blank'],
      ['/api/v1/device/lora/nope', 404, 'LoRa device not found'],
      ['/api/v1/device/lora/%20/7', 400, 'Device name must not be blank'],
      ['/api/v1/device/lora/nope/7', 404, 'LoRa device not found'],
      ['/api/v1/device/lora/gw/abc', 400, 'Node id must be a valid integer'],
      ['/api/v1/device/lora/gw/-1', 400, 'Node id must be a valid integer'],
      ['/api/v1/device/lora/gw/1.5', 400, 'Node id must be a valid integer'],
      ['/api/v1/device/lora/gw/99999999999999', 400, 'Node id must be a valid integer'],
      ['/api/v1/device/lora/gw/200', 404, 'LoRa endpoint not found'],
    ];
    for (const [url, code, status] of cases) {
      const r = await s.inject(url);
      assert.equal(r.statusCode, code, `${url}: ${r.body}`);
      assert.deepEqual(r.json(), { status }, url);
    }
    assert.equal((await s.inject('/api/v1/device/lora/GW')).json().name, 'gw', 'names match case-insensitively as a fallback');
    assert.equal((await s.app.inject('/api/v1/device/lora')).statusCode, 401, 'credentials are needed');
    const doc = (await s.app.inject('/openapi.json')).json();
    for (const p of ['/api/v1/device/lora', '/api/v1/device/lora/{deviceName}', '/api/v1/device/lora/{deviceName}/{nodeId}']) {
      assert.deepEqual(doc.paths[p].get['x-required-permission'], { permission: 'view_stats', resourceType: 'Server' }, p);
    }
  });

  test('lora - the modem disappearing takes the radio offline, and it comes back when the modem returns', async () => {
    await sim.close();
    await pty.stop(); // socat gone: both pty ends vanish
    await waitUntil(async () => (await device()).state !== 'Online', 5000, 'the radio leaves Online');
    const lost = await device();
    assert.ok(['Offline', 'Failed'].includes(lost.state), lost.state);
    assert.ok(lost.lastError, 'it says why');
    const actor = (await s.inject('/api/v1/server/actors/lora%3Agw')).json();
    assert.match(JSON.stringify(actor.state), /offline/);

    await pty.start();
    sim = await Rn2483Sim.open(pty.sim);
    await waitUntil(async () => (await device()).state === 'Online' && sim.listening, 10000, 'the radio is back online');
    await sim.inject(frame(1, 7, 5, 'after the outage'), -65, 5);
    await waitUntil(async () => (await s.inject('/api/v1/device/lora/gw/7')).json()[0].lastPacketId === 5, 5000, 'packets flow again');
    const [n7] = (await s.inject('/api/v1/device/lora/gw/7')).json();
    assert.equal(n7.missedPackets, 2, 'the node table outlives the outage');
  });

  test('lora - a modem that stops answering is taken offline by the health check', async () => {
    // a second radio with a fast health check on its own pty pair
    const dir2 = tempDir('switchyard-lora2-');
    const pty2 = new PtyPair(dir2);
    await pty2.start();
    const sim2 = await Rn2483Sim.open(pty2.sim);
    const s2 = await startServer({
      overrides: {
        LoRaDeviceManager: { data: [{ name: 'hc', healthCheckInterval: 300, serialConfig: { port: pty2.radio } }], retryInitial: 100, retryMax: 200, commandTimeout: 1000 },
      },
    });
    try {
      const state = async () => (await s2.inject('/api/v1/device/lora/hc')).json().state;
      await waitUntil(async () => (await state()) === 'Online', 10000, 'online');
      sim2.frozen = true;
      await waitUntil(async () => (await state()) === 'Offline', 5000, 'offline once the modem is silent');
      assert.match((await s2.inject('/api/v1/device/lora/hc')).json().lastError, /did not answer/);
      sim2.frozen = false;
      await waitUntil(async () => (await state()) === 'Online', 10000, 'online again once it answers');
    } finally {
      await s2.close();
      await sim2.close();
      await pty2.stop();
      removeDir(dir2);
    }
  });
});
