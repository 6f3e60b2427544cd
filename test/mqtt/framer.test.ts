/** The MQTT framer: a byte stream cut anywhere gives back the same packets, whole and in order. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import mqttPacket from 'mqtt-packet';
import { Framer } from '../../src/protocol/mqtt/codec.js';

// remaining lengths at every varint boundary (1, 2 and 3 bytes), and empty packets
const SIZES = [0, 1, 10, 120, 127, 128, 16_380, 16_384, 70_000];

function stream(count: number): Buffer[] {
  const pkts: Buffer[] = [];
  for (let i = 0; i < count; i++) {
    if (i % 10 === 9) pkts.push(mqttPacket.generate({ cmd: 'pingreq' } as never));
    else pkts.push(mqttPacket.generate({ cmd: 'publish', topic: `t/${i}`, payload: Buffer.alloc(SIZES[i % SIZES.length]!, i % 256), qos: 0, retain: false, dup: false } as never));
  }
  return pkts;
}

function run(all: Buffer, cuts: (off: number) => number): Buffer[] {
  const got: Buffer[] = [];
  const framer = new Framer({ frame: (_t, _f, frame) => got.push(Buffer.from(frame)), stopped: false }, 1 << 28);
  for (let off = 0; off < all.length; ) {
    const n = cuts(off);
    framer.push(all.subarray(off, off + n));
    off += n;
  }
  assert.equal(framer.buffered, 0, 'nothing left over');
  return got;
}

test('framer: packets cut at every byte, at random points and in large reads come out whole and in order', () => {
  const pkts = stream(300);
  const all = Buffer.concat(pkts);
  let seed = 42;
  const rnd = (max: number) => {
    seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
    return 1 + (seed % max);
  };
  for (const [name, cuts] of [
    ['one byte at a time', () => 1],
    ['2..7 bytes', () => rnd(6) + 1],
    ['up to 64 KiB', () => rnd(65_536)],
    ['everything at once', () => all.length],
  ] as Array<[string, (off: number) => number]>) {
    const got = run(all, cuts);
    assert.equal(got.length, pkts.length, name);
    for (let i = 0; i < pkts.length; i++) assert.ok(got[i]!.equals(pkts[i]!), `${name}: packet ${i}`);
  }
});

test('framer: an oversize remaining length is refused before the packet is buffered', () => {
  const framer = new Framer({ frame: () => assert.fail('no packet expected'), stopped: false }, 1000);
  // header of a 100 000-byte PUBLISH, without its body
  assert.throws(() => framer.push(Buffer.from([0x30, 0xa0, 0x8d, 0x06])), /exceeds the maximum packet size/);
  // the same header split across two reads
  const split = new Framer({ frame: () => assert.fail('no packet expected'), stopped: false }, 1000);
  split.push(Buffer.from([0x30, 0xa0]));
  assert.throws(() => split.push(Buffer.from([0x8d, 0x06])), /exceeds the maximum packet size/);
});
