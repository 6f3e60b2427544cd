/**
 * MQTT 3.1.1 conformance: one test per scenario of the Eclipse Paho interoperability suite for 3.1.1
 * (paho.mqtt.testing interoperability/client_test.py), written here from the OASIS MQTT 3.1.1 standard with our own
 * code, Paho's topic names and short timings. The broker runs as the external suite meets it: authentication on,
 * anonymous access on (see ./paho.ts).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { NOSUBSCRIBE, PahoBench, TOPICS, WILDTOPICS, subAck } from './paho.js';

describe('paho v3.1.1 interoperability', () => {
  const b = new PahoBench();
  before(() => b.start());
  after(() => b.stop());
  const v4 = { protocolVersion: 4 as const };

  test('paho v3.1.1 testBasic: connect, QoS 0/1/2 round trip; a second CONNECT [MQTT-3.1.0-2] and a wrong protocol name [MQTT-3.1.2-1] fail', async () => {
    const first = await b.client({ ...v4, clientId: 'myclientid' });
    await first.endAsync();
    const { c, connack } = await b.clientAck({ ...v4, clientId: 'myclientid', clean: true });
    assert.equal(connack.sessionPresent, false, 'clean session: session present 0 [MQTT-3.2.2-1]');
    const inbox = b.inbox(c);
    assert.deepEqual(await subAck(c, { [TOPICS[0]]: { qos: 2 } }), [2]);
    await c.publishAsync(TOPICS[0], 'qos 0', { qos: 0 });
    await c.publishAsync(TOPICS[0], 'qos 1', { qos: 1 });
    await c.publishAsync(TOPICS[0], 'qos 2', { qos: 2 });
    const got = await inbox.count(3);
    assert.deepEqual(new Set(got.map((m) => m.payload)), new Set(['qos 0', 'qos 1', 'qos 2']));
    await c.endAsync();

    // a second CONNECT on the same network connection is a protocol violation: the server closes it [MQTT-3.1.0-2]
    const r = await b.raw(4);
    assert.equal((await r.connect({ clientId: 'myclientid' })).returnCode, 0);
    r.send({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: 4, clean: true, clientId: 'myclientid', keepalive: 0 });
    await r.waitClosed();
    assert.equal(r.packets.filter((p) => p.cmd === 'connack').length, 0, 'no second CONNACK');

    // protocol name "hj": the server may close without CONNACK, and must not accept it [MQTT-3.1.2-1]
    const bad = await b.raw(4);
    bad.write(Buffer.from([0x10, 0x0c, 0x00, 0x02, 0x68, 0x6a, 0x04, 0x02, 0x00, 0x3c, 0x00, 0x02, 0x68, 0x6a]));
    await bad.waitClosed();
    assert.equal(bad.packets.filter((p) => p.cmd === 'connack' && p.returnCode === 0).length, 0, 'not accepted');
  });

  test('paho v3.1.1 test_retained_messages: retained messages go to a new subscriber [MQTT-3.3.1-6]; empty retained messages clear them [MQTT-3.3.1-10, MQTT-3.3.1-11]', async () => {
    const a = await b.client({ ...v4, clientId: 'myclientid', clean: true });
    await a.publishAsync(TOPICS[1], 'qos 0', { qos: 0, retain: true });
    await a.publishAsync(TOPICS[2], 'qos 1', { qos: 1, retain: true });
    await a.publishAsync(TOPICS[3], 'qos 2', { qos: 2, retain: true });
    const inbox = b.inbox(a);
    await subAck(a, { [WILDTOPICS[5]]: { qos: 2 } });
    const got = await inbox.count(3);
    assert.deepEqual(new Set(got.map((m) => m.topic)), new Set([TOPICS[1], TOPICS[2], TOPICS[3]]));
    assert.ok(got.every((m) => m.packet.retain), 'sent with RETAIN 1 to a new subscription [MQTT-3.3.1-8]');
    assert.deepEqual(got.map((m) => m.packet.qos).sort(), [0, 1, 2], 'each at its publish QoS');
    await a.endAsync();

    const c = await b.client({ ...v4, clientId: 'myclientid', clean: true });
    await c.publishAsync(TOPICS[1], '', { qos: 0, retain: true });
    await c.publishAsync(TOPICS[2], '', { qos: 1, retain: true });
    await c.publishAsync(TOPICS[3], '', { qos: 2, retain: true });
    const after = b.inbox(c);
    await subAck(c, { [WILDTOPICS[5]]: { qos: 2 } });
    await c.publishAsync(TOPICS[1], 'probe', { qos: 2 });
    assert.deepEqual(await after.until('probe'), [], 'no retained message is left');
    await c.endAsync();
  });

  test('paho v3.1.1 will_message_test: the will is published when the client goes without DISCONNECT [MQTT-3.1.2-8]', async () => {
    const sub = await b.client({ ...v4, clientId: 'myclientid2', clean: false });
    const inbox = b.inbox(sub);
    await subAck(sub, { [TOPICS[2]]: { qos: 2 } });
    const r = await b.raw(4);
    const ack = await r.connect({ clientId: 'myclientid', keepalive: 2, will: { topic: TOPICS[2], payload: Buffer.from('client not disconnected'), qos: 0, retain: false } });
    assert.equal(ack.returnCode, 0);
    r.destroy(); // terminate: no DISCONNECT
    const [m] = await inbox.count(1);
    assert.equal(m!.topic, TOPICS[2]);
    assert.equal(m!.payload, 'client not disconnected');
    await sub.endAsync();
    (await b.client({ ...v4, clientId: 'myclientid2', clean: true })).end();
  });

  test('paho v3.1.1 test_zero_length_clientid: refused with clean session 0 (return code 2) [MQTT-3.1.3-8], accepted with clean session 1 [MQTT-3.1.3-6]', async () => {
    const r = await b.raw(4);
    // CONNECT 3.1.1, clean session 0, empty client id (mqtt-packet will not generate it)
    r.write(Buffer.from([0x10, 0x0c, 0x00, 0x04, 0x4d, 0x51, 0x54, 0x54, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00]));
    assert.equal((await r.next('connack')).returnCode, 2, 'identifier rejected [MQTT-3.2.2-5]');
    await r.waitClosed();
    const ok = await b.raw(4);
    const ack = await ok.connect({ clientId: '', clean: true });
    assert.equal(ack.returnCode, 0);
    ok.send({ cmd: 'disconnect' });
  });

  test('paho v3.1.1 test_offline_message_queueing: a persistent session receives what was published while it was away [MQTT-3.1.2-5]', async () => {
    await b.clearRetained();
    const a = await b.client({ ...v4, clientId: 'myclientid', clean: false });
    await subAck(a, { [WILDTOPICS[5]]: { qos: 2 } });
    await a.endAsync();

    const pub = await b.client({ ...v4, clientId: 'myclientid2', clean: true });
    await pub.publishAsync(TOPICS[1], 'qos 0', { qos: 0 });
    await pub.publishAsync(TOPICS[2], 'qos 1', { qos: 1 });
    await pub.publishAsync(TOPICS[3], 'qos 2', { qos: 2 });
    await pub.endAsync();

    const { c, connack } = await b.clientAck({ ...v4, clientId: 'myclientid', clean: false });
    assert.equal(connack.sessionPresent, true, 'session present 1 [MQTT-3.2.2-2]');
    const inbox = b.inbox(c);
    // Paho accepts 2 (QoS 0 not queued) or 3. Switchyard queues QoS 0 messages for an offline persistent session
    // too (the standard allows it, 3.1.1 §3.1.2.4), so all three arrive.
    const got = await inbox.count(3);
    assert.deepEqual(new Set(got.map((m) => m.payload)), new Set(['qos 0', 'qos 1', 'qos 2']));
    await c.endAsync();
    (await b.client({ ...v4, clientId: 'myclientid', clean: true })).end();
  });

  test('paho v3.1.1 test_overlapping_subscriptions: one message at the highest QoS of the matching subscriptions [MQTT-3.3.5-1]', async () => {
    const a = await b.client({ ...v4, clientId: 'myclientid', clean: true });
    const inbox = b.inbox(a);
    assert.deepEqual(await subAck(a, { [WILDTOPICS[6]]: { qos: 2 }, [WILDTOPICS[0]]: { qos: 1 } }), [2, 1]);
    await a.publishAsync(TOPICS[3], 'overlapping topic filters', { qos: 2 });
    await a.publishAsync(TOPICS[1], 'probe', { qos: 2 });
    // Paho accepts one copy at QoS 2, or one copy per subscription (QoS 2 and QoS 1). Switchyard sends one copy per
    // client, at the highest QoS of its matching subscriptions.
    const before = await inbox.until('probe');
    assert.equal(before.length, 1, JSON.stringify(before.map((m) => m.packet.qos)));
    assert.equal(before[0]!.packet.qos, 2);
    await a.endAsync();
  });

  test('paho v3.1.1 test_keepalive: a silent client is cut after 1.5 × keep alive and its will is published [MQTT-3.1.2-24]', async () => {
    const sub = await b.client({ ...v4, clientId: 'myclientid2', clean: true, keepalive: 0 });
    const inbox = b.inbox(sub);
    await subAck(sub, { [TOPICS[4]]: { qos: 2 } });
    const r = await b.raw(4);
    const started = Date.now();
    await r.connect({ clientId: 'myclientid', keepalive: 1, will: { topic: TOPICS[4], payload: Buffer.from('keepalive expiry'), qos: 0, retain: false } });
    // no PINGREQ: the server closes within 1.5 × 1 s (with a little slack)
    await r.waitClosed(4000);
    const [m] = await inbox.count(1);
    assert.equal(m!.payload, 'keepalive expiry');
    assert.ok(Date.now() - started >= 1400, 'not before 1.5 × keep alive');
    await sub.endAsync();
  });

  test('paho v3.1.1 test_redelivery_on_reconnect: unacknowledged QoS 1 and 2 deliveries are resent with DUP on reconnect [MQTT-4.4.0-1]', async () => {
    const first = await b.raw(4);
    await first.connect({ clientId: 'myclientid2', clean: false });
    first.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: WILDTOPICS[6], qos: 2 }] });
    assert.deepEqual((await first.next('suback')).granted, [2]);
    // publish as a well-behaved sender, but never acknowledge what the server delivers ("pause")
    first.send({ cmd: 'publish', topic: TOPICS[1], payload: Buffer.alloc(0), qos: 1, messageId: 10, retain: false, dup: false });
    first.send({ cmd: 'publish', topic: TOPICS[3], payload: Buffer.alloc(0), qos: 2, messageId: 11, retain: false, dup: false });
    await first.next('puback');
    await first.next('pubrec');
    first.send({ cmd: 'pubrel', messageId: 11 });
    await first.next('pubcomp');
    const d1 = await first.next('publish');
    const d2 = await first.next('publish');
    assert.deepEqual([d1.topic, d2.topic].sort(), [TOPICS[1], TOPICS[3]].sort());
    first.send({ cmd: 'disconnect' });
    await first.waitClosed();

    const again = await b.raw(4);
    const ack = await again.connect({ clientId: 'myclientid2', clean: false });
    assert.equal(ack.sessionPresent, true);
    const r1 = await again.next('publish');
    const r2 = await again.next('publish');
    for (const [orig, re] of [
      [d1, r1],
      [d2, r2],
    ] as const) {
      assert.equal(re.topic, orig.topic, 'in the original order [MQTT-4.6.0-1]');
      assert.equal(re.dup, true, 'DUP set on a resend [MQTT-3.3.1-1]');
      assert.equal(re.messageId, orig.messageId, 'same packet identifier');
      assert.equal(re.qos, orig.qos);
    }
    again.send({ cmd: r1.qos === 1 ? 'puback' : 'pubrec', messageId: r1.messageId });
    again.send({ cmd: r2.qos === 1 ? 'puback' : 'pubrec', messageId: r2.messageId });
    const rel = await again.next('pubrel');
    again.send({ cmd: 'pubcomp', messageId: rel.messageId });
    again.send({ cmd: 'disconnect' });
    await again.waitClosed();
    (await b.client({ ...v4, clientId: 'myclientid2', clean: true })).end();
  });

  test('paho v3.1.1 test_subscribe_failure: a refused filter gets return code 0x80 in SUBACK [MQTT-3.9.3-2]', async () => {
    const a = await b.client({ ...v4, clientId: 'myclientid', clean: true });
    assert.deepEqual(await subAck(a, { [NOSUBSCRIBE]: { qos: 2 } }), [0x80]);
    assert.deepEqual(await subAck(a, { [NOSUBSCRIBE]: { qos: 2 }, [TOPICS[0]]: { qos: 1 } }), [0x80, 1], 'one code per filter, in order [MQTT-3.8.4-6]');
    await a.endAsync();
  });

  test('paho v3.1.1 test_dollar_topics: a filter starting with a wildcard does not match a topic starting with $ [MQTT-4.7.2-1]', async () => {
    const sub = await b.client({ ...v4, clientId: 'myclientid2', clean: true, keepalive: 0 });
    const inbox = b.inbox(sub);
    await subAck(sub, { [WILDTOPICS[5]]: { qos: 2 } });
    inbox.clear(); // retained messages, if any
    await sub.publishAsync(`$${TOPICS[1]}`, '', { qos: 1 });
    await sub.publishAsync(TOPICS[1], 'probe', { qos: 2 });
    assert.deepEqual(await inbox.until('probe'), [], '$TopicA/B does not match +/+');
    await sub.endAsync();
  });

  test('paho v3.1.1 test_unsubscribe: after UNSUBSCRIBE the filter gets nothing; the others still do [MQTT-3.10.4-1]', async () => {
    const sub = await b.client({ ...v4, clientId: 'myclientid2', clean: true });
    const inbox = b.inbox(sub);
    for (const t of TOPICS.slice(0, 3)) await subAck(sub, { [t]: { qos: 2 } });
    await sub.unsubscribeAsync(TOPICS[0]);
    inbox.clear(); // retained messages, if any
    const pub = await b.client({ ...v4, clientId: 'myclientid', clean: true });
    await pub.publishAsync(TOPICS[0], '', { qos: 1 });
    await pub.publishAsync(TOPICS[1], '', { qos: 1 });
    await pub.publishAsync(TOPICS[2], '', { qos: 1 });
    const got = await inbox.count(2);
    assert.deepEqual(
      got.map((m) => m.topic),
      [TOPICS[1], TOPICS[2]],
    );
    await pub.publishAsync(TOPICS[1], 'probe', { qos: 2 });
    assert.equal((await inbox.until('probe')).length, 2, 'nothing for the unsubscribed topic');
    await sub.endAsync();
    await pub.endAsync();
  });
});
