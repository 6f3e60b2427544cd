/**
 * Deviations an outside MQTT suite found (issue 24, items 2..7) and the short AUTH packet, each on raw packets over a
 * loopback socket: bytes written by hand where the packet must be malformed, `mqtt-packet` where it is well-formed.
 * What is asserted is what a client sees: the CONNACK / SUBACK / UNSUBACK / DISCONNECT it gets, the bytes of the
 * CONNACK, whether the connection closes, and whether a will reaches a subscriber.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import mqttPacket from 'mqtt-packet';
import { startServer, type TestServer } from '../helpers.js';
import { mqttPort, RawClient, varInt } from './helpers.js';

/** A packet as bytes: type/flags byte, remaining length, body. */
function packet(first: number, body: number[] | Buffer): Buffer {
  const b = Buffer.from(body);
  return Buffer.concat([Buffer.from([first, ...varInt(b.length)]), b]);
}

function str(s: string): number[] {
  const b = Buffer.from(s);
  return [b.length >> 8, b.length & 0xff, ...b];
}

/** `bytes` (a whole packet) with `extra` appended to its body, the remaining length grown to match. */
function withTrailing(bytes: Buffer, extra: number[]): Buffer {
  let i = 1;
  while (bytes[i]! & 0x80) i++;
  return packet(bytes[0]!, Buffer.concat([bytes.subarray(i + 1), Buffer.from(extra)]));
}

function connectBytes(version: number, fields: Record<string, unknown>): Buffer {
  return mqttPacket.generate({ cmd: 'connect', protocolId: version === 3 ? 'MQIsdp' : 'MQTT', protocolVersion: version, clean: true, keepalive: 0, clientId: '', ...fields } as never, { protocolVersion: version } as never);
}

