import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, type TestServer } from '../helpers.js';
import { RawClient, mqttPort, varInt } from './helpers.js';

/**
 * Normative statements of MQTT 3.1.1 / 5.0 probed with raw packets (the ones mqtt-packet lets through): what the
 * client sees, and that another connection is unaffected.
 */

function packet(first: number, ...body: Buffer[]): Buffer {
  const b = Buffer.concat(body);
  return Buffer.concat([Buffer.from([first, ...varInt(b.length)]), b]);
}
/** A length-prefixed string from raw bytes (which may be ill-formed UTF-8). */
function str(bytes: Buffer | string): Buffer {
  const b = typeof bytes === 'string' ? Buffer.from(bytes) : bytes;
  return Buffer.concat([Buffer.from([b.length >> 8, b.length & 0xff]), b]);
}
const u16 = (n: number) => Buffer.from([n >> 8, n & 0xff]);
const bytes = (...b: number[]) => Buffer.from(b);
/** CONNECT with `flags`, keep alive 0, `props` (v5) and `payload` after the client id. */
function connectBytes(v: 4 | 5, flags: number, clientId: Buffer | string, props = Buffer.alloc(0), payload = Buffer.alloc(0)): Buffer {
  const head = Buffer.concat([str('MQTT'), bytes(v, flags, 0, 0)]);
  return packet(0x10, head, v === 5 ? Buffer.concat([bytes(...varInt(props.length)), props]) : Buffer.alloc(0), str(clientId), payload);
}

