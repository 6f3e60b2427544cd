import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createActor, fromPromise, waitFor } from 'xstate';
import { loraMachine, loraStateName, type ModemLike } from '../../actors/lora/lora.machine.js';
import { LoRaDeviceManagerSchema, nodeOfTopic, topicsOf } from '../../src/devices/lora/config.js';
import { decodeFrame, encodeFrame, packetGap } from '../../src/devices/lora/framing.js';
import { LoRaRadio, type Uplink } from '../../src/devices/lora/radio.js';
import { airTimeMs, hasRxStop, Rn2483, type ReceivedPacket } from '../../src/devices/lora/rn2483.js';
import { PtyPair, Rn2483Sim } from './rn2483-sim.js';
import { diagramMarkdown } from '../../src/runtime/diagrams.js';
import { loadConfig } from '../../src/config/load.js';
import { ROOT, tempDir, removeDir } from '../helpers.js';
import { writeFileSync } from 'node:fs';

test('lora - the framing header round-trips and packet id gaps count missed packets modulo 256', () => {
  const f = { to: 7, from: 1, id: 42, flags: 0x40, payload: Buffer.from('hi') };
  const bytes = encodeFrame(f);
  assert.deepEqual([...bytes], [7, 1, 42, 0x40, 0x68, 0x69]);
  assert.deepEqual(decodeFrame(bytes), f);
  assert.equal(decodeFrame(Buffer.from([1, 2, 3])), undefined, 'shorter than the header');
  assert.throws(() => encodeFrame({ ...f, payload: Buffer.alloc(252) }), /at most 251/);
  assert.deepEqual(packetGap(undefined, 9), { duplicate: false, missed: 0 });
  assert.deepEqual(packetGap(9, 10), { duplicate: false, missed: 0 });
  assert.deepEqual(packetGap(9, 13), { duplicate: false, missed: 3 });
  assert.deepEqual(packetGap(254, 1), { duplicate: false, missed: 2 }, 'across the wrap');
  assert.deepEqual(packetGap(5, 5), { duplicate: true, missed: 0 });
});

test('lora - the node table is bounded (least recently heard evicted) and downlink queues drop their oldest', async () => {
  const cfg = LoRaDeviceManagerSchema.parse({ data: [{ name: 'r', maxNodes: 2, downlinkQueueSize: 2, transmissionRate: 0, serialConfig: { port: '/dev/null' } }] }).data[0]!;
  const ups: Uplink[] = [];
  const radio = new LoRaRadio(cfg, (u) => ups.push(u));
  const pkt = (from: number, id: number) => ({ data: encodeFrame({ to: 1, from, id, flags: 0, payload: Buffer.from('x') }), rssi: -50 });
  radio.received(pkt(10, 0));
  radio.received(pkt(11, 0));
  radio.received(pkt(10, 1)); // 10 heard again: 11 is now the least recently heard
  radio.received(pkt(12, 0));
  assert.deepEqual([...radio.nodes.keys()], [10, 12]);
  assert.equal(radio.nodesEvicted, 1);
  assert.deepEqual(ups.map((u) => u.topic), ['lora/r/10/up', 'lora/r/11/up', 'lora/r/10/up', 'lora/r/12/up']);

  for (const p of ['a', 'b', 'c']) radio.enqueue(10, Buffer.from(p));
  assert.equal(radio.queued(10), 2);
  assert.equal(radio.downlinksDropped, 1);
  radio.enqueue(10, Buffer.alloc(300));
  assert.equal(radio.downlinksTooLarge, 1);
  const sent: Buffer[] = [];
  radio.attach({ transmit: async (b) => void sent.push(b) });
  for (let i = 0; i < 50 && sent.length < 2; i++) await new Promise((r) => setImmediate(r));
  assert.deepEqual(sent.map((b) => b.subarray(4).toString()), ['b', 'c'], 'the oldest was dropped');
  radio.stop();
});

test('lora - topic templates: defaults, node ids from topics, and invalid templates refused', () => {
  const d = LoRaDeviceManagerSchema.parse({ data: [{ name: 'gw', serialConfig: { port: 'ttyUSB0' } }] }).data[0]!;
  assert.deepEqual(topicsOf(d), { uplink: 'lora/gw/{node}/up', downlink: 'lora/gw/{node}/down' });
  assert.equal(nodeOfTopic('lora/gw/{node}/down', 'lora/gw/17/down'), 17);
  assert.equal(nodeOfTopic('lora/gw/{node}/down', 'lora/gw/256/down'), undefined);
  assert.equal(nodeOfTopic('lora/gw/{node}/down', 'lora/gw/x/down'), undefined);
  const bad = LoRaDeviceManagerSchema.safeParse({ data: [{ name: 'gw', downlinkTopic: 'a/{node}x', serialConfig: { port: 'ttyUSB0' } }] });
  assert.equal(bad.success, false);
  assert.deepEqual(LoRaDeviceManagerSchema.parse({}).data, [], 'default: no radios');
});

test('lora - a wrong LoRa section stops start-up with one line naming the key', () => {
  const dir = tempDir('switchyard-lora-config-');
  try {
    writeFileSync(join(dir, 'LoRa.yaml'), 'LoRaDeviceManager:\n  data:\n    - name: gw\n      power: 14\n');
    assert.throws(
      () => loadConfig({ configDir: dir, env: {} }),
      (err: Error) => {
        assert.match(err.message, /LoRaDeviceManager/);
        assert.match(err.message, /serialConfig/);
        return true;
      },
    );
  } finally {
    removeDir(dir);
  }
});

