/**
 * The NATS transport's `qos0Subjects` (src/links/nats-transport.ts; the cluster's message plane sets it): QoS 0 crosses
 * on core subjects outside the stream, and a receiver that is behind drops QoS 0 and counts it instead of holding the
 * connection's reading. A real `nats-server -js` on a random port, two transports, no broker.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { createNatsTransport, QOS0_MAX_IN_HANDLERS, type NatsTransport } from '../../src/links/nats-transport.js';
import type { LinkMessage, TransportEvent } from '../../src/links/transport.js';
import { waitUntil } from '../helpers.js';
import { startNats, type NatsServer } from '../federation/nats-server.js';

const log = { info() {}, warn() {}, debug() {} };

describe('links - NATS QoS 0 outside the stream (qos0Subjects)', () => {
  let nats: NatsServer;
  let nc: NatsConnection;
  const open: NatsTransport[] = [];
  /** A transport of the cluster's kind: one stream on `sy.<c>.m.>`, QoS 0 under `sy.<c>.q0`. */
  const transport = async (serverId: string, c: string): Promise<{ t: NatsTransport; events: TransportEvent[] }> => {
    const t = createNatsTransport(
      {
        name: `q0-${serverId}`,
        url: nats.url,
        protocolConfigs: [{ type: 'nats', stream: `SY_${c}_MSG`, subjects: [`sy.${c}.m.>`], qos0Subjects: { from: `sy.${c}.m`, to: `sy.${c}.q0` } }],
      },
      { serverId, log, connectTimeout: 3000 },
    );
    open.push(t);
    const events: TransportEvent[] = [];
    t.onEvent((e) => events.push(e));
    await t.connect();
    return { t, events };
  };
  const msg = (topic: string, payload: string, qos: 0 | 1, id?: string): LinkMessage => ({ topic, payload: Buffer.from(payload), qos, retain: false, originServer: 'A', hops: 1, ...(id ? { id } : {}) });

  before(async () => {
    nats = await startNats();
    nc = await connect({ servers: nats.url });
  });
  after(async () => {
    await Promise.all(open.map((t) => t.close()));
    await nc?.close().catch(() => undefined);
    await nats.dispose();
  });

  it('links - a QoS 0 message crosses on the core subject and is not stored in the stream; a QoS 1 message is', async () => {
    const { t: a } = await transport('A', 'one');
    const { t: b } = await transport('B', 'one');
    const got: LinkMessage[] = [];
    await b.receive({ filter: 'sy/one/m/#', qos: 2, durableName: 'b-one' }, async (m) => void got.push(m));
    const plain: string[] = [];
    nc.subscribe('sy.one.>', { callback: (_e, m) => void plain.push(m.subject) });
    await nc.flush();
    await a.send(msg('sy/one/m/x/y', 'zero', 0));
    await a.send(msg('sy/one/m/x/y', 'one', 1, 'A:1'));
    await waitUntil(() => got.length === 2, 10000, 'both messages at B');
    assert.deepEqual(got.map((m) => [m.topic, m.payload.toString(), m.qos]).sort(), [['sy/one/m/x/y', 'one', 1], ['sy/one/m/x/y', 'zero', 0]], 'handed over under the stream subject, each with its QoS');
    assert.deepEqual(plain.sort(), ['sy.one.m.x.y', 'sy.one.q0.x.y'], 'QoS 0 went on sy.one.q0.x.y');
    const jsm = await jetstreamManager(nc);
    const info = await jsm.streams.info('SY_one_MSG');
    assert.equal(info.state.messages, 1, 'the stream holds the QoS 1 message only');
    assert.deepEqual(b.counters().qos0Dropped, 0);
  });

  it(`links - a receiver whose handler holds ${QOS0_MAX_IN_HANDLERS} QoS 0 messages drops the next ones and counts them; the connection stays up`, async () => {
    const { t: a } = await transport('A', 'hold');
    const { t: b, events } = await transport('B', 'hold');
    let handed = 0;
    let dropped = 0;
    const release: Array<() => void> = [];
    await b.receive({ filter: 'sy/hold/m/#', qos: 1, durableName: 'b-hold', dropped: () => dropped++ }, (m) => {
      handed++;
      return m.qos === 0 ? new Promise<void>((r) => release.push(r)) : Promise.resolve();
    });
    const N = 2000;
    for (let i = 0; i < N; i++) void a.send(msg('sy/hold/m/t', String(i), 0));
    await waitUntil(() => handed + dropped === N, 15000, `all ${N} seen (handed ${handed}, dropped ${dropped})`);
    assert.equal(handed, QOS0_MAX_IN_HANDLERS, 'the handler got as many as the cap');
    assert.equal(dropped, N - QOS0_MAX_IN_HANDLERS, 'the rest were dropped, each reported');
    assert.equal(b.counters().qos0Dropped, dropped);
    // B's own QoS 0 message echoed back by NATS while B is still behind: handed over (the link drops it as a loop), not
    // counted as a drop
    await b.send({ ...msg('sy/hold/m/t', 'own', 0), originServer: 'B' });
    await waitUntil(() => handed === QOS0_MAX_IN_HANDLERS + 1, 10000, "B's own message handed over");
    assert.equal(b.counters().qos0Dropped, dropped, 'its own message is no drop');
    for (const r of release.splice(0)) r();
    // once the handler is free again QoS 0 flows, and QoS 1 was never held up
    const before = handed;
    await a.send(msg('sy/hold/m/t', 'after', 0));
    await a.send(msg('sy/hold/m/t', 'q1', 1, 'A:hold:1'));
    await waitUntil(() => handed === before + 2, 10000, 'QoS 0 and QoS 1 after the release');
    assert.deepEqual(events.filter((e) => e.type === 'disconnected'), [], 'the connection stayed up');
  });

  it('links - a receiver that falls behind reading (a slow handler) drops QoS 0 while behind, keeps the order of what it hands over, and is not cut off', async () => {
    const { t: a } = await transport('A', 'slow');
    const { t: b, events } = await transport('B', 'slow');
    const order: number[] = [];
    await b.receive({ filter: 'sy/slow/m/#', qos: 1, durableName: 'b-slow' }, (m) => {
      order.push(Number.parseInt(m.payload.toString(), 10));
      const end = Date.now() + 2; // 2 ms of work per message, on the event loop: about 500 msg/s
      while (Date.now() < end);
      return Promise.resolve();
    });
    // 1 KiB messages, 5 MiB at once: far more than QOS0_MAX_UNREAD arrives while the handler works
    const N = 5000;
    const pad = ' '.repeat(1024);
    for (let i = 0; i < N; i++) void a.send(msg('sy/slow/m/t', `${i}${pad}`, 0));
    await waitUntil(() => order.length + b.counters().qos0Dropped === N, 60000, `all ${N} seen (handed ${order.length}, dropped ${b.counters().qos0Dropped})`);
    const dropped = b.counters().qos0Dropped;
    console.log(`# slow QoS 0 receiver (2 ms per message), ${N} messages of 1 KiB published at once: handed over ${order.length}, dropped ${dropped}`);
    assert.ok(dropped > 0, 'some were dropped while behind');
    assert.ok(order.length > 0, 'some were handed over');
    assert.deepEqual(order, [...order].sort((x, y) => x - y), 'handed over in publish order');
    assert.deepEqual(events.filter((e) => e.type === 'disconnected'), [], 'the connection stayed up (not cut off as a slow consumer)');
  });
});
