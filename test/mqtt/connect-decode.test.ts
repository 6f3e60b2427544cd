import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import mqttPacket from 'mqtt-packet';
import { decodeConnect } from '../../src/protocol/mqtt/codec.js';
import { MqttProtocolError } from '../../src/protocol/mqtt/reason.js';
import { rawBroker } from './helpers.js';

/**
 * The broker's own CONNECT decoder (src/protocol/mqtt/codec.ts `decodeConnect`, which replaced mqtt-packet's parser on
 * the connect path): every CONNECT mqtt-packet writes reads back with the same fields mqtt-packet's parser gives, and
 * the checks a client notices hold over the wire.
 */

const utf8 = fc.string({ maxLength: 12 }).filter((s) => !s.includes('\u0000'));
const bytes = fc.uint8Array({ maxLength: 16 }).map((a) => Buffer.from(a));
const userProps = fc.option(fc.dictionary(fc.string({ minLength: 1, maxLength: 5 }).filter((s) => !s.includes('\u0000') && s !== '__proto__'), utf8, { maxKeys: 3 }), { nil: undefined });

const connectArb = fc
  .record({
    protocolVersion: fc.constantFrom(3, 4, 5),
    clean: fc.boolean(),
    keepalive: fc.integer({ min: 0, max: 65535 }),
    clientId: utf8,
    username: fc.option(utf8, { nil: undefined }),
    password: fc.option(bytes, { nil: undefined }),
    will: fc.option(fc.record({ topic: utf8.filter((t) => t.length > 0), payload: bytes, qos: fc.constantFrom(0, 1, 2), retain: fc.boolean() }), { nil: undefined }),
    sessionExpiryInterval: fc.option(fc.integer({ min: 0, max: 0xffffffff }), { nil: undefined }),
    receiveMaximum: fc.option(fc.integer({ min: 1, max: 65535 }), { nil: undefined }),
    requestProblemInformation: fc.option(fc.boolean(), { nil: undefined }),
    userProperties: userProps,
    willDelayInterval: fc.option(fc.integer({ min: 0, max: 1000 }), { nil: undefined }),
    contentType: fc.option(utf8, { nil: undefined }),
  })
  .map((r) => {
    const v5 = r.protocolVersion === 5;
    const packet: Record<string, unknown> = {
      cmd: 'connect',
      protocolId: r.protocolVersion === 3 ? 'MQIsdp' : 'MQTT',
      protocolVersion: r.protocolVersion,
      clean: r.clean,
      keepalive: r.keepalive,
      // mqtt-packet writes no empty client id for 3.1, nor for 3.1.1 without clean session
      clientId: r.clientId === '' && (r.protocolVersion === 3 || !r.clean) ? 'x' : r.clientId,
    };
    if (r.username !== undefined) packet.username = r.username;
    if (r.password !== undefined && r.username !== undefined) packet.password = r.password; // mqtt-packet writes none without a user name
    if (r.will !== undefined) {
      const will: Record<string, unknown> = { ...r.will };
      if (v5) {
        const wp: Record<string, unknown> = {};
        if (r.willDelayInterval !== undefined) wp.willDelayInterval = r.willDelayInterval;
        if (r.contentType !== undefined) wp.contentType = r.contentType;
        if (Object.keys(wp).length > 0) will.properties = wp;
      }
      packet.will = will;
    }
    if (v5) {
      const p: Record<string, unknown> = {};
      if (r.sessionExpiryInterval !== undefined) p.sessionExpiryInterval = r.sessionExpiryInterval;
      if (r.receiveMaximum !== undefined) p.receiveMaximum = r.receiveMaximum;
      if (r.requestProblemInformation !== undefined) p.requestProblemInformation = r.requestProblemInformation;
      if (r.userProperties !== undefined && Object.keys(r.userProperties).length > 0) p.userProperties = r.userProperties;
      if (Object.keys(p).length > 0) packet.properties = p;
    }
    return packet;
  });

/** mqtt-packet's reading of one frame. */
function referenceParse(frame: Buffer): Record<string, unknown> {
  const parser = mqttPacket.parser({ protocolVersion: 4 } as never);
  let out: Record<string, unknown> | undefined;
  parser.on('packet', (p) => (out = p as unknown as Record<string, unknown>));
  parser.on('error', (err) => {
    throw err;
  });
  parser.parse(frame);
  assert.ok(out, 'mqtt-packet read no packet');
  return out;
}

