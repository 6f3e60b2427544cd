/** Data representation (§1.5), packet format (§2), PINGREQ (§3.12), DISCONNECT (§3.14), AUTH (5 §3.15) and errors (§4.8, 5 §4.13). */
import assert from 'node:assert/strict';
import { bytes, packet, props, str, u16, type Ctx, type V } from '../harness.js';
import { both, type Case } from './types.js';

const noProps = (v: V) => (v === 5 ? bytes(0) : Buffer.alloc(0));

/** A watcher on a fresh will topic and a client with a will on it. */
async function withWill(t: Ctx, v: V) {
  const topic = t.topic('will');
  const w = await t.subscriber(v, topic, 1);
  const [c] = await t.connect(v, { will: { topic, payload: Buffer.from('will'), qos: 1, retain: false, ...(v === 5 ? { properties: {} } : {}) } });
  return { w, c };
}

/** Mosquitto 2.0.11 does not check the flags of PINGREQ: 0xC1 gets PINGRESP and the connection stays. */
const flagsIgnored = (v: V) => ({
  why: 'ignores the reserved flags of PINGREQ: C1 00 gets PINGRESP and the connection stays open',
  async observe(t: Ctx) {
    const [r] = await t.connect(v);
    r.write(bytes(0xc1, 0));
    await r.next('pingresp');
    assert.equal(r.closed, false);
  },
});