test('lora - airtime and firmware checks used by the driver', () => {
  // Semtech's calculator: SF7, 125 kHz, CR 4/5, 10 bytes, explicit header, CRC on → 41.216 ms
  assert.equal(Math.round(airTimeMs(10, { spreadingFactor: 7, bandwidth: 125, codingRate: '4/5' }) * 1000) / 1000, 41.216);
  assert.equal(hasRxStop('RN2483 1.0.5 Oct 31 2018 15:06:52'), true);
  assert.equal(hasRxStop('RN2483 1.0.4 Oct 12 2017 14:59:25'), false);
  assert.equal(hasRxStop('RN2903 1.0.5 Nov 06 2018 10:45:27'), true);
});

test('lora - the machine: failed with backoff until the modem opens, online, offline when lost, online again', async () => {
  let opens = 0;
  let lose: ((reason: string) => void) | undefined;
  const modem: ModemLike = { version: 'sim', onLost: (cb) => void (lose = cb), close: async () => {} };
  const actor = createActor(
    loraMachine.provide({
      actors: {
        openModem: fromPromise(async () => {
          opens++;
          if (opens === 1) throw new Error('no such port');
          return modem;
        }),
      },
    }),
    { input: { name: 'r', retryInitial: 10, retryMax: 20 } },
  ).start();
  await waitFor(actor, (s) => s.matches('online'));
  assert.equal(opens, 2);
  assert.equal(loraStateName(actor.getSnapshot().value), 'Online');
  lose!('serial port closed');
  assert.equal(loraStateName(actor.getSnapshot().value), 'Offline');
  assert.ok(actor.getSnapshot().hasTag('degraded'));
  assert.equal(actor.getSnapshot().context.lastError, 'serial port closed');
  await waitFor(actor, (s) => s.matches('online'));
  assert.equal(opens, 3);
  actor.stop();
});

test('lora - the committed diagram matches the machine (run npm run diagrams)', () => {
  assert.equal(readFileSync(join(ROOT, 'docs', 'machines', 'lora.md'), 'utf8'), diagramMarkdown(loraMachine));
});

test('lora - on firmware before 1.0.5 the driver listens in watchdog windows, transmits between them, reports no RSSI', async () => {
  const dir = tempDir('switchyard-lora-legacy-');
  const pty = new PtyPair(dir);
  await pty.start();
  const sim = await Rn2483Sim.open(pty.sim);
  sim.version = 'RN2483 1.0.1 Dec 15 2015 09:38:09';
  let modem: Rn2483 | undefined;
  try {
    modem = await Rn2483.open({
      path: pty.radio,
      baudRate: 57600,
      dataBits: 8,
      stopBits: 1,
      parity: 'none',
      flowControl: 'none',
      commandTimeout: 2000,
      healthCheckInterval: 0,
      legacyRxWindow: 200,
      settings: { frequencyHz: 868100000, power: 14, spreadingFactor: 7, bandwidth: 125, codingRate: '4/5', syncWord: 0x12 },
    });
    assert.equal(sim.settings.get('wdt'), '200');
    const got: ReceivedPacket[] = [];
    modem.onPacket((p) => got.push(p));
    await sim.inject(Buffer.from([1, 7, 0, 0, 0x41]), -70, 4);
    await modem.transmit(Buffer.from([7, 1, 0, 0, 0x42]));
    assert.deepEqual([...sim.transmissions[0]!], [7, 1, 0, 0, 0x42]);
    assert.equal(got.length, 1);
    assert.equal(got[0]!.rssi, undefined);
    assert.equal(got[0]!.snr, 4);
    assert.ok(!sim.commands.includes('radio rxstop') && !sim.commands.includes('radio get rssi'));
  } finally {
    await modem?.close();
    await sim.close();
    await pty.stop();
    removeDir(dir);
  }
});

test('lora - with acknowledge on, uplinks addressed to the radio are answered with a RadioHead ACK (also duplicates), broadcasts are not', async () => {
  const cfg = LoRaDeviceManagerSchema.parse({ data: [{ name: 'r', address: 1, acknowledge: true, transmissionRate: 1, serialConfig: { port: '/dev/null' } }] }).data[0]!;
  const radio = new LoRaRadio(cfg, () => {});
  const sent: Buffer[] = [];
  radio.attach({ transmit: async (b) => void sent.push(b) });
  const pkt = (to: number, id: number, flags = 0) => ({ data: encodeFrame({ to, from: 5, id, flags, payload: Buffer.from('x') }) });
  radio.received(pkt(1, 9));
  radio.received(pkt(1, 9, 0x40)); // the node did not hear the first ACK and retried
  radio.received(pkt(255, 10));
  for (let i = 0; i < 50 && sent.length < 2; i++) await new Promise((r) => setImmediate(r));
  assert.deepEqual(sent.map((b) => [...b]), [
    [5, 1, 9, 0x80, 0x21],
    [5, 1, 9, 0x80, 0x21],
  ]);
  assert.equal(radio.acksSent, 2);
  assert.equal(radio.nodes.get(5)!.duplicatePackets, 1);
  assert.equal(radio.nodes.get(5)!.missedPackets, 0);
  radio.stop();
});
