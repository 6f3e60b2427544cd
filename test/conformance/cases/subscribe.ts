/** SUBSCRIBE and SUBACK (§3.8, §3.9), UNSUBSCRIBE and UNSUBACK (§3.10, §3.11), topic names and filters (§4.7), shared subscriptions (5 §4.8). */
import assert from 'node:assert/strict';
import { bytes, packet, sleep, str, u16, type Ctx, type Packet, type V } from '../harness.js';
import { both, type Case } from './types.js';

const noProps = (v: V) => (v === 5 ? bytes(0) : Buffer.alloc(0));

/** SUBSCRIBE raw: packet id 1, the filter bytes, the options byte. */
const subscribeBytes = (v: V, filter: Buffer | string, options = 0, first = 0x82) => packet(first, u16(1), noProps(v), str(filter), bytes(options));
const unsubscribeBytes = (v: V, filter: Buffer | string, first = 0xa2) => packet(first, u16(1), noProps(v), str(filter));

/** A connected client sends `bytes`: the connection closes, with no `none` packet first. */
async function refusedPacket(t: Ctx, v: V, b: Buffer, none: string[]): Promise<void> {
  const [r] = await t.connect(v);
  r.write(b);
  await t.closed(r, undefined, none);
}

const subackCodes5 = [0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8f, 0x91, 0x97, 0x9e, 0xa1, 0xa2];
const unsubackCodes5 = [0x00, 0x11, 0x80, 0x83, 0x87, 0x8f, 0x91];

/** Mosquitto's answer to a SUBSCRIBE it should refuse: SUBACK granting the QoS asked for, connection kept. */
const grants = (f: (t: Ctx) => string) => async (t: Ctx) => {
  const [r] = await t.connect(5);
  r.write(subscribeBytes(5, f(t), 1));
  assert.deepEqual((await r.next('suback')).granted, [1]);
  assert.equal(r.closed, false);
};

/** All PUBLISH packets that arrive within `ms` (acknowledged). */
async function drain(t: Ctx, r: Awaited<ReturnType<Ctx['open']>>, ms = 400): Promise<Packet[]> {
  const out: Packet[] = [];
  for (;;) {
    try {
      out.push(await t.msg(r, ms));
    } catch {
      return out;
    }
  }
}

