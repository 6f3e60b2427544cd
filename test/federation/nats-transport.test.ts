/**
 * The NATS transport of integration links against a real `nats-server -js` (random port, own store dir), without
 * the brokers: subjects, headers, JetStream acknowledgement, durable consumers, retained and shared delivery,
 * connection errors and loss.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { createNatsTransport, type NatsLinkMessage, type NatsTransport } from '../../src/links/nats-transport.js';
import { HANDED, type LinkMessage } from '../../src/links/transport.js';
import { waitUntil } from '../helpers.js';
import { startNats, type NatsServer } from './nats-server.js';

const log = { info() {}, warn() {}, debug() {} };

function msg(topic: string, payload: string, extra: Partial<NatsLinkMessage> = {}): NatsLinkMessage {
  return { topic, payload: Buffer.from(payload), qos: 1, retain: false, originServer: 'A', hops: 1, ...extra };
}

describe('federation - NATS transport', () => {
  let nats: NatsServer;
  const open: NatsTransport[] = [];
  const transport = async (serverId: string, url = nats.url, auth?: { username?: string; password?: string }) => {
    const t = createNatsTransport({ name: `t-${serverId}`, url, ...(auth ? { authConfig: auth } : {}) }, { serverId, log, connectTimeout: 3000 });
    open.push(t);
    await t.connect();
    return t;
  };

  before(async () => {
    nats = await startNats();
  });
  after(async () => {
    await Promise.all(open.map((t) => t.close()));
    await nats.dispose();
  });

  it('federation - QoS 0 and QoS 1 cross with every header, on the subject nats-server would use', async () => {
    const a = await transport('A');
    const b = await transport('B');
    const q0: LinkMessage[] = [];
    const q1: LinkMessage[] = [];
    await b.receive({ filter: 'hdr/#', qos: 0, durableName: 'b-hdr-0' }, async (m) => void q0.push(m));
    await b.receive({ filter: 'hdr/#', qos: 1, durableName: 'b-hdr-1' }, async (m) => void q1.push(m));
    // a plain NATS client sees the subject mapping
    const nc = await connect({ servers: nats.url });
    const plain: string[] = [];
    nc.subscribe('hdr.>', { callback: (_e, m) => void plain.push(m.subject) });
    await nc.flush();
    const full = msg('hdr/x.y/z', 'one', {
      contentType: 'application/json',
      correlationData: Buffer.from([1, 2, 3]),
      userProperties: { a: 'b', list: ['1', '2'] },
      responseTopic: 'hdr/reply',
      priority: 7,
      expiresAt: Date.now() + 60000,
      originServer: 'A',
      hops: 2,
      id: 'A:hdr:1',
    });
    await a.send(full);
    await a.send(msg('hdr/zero', 'two', { qos: 0 }));
    await waitUntil(() => q0.length === 2 && q1.length === 2 && plain.length === 2, 10000, 'both messages on both receivers');
    await nc.close();
    assert.deepEqual(plain.sort(), ['hdr.x//y.z', 'hdr.zero']);
    const got = q1.find((m) => m.topic === 'hdr/x.y/z')!;
    assert.equal(got.payload.toString(), 'one');
    assert.equal(got.contentType, 'application/json');
    assert.deepEqual([...got.correlationData!], [1, 2, 3]);
    assert.deepEqual(got.userProperties, { a: 'b', list: ['1', '2'] });
    assert.equal(got.responseTopic, 'hdr/reply');
    assert.equal(got.priority, 7);
    assert.equal(got.expiresAt, full.expiresAt);
    assert.equal(got.originServer, 'A');
    assert.equal(got.hops, 2);
    assert.equal(got.qos, 1);
    // a QoS 0 message keeps QoS 0 even when it reaches a JetStream consumer
    assert.equal(q1.find((m) => m.topic === 'hdr/zero')!.qos, 0);
    assert.equal(q0.find((m) => m.topic === 'hdr/zero')!.qos, 0);
  });

  it('federation - headers read alike by nats.js and by the link; a line break in a header value crosses as a space', async () => {
    const a = await transport('A');
    const b = await transport('B');
    const got: LinkMessage[] = [];
    await b.receive({ filter: 'hdr2/#', qos: 1, durableName: 'b-hdr2' }, async (m) => void got.push(m));
    const nc = await connect({ servers: nats.url });
    const plain: Array<{ ct: string; origin: string; qos: string }> = [];
    nc.subscribe('hdr2.>', { callback: (_e, m) => void plain.push({ ct: m.headers?.get('Content-Type') ?? '', origin: m.headers?.get('Sy-Origin') ?? '', qos: m.headers?.get('Sy-Qos') ?? '' }) });
    await nc.flush();
    // MQTT strings may hold CR/LF, a NATS header value cannot: the link sends it with spaces instead of failing
    await a.send(msg('hdr2/crlf', 'one', { contentType: 'text/plain;\r\n x=1', originServer: 'A' }));
    // a foreign NATS publisher that sets the link's headers with nats.js is read by the link
    const { headers } = await import('@nats-io/transport-node');
    const h = headers();
    h.set('Sy-Qos', '1');
    h.set('Content-Type', 'application/cbor');
    h.set('Sy-Hops', '3');
    nc.publish('hdr2.foreign', 'two', { headers: h });
    await waitUntil(() => got.length === 2 && plain.length === 2, 10000, 'both messages');
    await nc.close();
    assert.deepEqual(plain.find((p) => p.ct.startsWith('text')), { ct: 'text/plain;   x=1', origin: 'A', qos: '1' });
    const crlf = got.find((m) => m.topic === 'hdr2/crlf')!;
    assert.equal(crlf.contentType, 'text/plain;   x=1');
    assert.equal(crlf.payload.toString(), 'one');
    const foreign = got.find((m) => m.topic === 'hdr2/foreign')!;
    assert.equal(foreign.contentType, 'application/cbor');
    assert.equal(foreign.hops, 3);
    assert.equal(foreign.originServer, '');
  });

  it('federation - a QoS 1 message is acknowledged only after the handler resolved; a rejection is redelivered', async () => {
    const a = await transport('A2');
    const b = await transport('B2');
    let failOnce = true;
    const got: string[] = [];
    await b.receive({ filter: 'ack/#', qos: 1, durableName: 'b-ack' }, async (m) => {
      if (failOnce) {
        failOnce = false;
        throw new Error('not stored');
      }
      got.push(m.payload.toString());
    });
    await a.send(msg('ack/t', 'again', { id: 'A:ack:1' }));
    await waitUntil(() => got.length === 1, 15000, 'redelivery after the rejection');
    assert.deepEqual(got, ['again']);
    // a send retried with the same id (PubAck lost) is stored once
    await a.send(msg('ack/t', 'dup', { id: 'A:ack:2' }));
    await a.send(msg('ack/t', 'dup', { id: 'A:ack:2' }));
    await a.send(msg('ack/t', 'last', { id: 'A:ack:3' }));
    await waitUntil(() => got.includes('last'), 10000, 'the last message');
    assert.deepEqual(got, ['again', 'dup', 'last']);
  });

  it('federation - every message is acknowledged, those taken at once and those taken later, and arrives in order whether sent alone or in a burst', async () => {
    const a = await transport('A7');
    const b = await transport('B7');
    const got: number[] = [];
    // even messages taken at once (HANDED, acknowledged without a promise), odd ones a turn later
    await b.receive({ filter: 'acked/#', qos: 1, durableName: 'b-acked' }, (m) => {
      const i = Number(m.payload.toString());
      got.push(i);
      return i % 2 === 0 ? HANDED : new Promise<void>((r) => setImmediate(r));
    });
    // one at a time (each handed to nats.js at once), then a burst (most wait for the end of the turn)
    for (let i = 0; i < 5; i++) await a.send(msg('acked/t', String(i), { id: `A7:${i}` }));
    await Promise.all(Array.from({ length: 295 }, (_, k) => a.send(msg('acked/t', String(k + 5), { id: `A7:${k + 5}` }))));
    await waitUntil(() => got.length >= 300, 15000, '300 messages received');
    assert.deepEqual(got, Array.from({ length: 300 }, (_, i) => i));
    const nc = await connect({ servers: nats.url });
    try {
      const jsm = await jetstreamManager(nc);
      let info = await jsm.consumers.info('SY_acked', 'b-acked');
      await waitUntil(async () => (info = await jsm.consumers.info('SY_acked', 'b-acked')).num_ack_pending === 0, 10000, "no acknowledgement pending");
      assert.equal(info.delivered.stream_seq, 300);
      assert.equal(info.ack_floor.stream_seq, 300);
      assert.equal(info.num_redelivered, 0);
    } finally {
      await nc.close();
    }
    assert.equal(got.length, 300, 'nothing came again');
  });

  it('federation - a durable consumer keeps what was sent while its broker was away', async () => {
    const a = await transport('A3');
    const b1 = await transport('B3');
    const first: string[] = [];
    await b1.receive({ filter: 'away/#', qos: 1, durableName: 'b-away' }, async (m) => void first.push(m.payload.toString()));
    await a.send(msg('away/t', 'm0'));
    await waitUntil(() => first.length === 1, 10000, 'first message');
    await b1.close();
    for (let i = 1; i <= 20; i++) await a.send(msg('away/t', `m${i}`, { id: `A:away:${i}` }));
    const b2 = await transport('B3');
    const later: string[] = [];
    await b2.receive({ filter: 'away/#', qos: 1, durableName: 'b-away' }, async (m) => void later.push(m.payload.toString()));
    // (m0 may come again if its acknowledgement did not reach NATS before the close: at least once)
    const away = () => later.filter((p) => p !== 'm0');
    await waitUntil(() => away().length >= 20, 20000, 'the 20 messages sent while away');
    assert.deepEqual(away(), Array.from({ length: 20 }, (_, i) => `m${i + 1}`));
  });

  it('federation - the retained set is handed over when receiving starts; an empty payload clears', async () => {
    const a = await transport('A4');
    await a.send(msg('ret/one', 'r1', { retain: true, qos: 0 }));
    await a.send(msg('ret/two', 'old', { retain: true }));
    await a.send(msg('ret/two', 'r2', { retain: true }));
    await a.send(msg('ret/gone', 'x', { retain: true }));
    await a.send(msg('ret/gone', '', { retain: true }));
    const b = await transport('B4');
    const got: LinkMessage[] = [];
    await b.receive({ filter: 'ret/#', qos: 0, durableName: 'b-ret' }, async (m) => void got.push(m));
    const byTopic = Object.fromEntries(got.map((m) => [m.topic, m.payload.toString()]));
    assert.deepEqual(byTopic, { 'ret/one': 'r1', 'ret/two': 'r2', 'ret/gone': '' });
    assert.ok(got.every((m) => m.retain));
  });

  // (at QoS 1 the members pull from one durable: how JetStream splits the messages between them is not asserted)
  it('federation - a shared group gets each message once across its members (queue group at QoS 0, one durable at QoS 1)', async () => {
    const a = await transport('A5');
    const m1 = await transport('M1');
    const m2 = await transport('M2');
    const q0: Record<string, number> = { M1: 0, M2: 0 };
    const q1: Record<string, number> = { M1: 0, M2: 0 };
    for (const [t, id] of [
      [m1, 'M1'],
      [m2, 'M2'],
    ] as const) {
      await t.receive({ filter: 'sh/#', qos: 0, durableName: `x-${id}`, shareGroup: 'g' }, async () => void q0[id]!++);
      await t.receive({ filter: 'sh/#', qos: 1, durableName: `y-${id}`, shareGroup: 'g' }, async () => void q1[id]!++);
    }
    const n = 200;
    for (let i = 0; i < n; i++) await a.send(msg(`sh/${i}`, String(i), { qos: 0 }));
    for (let i = 0; i < n; i++) await a.send(msg(`sh/${i}`, String(i), { qos: 1, id: `A5:${i}` }));
    // QoS 0 messages reach the QoS 1 group as well (the stream stores them): 2n for the durable
    await waitUntil(() => q0.M1! + q0.M2! === 2 * n && q1.M1! + q1.M2! === 2 * n, 15000, 'every message once');
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(q0.M1! + q0.M2!, 2 * n);
    assert.equal(q1.M1! + q1.M2!, 2 * n);
    assert.ok(q0.M1! > 0 && q0.M2! > 0, `both members get some: ${JSON.stringify(q0)}`);
  });

  it('federation - topics with no subject form are refused and counted', async () => {
    const a = await transport('A6');
    await assert.rejects(a.send(msg('bad topic', 'x')), (err: Error & { permanent?: boolean; code?: number }) => err.permanent === true && err.code === 0x90);
    await assert.rejects(a.send(msg('a/*/b', 'x')), /wildcard/);
    assert.equal(a.counters().refused, 2);
  });

  it('federation - connect rejects readably: nothing listening, wrong credentials', async () => {
    const dead = createNatsTransport({ name: 'dead', url: 'nats://127.0.0.1:1' }, { serverId: 'X', log, connectTimeout: 2000 });
    await assert.rejects(dead.connect(), /NATS nats:\/\/127\.0\.0\.1:1: .*refused/i);
    const secured = await startNats({ jetstream: false, args: ['--user', 'bridge', '--pass', 'right-password'] });
    try {
      const wrong = createNatsTransport({ name: 'w', url: secured.url, authConfig: { username: 'bridge', password: 'nope' } }, { serverId: 'X', log });
      await assert.rejects(wrong.connect(), /Authorization Violation/i);
      const right = createNatsTransport({ name: 'r', url: secured.url, authConfig: { username: 'bridge', password: 'right-password' } }, { serverId: 'X', log });
      await right.connect();
      await right.close();
    } finally {
      await secured.dispose();
    }
  });

  it('federation - without JetStream, QoS 0 (retained too) still crosses; QoS 1 is not taken and says why', async () => {
    const plain = await startNats({ jetstream: false });
    try {
      const a = createNatsTransport({ name: 'nojs', url: plain.url }, { serverId: 'NA', log });
      const b = createNatsTransport({ name: 'nojs', url: plain.url }, { serverId: 'NB', log });
      open.push(a, b);
      await a.connect();
      await b.connect();
      const got: LinkMessage[] = [];
      await b.receive({ filter: 'nojs/#', qos: 0, durableName: 'nb' }, async (m) => void got.push(m));
      await a.send(msg('nojs/t', 'kept live', { qos: 0, retain: true }));
      await waitUntil(() => got.length === 1, 10000, 'the retained QoS 0 message');
      assert.equal(got[0]!.retain, true);
      await assert.rejects(a.send(msg('nojs/t', 'q1')), /JetStream is not available/);
    } finally {
      await plain.dispose();
    }
  });

  it('federation - losing the NATS server is reported as disconnected, and a send is not taken', async () => {
    const other = await startNats();
    try {
      const t = createNatsTransport({ name: 'loss', url: other.url }, { serverId: 'L', log });
      await t.connect();
      const events: string[] = [];
      t.onEvent((e) => events.push(e.type));
      await other.stop('SIGKILL');
      await waitUntil(() => events.includes('disconnected'), 10000, 'disconnected');
      await assert.rejects(t.send(msg('loss/t', 'x')));
      await t.close();
      assert.equal(events.filter((e) => e === 'disconnected').length, 1, events.join(', '));
    } finally {
      await other.dispose();
    }
  });
});
