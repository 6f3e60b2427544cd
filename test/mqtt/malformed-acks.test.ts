import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startServer, type TestServer } from '../helpers.js';
import type { LogEntry } from '../../src/log.js';
import { RawClient, mqttPort } from './helpers.js';

/**
 * Malformed PUBACK / PUBREC / PUBREL / PUBCOMP after a valid CONNECT: each closes the connection (v5: DISCONNECT
 * 0x81 Malformed Packet first), with exactly one WARN line naming the client, and no stack trace anywhere in the log.
 */
const CASES: Array<[name: string, version: 4 | 5, hex: string]> = [
  ['3.1.1 PUBREC without packet id (50 00)', 4, '5000'],
  ['3.1.1 PUBREL with a 1-byte packet id (62 01 00)', 4, '620100'],
  ['3.1.1 PUBCOMP without packet id (70 00)', 4, '7000'],
  ['3.1.1 PUBACK without packet id (40 00)', 4, '4000'],
  ['3.1.1 PUBACK of remaining length 3', 4, '4003000100'],
  ['3.1.1 PUBREC with a v5 reason code and properties', 4, '500400010000'],
  ['3.1.1 PUBREL with flags 0', 4, '60020001'],
  ['3.1.1 PUBACK with flags 1', 4, '41020001'],
  ['3.1.1 PUBCOMP with packet id 0', 4, '70020000'],
  ['v5 PUBACK without packet id (40 00)', 5, '4000'],
  ['v5 PUBREC without packet id (50 00)', 5, '5000'],
  ['v5 PUBREL with a 1-byte packet id (62 01 00)', 5, '620100'],
  ['v5 PUBCOMP without packet id (70 00)', 5, '7000'],
  ['v5 PUBACK with a truncated Reason String property', 5, '40060001000 21f00'.replace(' ', '')],
  ['v5 PUBACK whose property length runs past the packet', 5, '40040001 0005'.replace(' ', '')],
  ['v5 PUBACK whose property length stops short of the packet', 5, '40070001 00011f0000'.replace(' ', '')],
  ['v5 PUBREC with a property not allowed in it (0x01)', 5, '5006000100020100'],
  ['v5 PUBACK with an undefined reason code (0x05)', 5, '4003000105'],
  ['v5 PUBCOMP with reason 0x10 (only 0x00 / 0x92)', 5, '7003000110'],
  ['v5 PUBREL with flags 0', 5, '60020001'],
  ['v5 PUBCOMP with flags 2', 5, '72020001'],
  ['v5 PUBACK with packet id 0', 5, '40020000'],
  ['v5 PUBREC with a truncated property length varint', 5, '5004000100ff'],
];

describe('mqtt malformed acknowledgements', () => {
  let server: TestServer;
  let port: number;
  const logs: LogEntry[] = [];
  before(async () => {
    server = await startServer({ auth: false });
    port = await mqttPort(server);
    server.rt.logs.monitor.subscribe((e) => logs.push(e));
  });
  after(async () => {
    await server?.close();
  });

  let n = 0;
  for (const [name, version, hex] of CASES) {
    test(`mqtt acks - ${name}: connection closed${version === 5 ? ' with DISCONNECT 0x81' : ''}, one WARN line, no stack trace`, async () => {
      const clientId = `malformed-ack-${++n}`;
      const c = await RawClient.open(port, version);
      try {
        const ack = await c.connect({ clientId, clean: true });
        assert.equal(version === 5 ? ack.reasonCode : ack.returnCode, 0);
        c.write(Buffer.from(hex, 'hex'));
        await c.waitClosed();
        if (version === 5) {
          const d = c.packets.find((p) => p.cmd === 'disconnect');
          assert.ok(d, `a DISCONNECT before the close; got ${JSON.stringify(c.packets.map((p) => p.cmd))}`);
          assert.equal(d.reasonCode, 0x81);
        } else assert.equal(c.packets.length, 0, 'nothing sent back to a 3.1.1 client');
        await new Promise((r) => setTimeout(r, 50));
        const mine = logs.filter((e) => e.message.includes(clientId));
        const warns = mine.filter((e) => e.level === 30000);
        assert.equal(warns.length, 1, `one WARN line for ${clientId}: ${JSON.stringify(mine)}`);
        assert.match(warns[0]!.message, /malformed acknowledgement/);
        assert.match(warns[0]!.message, /reason=0x81/);
        assert.ok(!mine.some((e) => /RangeError|\n\s+at /.test(e.message)), 'no RangeError, no stack');
        assert.ok(!mine.some((e) => e.level >= 40000), 'no ERROR line');
      } finally {
        c.destroy();
      }
    });
  }

  test('mqtt acks - the log file has no stack trace and no RangeError for the malformed acknowledgements', async () => {
    await new Promise((r) => setTimeout(r, 200));
    const text = readFileSync(join(server.dataDir, 'log', 'messaging.log'), 'utf8');
    const lines = text.split('\n').filter((l) => l.includes('malformed-ack-'));
    assert.ok(lines.length >= CASES.length, `log lines of the cases: ${lines.length}`);
    for (const l of lines) {
      assert.ok(!l.includes('"stack"'), `no stack: ${l.slice(0, 300)}`);
      assert.ok(!l.includes('RangeError'), `no RangeError: ${l.slice(0, 300)}`);
    }
  });

  test('mqtt acks - well-formed acknowledgements stay accepted (v5 length 2 and 3, unknown ids, 3.1.1 length 2)', async () => {
    for (const version of [4, 5] as const) {
      const c = await RawClient.open(port, version);
      try {
        await c.connect({ clientId: `wellformed-ack-${version}`, clean: true });
        c.write(Buffer.from('40020007', 'hex')); // PUBACK for an unknown id: nothing to do
        c.write(Buffer.from('70020007', 'hex')); // PUBCOMP for an unknown id: nothing to do
        if (version === 5) {
          c.write(Buffer.from('4003000700', 'hex')); // v5 PUBACK with reason 0, no property length
          c.write(Buffer.from('400700070003 1f0000'.replace(' ', ''), 'hex')); // reason 0x00, empty Reason String
        }
        c.write(Buffer.from('50020009', 'hex')); // PUBREC for an unknown id: PUBREL (v5: 0x92)
        const rel = await c.next('pubrel');
        assert.equal(rel.messageId, 9);
        if (version === 5) assert.equal(rel.reasonCode, 0x92);
        c.write(Buffer.from('6202000b', 'hex')); // PUBREL for an id never used: PUBCOMP (v5: 0x92)
        const comp = await c.next('pubcomp');
        assert.equal(comp.messageId, 11);
        if (version === 5) assert.equal(comp.reasonCode, 0x92);
        c.send({ cmd: 'pingreq' });
        await c.next('pingresp');
        assert.equal(c.closed, false);
      } finally {
        c.destroy();
      }
    }
  });
});