/** The fields both readings have, as plain data (mqtt-packet's user properties have a null prototype). */
function plain(p: Record<string, unknown>): unknown {
  const { cmd, protocolId, protocolVersion, clean, keepalive, clientId, username, password, will, properties } = p;
  return JSON.parse(JSON.stringify({ cmd, protocolId, protocolVersion, clean, keepalive, clientId, username, password, will, properties }));
}

describe('mqtt CONNECT decoding', () => {
  test('connect decode - every CONNECT mqtt-packet writes (3.1, 3.1.1, 5; will, credentials, properties) reads back as mqtt-packet reads it', () => {
    fc.assert(
      fc.property(connectArb, (packet) => {
        const frame = mqttPacket.generate(packet as never, { protocolVersion: packet.protocolVersion } as never);
        let body = 1;
        while (frame[body]! & 0x80) body++;
        const ours = decodeConnect(frame, frame[0]! & 0x0f, body + 1);
        assert.deepEqual(plain(ours as unknown as Record<string, unknown>), plain(referenceParse(frame)));
      }),
      { numRuns: 500 },
    );
  });

  test('connect decode - a truncated CONNECT, or one with bytes after its last field, is malformed (0x81), never another error', () => {
    fc.assert(
      fc.property(connectArb, fc.nat(), fc.boolean(), (packet, cut, extend) => {
        const whole = mqttPacket.generate(packet as never, { protocolVersion: packet.protocolVersion } as never);
        let body = 1;
        while (whole[body]! & 0x80) body++;
        body++;
        const frame = extend ? Buffer.concat([whole, Buffer.from([0])]) : whole.subarray(0, body + (cut % (whole.length - body)));
        assert.throws(
          () => decodeConnect(frame, 0, body),
          (err: unknown) => err instanceof MqttProtocolError && err.reason === 0x81,
        );
      }),
      { numRuns: 500 },
    );
  });
});

describe('mqtt CONNECT refusals over the wire', () => {
  const broker = rawBroker();

  /** A v5 CONNECT (client id "c", keep alive 0) with `props` as its raw property bytes. */
  const v5Connect = (props: number[]): Buffer => {
    const body = [0, 4, 0x4d, 0x51, 0x54, 0x54, 5, 0x02, 0, 0, props.length, ...props, 0, 1, 0x63];
    return Buffer.from([0x10, body.length, ...body]);
  };

  for (const [what, props, reason] of [
    ['Request Problem Information 2 is a Protocol Error (5 §3.1.2.11.7)', [0x17, 2], 0x82],
    ['Request Response Information 2 is a Protocol Error (5 §3.1.2.11.6)', [0x19, 2], 0x82],
    ['Receive Maximum twice is a Protocol Error (5 §2.2.2.2)', [0x21, 0, 1, 0x21, 0, 2], 0x82],
    ['a property CONNECT may not carry (Topic Alias) is malformed (5 §2.2.2.2)', [0x23, 0, 1], 0x81],
    ['a Session Expiry Interval cut short by the Property Length is malformed', [0x11, 0, 0], 0x81],
  ] as const) {
    test(`connect decode - ${what}: CONNACK 0x${reason.toString(16)}, then the connection closes`, async () => {
      const r = await broker.open(5);
      r.write(v5Connect([...props]));
      const ack = await r.next('connack');
      assert.equal(ack.reasonCode, reason);
      await r.waitClosed();
    });
  }

  test('connect decode - 3.1.1: a CONNECT with its reserved flag set closes the connection without CONNACK [MQTT-3.1.2-3]', async () => {
    const r = await broker.open(4);
    r.write(Buffer.from([0x10, 13, 0, 4, 0x4d, 0x51, 0x54, 0x54, 4, 0x03, 0, 0, 0, 1, 0x63]));
    await r.waitClosed();
    assert.equal(r.packets.length, 0);
  });

  test('connect decode - a valid 3.1.1 CONNECT after those is accepted (session present 0)', async () => {
    const r = await broker.open(4);
    const ack = await r.connect({ clientId: 'fine', keepalive: 30 });
    assert.equal(ack.returnCode, 0);
    assert.equal(ack.sessionPresent, false);
  });
});
