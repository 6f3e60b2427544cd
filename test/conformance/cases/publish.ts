/** PUBLISH and its acknowledgements (§3.3–3.7), QoS flows (§4.3, §4.4), delivery and ordering (§4.5, §4.6), flow control (5 §4.9). */
import assert from 'node:assert/strict';
import mqttPacket from 'mqtt-packet';
import { bytes, packet, props, sleep, str, u16, type Client, type Ctx, type Packet, type V } from '../harness.js';
import { both, type Case } from './types.js';

/** A subscriber and a publisher on a fresh topic. */
async function pair(t: Ctx, v: V, qos = 1, subOpts: Record<string, unknown> = {}, subConnect: Record<string, unknown> = {}) {
  const topic = t.topic();
  const s = await t.subscriber(v, topic, qos, subConnect, subOpts);
  const [p] = await t.connect(v);
  return { s, p, topic };
}

/** A persistent subscriber (clean 0 / expiry 300) that then drops its connection; reconnect() resumes it. */
async function persistentSub(t: Ctx, v: V, topic: string, qos = 1) {
  const clientId = t.id();
  const o = { clientId, clean: false, ...(v === 5 ? { properties: { sessionExpiryInterval: 300 } } : {}) };
  const s = await t.subscriber(v, topic, qos, o);
  return { s, reconnect: async () => (await t.connect(v, o))[0] };
}

/** Clears a retained message. */
const unretain = (t: Ctx, r: Client, topic: string) => t.pub(r, topic, '', 0, { retain: true });

const QOS0_UNDEFINED = (p: Packet) => p.messageId === undefined || p.messageId === null;

/** A v5 User Property as bytes. */
const up = (k: string, val: string) => Buffer.concat([bytes(0x26), str(k), str(val)]);

/** A PUBLISH with the user properties k=2, a=1, k=1 (raw bytes); resolves with the raw bytes its subscriber got. */
async function forwardUserProperties(t: Ctx): Promise<Buffer> {
  const { s, p, topic } = await pair(t, 5, 0);
  s.received.length = 0;
  p.write(packet(0x30, str(topic), props(up('k', '2'), up('a', '1'), up('k', '1')), Buffer.from('x')));
  await t.msg(s);
  return Buffer.concat(s.received);
}

const definedPubackCodes = [0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99];

