import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import mqttPacket from 'mqtt-packet';
import { pino } from 'pino';
import { EndpointStats, MqttConnection, type ConnectionOwner, type EndpointContext } from '../../src/protocol/mqtt/connection.js';
import { EncodeCache, WriteBatch } from '../../src/protocol/mqtt/outbound.js';
import { PacketParser } from '../../src/protocol/mqtt/parser.js';
import { LogLimiter } from '../../src/log-limit.js';
import { MqttConfigSchema } from '../../src/config/schema.js';
import type { Wire } from '../../src/protocol/mqtt/types.js';

/**
 * What one connection reads before its acknowledgements are out (issue 20 item 7), with the real MqttConnection and
 * packet handlers over a fake transport and a fake engine whose store writes the test completes by hand: a read is
 * framed in turns of the endpoint's readTurnBytes (16 KiB by default) with the transport paused in between, and once 4 MiB of QoS 1 PUBLISHes wait for the
 * store the connection stops reading until half of them are written.
 */
function harness(settings: Record<string, unknown> = {}) {
  const writes: Promise<void>[] = [];
  const resolvers: Array<() => void> = [];
  let published = 0;
  const engine = {
    publish: () => {
      published++;
      const p = new Promise<void>((r) => resolvers.push(r));
      writes.push(p);
      return p;
    },
    checkSchema: () => undefined,
    isQueueName: () => false,
    hasStore: false,
  };
  const network = { packetsSent: 0, packetsReceived: 0, totalReadBytes: 0, totalWriteBytes: 0, totalConnections: 0, totalDisconnections: 0, currentConnections: 0, peakConnections: 0 };
  const log = pino({ level: 'silent' });
  const owner = {
    host: { engine: () => engine, security: () => ({ enabled: false }), serverName: 'test', network, log },
    log,
    sessions: new Map(),
    maxQueued: 10_000,
    save() {},
    endSession() {},
    cancelWill() {},
    connections: new Map(),
    connectionId: () => 1,
    writes: new WriteBatch(),
    encoded: new EncodeCache(),
    parser: new PacketParser(),
    faults: new LogLimiter(),
    publishWill() {},
    scheduleWill() {},
    scheduleExpiry() {},
  } as unknown as ConnectionOwner;
  const mqtt = MqttConfigSchema.parse({ type: 'mqtt', ...settings });
  const endpoint: EndpointContext = { name: 'test', mqtt, connectTimeout: 60_000, stats: new EndpointStats() };
  const wire = {
    paused: false,
    pauses: 0,
    written: 0,
    write(b: Buffer) {
      this.written += b.length;
      return true;
    },
    end() {},
    destroy() {},
    pause() {
      this.paused = true;
      this.pauses++;
    },
    resume() {
      this.paused = false;
    },
    remoteAddress: '127.0.0.1',
    remotePort: 1,
    transport: 'tcp',
  };
  const conn = new MqttConnection(owner, endpoint, wire as unknown as Wire);
  conn.state = 'connected';
  conn.session = { sessionId: 's1', inbound: new Set(), released: new Set(), persistent: false, stateStored: false } as never;
  return {
    conn,
    wire,
    published: () => published,
    /** Completes the store writes made so far. */
    writeStore: () => resolvers.splice(0).forEach((r) => r()),
  };
}

const turn = () => new Promise((r) => setImmediate(r));

function publishes(n: number, size: number): Buffer {
  const payload = Buffer.alloc(size, 7);
  const out: Buffer[] = [];
  for (let i = 0; i < n; i++) out.push(mqttPacket.generate({ cmd: 'publish', topic: 'a/b', payload, qos: 1, messageId: (i % 65535) + 1, retain: false, dup: false } as never));
  return Buffer.concat(out);
}

describe('mqtt read bounds', () => {
  /** A read of 2 000 PUBLISHes of about 49 bytes (98 000 bytes), handled turn by turn in turns of at most `bytes`. */
  async function turnsOf(h: ReturnType<typeof harness>, bytes: number): Promise<void> {
    h.conn.onData(publishes(2000, 40));
    const first = h.published();
    assert.ok(first > 0 && first <= Math.ceil(bytes / 49) + 1, `first turn: ${first} PUBLISHes`);
    assert.ok(first >= Math.floor(bytes / 49) - 1, `first turn: ${first} PUBLISHes, a whole turn`);
    assert.equal(h.wire.paused, true, 'paused while the rest of the read waits');
    await turn();
    const second = h.published() - first;
    assert.ok(second > 0 && second <= Math.ceil(bytes / 49) + 1, `second turn: ${second} PUBLISHes`);
    for (let i = 0; i < 40 && h.published() < 2000; i++) await turn();
    assert.equal(h.published(), 2000, 'all of the read handled, turn by turn');
    h.writeStore();
    await turn();
    await turn();
    assert.equal(h.wire.paused, false, 'reading again');
    assert.equal(h.wire.written, 2000 * 4, 'one PUBACK per PUBLISH');
  }

  test('mqtt read bounds - a 96 KiB read of small PUBLISHes is handled in 16 KiB turns by default, the transport paused in between', async () => {
    const h = harness();
    assert.equal(h.conn.endpoint.mqtt.readTurnBytes, 16 * 1024);
    await turnsOf(h, 16 * 1024);
  });

  test('mqtt read bounds - readTurnBytes 32 KiB: 32 KiB turns', async () => {
    await turnsOf(harness({ readTurnBytes: 32768 }), 32768);
  });

  test('mqtt read bounds - readTurnBytes sets the turn (8 KiB), and is validated like every endpoint key', async () => {
    await turnsOf(harness({ readTurnBytes: 8192 }), 8192);
    for (const bad of [100, 2 * 1024 * 1024, 4096.5, '8k']) {
      const r = MqttConfigSchema.safeParse({ type: 'mqtt', readTurnBytes: bad });
      assert.equal(r.success, false, `readTurnBytes ${String(bad)} refused`);
      assert.deepEqual(r.error!.issues[0]!.path, ['readTurnBytes']);
    }
  });

  test('mqtt read bounds - a publisher faster than the store: reading stops at 4 MiB of PUBLISHes waiting for their write, resumes once they are written', async () => {
    const h = harness();
    const bytes = publishes(12_000, 1000); // about 11.8 MiB
    h.conn.onData(bytes);
    // turns until nothing more is handled (10 turns in a row)
    for (let i = 0, still = 0, last = -1; i < 5000 && still < 10; i++) {
      await turn();
      still = h.published() === last ? still + 1 : 0;
      last = h.published();
    }
    const held = h.published();
    console.log(`# ${held} QoS 1 PUBLISHes of 1 KiB handled before reading stopped for the store (cap 4 MiB); ${h.wire.written} bytes of PUBACK out`);
    assert.ok(held >= 4000 && held <= 4300, `PUBLISHes handled while none was written: ${held}`);
    assert.equal(h.wire.paused, true, 'not reading');
    assert.equal(h.wire.written, 0, 'no PUBACK before the write');
    // the store catches up: reading goes on until everything is handled
    for (let i = 0; i < 5000 && h.published() < 12_000; i++) {
      h.writeStore();
      await turn();
    }
    h.writeStore();
    for (let i = 0; i < 5; i++) await turn();
    assert.equal(h.published(), 12_000);
    assert.equal(h.wire.written, 12_000 * 4, 'every PUBLISH acknowledged, in the end');
    assert.equal(h.wire.paused, false);
  });
});
