/**
 * The inbound scanners of links (src/links/nats-guard.ts, mqtt-guard.ts) follow a protocol stream however it is cut
 * into reads: a legitimate stream split at every byte boundary breaks no limit; a message over the limit is refused
 * at its header whatever the split.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import mqttPacket from 'mqtt-packet';
import { InboundScanner } from '../../src/links/nats-guard.js';
import { MqttPacketScanner } from '../../src/links/mqtt-guard.js';

function natsStream(): Buffer {
  const payload = Buffer.alloc(3000, 0x4d); // 'M': payload bytes that look like protocol
  const hdr = 'NATS/1.0\r\nSy-Qos: 1\r\n\r\n';
  return Buffer.concat([
    Buffer.from('INFO {"server_id":"x","max_payload":4096}\r\nPING\r\n'),
    Buffer.from(`MSG a.b 1 ${payload.length}\r\n`),
    payload,
    Buffer.from('\r\n+OK\r\n'),
    Buffer.from(`HMSG a.c 2 _INBOX.r ${hdr.length} ${hdr.length + 10}\r\n${hdr}MSG 9 9 9\r\n\r\n`),
    Buffer.from(`msg a.d 3 0\r\n\r\nPONG\r\n`),
  ]);
}

test('links - the NATS scanner follows a legitimate stream cut at every byte and counts its messages', () => {
  const all = natsStream();
  for (let cut = 1; cut < all.length; cut++) {
    const s = new InboundScanner({ maxMessageSize: 4096, maxControlLine: 1024 });
    s.serverMaxPayload = 4096;
    assert.equal(s.scan(all.subarray(0, cut)), undefined, `cut at ${cut}`);
    assert.equal(s.scan(all.subarray(cut)), undefined, `cut at ${cut}`);
    assert.equal(s.messages, 3, `cut at ${cut}`);
  }
});

test('links - the NATS scanner refuses a message over the limit at its header, and a line over the line limit', () => {
  const s = new InboundScanner({ maxMessageSize: 10 * 1024 * 1024 });
  s.serverMaxPayload = 1048576;
  assert.equal(s.scan(Buffer.from('MSG a 1 1048')), undefined, 'the size is not complete yet');
  assert.equal(s.scan(Buffer.from('577\r\n')), "the NATS server sent a message of 1048577 bytes (the limit is 1048576, the server's max_payload)");
  const own = new InboundScanner({ maxMessageSize: 2048 });
  own.serverMaxPayload = 1048576;
  assert.match(own.scan(Buffer.from('HMSG a 1 10 4096\r\n'))!, /4096 bytes \(the limit is 2048, the link's maxMessageSize\)/);
  const line = new InboundScanner({ maxMessageSize: 1024, maxControlLine: 100 });
  assert.equal(line.scan(Buffer.alloc(60, 0x41)), undefined);
  assert.match(line.scan(Buffer.alloc(60, 0x41))!, /protocol line longer than 100 bytes/);
  let t = 0;
  const pings = new InboundScanner({ maxMessageSize: 1024, maxPings: 3 }, () => t);
  assert.equal(pings.scan(Buffer.from('PING\r\nPING\r\nPING\r\n')), undefined);
  t = 11_000; // a new 10 s window
  assert.equal(pings.scan(Buffer.from('PING\r\nPING\r\n')), undefined);
  assert.match(pings.scan(Buffer.from('PING\r\nPING\r\n'))!, /more than 3 PINGs within 10 s/);
});

test('links - the MQTT scanner follows a legitimate stream cut at every byte; a packet over the limit is refused at its fixed header', () => {
  const gen = (p: object) => mqttPacket.generate(p as mqttPacket.Packet, { protocolVersion: 5 });
  const all = Buffer.concat([
    gen({ cmd: 'connack', sessionPresent: false, reasonCode: 0 }),
    gen({ cmd: 'suback', messageId: 1, granted: [1] }),
    gen({ cmd: 'publish', topic: 'a/b', payload: Buffer.alloc(20000, 0x30), qos: 1, messageId: 2, retain: false, dup: false }),
    gen({ cmd: 'pingresp' }),
    gen({ cmd: 'publish', topic: 'a/c', payload: Buffer.alloc(200, 0xc0), qos: 0, retain: false, dup: false }),
  ]);
  for (let cut = 1; cut < all.length; cut += cut < 40 || cut > all.length - 300 ? 1 : 97) {
    const s = new MqttPacketScanner({ maxPacketSize: 32768 });
    assert.equal(s.scan(all.subarray(0, cut)), undefined, `cut at ${cut}`);
    assert.equal(s.scan(all.subarray(cut)), undefined, `cut at ${cut}`);
    assert.equal(s.packets, 5, `cut at ${cut}`);
  }
  const big = new MqttPacketScanner({ maxPacketSize: 32768 });
  assert.equal(big.scan(Buffer.from([0x30, 0xff])), undefined);
  assert.equal(big.scan(Buffer.from([0xff, 0xff, 0x7f])), "the MQTT peer sent a PUBLISH packet of 268435460 bytes (the limit is 32768, the link's maxMessageSize)");
  assert.match(new MqttPacketScanner({ maxPacketSize: 32768 }).scan(Buffer.from([0x30, 0xff, 0xff, 0xff, 0xff, 0x01]))!, /malformed packet length/);
  let t = 0;
  const pings = new MqttPacketScanner({ maxPacketSize: 1024, maxPings: 2 }, () => t);
  assert.equal(pings.scan(Buffer.from([0xd0, 0, 0xd0, 0])), undefined);
  assert.match(pings.scan(Buffer.from([0xd0, 0]))!, /more than 2 PINGRESPs within 10 s/);
});