describe('MQTT deviations (issue 24)', () => {
  let s: TestServer;
  let port = 0;
  const raws: RawClient[] = [];
  const open = async (version: number): Promise<RawClient> => {
    const r = await RawClient.open(port, version);
    raws.push(r);
    return r;
  };
  /** Every byte the server sends on `r` from now on. */
  const capture = (r: RawClient): Buffer[] => {
    const chunks: Buffer[] = [];
    r.socket.on('data', (b: Buffer) => chunks.push(b));
    return chunks;
  };
  const connected = async (version: number, clientId: string, props: Record<string, unknown> = {}): Promise<RawClient> => {
    const r = await open(version);
    const ack = await r.connect({ clientId, ...props });
    assert.equal(version === 5 ? ack.reasonCode : ack.returnCode, 0);
    return r;
  };
  /** Waits for the close; returns the packets the server sent before it (by cmd). */
  const closedAfter = async (r: RawClient): Promise<string[]> => {
    await r.waitClosed();
    return r.packets.map((p) => p.cmd as string);
  };

  before(async () => {
    s = await startServer({ overrides: { AuthManager: { allowAnonymous: true } } });
    port = await mqttPort(s);
  });
  after(async () => {
    for (const r of raws) r.destroy();
    await s.close();
  });

  // ---- 2. CONNECT with bytes its flags do not announce -------------------------------------------------------

  test('MQTT-3.1.4-1, MQTT-3.1.2-18 - MQTT 3.1.1 CONNECT with a user name but no User Name Flag is malformed: no CONNACK, connection closed', async () => {
    const r = await open(4);
    r.write(withTrailing(connectBytes(4, { clientId: 'dev2-a' }), str('alice')));
    assert.deepEqual(await closedAfter(r), []);
  });

  test('MQTT-3.1.4-1, MQTT-3.1.2-16 - MQTT 3.1.1 CONNECT with a password but no Password Flag is malformed: no CONNACK, connection closed', async () => {
    const r = await open(4);
    r.write(withTrailing(connectBytes(4, { clientId: 'dev2-b', username: 'alice' }), str('secret')));
    assert.deepEqual(await closedAfter(r), []);
  });

  test('MQTT-3.1.4-1, MQTT-3.1.2-18 - MQTT 5 CONNECT with a user name but no User Name Flag gets CONNACK 0x81 Malformed Packet and is closed', async () => {
    const r = await open(5);
    r.write(withTrailing(connectBytes(5, { clientId: 'dev2-c' }), str('alice')));
    await r.waitClosed();
    assert.deepEqual(r.packets.map((p) => [p.cmd, p.reasonCode]), [['connack', 0x81]]);
  });

  test('MQTT-3.1.4-1, MQTT-3.1.2-16 - MQTT 5 CONNECT with a password but no Password Flag gets CONNACK 0x81 Malformed Packet and is closed', async () => {
    const r = await open(5);
    r.write(withTrailing(connectBytes(5, { clientId: 'dev2-d', username: 'alice' }), str('secret')));
    await r.waitClosed();
    assert.deepEqual(r.packets.map((p) => [p.cmd, p.reasonCode]), [['connack', 0x81]]);
  });

  test('MQTT-3.1.4-1 - a CONNECT whose flags announce what it carries is still accepted (3.1.1 and 5)', async () => {
    for (const v of [4, 5]) {
      const r = await open(v);
      const ack = await r.connect({ clientId: `dev2-ok-${v}`, username: 'admin', password: Buffer.from(s.adminPassword) });
      assert.equal(v === 5 ? ack.reasonCode : ack.returnCode, 0);
    }
  });

  test('MQTT 5 §3.12.2 - PINGREQ with bytes after its fixed header (it has no variable header or payload) is malformed: DISCONNECT 0x81, no PINGRESP', async () => {
    const r = await connected(5, 'dev2-ping');
    r.write(Buffer.from([0xc0, 0x01, 0x00]));
    await r.waitClosed();
    assert.deepEqual(r.packets.filter((p) => p.cmd !== 'connack').map((p) => [p.cmd, p.reasonCode]), [['disconnect', 0x81]]);
  });

  // ---- 3. CONNACK and the client's Maximum Packet Size -------------------------------------------------------

  test('MQTT-3.1.2-24 - a client with Maximum Packet Size 20 gets a CONNACK of at most 20 bytes that keeps the limits it must know', async () => {
    const r = await open(5);
    const bytes = capture(r);
    const ack = await r.connect({ clientId: 'dev3-a', properties: { maximumPacketSize: 20 } });
    assert.equal(ack.reasonCode, 0);
    const raw = Buffer.concat(bytes);
    assert.equal(raw[0], 0x20);
    const size = 2 + raw[1]!;
    assert.ok(size <= 20, `CONNACK of ${size} bytes to a client that allows 20`);
    // the optional "available" flags (absent means available) go first; the limits stay as long as they fit
    assert.equal(ack.properties?.receiveMaximum !== undefined, true, 'Receive Maximum kept');
    assert.equal(ack.properties?.maximumPacketSize !== undefined, true, 'Maximum Packet Size kept');
    assert.equal(ack.properties?.wildcardSubscriptionAvailable, undefined);
  });

  test('MQTT-3.1.2-24 - without a Maximum Packet Size the CONNACK keeps every property', async () => {
    const r = await open(5);
    const ack = await r.connect({ clientId: 'dev3-b' });
    assert.equal(ack.properties?.wildcardSubscriptionAvailable, true);
    assert.equal(ack.properties?.retainAvailable, true);
  });

  // ---- 4. a property the packet may not carry ----------------------------------------------------------------

  test('MQTT 5 §2.2.2.2 - SUBSCRIBE carrying a Session Expiry Interval is malformed: DISCONNECT 0x81, no SUBACK', async () => {
    const r = await connected(5, 'dev4-a');
    // 82 | packet id 1 | properties: 0x11 Session Expiry Interval 10 | filter a/b, QoS 1
    r.write(packet(0x82, [0, 1, 5, 0x11, 0, 0, 0, 10, ...str('a/b'), 1]));
    await r.waitClosed();
    assert.deepEqual(r.packets.filter((p) => p.cmd !== 'connack').map((p) => [p.cmd, p.reasonCode]), [['disconnect', 0x81]]);
  });

  test('MQTT 5 §2.2.2.2 - UNSUBSCRIBE carrying a Subscription Identifier is malformed: DISCONNECT 0x81, no UNSUBACK', async () => {
    const r = await connected(5, 'dev4-b');
    r.write(packet(0xa2, [0, 1, 2, 0x0b, 7, ...str('a/b')]));
    await r.waitClosed();
    assert.deepEqual(r.packets.filter((p) => p.cmd !== 'connack').map((p) => [p.cmd, p.reasonCode]), [['disconnect', 0x81]]);
  });

  test('MQTT 5 §2.2.2.2 - CONNECT carrying a Will Delay Interval among its own properties gets CONNACK 0x81', async () => {
    const r = await open(5);
    // 10 | "MQTT" 5 | flags: clean start | keep alive 0 | properties: 0x18 Will Delay Interval 5 | client id "dev4-c"
    r.write(packet(0x10, [...str('MQTT'), 5, 0x02, 0, 0, 5, 0x18, 0, 0, 0, 5, ...str('dev4-c')]));
    await r.waitClosed();
    assert.deepEqual(r.packets.map((p) => [p.cmd, p.reasonCode]), [['connack', 0x81]]);
  });

  test('MQTT 5 §2.2.2.2 - Will Properties carrying a Session Expiry Interval get CONNACK 0x81', async () => {
    const r = await open(5);
    // flags: will flag + clean start | no properties | client id | will properties: 0x11 | will topic | will payload
    r.write(packet(0x10, [...str('MQTT'), 5, 0x06, 0, 0, 0, ...str('dev4-d'), 5, 0x11, 0, 0, 0, 1, ...str('w/t'), ...str('x')]));
    await r.waitClosed();
    assert.deepEqual(r.packets.map((p) => [p.cmd, p.reasonCode]), [['connack', 0x81]]);
  });

  test('MQTT 5 §2.2.2.2 - SUBSCRIBE with the properties it may carry (Subscription Identifier, User Property) still gets its SUBACK', async () => {
    const r = await connected(5, 'dev4-e');
    r.send({ cmd: 'subscribe', messageId: 3, subscriptions: [{ topic: 'a/b', qos: 1 }], properties: { subscriptionIdentifier: 4, userProperties: { k: 'v' } } });
    assert.deepEqual((await r.next('suback')).granted, [1]);
  });

  // ---- 5. UNSUBSCRIBE with a malformed topic filter ----------------------------------------------------------

  for (const [name, filter] of [
    ['an empty', ''],
    ['a #/x', '#/x'],
  ] as const) {
    test(`MQTT-4.7.3-1, MQTT-4.7.1-1 - MQTT 5 UNSUBSCRIBE with ${name} filter is malformed: DISCONNECT 0x81, no UNSUBACK`, async () => {
      const r = await connected(5, `dev5-5-${filter}`);
      r.write(packet(0xa2, [0, 1, 0, ...str(filter)]));
      await r.waitClosed();
      assert.deepEqual(r.packets.filter((p) => p.cmd !== 'connack').map((p) => [p.cmd, p.reasonCode]), [['disconnect', 0x81]]);
    });
    test(`MQTT-4.7.3-1, MQTT-4.7.1-1 - MQTT 3.1.1 UNSUBSCRIBE with ${name} filter is malformed: connection closed, no UNSUBACK`, async () => {
      const r = await connected(4, `dev5-4-${filter}`);
      r.write(packet(0xa2, [0, 1, ...str(filter)]));
      assert.deepEqual((await closedAfter(r)).filter((c) => c !== 'connack'), []);
    });
  }

  test('MQTT-3.10.4-5 - UNSUBSCRIBE with a well-formed filter that has no subscription still gets UNSUBACK 0x11', async () => {
    const r = await connected(5, 'dev5-ok');
    r.send({ cmd: 'unsubscribe', messageId: 2, unsubscriptions: ['a/+/#'] });
    assert.deepEqual((await r.next('unsuback')).granted, [0x11]);
  });

  // ---- 6. MQTT 3.1 -------------------------------------------------------------------------------------------

  test('MQTT 3.1 §3.1 - a zero-length client id is refused with CONNACK return code 2 (identifier rejected)', async () => {
    const r = await open(3);
    // by hand: mqtt-packet will not write it. 10 | "MQIsdp" 3 | flags: clean session | keep alive 0 | client id ""
    r.write(packet(0x10, [...str('MQIsdp'), 3, 0x02, 0, 0, 0, 0]));
    const ack = await r.next('connack');
    assert.equal(ack.returnCode, 2);
    await r.waitClosed();
  });

  test('MQTT 3.1 §3.2 - CONNACK to a 3.1 client resuming its session has no session present bit (byte 1 is reserved 0)', async () => {
    const first = await open(3);
    first.write(connectBytes(3, { clientId: 'dev6-persistent', clean: false }));
    assert.equal((await first.next('connack')).returnCode, 0);
    first.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: 'dev6/t', qos: 1 }] });
    await first.next('suback');
    first.send({ cmd: 'disconnect' });
    await first.waitClosed();
    const again = await open(3);
    const bytes = capture(again);
    again.write(connectBytes(3, { clientId: 'dev6-persistent', clean: false }));
    assert.equal((await again.next('connack')).returnCode, 0);
    assert.deepEqual([...Buffer.concat(bytes).subarray(0, 4)], [0x20, 0x02, 0x00, 0x00]);
    // the session was resumed all the same: its subscription delivers
    const pub = await connected(4, 'dev6-pub');
    pub.send({ cmd: 'publish', topic: 'dev6/t', payload: Buffer.from('kept'), qos: 1, messageId: 1 });
    assert.equal((await again.next('publish')).payload.toString(), 'kept');
  });

  test('MQTT 3.1 §3.1 - a client id of more than 23 characters is accepted (as in 3.1.1; docs/messaging.md)', async () => {
    const r = await open(3);
    r.write(connectBytes(3, { clientId: 'a-3.1-client-id-of-thirty-two-ch' }));
    assert.equal((await r.next('connack')).returnCode, 0);
  });

  test('MQTT 3.1 - a 3.1.1 client resuming its session still gets session present 1 [MQTT-3.2.2-2]', async () => {
    const first = await open(4);
    assert.equal((await first.connect({ clientId: 'dev6-311', clean: false })).returnCode, 0);
    first.send({ cmd: 'disconnect' });
    await first.waitClosed();
    const again = await open(4);
    assert.equal((await again.connect({ clientId: 'dev6-311', clean: false })).sessionPresent, true);
  });

  // ---- 7. a will and Clean Start 1 inside the will delay -----------------------------------------------------

  /** Messages on `topic` seen by a subscriber until a probe message published after `act` arrives. */
  const willsDuring = async (topic: string, act: () => Promise<void>): Promise<string[]> => {
    const watcher = await connected(5, `watch-${topic}`);
    watcher.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic, qos: 1 }] });
    await watcher.next('suback');
    await act();
    const probe = await connected(5, `probe-${topic}`);
    probe.send({ cmd: 'publish', topic, payload: Buffer.from('probe'), qos: 1, messageId: 7 });
    await probe.next('puback');
    const seen: string[] = [];
    for (;;) {
      const p = await watcher.next('publish');
      if (p.payload.toString() === 'probe') return seen;
      seen.push(p.payload.toString());
    }
  };
  const willClient = async (clientId: string, topic: string): Promise<RawClient> =>
    connected(5, clientId, {
      properties: { sessionExpiryInterval: 60 },
      will: { topic, payload: Buffer.from('gone'), qos: 1, retain: false, properties: { willDelayInterval: 30 } },
    });

  test('MQTT-3.1.2-8 - a client back with Clean Start 1 inside the Will Delay Interval: its will is not published', async () => {
    const seen = await willsDuring('dev7/clean', async () => {
      const c = await willClient('dev7-clean', 'dev7/clean');
      c.destroy(); // network failure: the will waits 30 s
      await c.closedPromise;
      await new Promise((res) => setTimeout(res, 200));
      const back = await connected(5, 'dev7-clean', { clean: true });
      assert.equal(back.packets.length, 0);
    });
    assert.deepEqual(seen, []);
  });

  test('MQTT-3.1.3-9 - a client back with Clean Start 0 inside the Will Delay Interval: its will is not published', async () => {
    const seen = await willsDuring('dev7/resume', async () => {
      const c = await willClient('dev7-resume', 'dev7/resume');
      c.destroy();
      await c.closedPromise;
      await new Promise((res) => setTimeout(res, 200));
      await connected(5, 'dev7-resume', { clean: false, properties: { sessionExpiryInterval: 60 } });
    });
    assert.deepEqual(seen, []);
  });

  test('MQTT-3.1.2-8 - a will without a delay is still published when its client drops', async () => {
    const seen = await willsDuring('dev7/now', async () => {
      const c = await connected(5, 'dev7-now', { will: { topic: 'dev7/now', payload: Buffer.from('gone'), qos: 1, retain: false, properties: {} } });
      c.destroy();
      await c.closedPromise;
    });
    assert.deepEqual(seen, ['gone']);
  });

  // ---- AUTH of Remaining Length 0 ----------------------------------------------------------------------------

  test('MQTT 5 §3.15.2.1 - AUTH F0 00 is reason 0x00 Success without properties: read as such (a client must not send it: DISCONNECT 0x82, not 0x81)', async () => {
    const r = await connected(5, 'auth-short');
    r.write(Buffer.from([0xf0, 0x00]));
    await r.waitClosed();
    assert.deepEqual(r.packets.filter((p) => p.cmd !== 'connack').map((p) => [p.cmd, p.reasonCode]), [['disconnect', 0x82]]);
  });

  test('MQTT 5 §3.15.2.1 - AUTH F0 01 18 (a reason code without its Property Length) is still malformed: DISCONNECT 0x81', async () => {
    const r = await connected(5, 'auth-short-1');
    r.write(Buffer.from([0xf0, 0x01, 0x18]));
    await r.waitClosed();
    assert.deepEqual(r.packets.filter((p) => p.cmd !== 'connack').map((p) => [p.cmd, p.reasonCode]), [['disconnect', 0x81]]);
  });
});