export const publishCases: Case[] = [
  ...both({ 4: 'MQTT-3.3.1-1', 5: 'MQTT-3.3.1-1' }, 'a QoS 1 message re-delivered on session resumption has DUP 1 and the same packet identifier', async (t, v) => {
    const topic = t.topic();
    const { s, reconnect } = await persistentSub(t, v, topic, 1);
    const [p] = await t.connect(v);
    await t.pub(p, topic, 'again', 1);
    const first = await t.msg(s, 3000, false);
    assert.equal(first.dup, false);
    s.destroy();
    const r = await reconnect();
    const m = await t.msg(r);
    assert.equal(m.dup, true);
    assert.equal(m.messageId, first.messageId);
  }, { 4: { covers: ['MQTT-4.4.0-1', 'MQTT-4.3.2-1', 'MQTT-2.3.1-4'] }, 5: { covers: ['MQTT-4.4.0-1', 'MQTT-4.3.2-2', 'MQTT-4.3.2-3'] } }),
  ...both({ 4: 'MQTT-3.3.1-2', 5: 'MQTT-3.3.1-2' }, 'QoS 0 deliveries have DUP 0 and no packet identifier (the publisher sent QoS 1 with DUP 1)', async (t, v) => {
    const { s, p, topic } = await pair(t, v, 0);
    await t.pub(p, topic, 'x', 1, { dup: true });
    const m = await t.msg(s);
    assert.equal(m.qos, 0);
    assert.equal(m.dup, false);
    assert.ok(QOS0_UNDEFINED(m));
  }, { 4: { covers: ['MQTT-4.3.1-1', 'MQTT-2.3.1-5'] }, 5: { covers: ['MQTT-4.3.1-1', 'MQTT-2.2.1-2'] } }),
  ...both({ 4: 'MQTT-3.3.1-3', 5: 'MQTT-3.3.1-3' }, 'the outgoing DUP is set independently of the incoming one: a first QoS 1 delivery has DUP 0 though the publisher sent DUP 1', async (t, v) => {
    const { s, p, topic } = await pair(t, v, 1);
    await t.pub(p, topic, 'x', 1, { dup: true });
    assert.equal((await t.msg(s)).dup, false);
  }),
  ...both({ 4: 'MQTT-3.3.1-4', 5: 'MQTT-3.3.1-4' }, 'a PUBLISH with both QoS bits set: the connection closes', async (t, v) => {
    const [r] = await t.connect(v);
    r.write(packet(0x36, str(t.topic()), u16(1), v === 5 ? bytes(0) : Buffer.alloc(0), Buffer.from('x')));
    await t.closed(r, undefined, ['puback', 'pubrec']);
  }),
  ...both({ 4: 'MQTT-3.3.1-5', 5: 'MQTT-3.3.1-5' }, 'a retained message is stored with its QoS: a later subscriber (QoS 2) gets it at QoS 1 with RETAIN 1', async (t, v) => {
    const topic = t.topic();
    const [p] = await t.connect(v);
    await t.pub(p, topic, 'r1', 1, { retain: true });
    const s = await t.subscriber(v, topic, 2);
    const m = await t.msg(s);
    assert.equal(m.payload.toString(), 'r1');
    assert.equal(m.qos, 1);
    assert.equal(m.retain, true);
    await unretain(t, p, topic);
  }, { 4: { covers: ['MQTT-3.3.1-6', 'MQTT-3.3.1-8'] }, 5: { covers: ['MQTT-3.3.1-9'] } }),
  {
    id: 'MQTT-3.3.1-7',
    v: 4,
    title: 'a retained QoS 0 message replaces the one retained before',
    async run(t) {
      const topic = t.topic();
      const [p] = await t.connect(4);
      await t.pub(p, topic, 'old', 1, { retain: true });
      await t.pub(p, topic, 'new', 0, { retain: true });
      const s = await t.subscriber(4, topic, 1);
      assert.equal((await t.msg(s)).payload.toString(), 'new');
      await t.none(s, 'publish');
      await unretain(t, p, topic);
    },
  },
  {
    id: 'MQTT-3.3.1-9',
    v: 4,
    title: 'a message sent to an established subscription has RETAIN 0 though it was published retained',
    async run(t) {
      const { s, p, topic } = await pair(t, 4, 1);
      await t.pub(p, topic, 'live', 1, { retain: true });
      assert.equal((await t.msg(s)).retain, false);
      await unretain(t, p, topic);
    },
  },
  ...both({ 4: 'MQTT-3.3.1-10', 5: 'MQTT-3.3.1-6' }, 'a zero-byte retained PUBLISH is delivered as usual and removes the retained message', async (t, v) => {
    const topic = t.topic();
    const [p] = await t.connect(v);
    await t.pub(p, topic, 'r', 1, { retain: true });
    const s = await t.subscriber(v, topic, 1);
    await t.msg(s);
    await t.pub(p, topic, '', 1, { retain: true });
    assert.equal((await t.msg(s)).payload.length, 0);
    const late = await t.subscriber(v, topic, 1);
    await t.none(late, 'publish');
  }, { 4: { covers: ['MQTT-3.3.1-11'] }, 5: { covers: ['MQTT-3.3.1-7'] } }),
  ...both({ 4: 'MQTT-3.3.1-12', 5: 'MQTT-3.3.1-8' }, 'RETAIN 0 neither stores the message nor removes the retained one', async (t, v) => {
    const topic = t.topic();
    const [p] = await t.connect(v);
    await t.pub(p, topic, 'kept', 1, { retain: true });
    await t.pub(p, topic, 'passing', 1);
    const s = await t.subscriber(v, topic, 1);
    assert.equal((await t.msg(s)).payload.toString(), 'kept');
    await t.none(s, 'publish');
    await unretain(t, p, topic);
  }),
  {
    id: 'MQTT-3.3.1-10',
    v: 5,
    title: 'Retain Handling 1 sends retained messages only when the subscription did not exist',
    async run(t) {
      const topic = t.topic();
      const [p] = await t.connect(5);
      await t.pub(p, topic, 'r', 1, { retain: true });
      const [s] = await t.connect(5);
      await t.sub(s, topic, 1, { rh: 1 });
      assert.equal((await t.msg(s)).payload.toString(), 'r');
      await t.sub(s, topic, 1, { rh: 1 });
      await t.none(s, 'publish');
      await unretain(t, p, topic);
    },
  },
  {
    id: 'MQTT-3.3.1-11',
    v: 5,
    title: 'Retain Handling 2 sends no retained messages',
    async run(t) {
      const topic = t.topic();
      const [p] = await t.connect(5);
      await t.pub(p, topic, 'r', 1, { retain: true });
      const [s] = await t.connect(5);
      await t.sub(s, topic, 1, { rh: 2 });
      await t.none(s, 'publish');
      await unretain(t, p, topic);
    },
  },
  {
    id: 'MQTT-3.3.1-12',
    v: 5,
    title: 'Retain As Published 0: a retained message to an established subscription goes with RETAIN 0',
    async run(t) {
      const { s, p, topic } = await pair(t, 5, 1, { rap: false });
      await t.pub(p, topic, 'x', 1, { retain: true });
      assert.equal((await t.msg(s)).retain, false);
      await unretain(t, p, topic);
    },
  },
  {
    id: 'MQTT-3.3.1-13',
    v: 5,
    title: 'Retain As Published 1: the RETAIN flag goes as published',
    async run(t) {
      const { s, p, topic } = await pair(t, 5, 1, { rap: true });
      await t.pub(p, topic, 'x', 1, { retain: true });
      assert.equal((await t.msg(s)).retain, true);
      await t.pub(p, topic, 'y', 1);
      assert.equal((await t.msg(s)).retain, false);
      await unretain(t, p, topic);
    },
  },
  ...both({ 4: 'MQTT-3.3.2-1', 5: 'MQTT-3.3.2-1' }, 'a topic name of ill-formed UTF-8: the connection closes', async (t, v) => {
    const [r] = await t.connect(v);
    r.write(packet(0x32, str(bytes(0x61, 0x2f, 0xff)), u16(1), v === 5 ? bytes(0) : Buffer.alloc(0), Buffer.from('x')));
    await t.closed(r, undefined, ['puback']);
  }, { 4: { covers: ['MQTT-1.5.3-1'] }, 5: { covers: ['MQTT-1.5.4-1'] } }),
  ...both({ 4: 'MQTT-3.3.2-2', 5: 'MQTT-3.3.2-2' }, 'a topic name with a wildcard is not accepted: not delivered, and the connection closes', async (t, v) => {
    const base = t.topic();
    const s = await t.subscriber(v, `${base}/#`, 1);
    const [r] = await t.connect(v);
    r.send({ cmd: 'publish', topic: `${base}/+`, payload: Buffer.from('x'), qos: 1, messageId: 1 });
    await t.closed(r);
    await t.none(s, 'publish');
  }, { 4: { covers: ['MQTT-4.7.1-1'] }, 5: { covers: ['MQTT-4.7.0-1'] } }),
  ...both({ 4: 'MQTT-3.3.2-3', 5: 'MQTT-3.3.2-3' }, 'the topic name sent to a subscriber matches its filter (the published name, unchanged)', async (t, v) => {
    const base = t.topic();
    const s = await t.subscriber(v, `${base}/+/c`, 0);
    const [p] = await t.connect(v);
    await t.pub(p, `${base}/b/c`, 'x', 0);
    assert.equal((await t.msg(s)).topic, `${base}/b/c`);
  }),
  {
    id: 'MQTT-3.3.2-4',
    v: 5,
    title: 'Payload Format Indicator, Response Topic, Correlation Data, User Properties and Content Type reach the subscriber unaltered',
    covers: ['MQTT-3.3.2-15', 'MQTT-3.3.2-16', 'MQTT-3.3.2-17', 'MQTT-3.3.2-20'],
    async run(t) {
      const { s, p, topic } = await pair(t, 5, 1);
      const properties = { payloadFormatIndicator: true, responseTopic: 'reply/to', correlationData: Buffer.from([1, 2, 3]), userProperties: { a: '1', b: ['2', '3'] }, contentType: 'text/plain; x=1' };
      await t.pub(p, topic, 'x', 1, { properties });
      const m = await t.msg(s);
      assert.equal(m.properties?.payloadFormatIndicator, true);
      assert.equal(m.properties?.responseTopic, 'reply/to');
      assert.deepEqual([...m.properties!.correlationData], [1, 2, 3]);
      assert.deepEqual({ ...m.properties?.userProperties }, { a: '1', b: ['2', '3'] });
      assert.equal(m.properties?.contentType, 'text/plain; x=1');
    },
  },
  {
    id: 'MQTT-3.3.2-5',
    v: 5,
    title: 'a message whose expiry (1 s) passed while its subscriber was away is not delivered',
    async run(t) {
      const topic = t.topic();
      const { s, reconnect } = await persistentSub(t, 5, topic, 1);
      s.send({ cmd: 'disconnect' });
      await s.waitClosed();
      const [p] = await t.connect(5);
      await t.pub(p, topic, 'expires', 1, { properties: { messageExpiryInterval: 1 } });
      await t.pub(p, topic, 'stays', 1);
      await sleep(2200);
      const r = await reconnect();
      assert.equal((await t.msg(r)).payload.toString(), 'stays');
      await t.none(r, 'publish');
    },
  },
  {
    id: 'MQTT-3.3.2-6',
    v: 5,
    title: 'a message held 2 s goes out with its expiry interval reduced by the time it waited',
    async run(t) {
      const topic = t.topic();
      const { s, reconnect } = await persistentSub(t, 5, topic, 1);
      s.send({ cmd: 'disconnect' });
      await s.waitClosed();
      const [p] = await t.connect(5);
      await t.pub(p, topic, 'x', 1, { properties: { messageExpiryInterval: 60 } });
      await sleep(2100);
      const r = await reconnect();
      const left = (await t.msg(r)).properties?.messageExpiryInterval as number;
      assert.ok(left >= 55 && left <= 58, `interval ${left}`);
    },
  },
  {
    id: 'MQTT-3.3.2-7',
    v: 5,
    title: 'topic alias mappings do not carry over to a new connection: an alias alone (empty topic) there is a protocol error',
    async run(t) {
      const id = t.id();
      const [a, ack] = await t.connect(5, { clientId: id });
      assert.ok((ack.properties?.topicAliasMaximum ?? 0) >= 1, 'the server accepts topic aliases');
      await t.pub(a, t.topic(), 'x', 1, { properties: { topicAlias: 1 } });
      a.destroy();
      const [b] = await t.connect(5, { clientId: id });
      b.write(packet(0x32, str(''), u16(1), props(bytes(0x23, 0, 1)), Buffer.from('x')));
      await t.closed(b, 0x82, ['puback']);
    },
  },
  {
    id: 'MQTT-3.3.2-8',
    v: 5,
    title: 'a Topic Alias of 0 from the client is refused: the connection closes (DISCONNECT 0x94 from Switchyard, 0x81 from Mosquitto)',
    async run(t) {
      const [r] = await t.connect(5);
      r.write(packet(0x32, str(t.topic()), u16(1), props(bytes(0x23, 0, 0)), Buffer.from('x')));
      await t.closed(r, undefined, ['puback']);
    },
  },
  {
    id: 'MQTT-3.3.2-9',
    v: 5,
    title: "a Topic Alias above the server's Topic Alias Maximum: DISCONNECT 0x94",
    async run(t) {
      const [r, ack] = await t.connect(5);
      const max = (ack.properties?.topicAliasMaximum as number | undefined) ?? 0;
      r.write(packet(0x32, str(t.topic()), u16(1), props(bytes(0x23, (max + 1) >> 8, (max + 1) & 0xff)), Buffer.from('x')));
      await t.closed(r, 0x94, ['puback']);
    },
  },
  {
    id: 'MQTT-3.3.2-12',
    v: 5,
    title: 'the server accepts every Topic Alias from 1 to the maximum it announced',
    async run(t) {
      const [p, ack] = await t.connect(5);
      const max = ack.properties?.topicAliasMaximum as number;
      assert.ok(max >= 1, 'topic aliases announced');
      const topic = t.topic();
      const s = await t.subscriber(5, topic, 1);
      for (const alias of [1, max]) {
        await t.pub(p, topic, `set ${alias}`, 1, { properties: { topicAlias: alias } });
        p.write(packet(0x32, str(''), u16(100 + alias), props(bytes(0x23, alias >> 8, alias & 0xff)), Buffer.from(`use ${alias}`)));
        assert.equal((await p.next('puback')).messageId, 100 + alias);
      }
      const got = [];
      for (let i = 0; i < 4; i++) got.push((await t.msg(s)).payload.toString());
      assert.deepEqual(got, ['set 1', 'use 1', `set ${max}`, `use ${max}`]);
    },
  },
  {
    id: 'MQTT-3.3.2-13',
    v: 5,
    title: 'a Response Topic of ill-formed UTF-8: the connection closes',
    async run(t) {
      const [r] = await t.connect(5);
      r.write(packet(0x32, str(t.topic()), u16(1), props(bytes(0x08), str(bytes(0x72, 0xc0, 0xaf))), Buffer.from('x')));
      await t.closed(r, undefined, ['puback']);
    },
  },
  {
    id: 'MQTT-3.3.2-14',
    v: 5,
    title: 'a Response Topic with a wildcard is refused: not delivered (an error ack or the connection closed)',
    async run(t) {
      const { s, p, topic } = await pair(t, 5, 1);
      p.send({ cmd: 'publish', topic, payload: Buffer.from('x'), qos: 1, messageId: 9, properties: { responseTopic: 'reply/#' } });
      const ack = await Promise.race([p.next('puback').catch(() => undefined), p.closedPromise]);
      if (ack) assert.ok(ack.reasonCode >= 0x80, `PUBACK 0x${ack.reasonCode?.toString(16)}`);
      else await t.closed(p);
      await t.none(s, 'publish');
    },
    deviation: {
      mosquitto: {
        why: 'accepts a Response Topic with a wildcard (PUBACK 0x00) and forwards it',
        async observe(t) {
          const { s, p, topic } = await pair(t, 5, 1);
          p.send({ cmd: 'publish', topic, payload: Buffer.from('x'), qos: 1, messageId: 9, properties: { responseTopic: 'reply/#' } });
          assert.equal((await p.next('puback')).reasonCode ?? 0, 0);
          assert.equal((await t.msg(s)).properties?.responseTopic, 'reply/#');
        },
      },
    },
  },
  {
    id: 'MQTT-3.3.2-18',
    v: 5,
    title: 'User Properties keep their order when forwarded (k=2, a=1, k=1, raw bytes)',
    async run(t) {
      const out = await forwardUserProperties(t);
      assert.ok(out.includes(Buffer.concat([up('k', '2'), up('a', '1'), up('k', '1')])), 'k=2, a=1, k=1 in that order');
    },
    deviation: {
      switchyard: {
        why: 'user properties are held as mqtt-packet holds them, an object of name to values: the pairs of one name go out together, so k=2, a=1, k=1 is forwarded as k=2, k=1, a=1 (the order of distinct names, and of the values of one name, is kept)',
        async observe(t) {
          const out = await forwardUserProperties(t);
          assert.ok(out.includes(Buffer.concat([up('k', '2'), up('k', '1'), up('a', '1')])), 'k=2, k=1, a=1');
        },
      },
    },
  },
  {
    id: 'MQTT-3.3.2-19',
    v: 5,
    title: 'a Content Type of ill-formed UTF-8: the connection closes',
    async run(t) {
      const [r] = await t.connect(5);
      r.write(packet(0x32, str(t.topic()), u16(1), props(bytes(0x03), str(bytes(0x74, 0xed, 0xa0, 0x80))), Buffer.from('x')));
      await t.closed(r, undefined, ['puback']);
    },
  },
  ...both({ 4: 'MQTT-3.3.4-1', 5: 'MQTT-3.3.4-1' }, 'a PUBLISH gets the response its QoS asks for: QoS 1 PUBACK, QoS 2 PUBREC then PUBCOMP, with its packet identifier', async (t, v) => {
    const [r] = await t.connect(v);
    const topic = t.topic();
    r.send({ cmd: 'publish', topic, payload: Buffer.from('1'), qos: 1, messageId: 11 });
    assert.equal((await r.next('puback')).messageId, 11);
    r.send({ cmd: 'publish', topic, payload: Buffer.from('2'), qos: 2, messageId: 12 });
    assert.equal((await r.next('pubrec')).messageId, 12);
    r.send({ cmd: 'pubrel', messageId: 12 });
    assert.equal((await r.next('pubcomp')).messageId, 12);
  }, { 4: { covers: ['MQTT-2.3.1-6', 'MQTT-4.3.2-2', 'MQTT-4.3.3-2'] }, 5: { covers: ['MQTT-2.2.1-5', 'MQTT-4.3.2-4', 'MQTT-4.3.3-8', 'MQTT-4.3.3-11'] } }),
  ...both({ 4: 'MQTT-3.3.5-1', 5: 'MQTT-3.3.4-2' }, 'overlapping subscriptions (QoS 0 and QoS 2): the message is delivered at the highest QoS', async (t, v) => {
    const base = t.topic();
    const [s] = await t.connect(v);
    await t.sub(s, `${base}/#`, 0);
    await t.sub(s, `${base}/a`, 2);
    const [p] = await t.connect(v);
    await t.pub(p, `${base}/a`, 'x', 2);
    const first = await t.msg(s);
    const copies = [first, ...s.packets.filter((x) => x.cmd === 'publish')];
    await sleep(200);
    copies.push(...s.packets.filter((x) => x.cmd === 'publish' && !copies.includes(x)));
    assert.ok(copies.some((c) => c.qos === 2), `QoS of the copies: ${copies.map((c) => c.qos)}`);
  }),
  {
    id: 'MQTT-3.3.4-3',
    v: 5,
    title: 'the Subscription Identifiers of the matching subscriptions go with the message (one copy with both, or one copy each)',
    covers: ['MQTT-3.3.4-4', 'MQTT-3.3.4-5'],
    async run(t) {
      const base = t.topic();
      const [s] = await t.connect(5);
      await t.sub(s, `${base}/#`, 1, {}, { subscriptionIdentifier: 7 });
      await t.sub(s, `${base}/+`, 1, {}, { subscriptionIdentifier: 9 });
      const [p] = await t.connect(5);
      await t.pub(p, `${base}/x`, 'x', 1);
      const copies = [await t.msg(s)];
      await sleep(300);
      while (s.packets.some((x) => x.cmd === 'publish')) copies.push(await t.msg(s));
      const ids = (c: Packet) => [c.properties?.subscriptionIdentifier ?? []].flat() as number[];
      if (copies.length === 1) assert.deepEqual(ids(copies[0]!).sort(), [7, 9]);
      else assert.deepEqual(copies.map((c) => ids(c)).sort(), [[7], [9]]);
    },
  },
  {
    id: 'MQTT-3.3.4-6',
    v: 5,
    title: 'a PUBLISH from a client with a Subscription Identifier is a protocol error: the connection closes',
    async run(t) {
      const [r] = await t.connect(5);
      r.write(packet(0x32, str(t.topic()), u16(1), props(bytes(0x0b, 5)), Buffer.from('x')));
      await t.closed(r, 0x82, ['puback']);
    },
    deviation: {
      mosquitto: {
        why: 'accepts a PUBLISH from a client carrying a Subscription Identifier (PUBACK) and keeps the connection',
        async observe(t) {
          const [r] = await t.connect(5);
          r.write(packet(0x32, str(t.topic()), u16(1), props(bytes(0x0b, 5)), Buffer.from('x')));
          assert.equal((await r.next('puback')).messageId, 1);
          await t.none(r, 'disconnect');
          assert.equal(r.closed, false);
        },
      },
    },
  },
  {
    id: 'MQTT-3.3.4-7',
    v: 5,
    title: "QoS 2 PUBLISHes past the server's Receive Maximum: DISCONNECT 0x93",
    async run(t) {
      const [r, ack] = await t.connect(5);
      const max = (ack.properties?.receiveMaximum as number | undefined) ?? 65535;
      assert.ok(max <= 5000, `Receive Maximum ${max} is too large for this test`);
      const topic = t.topic();
      const all = Array.from({ length: max + 1 }, (_, i) => mqttPacket.generate({ cmd: 'publish', topic, payload: Buffer.from('x'), qos: 2, messageId: i + 1, retain: false, dup: false } as never, { protocolVersion: 5 } as never));
      r.write(Buffer.concat(all));
      await t.closed(r, 0x93);
      assert.ok(r.packets.filter((x) => x.cmd === 'pubrec').length <= max);
    },
    deviation: {
      mosquitto: {
        why: 'announces Receive Maximum 20 but takes a 21st unacknowledged QoS 2 PUBLISH (PUBREC) and keeps the connection',
        async observe(t) {
          const [r, ack] = await t.connect(5);
          const max = ack.properties?.receiveMaximum as number;
          const topic = t.topic();
          for (let i = 1; i <= max + 1; i++) r.send({ cmd: 'publish', topic, payload: Buffer.from('x'), qos: 2, messageId: i });
          for (let i = 1; i <= max + 1; i++) await r.next('pubrec');
          assert.equal(r.closed, false);
        },
      },
    },
  },
  {
    id: 'MQTT-3.3.4-9',
    v: 5,
    title: "no more unacknowledged QoS 1 PUBLISHes than the client's Receive Maximum (2); the rest follow the PUBACKs",
    covers: ['MQTT-4.9.0-1', 'MQTT-4.9.0-2', 'MQTT-3.3.4-10', 'MQTT-4.9.0-3'],
    async run(t) {
      const topic = t.topic();
      const s = await t.subscriber(5, topic, 1, { properties: { receiveMaximum: 2 } });
      const [p] = await t.connect(5);
      for (let i = 0; i < 5; i++) await t.pub(p, topic, `${i}`, 1);
      const a = await t.msg(s, 3000, false);
      const b = await t.msg(s, 3000, false);
      // quota 0: no third PUBLISH, but PINGREQ is still answered
      await t.none(s, 'publish', 400);
      const got = [a, b];
      for (const m of got) s.send({ cmd: 'puback', messageId: m.messageId });
      for (let i = 0; i < 3; i++) got.push(await t.msg(s));
      assert.deepEqual(got.map((m) => m.payload.toString()), ['0', '1', '2', '3', '4']);
    },
  },
  {
    id: 'MQTT-3.4.2-1',
    v: 5,
    title: 'PUBACK uses a defined reason code (a message with no subscriber: 0x00 or 0x10)',
    async run(t) {
      const [r] = await t.connect(5);
      const ack = await t.pub(r, t.topic(), 'x', 1);
      assert.ok([0x00, 0x10].includes(ack!.reasonCode ?? 0), `0x${(ack!.reasonCode ?? 0).toString(16)}`);
      assert.ok(definedPubackCodes.includes(ack!.reasonCode ?? 0));
    },
  },
  {
    id: 'MQTT-3.4.2-2',
    v: 5,
    title: "PUBACK, PUBREC, PUBREL and PUBCOMP fit the client's Maximum Packet Size (20 bytes): no Reason String or User Property past it",
    covers: ['MQTT-3.4.2-3', 'MQTT-3.5.2-2', 'MQTT-3.5.2-3', 'MQTT-3.6.2-2', 'MQTT-3.6.2-3', 'MQTT-3.7.2-2', 'MQTT-3.7.2-3'],
    async run(t) {
      const [r] = await t.connect(5, { properties: { maximumPacketSize: 20 } });
      const topic = t.topic();
      await t.pub(r, topic, 'x', 1);
      await t.pub(r, topic, 'x', 2);
      // a PUBREL for a packet identifier the server does not know: PUBCOMP 0x92
      r.send({ cmd: 'pubrel', messageId: 999 });
      await r.next('pubcomp');
      for (const p of r.packets) assert.ok(p.length + 2 <= 20, `${p.cmd} of ${p.length + 2} bytes`);
    },
  },
  {
    id: 'MQTT-3.5.2-1',
    v: 5,
    title: 'PUBREC, PUBREL and PUBCOMP use defined reason codes',
    covers: ['MQTT-3.6.2-1', 'MQTT-3.7.2-1'],
    async run(t) {
      const { s, p, topic } = await pair(t, 5, 2);
      p.send({ cmd: 'publish', topic, payload: Buffer.from('x'), qos: 2, messageId: 5 });
      const rec = await p.next('pubrec');
      assert.ok([0x00, 0x10].includes(rec.reasonCode ?? 0));
      p.send({ cmd: 'pubrel', messageId: 5 });
      assert.equal((await p.next('pubcomp')).reasonCode ?? 0, 0);
      const m = await s.next('publish');
      s.send({ cmd: 'pubrec', messageId: m.messageId });
      assert.equal((await s.next('pubrel')).reasonCode ?? 0, 0);
      s.send({ cmd: 'pubcomp', messageId: m.messageId });
      p.send({ cmd: 'pubrel', messageId: 77 });
      assert.ok([0x00, 0x92].includes((await p.next('pubcomp')).reasonCode ?? 0));
    },
  },
  ...both({ 4: 'MQTT-3.6.1-1', 5: 'MQTT-3.6.1-1' }, 'PUBREL with fixed header flags 0000: the connection closes', async (t, v) => {
    const [r] = await t.connect(v);
    r.send({ cmd: 'publish', topic: t.topic(), payload: Buffer.from('x'), qos: 2, messageId: 3 });
    await r.next('pubrec');
    r.write(packet(0x60, u16(3)));
    await t.closed(r, undefined, ['pubcomp']);
  }),
  {
    id: 'MQTT-4.3.2-1',
    v: 5,
    title: 'QoS 1 deliveries in flight at once have distinct, non-zero packet identifiers',
    covers: ['MQTT-2.2.1-4', 'MQTT-4.3.3-1'],
    async run(t) {
      const { s, p, topic } = await pair(t, 5, 2);
      for (let i = 0; i < 4; i++) await t.pub(p, topic, `${i}`, i % 2 ? 2 : 1);
      const ids = [];
      for (let i = 0; i < 4; i++) ids.push((await t.msg(s, 3000, false)).messageId);
      assert.ok(ids.every((id) => id > 0));
      assert.equal(new Set(ids).size, 4);
    },
  },
  {
    id: 'MQTT-4.3.3-1',
    v: 4,
    title: 'QoS 2 delivery to a subscriber: new packet identifier, DUP 0, PUBREL after PUBREC, PUBLISH not resent after that',
    async run(t) {
      const { s, p, topic } = await pair(t, 4, 2);
      await t.pub(p, topic, 'x', 2);
      const m = await t.msg(s, 3000, false);
      assert.equal(m.qos, 2);
      assert.equal(m.dup, false);
      assert.ok(m.messageId > 0);
      s.send({ cmd: 'pubrec', messageId: m.messageId });
      assert.equal((await s.next('pubrel')).messageId, m.messageId);
      s.send({ cmd: 'pubcomp', messageId: m.messageId });
      await t.none(s, 'publish');
    },
  },
  ...both({ 4: 'MQTT-4.3.2-2', 5: 'MQTT-4.3.2-5' }, 'after PUBACK the same packet identifier starts a new message: both are delivered', async (t, v) => {
    const { s, p, topic } = await pair(t, v, 1);
    for (const x of ['a', 'b']) {
      p.send({ cmd: 'publish', topic, payload: Buffer.from(x), qos: 1, messageId: 42 });
      await p.next('puback');
    }
    assert.equal((await t.msg(s)).payload.toString(), 'a');
    assert.equal((await t.msg(s)).payload.toString(), 'b');
  }),
  {
    id: 'MQTT-4.3.3-2',
    v: 5,
    title: 'a QoS 2 delivery first goes out with DUP 0 and waits for PUBREC (resent with DUP 1 on resumption)',
    covers: ['MQTT-4.3.3-3'],
    async run(t) {
      const topic = t.topic();
      const { s, reconnect } = await persistentSub(t, 5, topic, 2);
      const [p] = await t.connect(5);
      await t.pub(p, topic, 'q2', 2);
      const m = await t.msg(s, 3000, false);
      assert.equal(m.dup, false);
      s.destroy();
      const r = await reconnect();
      const again = await t.msg(r);
      assert.equal(again.messageId, m.messageId);
      assert.equal(again.dup, true);
    },
  },
  ...both({ 4: 'MQTT-4.3.3-2', 5: 'MQTT-4.3.3-10' }, 'a QoS 2 PUBLISH repeated before PUBREL gets PUBREC again and is delivered once', async (t, v) => {
    const { s, p, topic } = await pair(t, v, 2);
    p.send({ cmd: 'publish', topic, payload: Buffer.from('once'), qos: 2, messageId: 8 });
    await p.next('pubrec');
    p.send({ cmd: 'publish', topic, payload: Buffer.from('once'), qos: 2, messageId: 8, dup: true });
    await p.next('pubrec');
    p.send({ cmd: 'pubrel', messageId: 8 });
    await p.next('pubcomp');
    assert.equal((await t.msg(s)).payload.toString(), 'once');
    await t.none(s, 'publish');
  }, { 5: { covers: ['MQTT-4.3.3-12'] } }),
  {
    id: 'MQTT-4.3.3-4',
    v: 5,
    title: 'a PUBREC below 0x80 gets a PUBREL with the same packet identifier, unacknowledged until PUBCOMP (resent on resumption), and the PUBLISH is not resent',
    covers: ['MQTT-4.3.3-5', 'MQTT-4.3.3-6'],
    async run(t) {
      const topic = t.topic();
      const { s, reconnect } = await persistentSub(t, 5, topic, 2);
      const [p] = await t.connect(5);
      await t.pub(p, topic, 'x', 2);
      const m = await t.msg(s, 3000, false);
      s.send({ cmd: 'pubrec', messageId: m.messageId });
      assert.equal((await s.next('pubrel')).messageId, m.messageId);
      s.destroy();
      const r = await reconnect();
      assert.equal((await r.next('pubrel')).messageId, m.messageId);
      r.send({ cmd: 'pubcomp', messageId: m.messageId });
      await t.none(r, 'publish');
    },
  },
  {
    id: 'MQTT-4.3.3-7',
    v: 5,
    title: 'once a QoS 2 PUBLISH is sent, its expiry no longer applies: a late PUBREC still gets PUBREL',
    async run(t) {
      const { s, p, topic } = await pair(t, 5, 2);
      await t.pub(p, topic, 'x', 2, { properties: { messageExpiryInterval: 1 } });
      const m = await t.msg(s, 3000, false);
      await sleep(1600);
      s.send({ cmd: 'pubrec', messageId: m.messageId });
      assert.equal((await s.next('pubrel')).messageId, m.messageId);
    },
  },
  {
    id: 'MQTT-4.3.3-13',
    v: 5,
    title: 'the server completes a QoS 2 exchange whose message expired: PUBREL after the expiry gets PUBCOMP 0x00',
    async run(t) {
      const [p] = await t.connect(5);
      p.send({ cmd: 'publish', topic: t.topic(), payload: Buffer.from('x'), qos: 2, messageId: 6, properties: { messageExpiryInterval: 1 } });
      await p.next('pubrec');
      await sleep(1600);
      p.send({ cmd: 'pubrel', messageId: 6 });
      assert.equal((await p.next('pubcomp')).reasonCode ?? 0, 0);
    },
  },
  {
    id: 'MQTT-4.4.0-2',
    v: 5,
    title: 'a PUBACK of 0x80 acknowledges the PUBLISH: it is not sent again on resumption',
    async run(t) {
      const topic = t.topic();
      const { s, reconnect } = await persistentSub(t, 5, topic, 1);
      const [p] = await t.connect(5);
      await t.pub(p, topic, 'x', 1);
      const m = await t.msg(s, 3000, false);
      s.send({ cmd: 'puback', messageId: m.messageId, reasonCode: 0x80 });
      await sleep(200);
      s.destroy();
      const r = await reconnect();
      await t.none(r, 'publish', 500);
    },
  },
  {
    id: 'MQTT-4.5.0-1',
    v: 5,
    title: 'a message is added to the session of every client with a matching subscription (two subscribers, one away)',
    async run(t) {
      const topic = t.topic();
      const { s, reconnect } = await persistentSub(t, 5, topic, 1);
      s.send({ cmd: 'disconnect' });
      await s.waitClosed();
      const live = await t.subscriber(5, topic, 1);
      const [p] = await t.connect(5);
      await t.pub(p, topic, 'both', 1);
      assert.equal((await t.msg(live)).payload.toString(), 'both');
      assert.equal((await t.msg(await reconnect())).payload.toString(), 'both');
    },
  },
  ...both({ 4: 'MQTT-4.6.0-5', 5: 'MQTT-4.6.0-5' }, "one publisher's messages to a topic reach a subscriber in the order sent, per QoS (QoS 0 and 1 interleaved, pipelined)", async (t, v) => {
    const { s, p, topic } = await pair(t, v, 1);
    const n = 30;
    for (let i = 0; i < n; i++) {
      const qos = i % 2;
      p.send({ cmd: 'publish', topic, payload: Buffer.from(`${i}`), qos, ...(qos ? { messageId: i + 1 } : {}) });
    }
    // until the last one (QoS 1): QoS 0 may be dropped, never reordered; every QoS 1 arrives, in order
    const got: Packet[] = [];
    while (got.at(-1)?.payload.toString() !== `${n - 1}`) got.push(await t.msg(s));
    for (const q of [0, 1]) {
      const seq = got.filter((m) => Number(m.payload.toString()) % 2 === q).map((m) => Number(m.payload.toString()));
      assert.deepEqual(seq, [...seq].sort((a, b) => a - b), `QoS ${q} in order`);
      if (q === 1) assert.equal(seq.length, n / 2);
    }
  }, { 4: { covers: ['MQTT-4.6.0-6'] }, 5: { covers: ['MQTT-4.6.0-6'] } }),
  ...both({ 4: 'MQTT-2.3.1-1', 5: 'MQTT-2.2.1-3' }, 'a QoS 1 PUBLISH or a SUBSCRIBE with packet identifier 0 is refused: the connection closes', async (t, v) => {
    const [r] = await t.connect(v);
    r.write(packet(0x32, str(t.topic()), u16(0), v === 5 ? bytes(0) : Buffer.alloc(0), Buffer.from('x')));
    await t.closed(r, undefined, ['puback']);
    const [s] = await t.connect(v);
    s.write(packet(0x82, u16(0), v === 5 ? bytes(0) : Buffer.alloc(0), str(t.topic()), bytes(0)));
    await t.closed(s, undefined, ['suback']);
  }),
];