describe('mqtt normative statements (raw packets)', () => {
  let s: TestServer;
  let port: number;
  const raws: RawClient[] = [];
  let bystander: RawClient;
  before(async () => {
    s = await startServer({ auth: false });
    port = await mqttPort(s);
    bystander = await raw(5);
    assert.equal((await bystander.connect({ clientId: 'bystander' })).reasonCode, 0);
  });
  after(async () => {
    for (const r of raws) r.destroy();
    await s.close();
  });
  const raw = async (v = 4) => {
    const r = await RawClient.open(port, v);
    raws.push(r);
    return r;
  };
  /** The other connection still works. */
  const unaffected = async () => {
    bystander.send({ cmd: 'pingreq' });
    await bystander.next('pingresp');
  };
  /** Closed without a successful CONNACK (a v5 refusal CONNACK ≥ 0x80 is allowed). */
  const refusedAtConnect = async (r: RawClient) => {
    await r.waitClosed();
    const ack = r.packets.find((p) => p.cmd === 'connack');
    if (ack !== undefined) assert.ok((ack.reasonCode ?? ack.returnCode) !== 0, 'no successful CONNACK');
  };
  /** v5: DISCONNECT with `reason`, then closed. */
  const disconnectedWith = async (r: RawClient, reason: number) => {
    const d = await r.next('disconnect');
    assert.equal(d.reasonCode, reason);
    await r.waitClosed();
  };

  test('CONNECT: Will QoS 3 is malformed (3.1.1 [MQTT-3.1.2-14], 5 [MQTT-3.1.2-12])', async () => {
    for (const v of [4, 5] as const) {
      const r = await raw(v);
      // clean start + will flag + will QoS 3
      const willProps = v === 5 ? bytes(0) : Buffer.alloc(0);
      r.write(connectBytes(v, 0x02 | 0x04 | 0x18, `willqos3-${v}`, Buffer.alloc(0), Buffer.concat([willProps, str('will/t'), str('x')])));
      await refusedAtConnect(r);
    }
    await unaffected();
  });

  test('UTF-8 strings: ill-formed UTF-8 or U+0000 is a malformed packet [MQTT-1.5.4-1, MQTT-1.5.4-2]', async () => {
    // in the client id of CONNECT (3.1.1 and 5)
    for (const v of [4, 5] as const) {
      for (const id of [bytes(0x61, 0xc3, 0x28), bytes(0x61, 0xed, 0xa0, 0x80), bytes(0x61, 0x00, 0x62)]) {
        const r = await raw(v);
        r.write(connectBytes(v, 0x02, id));
        await refusedAtConnect(r);
      }
    }
    // in a will topic
    const w = await raw(4);
    w.write(connectBytes(4, 0x02 | 0x04, 'badwill', Buffer.alloc(0), Buffer.concat([str(bytes(0x77, 0xff)), str('x')])));
    await refusedAtConnect(w);
    // in a SUBSCRIBE topic filter: v5 DISCONNECT 0x81
    const sub = await raw(5);
    assert.equal((await sub.connect({ clientId: 'badutf8sub' })).reasonCode, 0);
    sub.write(packet(0x82, u16(1), bytes(0), str(bytes(0x61, 0x2f, 0xc3, 0x28)), bytes(0)));
    await disconnectedWith(sub, 0x81);
    assert.equal(sub.packets.filter((p) => p.cmd === 'suback').length, 0);
    // in an UNSUBSCRIBE topic filter (3.1.1: closed)
    const uns = await raw(4);
    assert.equal((await uns.connect({ clientId: 'badutf8unsub' })).returnCode, 0);
    uns.write(packet(0xa2, u16(1), str(bytes(0x61, 0x00))));
    await uns.waitClosed();
    assert.equal(uns.packets.filter((p) => p.cmd === 'unsuback').length, 0);
    // in a v5 user property of SUBSCRIBE
    const up = await raw(5);
    assert.equal((await up.connect({ clientId: 'badutf8prop' })).reasonCode, 0);
    const prop = Buffer.concat([bytes(0x26), str('k'), str(bytes(0xc0, 0x80))]);
    up.write(packet(0x82, u16(1), bytes(prop.length), prop, str('ok/topic'), bytes(0)));
    await disconnectedWith(up, 0x81);
    await unaffected();
  });

  test('5: a property other than User Property included twice is a protocol error (5 §2.2.2.2, §3.1.2.11)', async () => {
    // CONNECT with Session Expiry Interval twice: refused, no successful CONNACK
    const r = await raw(5);
    const twice = Buffer.concat([bytes(0x11, 0, 0, 0, 0), bytes(0x11, 0, 0, 0, 10)]);
    r.write(connectBytes(5, 0x02, 'dupprop', twice));
    await refusedAtConnect(r);
    // SUBSCRIBE: a user property twice is fine; the Subscription Identifier twice is DISCONNECT 0x82
    const sub = await raw(5);
    assert.equal((await sub.connect({ clientId: 'dupprop-sub' })).reasonCode, 0);
    const okProps = Buffer.concat([bytes(0x0b, 5), bytes(0x26), str('k'), str('a'), bytes(0x26), str('k'), str('b')]);
    sub.write(packet(0x82, u16(1), bytes(okProps.length), okProps, str('dup/ok'), bytes(1)));
    assert.deepEqual((await sub.next('suback')).granted, [1]);
    const badProps = Buffer.concat([bytes(0x0b, 5), bytes(0x0b, 6)]);
    sub.write(packet(0x82, u16(2), bytes(badProps.length), badProps, str('dup/bad'), bytes(1)));
    await disconnectedWith(sub, 0x82);
    // PUBACK with Reason String twice
    const ack = await raw(5);
    assert.equal((await ack.connect({ clientId: 'dupprop-ack' })).reasonCode, 0);
    const rs = Buffer.concat([bytes(0x1f), str('a'), bytes(0x1f), str('b')]);
    ack.write(packet(0x40, u16(7), bytes(0x10, rs.length), rs));
    await disconnectedWith(ack, 0x82);
    await unaffected();
  });

  test('SUBSCRIBE / UNSUBSCRIBE with packet identifier 0 are malformed (3.1.1 [MQTT-2.3.1-1], 5 [MQTT-2.2.1-3])', async () => {
    const v5 = await raw(5);
    assert.equal((await v5.connect({ clientId: 'pid0-sub' })).reasonCode, 0);
    v5.write(packet(0x82, u16(0), bytes(0), str('pid/0'), bytes(0)));
    await disconnectedWith(v5, 0x81);
    const v4 = await raw(4);
    assert.equal((await v4.connect({ clientId: 'pid0-unsub' })).returnCode, 0);
    v4.write(packet(0xa2, u16(0), str('pid/0')));
    await v4.waitClosed();
    assert.equal(v4.packets.filter((p) => p.cmd === 'unsuback').length, 0);
    await unaffected();
  });

  test("5: no Reason String beyond the client's Maximum Packet Size on CONNACK or DISCONNECT [MQTT-3.2.2-19, MQTT-3.14.2-3]", async () => {
    // a refusing CONNACK (Authentication Data without a method: 0x82) to a client allowing 16 bytes
    const r = await raw(5);
    r.send({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: 5, clean: true, clientId: 'mps-refused', keepalive: 0, properties: { maximumPacketSize: 16, authenticationData: Buffer.from('x') } });
    const ack = await r.next('connack');
    assert.equal(ack.reasonCode, 0x82);
    assert.equal(ack.properties?.reasonString, undefined);
    assert.ok(ack.length + 2 <= 16, `CONNACK of ${ack.length + 2} bytes`);
    await r.waitClosed();
    // a server DISCONNECT (topic name with a wildcard: 0x90) to a client allowing 16 bytes
    const c = await raw(5);
    assert.equal((await c.connect({ clientId: 'mps-disc', properties: { maximumPacketSize: 16 } })).reasonCode, 0);
    c.write(packet(0x30, str('a/+'), bytes(0), Buffer.from('x')));
    const d = await c.next('disconnect');
    assert.equal(d.reasonCode, 0x90);
    assert.equal(d.properties?.reasonString, undefined);
    assert.ok(d.length + 2 <= 16, `DISCONNECT of ${d.length + 2} bytes`);
    await c.waitClosed();
    // without the limit the reason string is there
    const full = await raw(5);
    assert.equal((await full.connect({ clientId: 'mps-full' })).reasonCode, 0);
    full.write(packet(0x30, str('a/+'), bytes(0), Buffer.from('x')));
    const fd = await full.next('disconnect');
    assert.equal(fd.reasonCode, 0x90);
    assert.ok(typeof fd.properties?.reasonString === 'string');
    await unaffected();
  });
});
