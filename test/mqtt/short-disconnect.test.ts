/**
 * MQTT 5 §3.14.2.1: the Reason Code and the Property Length of a DISCONNECT may be omitted (Remaining Length 0, or
 * 1 with the reason only: "If the Remaining Length is less than 2, a value of 0 is used", §3.14.2.2.1). `E0 00` is
 * what `mosquitto_pub -V 5` sends on a normal exit: a normal disconnection, so the will is discarded [MQTT-3.14.4-3].
 * The raw bytes are written by hand; the will is watched by a real subscriber.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, type TestServer } from '../helpers.js';
import { mqttPort, RawClient } from './helpers.js';

describe('short MQTT 5 DISCONNECT', () => {
  let s: TestServer;
  let port = 0;
  const raws: RawClient[] = [];
  const open = async (): Promise<RawClient> => {
    const r = await RawClient.open(port, 5);
    raws.push(r);
    return r;
  };
  before(async () => {
    s = await startServer({ overrides: { AuthManager: { allowAnonymous: true } } });
    port = await mqttPort(s);
  });
  after(async () => {
    for (const r of raws) r.destroy();
    await s.close();
  });

  /** Connects a client with a will on `topic`, sends `bytes` as its DISCONNECT; resolves with what reached a subscriber of `topic`. */
  const disconnectWith = async (topic: string, bytes: Buffer): Promise<{ wills: string[]; serverDisconnect: unknown[] }> => {
    const watcher = await open();
    assert.equal((await watcher.connect({ clientId: `watch-${topic}` })).reasonCode, 0);
    watcher.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic, qos: 1 }] });
    assert.deepEqual((await watcher.next('suback')).granted, [1]);

    const c = await open();
    const ack = await c.connect({ clientId: `short-${topic}`, will: { topic, payload: Buffer.from('gone'), qos: 1, retain: false, properties: {} } });
    assert.equal(ack.reasonCode, 0);
    c.write(bytes);
    await c.waitClosed();
    // a will would be published at once (no will delay): a later message on the same topic shows the order
    const probe = await open();
    await probe.connect({ clientId: `probe-${topic}` });
    probe.send({ cmd: 'publish', topic, payload: Buffer.from('probe'), qos: 1, messageId: 7 });
    await probe.next('puback');
    const wills: string[] = [];
    for (;;) {
      const p = await watcher.next('publish');
      if (p.payload.toString() === 'probe') break;
      wills.push(p.payload.toString());
    }
    return { wills, serverDisconnect: c.packets.filter((p) => p.cmd === 'disconnect') };
  };

  test('MQTT-3.14.4-3 - E0 00 (no reason code, no properties) is a normal disconnection: the will is not published', async () => {
    const r = await disconnectWith('short/zero', Buffer.from([0xe0, 0x00]));
    assert.deepEqual(r.wills, [], 'no will message');
    assert.deepEqual(r.serverDisconnect, [], 'no DISCONNECT (0x81) from the server');
  });

  test('MQTT-3.14.4-3 - E0 01 00 (reason 0, no property length) is a normal disconnection: the will is not published', async () => {
    const r = await disconnectWith('short/one', Buffer.from([0xe0, 0x01, 0x00]));
    assert.deepEqual(r.wills, [], 'no will message');
    assert.deepEqual(r.serverDisconnect, [], 'no DISCONNECT (0x81) from the server');
  });

  test('MQTT 5 §3.14.2.1 - E0 01 04 (Disconnect with Will Message, no property length) publishes the will', async () => {
    const r = await disconnectWith('short/will', Buffer.from([0xe0, 0x01, 0x04]));
    assert.deepEqual(r.wills, ['gone']);
    assert.deepEqual(r.serverDisconnect, []);
  });

  test('MQTT 5 §3.14.2.2.1 - E0 02 00 01 (a Property Length that runs past the packet) is still malformed: 0x81 and the will', async () => {
    const r = await disconnectWith('short/bad', Buffer.from([0xe0, 0x02, 0x00, 0x01]));
    assert.deepEqual(r.wills, ['gone']);
    assert.equal((r.serverDisconnect[0] as { reasonCode?: number } | undefined)?.reasonCode, 0x81);
  });
});