export const controlCases: Case[] = [
  ...both({ 4: 'MQTT-1.5.3-3', 5: 'MQTT-1.5.4-3' }, 'U+FEFF (EF BB BF) in a topic is kept: not skipped or stripped', async (t, v) => {
    const base = t.topic();
    const topic = `${base}/\ufeffx`;
    const s = await t.subscriber(v, topic, 0);
    const plain = await t.subscriber(v, `${base}/x`, 0);
    const [p] = await t.connect(v);
    await t.pub(p, topic, 'bom', 0);
    assert.equal((await t.msg(s)).topic, topic);
    await t.none(plain, 'publish');
  }),
  {
    id: 'MQTT-1.5.5-1',
    v: 5,
    title: 'the server encodes Variable Byte Integers in the fewest bytes (remaining length of a 200-byte and a 20-byte PUBLISH)',
    async run(t) {
      const topic = t.topic();
      const s = await t.subscriber(5, topic, 0);
      const [p] = await t.connect(5);
      s.received.length = 0;
      await t.pub(p, topic, Buffer.alloc(200, 0x61), 0);
      await t.pub(p, topic, 'short', 0);
      await t.msg(s);
      await t.msg(s);
      const all = Buffer.concat(s.received);
      // walk the packets: every remaining length is minimal
      for (let i = 0; i < all.length; ) {
        let len = 0;
        let mult = 1;
        let n = 0;
        let b: number;
        do {
          b = all[i + 1 + n]!;
          len += (b & 0x7f) * mult;
          mult *= 128;
          n++;
        } while (b & 0x80);
        const minimal = len < 128 ? 1 : len < 16384 ? 2 : len < 2097152 ? 3 : 4;
        assert.equal(n, minimal, `remaining length ${len} in ${n} bytes`);
        i += 1 + n + len;
      }
    },
  },
  {
    id: 'MQTT-1.5.7-1',
    v: 5,
    title: 'a User Property whose value is ill-formed UTF-8: the connection closes',
    async run(t) {
      const [r] = await t.connect(5);
      r.write(packet(0x32, str(t.topic()), u16(1), props(bytes(0x26), str('k'), str(bytes(0xc0, 0x80))), Buffer.from('x')));
      await t.closed(r, undefined, ['puback']);
    },
  },
  ...both({ 4: 'MQTT-2.2.2-2', 5: 'MQTT-2.1.3-1' }, 'reserved fixed header flags not as specified (PINGREQ 0xC1): the connection closes', async (t, v) => {
    const [r] = await t.connect(v);
    r.write(bytes(0xc1, 0));
    await t.closed(r, undefined, ['pingresp']);
  }, { 4: { deviation: { mosquitto: flagsIgnored(4) } }, 5: { deviation: { mosquitto: flagsIgnored(5) } } }),
  ...both({ 4: 'MQTT-2.2.2-1', 5: 'MQTT-2.1.3-1' }, "the server's packets carry the fixed header flags listed (CONNACK 20, SUBACK 90, PUBACK 40, PUBREC 50, PUBREL 62, PUBCOMP 70, UNSUBACK B0, PINGRESP D0)", async (t, v) => {
    const topic = t.topic();
    const [r] = await t.connect(v);
    await t.sub(r, topic, 2);
    await t.pub(r, t.topic(), 'x', 1);
    await t.pub(r, t.topic(), 'x', 2);
    await t.pub(r, topic, 'x', 2);
    await t.msg(r);
    r.send({ cmd: 'unsubscribe', messageId: 9, unsubscriptions: [topic] });
    await r.next('unsuback');
    r.send({ cmd: 'pingreq' });
    await r.next('pingresp');
    const all = Buffer.concat(r.received);
    const firsts = new Set<number>();
    for (let i = 0; i < all.length; ) {
      let len = 0;
      let mult = 1;
      let n = 0;
      let b: number;
      do {
        b = all[i + 1 + n]!;
        len += (b & 0x7f) * mult;
        mult *= 128;
        n++;
      } while (b & 0x80);
      firsts.add(all[i]!);
      i += 1 + n + len;
    }
    // a PUBLISH (0x3_) may carry any of its own flags; every other type has exactly the listed ones
    const other = [...firsts].filter((f) => f >> 4 !== 3).sort((a, b) => a - b);
    assert.deepEqual(other, [0x20, 0x40, 0x50, 0x62, 0x70, 0x90, 0xb0, 0xd0].filter((f) => other.includes(f)));
    for (const f of [0x20, 0x40, 0x50, 0x62, 0x70, 0x90, 0xb0, 0xd0]) assert.ok(firsts.has(f), `0x${f.toString(16)} seen`);
  }),
  {
    id: 'MQTT-2.2.2-1',
    v: 5,
    title: 'no properties: Property Length 0 is still sent (the UNSUBACK and SUBACK bytes)',
    async run(t) {
      const [r] = await t.connect(5);
      r.received.length = 0;
      r.send({ cmd: 'subscribe', messageId: 0x0102, subscriptions: [{ topic: t.topic(), qos: 0 }] });
      await r.next('suback');
      r.send({ cmd: 'unsubscribe', messageId: 0x0103, unsubscriptions: [t.topic()] });
      await r.next('unsuback');
      const all = Buffer.concat(r.received);
      // SUBACK: 90 len 01 02 <property length> ... code; UNSUBACK: b0 len 01 03 <property length> ... code
      for (const [first, idLow] of [[0x90, 0x02], [0xb0, 0x03]] as const) {
        const i = all.indexOf(Buffer.from([first]));
        assert.ok(i >= 0, `packet 0x${first.toString(16)}`);
        assert.deepEqual([all[i + 2], all[i + 3]], [0x01, idLow]);
        const len = all[i + 1]!;
        const propLen = all[i + 4]!;
        assert.equal(len, 2 + 1 + propLen + 1, 'packet id, property length, properties, one code');
      }
    },
  },
  ...both({ 4: 'MQTT-3.12.4-1', 5: 'MQTT-3.12.4-1' }, 'PINGREQ gets PINGRESP (over TCP: an ordered, lossless byte stream)', async (t, v) => {
    const [r] = await t.connect(v);
    r.send({ cmd: 'pingreq' });
    await r.next('pingresp');
  }, { 5: { covers: ['MQTT-4.2.0-1'] } }),
  ...both({ 4: 'MQTT-3.14.1-1', 5: 'MQTT-3.14.1-1' }, 'DISCONNECT with reserved flags set: the connection closes as an error (the will is published)', async (t, v) => {
    const { w, c } = await withWill(t, v);
    c.write(v === 5 ? bytes(0xe1, 1, 0) : bytes(0xe1, 0));
    await t.closed(c, v === 5 ? 0x81 : undefined);
    assert.equal((await t.msg(w)).payload.toString(), 'will');
  }),
  {
    id: 'MQTT-3.14.2-2',
    v: 5,
    title: 'the DISCONNECT of a takeover carries no Session Expiry Interval, and fits the client\'s Maximum Packet Size (20 bytes)',
    covers: ['MQTT-3.14.2-3', 'MQTT-3.14.2-4'],
    async run(t) {
      const id = t.id();
      const [a] = await t.connect(5, { clientId: id, properties: { maximumPacketSize: 20, sessionExpiryInterval: 30 } });
      await t.connect(5, { clientId: id });
      await a.waitClosed();
      for (const d of a.packets.filter((p) => p.cmd === 'disconnect')) {
        assert.equal(d.properties?.sessionExpiryInterval, undefined);
        assert.ok(d.length + 2 <= 20);
      }
    },
  },
  {
    id: 'MQTT-3.14.4-3',
    v: 5,
    title: 'DISCONNECT 0x00 discards the will, also in its short forms E0 00 and E0 01 00; DISCONNECT 0x04 (with will) publishes it',
    async run(t) {
      for (const d of [undefined, bytes(0xe0, 0), bytes(0xe0, 1, 0)]) {
        const a = await withWill(t, 5);
        if (d === undefined) a.c.send({ cmd: 'disconnect', reasonCode: 0 });
        else a.c.write(d);
        await a.c.waitClosed();
        await t.none(a.w, 'publish', 400);
      }
      const b = await withWill(t, 5);
      b.c.send({ cmd: 'disconnect', reasonCode: 0x04 });
      await b.c.waitClosed();
      assert.equal((await t.msg(b.w)).payload.toString(), 'will');
    },
  },
  {
    id: 'MQTT-3.15.1-1',
    v: 5,
    title: 'AUTH with reserved flags set: the connection closes',
    async run(t) {
      const [r] = await t.connect(5);
      r.write(bytes(0xf1, 2, 0x18, 0));
      await t.closed(r);
    },
  },
  ...both({ 4: 'MQTT-4.8.0-1', 5: 'MQTT-4.13.1-1' }, 'a malformed packet after CONNECT (a PUBLISH whose topic length overruns the packet): the connection closes, others go on', async (t, v) => {
    const [other] = await t.connect(v);
    const [r] = await t.connect(v);
    r.write(packet(0x30, u16(50), Buffer.from('abc')));
    await t.closed(r, v === 5 ? 0x81 : undefined);
    other.send({ cmd: 'pingreq' });
    await other.next('pingresp');
  }),
  ...both({ 4: 'MQTT-2.3.1-6', 5: 'MQTT-2.2.1-5' }, 'PUBREL answers PUBREC with its packet identifier; PUBCOMP answers PUBREL with it', async (t, v) => {
    const topic = t.topic();
    const s = await t.subscriber(v, topic, 2);
    const [p] = await t.connect(v);
    p.send({ cmd: 'publish', topic, payload: Buffer.from('x'), qos: 2, messageId: 0x1234 });
    assert.equal((await p.next('pubrec')).messageId, 0x1234);
    p.send({ cmd: 'pubrel', messageId: 0x1234 });
    assert.equal((await p.next('pubcomp')).messageId, 0x1234);
    const m = await s.next('publish');
    s.send({ cmd: 'pubrec', messageId: m.messageId });
    assert.equal((await s.next('pubrel')).messageId, m.messageId);
  }),
];
