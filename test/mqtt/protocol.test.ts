import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import mqtt, { type MqttClient } from 'mqtt';
import { startServer, waitUntil, type TestServer } from '../helpers.js';
import { RawClient, mqttPort } from './helpers.js';

/** MQTT 3.1.1 and 5 behaviour over loopback against an in-process broker (authentication off). */
describe('mqtt protocol', () => {
  let s: TestServer;
  let port: number;
  const clients: MqttClient[] = [];
  const raws: RawClient[] = [];
  before(async () => {
    s = await startServer({ auth: false });
    port = await mqttPort(s);
  });
  after(async () => {
    for (const c of clients) c.end(true);
    for (const r of raws) r.destroy();
    await s.close();
  });
  const client = async (opts: mqtt.IClientOptions = {}) => {
    const c = await mqtt.connectAsync(`mqtt://127.0.0.1:${port}`, { reconnectPeriod: 0, ...opts });
    clients.push(c);
    return c;
  };
  const raw = async (v = 4) => {
    const r = await RawClient.open(port, v);
    raws.push(r);
    return r;
  };
  const nextMessage = (c: MqttClient, topic?: string) =>
    new Promise<{ topic: string; payload: string; packet: mqtt.IPublishPacket }>((res) => {
      const on = (t: string, p: Buffer, packet: mqtt.IPublishPacket) => {
        if (topic !== undefined && t !== topic) return;
        c.off('message', on);
        res({ topic: t, payload: p.toString(), packet });
      };
      c.on('message', on);
    });

  for (const v of [4, 5] as const) {
    test(`QoS 0, 1 and 2 round trips (MQTT ${v === 5 ? '5' : '3.1.1'})`, async () => {
      const sub = await client({ protocolVersion: v });
      const pub = await client({ protocolVersion: v });
      await sub.subscribeAsync(`rt${v}/+`, { qos: 2 });
      for (const qos of [0, 1, 2] as const) {
        const got = nextMessage(sub, `rt${v}/q${qos}`);
        await pub.publishAsync(`rt${v}/q${qos}`, `m${qos}`, { qos });
        const m = await got;
        assert.equal(m.payload, `m${qos}`);
        assert.equal(m.packet.qos, qos);
      }
    });
  }

  test('retained message goes to a later subscriber with retain set; an empty retained message clears it [MQTT-3.3.1-10]', async () => {
    const pub = await client();
    await pub.publishAsync('ret/a', 'kept', { qos: 1, retain: true });
    const sub = await client();
    const got = nextMessage(sub, 'ret/a');
    await sub.subscribeAsync('ret/#', { qos: 1 });
    const m = await got;
    assert.equal(m.payload, 'kept');
    assert.equal(m.packet.retain, true);
    await pub.publishAsync('ret/a', '', { qos: 1, retain: true });
    const late = await client();
    let seen = 0;
    late.on('message', () => seen++);
    await late.subscribeAsync('ret/#', { qos: 1 });
    await pub.publishAsync('ret/other', 'live', { qos: 1 });
    await waitUntil(() => seen === 0 || seen > 0, 100);
    const probe = nextMessage(late, 'ret/probe');
    await pub.publishAsync('ret/probe', 'p', { qos: 1 });
    await probe;
    assert.equal(seen, 2, 'only the two live messages, no retained one');
  });

  test('will message is published when the connection drops without DISCONNECT [MQTT-3.1.2-8]; not after DISCONNECT', async () => {
    const watcher = await client();
    await watcher.subscribeAsync('will/+', { qos: 1 });
    const got = nextMessage(watcher, 'will/abrupt');
    const r = await raw();
    await r.connect({ clientId: 'willer', will: { topic: 'will/abrupt', payload: Buffer.from('gone'), qos: 1, retain: false } });
    r.destroy();
    assert.equal((await got).payload, 'gone');
    let polite = 0;
    watcher.on('message', (t) => t === 'will/polite' && polite++);
    const r2 = await raw();
    await r2.connect({ clientId: 'polite', will: { topic: 'will/polite', payload: Buffer.from('x'), qos: 1, retain: false } });
    r2.send({ cmd: 'disconnect' });
    await r2.waitClosed();
    const probe = nextMessage(watcher, 'will/probe');
    (await client()).publish('will/probe', 'p', { qos: 1 });
    await probe;
    assert.equal(polite, 0);
  });

  test('keep alive: the server closes a silent client after 1.5 × keep alive [MQTT-3.1.2-24]', async () => {
    const r = await raw();
    const ack = await r.connect({ clientId: 'silent', keepalive: 1 });
    assert.equal(ack.returnCode, 0);
    await r.waitClosed(4000);
  });

  test('malformed packets close only that connection; other clients keep working', async () => {
    const bystander = await client({ protocolVersion: 5 });
    await bystander.subscribeAsync('alive', { qos: 1 });
    const cases: Array<[string, (r: RawClient) => void, number | undefined]> = [
      ['garbage bytes', (r) => r.write(Buffer.from([0x00, 0xff, 0xff, 0xff, 0xff, 0x7f])), undefined],
      ['an oversize remaining length', (r) => r.write(Buffer.from([0x30, 0xff, 0xff, 0xff, 0x7f])), 0x95],
      ['a second CONNECT', (r) => r.send({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: 5, clean: true, clientId: 'again', keepalive: 0 }), 0x82],
      ['a PUBLISH with a wildcard topic', (r) => r.send({ cmd: 'publish', topic: 'a/+/b', payload: Buffer.from('x'), qos: 0, retain: false, dup: false }), 0x90],
    ];
    for (const [what, act, reason] of cases) {
      const r = await raw(5);
      const ack = await r.connect({ clientId: `bad-${what.length}` });
      assert.equal(ack.reasonCode, 0);
      act(r);
      if (reason !== undefined) {
        const d = await r.next('disconnect');
        assert.equal(d.reasonCode, reason, what);
      }
      await r.waitClosed();
      const got = nextMessage(bystander, 'alive');
      const p = await client();
      await p.publishAsync('alive', what, { qos: 1 });
      assert.equal((await got).payload, what, `bystander still served after ${what}`);
    }
    const errors = (await s.inject({ method: 'GET', url: '/api/v1/server/interface/MQTT%20Interface/status' })).json().errors;
    assert.ok(errors >= 4, `protocol errors are counted (${errors})`);
  });

  test('the first packet must be CONNECT [MQTT-3.1.0-1]; an unknown protocol level gets CONNACK 1 [MQTT-3.1.2-2]', async () => {
    const r = await raw();
    r.send({ cmd: 'pingreq' });
    await r.waitClosed();
    const r2 = await raw();
    // CONNECT, protocol name MQTT, level 9
    r2.write(Buffer.from([0x10, 0x0d, 0x00, 0x04, 0x4d, 0x51, 0x54, 0x54, 0x09, 0x02, 0x00, 0x00, 0x00, 0x01, 0x61]));
    const ack = await r2.next('connack');
    assert.equal(ack.returnCode, 1);
    await r2.waitClosed();
  });

  test('3.1.1: an empty client id with clean session 0 is refused with return code 2 [MQTT-3.1.3-8]', async () => {
    const r = await raw();
    // CONNECT 3.1.1, clean session 0, empty client id (mqtt-packet refuses to generate it)
    r.write(Buffer.from([0x10, 0x0c, 0x00, 0x04, 0x4d, 0x51, 0x54, 0x54, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00]));
    const ack = await r.next('connack');
    assert.equal(ack.returnCode, 2);
    await r.waitClosed();
  });

  test('5: an empty client id gets an assigned client identifier [MQTT-3.2.2-16]', async () => {
    const r = await raw(5);
    const ack = await r.connect({ clientId: '' });
    assert.equal(ack.reasonCode, 0);
    assert.match(ack.properties.assignedClientIdentifier, /^switchyard-/);
  });

  test('client id takeover: the old v5 connection gets DISCONNECT 0x8E [MQTT-3.1.4-3]', async () => {
    const a = await raw(5);
    await a.connect({ clientId: 'twin' });
    const b = await raw(5);
    await b.connect({ clientId: 'twin' });
    assert.equal((await a.next('disconnect')).reasonCode, 0x8e);
    await a.waitClosed();
    assert.equal(b.closed, false);
  });

  test('session present: a persistent session is resumed and queued QoS 1 messages are delivered [MQTT-3.2.2-2]', async () => {
    const c = await client({ clientId: 'keeper', clean: false });
    await c.subscribeAsync('keep/#', { qos: 1 });
    await c.endAsync();
    const pub = await client();
    await pub.publishAsync('keep/1', 'while away', { qos: 1 });
    const r = await raw();
    const ack = await r.connect({ clientId: 'keeper', clean: false });
    assert.equal(ack.sessionPresent, true);
    const p = await r.next('publish');
    assert.equal(p.payload.toString(), 'while away');
    r.send({ cmd: 'puback', messageId: p.messageId });
  });

  test('in-flight retry: an unacknowledged QoS 1 delivery is resent with DUP and the same packet id on reconnect [MQTT-4.4.0-1]', async () => {
    for (const v of [4, 5] as const) {
      const id = `inflight-${v}`;
      const first = await raw(v);
      await first.connect({ clientId: id, clean: false, ...(v === 5 ? { properties: { sessionExpiryInterval: 300 } } : {}) });
      first.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: `inflight/${v}`, qos: 1 }] });
      await first.next('suback');
      const pub = await client();
      await pub.publishAsync(`inflight/${v}`, 'must arrive', { qos: 1 });
      const p1 = await first.next('publish');
      assert.equal(p1.dup, false);
      first.destroy(); // no PUBACK: the message stays in flight
      await first.closedPromise;
      const again = await raw(v);
      const ack = await again.connect({ clientId: id, clean: false, ...(v === 5 ? { properties: { sessionExpiryInterval: 300 } } : {}) });
      assert.equal(ack.sessionPresent, true);
      const p2 = await again.next('publish');
      assert.equal(p2.payload.toString(), 'must arrive');
      assert.equal(p2.dup, true, 'resent with DUP');
      assert.equal(p2.messageId, p1.messageId, 'with its original packet id');
      again.send({ cmd: 'puback', messageId: p2.messageId });
      await assert.rejects(again.next('publish', 300), /no publish/, 'acknowledged: not sent a third time');
    }
  });

  test('in-flight retry: a persistent session resumed with Session Expiry 0 still resends its unacknowledged delivery with DUP and its packet id, then delivers new ones [MQTT-4.4.0-1]', async () => {
    // the session stops being persistent on the second connection, and such a session keeps no packet ids for
    // resends of its own deliveries: the ones it had before must still be resent with theirs
    const first = await raw(5);
    await first.connect({ clientId: 'inflight-expiry0', clean: false, properties: { sessionExpiryInterval: 300 } });
    first.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: 'inflight/expiry0', qos: 1 }] });
    await first.next('suback');
    const pub = await client();
    await pub.publishAsync('inflight/expiry0', 'before', { qos: 1 });
    const p1 = await first.next('publish');
    first.destroy();
    await first.closedPromise;
    const again = await raw(5);
    const ack = await again.connect({ clientId: 'inflight-expiry0', clean: false, properties: { sessionExpiryInterval: 0 } });
    assert.equal(ack.sessionPresent, true);
    const p2 = await again.next('publish');
    assert.equal(p2.payload.toString(), 'before');
    assert.equal(p2.dup, true, 'resent with DUP');
    assert.equal(p2.messageId, p1.messageId, 'with its original packet id');
    again.send({ cmd: 'puback', messageId: p2.messageId });
    await pub.publishAsync('inflight/expiry0', 'after', { qos: 1 });
    const p3 = await again.next('publish');
    assert.equal(p3.payload.toString(), 'after');
    assert.equal(p3.dup, false);
    again.send({ cmd: 'puback', messageId: p3.messageId });
    await assert.rejects(again.next('publish', 300), /no publish/, 'both acknowledged: nothing sent again');
  });

  test('QoS 2 exchange resumes across a reconnect: PUBREL is resent for a PUBREC-ed delivery [MQTT-4.4.0-1]', async () => {
    const id = 'qos2-resume';
    const first = await raw(5);
    await first.connect({ clientId: id, clean: false, properties: { sessionExpiryInterval: 300 } });
    first.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: 'q2/resume', qos: 2 }] });
    await first.next('suback');
    const pub = await client({ protocolVersion: 5 });
    await pub.publishAsync('q2/resume', 'exactly once', { qos: 2 });
    const p = await first.next('publish');
    assert.equal(p.qos, 2);
    first.send({ cmd: 'pubrec', messageId: p.messageId });
    await first.next('pubrel');
    first.destroy(); // PUBCOMP never sent
    await first.closedPromise;
    const again = await raw(5);
    await again.connect({ clientId: id, clean: false, properties: { sessionExpiryInterval: 300 } });
    const rel = await again.next('pubrel');
    assert.equal(rel.messageId, p.messageId, 'the PUBREL is resent, not the PUBLISH');
    again.send({ cmd: 'pubcomp', messageId: rel.messageId });
    await assert.rejects(again.next('publish', 300), /no publish/, 'the message is not delivered twice');
  });

  test('5: topic alias set by the client is used on later publishes; an alias above the maximum is 0x94', async () => {
    const sub = await client({ protocolVersion: 5 });
    await sub.subscribeAsync('alias/t', { qos: 0 });
    const r = await raw(5);
    const ack = await r.connect({ clientId: 'aliaser' });
    assert.ok(ack.properties.topicAliasMaximum >= 1);
    const first = nextMessage(sub, 'alias/t');
    r.send({ cmd: 'publish', topic: 'alias/t', payload: Buffer.from('one'), qos: 0, retain: false, dup: false, properties: { topicAlias: 1 } });
    assert.equal((await first).payload, 'one');
    const second = nextMessage(sub, 'alias/t');
    r.send({ cmd: 'publish', topic: '', payload: Buffer.from('two'), qos: 0, retain: false, dup: false, properties: { topicAlias: 1 } });
    assert.equal((await second).payload, 'two');
    r.send({ cmd: 'publish', topic: 'alias/t', payload: Buffer.from('x'), qos: 0, retain: false, dup: false, properties: { topicAlias: 60000 } });
    assert.equal((await r.next('disconnect')).reasonCode, 0x94);
  });

  test("5: the server respects the client's receive maximum (one in flight until PUBACK) [MQTT-3.3.4-7]", async () => {
    const r = await raw(5);
    await r.connect({ clientId: 'slow', properties: { receiveMaximum: 1 } });
    r.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: 'rm/#', qos: 1 }] });
    await r.next('suback');
    const pub = await client();
    for (let i = 0; i < 3; i++) await pub.publishAsync('rm/x', `m${i}`, { qos: 1 });
    const p0 = await r.next('publish');
    await new Promise((res) => setTimeout(res, 100));
    assert.equal(r.packets.filter((p) => p.cmd === 'publish').length, 0, 'no second PUBLISH before the PUBACK');
    r.send({ cmd: 'puback', messageId: p0.messageId });
    const p1 = await r.next('publish');
    assert.equal(p1.payload.toString(), 'm1');
  });

  test("5: exceeding the server's receive maximum is DISCONNECT 0x93 [MQTT-3.3.4-9]", async () => {
    const r = await raw(5);
    const ack = await r.connect({ clientId: 'flood' });
    const max = ack.properties.receiveMaximum as number;
    // QoS 2 publishes without PUBREL stay unacknowledged
    for (let i = 1; i <= max + 1; i++) r.send({ cmd: 'publish', topic: 'flood/x', payload: Buffer.from('x'), qos: 2, messageId: i, retain: false, dup: false });
    assert.equal((await r.next('disconnect', 10000)).reasonCode, 0x93);
  });

  test('5: message expiry: an expired message is not delivered; the remaining interval is sent [MQTT-3.3.2-5, MQTT-3.3.2-6]', async () => {
    const c = await client({ protocolVersion: 5, clientId: 'expirer', clean: false, properties: { sessionExpiryInterval: 300 } });
    await c.subscribeAsync('exp/#', { qos: 1 });
    await c.endAsync();
    const pub = await client({ protocolVersion: 5 });
    await pub.publishAsync('exp/short', 'short', { qos: 1, properties: { messageExpiryInterval: 1 } });
    await pub.publishAsync('exp/long', 'long', { qos: 1, properties: { messageExpiryInterval: 100 } });
    await new Promise((res) => setTimeout(res, 1200));
    const r = await raw(5);
    await r.connect({ clientId: 'expirer', clean: false, properties: { sessionExpiryInterval: 300 } });
    const p = await r.next('publish');
    assert.equal(p.payload.toString(), 'long');
    assert.ok(p.properties.messageExpiryInterval <= 100 && p.properties.messageExpiryInterval > 90);
    r.send({ cmd: 'puback', messageId: p.messageId });
    await new Promise((res) => setTimeout(res, 100));
    assert.equal(r.packets.filter((x) => x.cmd === 'publish').length, 0, 'the expired message is not delivered');
  });

  test('5: properties travel end to end; subscription identifier; no local; retain as published', async () => {
    const c = await client({ protocolVersion: 5, clientId: 'props' });
    await c.subscribeAsync('pr/#', { qos: 1, properties: { subscriptionIdentifier: 42 } });
    await c.subscribeAsync('nl/#', { qos: 1, nl: true });
    await c.subscribeAsync('rap/#', { qos: 1, rap: true });
    const got = nextMessage(c, 'pr/a');
    const pub = await client({ protocolVersion: 5 });
    await pub.publishAsync('pr/a', '{"x":1}', {
      qos: 1,
      properties: { contentType: 'application/json', responseTopic: 'pr/reply', correlationData: Buffer.from('c1'), userProperties: { k: 'v' }, payloadFormatIndicator: true },
    });
    const m = (await got).packet;
    assert.equal(m.properties?.contentType, 'application/json');
    assert.equal(m.properties?.responseTopic, 'pr/reply');
    assert.equal(m.properties?.correlationData?.toString(), 'c1');
    assert.deepEqual({ ...m.properties?.userProperties }, { k: 'v' });
    assert.equal(m.properties?.payloadFormatIndicator, true);
    assert.deepEqual(m.properties?.subscriptionIdentifier, 42);
    let own = 0;
    c.on('message', (t) => t === 'nl/x' && own++);
    await c.publishAsync('nl/x', 'mine', { qos: 1 });
    const rapGot = nextMessage(c, 'rap/x');
    await pub.publishAsync('rap/x', 'r', { qos: 1, retain: true });
    assert.equal((await rapGot).packet.retain, true, 'retain as published keeps the flag on a live delivery');
    assert.equal(own, 0, 'no local: own publish not received');
  });

  test('shared subscriptions: each message goes to one member of the group', async () => {
    const a = await client({ protocolVersion: 5 });
    const b = await client();
    await a.subscribeAsync('$share/g/sh/#', { qos: 1 });
    await b.subscribeAsync('$share/g/sh/#', { qos: 1 });
    let na = 0;
    let nb = 0;
    a.on('message', () => na++);
    b.on('message', () => nb++);
    const pub = await client();
    for (let i = 0; i < 10; i++) await pub.publishAsync('sh/x', `${i}`, { qos: 1 });
    await waitUntil(() => na + nb === 10, 5000, 'ten deliveries');
    assert.ok(na > 0 && nb > 0, `both members get messages (${na}, ${nb})`);
  });

  test('5: a malformed filter in SUBSCRIBE is a malformed packet (DISCONNECT 0x81, no SUBACK: 5 §3.9.3 keeps 0x8F for a correctly formed filter) [MQTT-4.7.1-1]; UNSUBACK says 0x11 for an unknown filter', async () => {
    const r = await raw(5);
    await r.connect({ clientId: 'codes' });
    r.send({ cmd: 'subscribe', messageId: 2, subscriptions: [{ topic: 'ok/#', qos: 1 }] });
    assert.deepEqual((await r.next('suback')).granted, [1]);
    r.send({ cmd: 'unsubscribe', messageId: 4, unsubscriptions: ['ok/#', 'never'] });
    const ua = await r.next('unsuback');
    assert.deepEqual(ua.granted, [0, 0x11]);
    r.send({ cmd: 'subscribe', messageId: 3, subscriptions: [{ topic: 'ok/#', qos: 1 }, { topic: 'bad/#/x', qos: 1 }] });
    assert.equal((await r.next('disconnect')).reasonCode, 0x81);
    await r.waitClosed();
    assert.equal(r.packets.filter((p) => p.cmd === 'suback').length, 0);
  });

  test('$SYS topics are subscribable over MQTT', async () => {
    const c = await client();
    const got = nextMessage(c, '$SYS/broker/version');
    await c.subscribeAsync('$SYS/#', { qos: 0 });
    assert.ok((await got).payload.length > 0);
  });
});