export const subscribeCases: Case[] = [
  ...both({ 4: 'MQTT-3.8.1-1', 5: 'MQTT-3.8.1-1' }, 'SUBSCRIBE with fixed header flags 0000: the connection closes', (t, v) => refusedPacket(t, v, subscribeBytes(v, t.topic(), 0, 0x80), ['suback'])),
  ...both({ 4: 'MQTT-3.8.3-1', 5: 'MQTT-3.8.3-1' }, 'a topic filter of ill-formed UTF-8: the connection closes', (t, v) => refusedPacket(t, v, subscribeBytes(v, bytes(0x61, 0x2f, 0xc3, 0x28)), ['suback'])),
  {
    id: 'MQTT-3.8.3-2',
    v: 4,
    title: 'wildcard filters are supported: + and # are granted and match',
    async run(t) {
      const base = t.topic();
      const [s] = await t.connect(4);
      assert.deepEqual(await t.sub(s, `${base}/+/x`, 1), [1]);
      assert.deepEqual(await t.sub(s, `${base}/y/#`, 1), [1]);
      const [p] = await t.connect(4);
      await t.pub(p, `${base}/a/x`, '1', 1);
      await t.pub(p, `${base}/y/z/w`, '2', 1);
      assert.equal((await t.msg(s)).payload.toString(), '1');
      assert.equal((await t.msg(s)).payload.toString(), '2');
    },
  },
  ...both({ 4: 'MQTT-3.8.3-3', 5: 'MQTT-3.8.3-2' }, 'SUBSCRIBE without a topic filter: the connection closes', (t, v) => refusedPacket(t, v, packet(0x82, u16(1), noProps(v)), ['suback'])),
  ...both({ 4: 'MQTT-3.8.3-4', 5: 'MQTT-3.8.3-5' }, 'reserved bits of the subscription options set, or QoS 3: the connection closes', async (t, v) => {
    await refusedPacket(t, v, subscribeBytes(v, t.topic(), 0xc0 | 1), ['suback']);
    await refusedPacket(t, v, subscribeBytes(v, t.topic(), 3), ['suback']);
  }),
  {
    id: 'MQTT-3.8.3-3',
    v: 5,
    title: 'No Local 1: the client does not get its own messages; others do',
    async run(t) {
      const topic = t.topic();
      const [me] = await t.connect(5);
      await t.sub(me, topic, 1, { nl: true });
      const other = await t.subscriber(5, topic, 1);
      await t.pub(me, topic, 'mine', 1);
      assert.equal((await t.msg(other)).payload.toString(), 'mine');
      await t.none(me, 'publish');
    },
  },
  {
    id: 'MQTT-3.8.3-4',
    v: 5,
    title: 'No Local 1 on a shared subscription is a protocol error: the connection closes',
    async run(t) {
      const [r] = await t.connect(5);
      r.write(subscribeBytes(5, `$share/g/${t.topic()}`, 0x04 | 1));
      await t.closed(r, 0x82, ['suback']);
    },
    deviation: {
      mosquitto: {
        why: 'grants the shared subscription with No Local 1 (SUBACK 0x01)',
        async observe(t) {
          const [r] = await t.connect(5);
          r.write(subscribeBytes(5, `$share/g/${t.topic()}`, 0x04 | 1));
          assert.deepEqual((await r.next('suback')).granted, [1]);
        },
      },
    },
  },
  ...both({ 4: 'MQTT-3.8.4-1', 5: 'MQTT-3.8.4-1' }, 'a SUBSCRIBE gets a SUBACK with its packet identifier', async (t, v) => {
    const [r] = await t.connect(v);
    r.send({ cmd: 'subscribe', messageId: 4242, subscriptions: [{ topic: t.topic(), qos: 1 }] });
    assert.equal((await r.next('suback')).messageId, 4242);
  }, { 4: { covers: ['MQTT-3.8.4-2', 'MQTT-2.3.1-7'] }, 5: { covers: ['MQTT-3.8.4-2', 'MQTT-2.2.1-6'] } }),
  ...both({ 4: 'MQTT-3.8.4-3', 5: 'MQTT-3.8.4-3' }, 'the same filter again replaces the subscription: one copy, at the new QoS', async (t, v) => {
    const topic = t.topic();
    const [s] = await t.connect(v);
    await t.sub(s, topic, 0);
    await t.sub(s, topic, 1);
    const [p] = await t.connect(v);
    await t.pub(p, topic, 'x', 1);
    const got = await drain(t, s);
    assert.equal(got.length, 1);
    assert.equal(got[0]!.qos, 1);
  }),
  {
    id: 'MQTT-3.8.4-3',
    v: 4,
    title: 'replacing a subscription re-sends the retained messages and does not interrupt the flow',
    async run(t) {
      const topic = t.topic();
      const [p] = await t.connect(4);
      await t.pub(p, topic, 'r', 1, { retain: true });
      const [s] = await t.connect(4);
      await t.sub(s, topic, 1);
      assert.equal((await t.msg(s)).payload.toString(), 'r');
      await t.sub(s, topic, 1);
      assert.equal((await t.msg(s)).payload.toString(), 'r');
      await t.pub(p, topic, 'live', 1);
      assert.equal((await t.msg(s)).payload.toString(), 'live');
      await t.pub(p, topic, '', 0, { retain: true });
    },
  },
  {
    id: 'MQTT-3.8.4-4',
    v: 5,
    title: 'replacing a subscription with Retain Handling 0 re-sends the retained messages',
    async run(t) {
      const topic = t.topic();
      const [p] = await t.connect(5);
      await t.pub(p, topic, 'r', 1, { retain: true });
      const [s] = await t.connect(5);
      await t.sub(s, topic, 1, { rh: 0 });
      await t.msg(s);
      await t.sub(s, topic, 1, { rh: 0 });
      assert.equal((await t.msg(s)).payload.toString(), 'r');
      await t.pub(p, topic, '', 0, { retain: true });
    },
  },
  ...both({ 4: 'MQTT-3.8.4-4', 5: 'MQTT-3.8.4-5' }, 'several filters in one SUBSCRIBE: each made, one SUBACK with a code per filter, in order', async (t, v) => {
    const base = t.topic();
    const [s] = await t.connect(v);
    s.send({ cmd: 'subscribe', messageId: 3, subscriptions: [{ topic: `${base}/a`, qos: 2 }, { topic: `${base}/b`, qos: 0 }, { topic: `${base}/c`, qos: 1 }] });
    const ack = await s.next('suback');
    assert.deepEqual(ack.granted, [2, 0, 1]);
    const [p] = await t.connect(v);
    for (const x of ['a', 'b', 'c']) await t.pub(p, `${base}/${x}`, x, 2);
    const got = await drain(t, s);
    assert.deepEqual(got.map((m) => [m.payload.toString(), m.qos]), [['a', 2], ['b', 0], ['c', 1]]);
  }, { 4: { covers: ['MQTT-3.8.4-5', 'MQTT-3.9.3-1'] }, 5: { covers: ['MQTT-3.8.4-6', 'MQTT-3.9.3-1', 'MQTT-3.8.4-7'] } }),
  ...both({ 4: 'MQTT-3.8.4-6', 5: 'MQTT-3.8.4-8' }, 'messages go out at the lower of the published QoS and the granted QoS', async (t, v) => {
    const base = t.topic();
    const [s] = await t.connect(v);
    await t.sub(s, `${base}/low`, 1);
    await t.sub(s, `${base}/high`, 2);
    const [p] = await t.connect(v);
    await t.pub(p, `${base}/low`, 'x', 2);
    await t.pub(p, `${base}/high`, 'y', 1);
    const got = await drain(t, s);
    assert.deepEqual(got.map((m) => m.qos), [1, 1]);
  }),
  ...both({ 4: 'MQTT-3.9.3-2', 5: 'MQTT-3.9.3-2' }, 'SUBACK return codes are defined ones', async (t, v) => {
    const [s] = await t.connect(v);
    s.send({ cmd: 'subscribe', messageId: 3, subscriptions: [0, 1, 2].map((qos) => ({ topic: `${t.topic()}/#`, qos })) });
    for (const c of (await s.next('suback')).granted as number[]) assert.ok((v === 5 ? subackCodes5 : [0, 1, 2, 0x80]).includes(c), `code 0x${c.toString(16)}`);
  }),
  {
    id: 'MQTT-3.9.2-1',
    v: 5,
    title: "SUBACK and UNSUBACK fit the client's Maximum Packet Size (20 bytes): no Reason String or User Property past it",
    covers: ['MQTT-3.9.2-2', 'MQTT-3.11.2-1', 'MQTT-3.11.2-2'],
    async run(t) {
      const [r] = await t.connect(5, { properties: { maximumPacketSize: 20 } });
      await t.sub(r, `$share/g/${t.topic()}`, 1);
      await t.sub(r, t.topic(), 2);
      r.send({ cmd: 'unsubscribe', messageId: 5, unsubscriptions: [t.topic()] });
      await r.next('unsuback');
      for (const p of [...r.packets]) assert.ok(p.length + 2 <= 20, `${p.cmd} of ${p.length + 2} bytes`);
    },
  },
  // UNSUBSCRIBE
  ...both({ 4: 'MQTT-3.10.1-1', 5: 'MQTT-3.10.1-1' }, 'UNSUBSCRIBE with fixed header flags 0000: the connection closes', (t, v) => refusedPacket(t, v, unsubscribeBytes(v, t.topic(), 0xa0), ['unsuback'])),
  ...both({ 4: 'MQTT-3.10.3-1', 5: 'MQTT-3.10.3-1' }, 'an UNSUBSCRIBE topic filter of ill-formed UTF-8: the connection closes', (t, v) => refusedPacket(t, v, unsubscribeBytes(v, bytes(0x61, 0xed, 0xbf, 0xbf)), ['unsuback'])),
  ...both({ 4: 'MQTT-3.10.3-2', 5: 'MQTT-3.10.3-2' }, 'UNSUBSCRIBE without a topic filter: the connection closes', (t, v) => refusedPacket(t, v, packet(0xa2, u16(1), noProps(v)), ['unsuback'])),
  ...both({ 4: 'MQTT-3.10.4-1', 5: 'MQTT-3.10.4-1' }, 'UNSUBSCRIBE compares filters character by character: a/b does not remove a/+, a/+ does', async (t, v) => {
    const base = t.topic();
    const [s] = await t.connect(v);
    await t.sub(s, `${base}/+`, 1);
    s.send({ cmd: 'unsubscribe', messageId: 7, unsubscriptions: [`${base}/b`] });
    await s.next('unsuback');
    const [p] = await t.connect(v);
    await t.pub(p, `${base}/b`, 'still', 1);
    assert.equal((await t.msg(s)).payload.toString(), 'still');
    s.send({ cmd: 'unsubscribe', messageId: 8, unsubscriptions: [`${base}/+`] });
    await s.next('unsuback');
    await t.pub(p, `${base}/b`, 'gone', 1);
    await t.none(s, 'publish');
  }, { 4: { covers: ['MQTT-3.10.4-2'] }, 5: { covers: ['MQTT-3.10.4-2'] } }),
  ...both({ 4: 'MQTT-3.10.4-3', 5: 'MQTT-3.10.4-3' }, 'a QoS 2 delivery started before UNSUBSCRIBE is completed (PUBREL still comes)', async (t, v) => {
    const topic = t.topic();
    const s = await t.subscriber(v, topic, 2);
    const [p] = await t.connect(v);
    await t.pub(p, topic, 'x', 2);
    const m = await t.msg(s, 3000, false);
    s.send({ cmd: 'unsubscribe', messageId: 9, unsubscriptions: [topic] });
    await s.next('unsuback');
    s.send({ cmd: 'pubrec', messageId: m.messageId });
    assert.equal((await s.next('pubrel')).messageId, m.messageId);
  }),
  ...both({ 4: 'MQTT-3.10.4-4', 5: 'MQTT-3.10.4-4' }, 'an UNSUBSCRIBE gets an UNSUBACK with its packet identifier, even when no filter matched', async (t, v) => {
    const [r] = await t.connect(v);
    r.send({ cmd: 'unsubscribe', messageId: 777, unsubscriptions: [t.topic()] });
    const ack = await r.next('unsuback');
    assert.equal(ack.messageId, 777);
    if (v === 5) assert.deepEqual(ack.granted, [0x11]);
  }, { 4: { covers: ['MQTT-3.10.4-5', 'MQTT-2.3.1-7'] }, 5: { covers: ['MQTT-3.10.4-5'] } }),
  ...both({ 4: 'MQTT-3.10.4-6', 5: 'MQTT-3.10.4-6' }, 'several filters in one UNSUBSCRIBE: all removed, one UNSUBACK (v5: a code per filter, in order)', async (t, v) => {
    const base = t.topic();
    const [s] = await t.connect(v);
    await t.sub(s, `${base}/a`, 1);
    await t.sub(s, `${base}/c`, 1);
    s.send({ cmd: 'unsubscribe', messageId: 9, unsubscriptions: [`${base}/a`, `${base}/b`, `${base}/c`] });
    const ack = await s.next('unsuback');
    if (v === 5) assert.deepEqual(ack.granted, [0x00, 0x11, 0x00]);
    const [p] = await t.connect(v);
    await t.pub(p, `${base}/a`, 'x', 1);
    await t.pub(p, `${base}/c`, 'x', 1);
    await t.none(s, 'publish');
  }, { 5: { covers: ['MQTT-3.11.3-1', 'MQTT-3.11.3-2'] } }),
  // topic names and filters
  ...both({ 4: 'MQTT-4.7.1-2', 5: 'MQTT-4.7.1-1' }, "a filter with # not last or not a whole level (a/#/b, a#; #/x in UNSUBSCRIBE): the packet is refused (closed)", async (t, v) => {
    for (const f of ['a/#/b', 'a#']) await refusedPacket(t, v, subscribeBytes(v, `${t.topic()}/${f}`), ['suback']);
    await refusedPacket(t, v, unsubscribeBytes(v, `${t.topic()}/#/x`), ['unsuback']);
  }),
  ...both({ 4: 'MQTT-4.7.1-3', 5: 'MQTT-4.7.1-2' }, 'a filter with + not a whole level (a+/b): the SUBSCRIBE is refused (closed)', async (t, v) => {
    await refusedPacket(t, v, subscribeBytes(v, `${t.topic()}/a+/b`), ['suback']);
  }),
  ...both({ 4: 'MQTT-4.7.2-1', 5: 'MQTT-4.7.2-1' }, 'filters starting with a wildcard do not match topics starting with $', async (t, v) => {
    const lvl = t.id('d');
    const [s] = await t.connect(v);
    await t.sub(s, `+/${lvl}`, 0);
    await t.sub(s, `#`, 0);
    const direct = await t.subscriber(v, `$cf/${lvl}`, 0);
    const [p] = await t.connect(v);
    await t.pub(p, `$cf/${lvl}`, 'dollar', 0);
    assert.equal((await t.msg(direct)).payload.toString(), 'dollar');
    // `#` also sees the other tests' traffic: only this test's $ topic matters
    s.send({ cmd: 'pingreq' });
    await s.next('pingresp');
    await sleep(300);
    assert.deepEqual(s.packets.filter((m) => m.cmd === 'publish' && m.topic.startsWith('$')).map((m) => m.topic), []);
  }),
  ...both({ 4: 'MQTT-4.7.3-1', 5: 'MQTT-4.7.3-1' }, 'an empty topic filter, or an empty topic name (without a topic alias): the connection closes', async (t, v) => {
    await refusedPacket(t, v, subscribeBytes(v, ''), ['suback']);
    await refusedPacket(t, v, unsubscribeBytes(v, ''), ['unsuback']);
    await refusedPacket(t, v, packet(0x32, str(''), u16(1), noProps(v), Buffer.from('x')), ['puback']);
  }),
  ...both({ 4: 'MQTT-4.7.3-2', 5: 'MQTT-4.7.3-2' }, 'U+0000 in a topic name or filter: the connection closes', async (t, v) => {
    await refusedPacket(t, v, subscribeBytes(v, bytes(0x61, 0x00, 0x62)), ['suback']);
    await refusedPacket(t, v, packet(0x30, str(bytes(0x61, 0x00)), noProps(v), Buffer.from('x')), []);
  }, { 4: { covers: ['MQTT-1.5.3-2'] }, 5: { covers: ['MQTT-1.5.4-2'] } }),
  ...both({ 4: 'MQTT-4.7.3-3', 5: 'MQTT-4.7.3-3' }, 'a topic of 60000 bytes is subscribed to and delivered', async (t, v) => {
    const topic = `${t.topic()}/${'x'.repeat(60000)}`;
    const s = await t.subscriber(v, topic, 1);
    const [p] = await t.connect(v);
    await t.pub(p, topic, 'long', 1);
    assert.equal((await t.msg(s)).topic, topic);
  }),
  ...both({ 4: 'MQTT-4.7.3-4', 5: 'MQTT-4.7.3-4' }, 'no normalisation when matching: a/b, a//b, A/b and é (NFC, NFD) are distinct topics', async (t, v) => {
    const base = t.topic();
    const s = await t.subscriber(v, `${base}/a/b`, 0);
    const nfc = await t.subscriber(v, `${base}/\u00e9`, 0);
    const [p] = await t.connect(v);
    for (const x of ['a//b', 'A/b', 'a/b/', 'e\u0301', 'a/b']) await t.pub(p, `${base}/${x}`, x, 0);
    assert.deepEqual((await drain(t, s, 200)).map((m) => m.payload.toString()), ['a/b']);
    assert.deepEqual((await drain(t, nfc, 200)).map((m) => m.payload.toString()), []);
  }),
  {
    id: 'MQTT-4.8.2-1',
    v: 5,
    title: 'a shared subscription filter needs a share name of one character or more and a filter: $share//t and $share/g are refused (closed)',
    async run(t) {
      await refusedPacket(t, 5, subscribeBytes(5, `$share//${t.topic()}`, 1), ['suback']);
      await refusedPacket(t, 5, subscribeBytes(5, '$share/g', 1), ['suback']);
    },
    deviation: {
      mosquitto: {
        why: 'grants $share//t and $share/g (SUBACK 0x01) instead of refusing them',
        async observe(t) {
          await grants((x) => `$share//${x.topic()}`)(t);
          await grants(() => '$share/g')(t);
        },
      },
    },
  },
  {
    id: 'MQTT-4.8.2-2',
    v: 5,
    title: 'a share name with + or #: refused (closed)',
    async run(t) {
      await refusedPacket(t, 5, subscribeBytes(5, `$share/g+/${t.topic()}`, 1), ['suback']);
      await refusedPacket(t, 5, subscribeBytes(5, `$share/g#/${t.topic()}`, 1), ['suback']);
    },
  },
  {
    id: 'MQTT-4.8.2-3',
    v: 5,
    title: 'each shared subscriber gets messages at its own granted QoS (0 and 1)',
    async run(t) {
      const topic = t.topic();
      const [a] = await t.connect(5);
      await t.sub(a, `$share/g/${topic}`, 0);
      const [b] = await t.connect(5);
      await t.sub(b, `$share/g/${topic}`, 1);
      const [p] = await t.connect(5);
      for (let i = 0; i < 20; i++) await t.pub(p, topic, `${i}`, 1);
      const ga = await drain(t, a, 300);
      const gb = await drain(t, b, 300);
      assert.ok(ga.length > 0 || gb.length > 0);
      assert.ok(ga.every((m) => m.qos === 0) && gb.every((m) => m.qos === 1), `${ga.map((m) => m.qos)} / ${gb.map((m) => m.qos)}`);
      assert.equal(ga.length + gb.length, 20);
    },
  },
  {
    id: 'MQTT-4.8.2-6',
    v: 5,
    title: 'a PUBACK of 0x80 to a shared delivery: the message goes to no other member',
    async run(t) {
      const topic = t.topic();
      const [a] = await t.connect(5);
      await t.sub(a, `$share/g/${topic}`, 1);
      const [b] = await t.connect(5);
      await t.sub(b, `$share/g/${topic}`, 1);
      const [p] = await t.connect(5);
      for (let i = 0; i < 10; i++) await t.pub(p, topic, `${i}`, 1);
      // a refuses everything it gets; b acknowledges
      const seen: string[] = [];
      const refuse = async () => {
        for (;;) {
          const m = await a.next('publish', 600).catch(() => undefined);
          if (!m) return;
          seen.push(`a${m.payload}`);
          a.send({ cmd: 'puback', messageId: m.messageId, reasonCode: 0x80 });
        }
      };
      const [, gb] = await Promise.all([refuse(), drain(t, b, 600)]);
      for (const m of gb) seen.push(`b${m.payload}`);
      const payloads = seen.map((x) => x.slice(1)).sort();
      assert.equal(payloads.length, 10, `each message once: ${seen}`);
      assert.equal(new Set(payloads).size, 10);
    },
  },
];
