import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, type TestServer } from '../helpers.js';
import { RawClient, mqttPort } from './helpers.js';

/**
 * Keep alive and the connect timeout of many connections at once, as one sweep of all connections checks them
 * (src/protocol/mqtt/keep-alive.ts, every 250 ms): each silent client is closed no earlier than its deadline and
 * soon after it; a client that pings, or that sent CONNECT in time, stays. The upper bounds leave seconds of margin
 * for a loaded machine: they catch a deadline that is never checked, not a slow one.
 */
const CLIENTS = 60;

describe('mqtt keep alive sweep', () => {
  let s: TestServer;
  let port: number;
  let shortPort: number;
  const raws: RawClient[] = [];

  before(async () => {
    s = await startServer({
      auth: false,
      overrides: {
        NetworkManager: {
          data: [
            { name: 'ka', url: 'tcp://127.0.0.1:0/', protocolConfigs: [{ type: 'mqtt' }] },
            { name: 'ka-short', url: 'tcp://127.0.0.1:0/', protocolConfigs: [{ type: 'mqtt' }], endPointConfig: { connectionTimeout: 1000 } },
          ],
        },
      },
    });
    port = await mqttPort(s, 'ka');
    shortPort = await mqttPort(s, 'ka-short');
  });
  after(async () => {
    for (const r of raws) r.destroy();
    await s.close();
  });

  const open = async (p: number, version = 4): Promise<RawClient> => {
    const r = await RawClient.open(p, version);
    raws.push(r);
    return r;
  };

  test(`keep alive - ${CLIENTS} silent clients with keep alive 1 s are each closed after 1.5 s, not long after; one that pings stays [MQTT-3.1.2-24]`, async () => {
    const pinger = await open(port);
    assert.equal((await pinger.connect({ clientId: 'pinger', keepalive: 1 })).returnCode, 0);
    const ping = setInterval(() => pinger.send({ cmd: 'pingreq' }), 400);
    try {
      const silent = await Promise.all(Array.from({ length: CLIENTS }, () => open(port)));
      const closedAfter = await Promise.all(
        silent.map(async (r, i) => {
          const ack = await r.connect({ clientId: `silent-${i}`, keepalive: 1 });
          assert.equal(ack.returnCode, 0);
          const acked = Date.now();
          await r.waitClosed(10_000);
          return Date.now() - acked;
        }),
      );
      const min = Math.min(...closedAfter);
      const max = Math.max(...closedAfter);
      console.log(`# keep alive 1 s: ${CLIENTS} silent clients closed ${min}..${max} ms after their CONNACK`);
      // the CONNACK arrives a moment after the server read CONNECT, from which the 1.5 s count
      assert.ok(min >= 1400, `a client was closed ${min} ms after its CONNACK: before 1.5 × keep alive`);
      assert.ok(max <= 4500, `a client was closed only ${max} ms after its CONNACK`);
      assert.equal(pinger.closed, false, 'the client that pings within its keep alive stays connected');
    } finally {
      clearInterval(ping);
    }
  });

  test('keep alive - MQTT 5: a silent client gets DISCONNECT 0x8D Keep alive timeout before the close [MQTT-3.1.2-22]', async () => {
    const r = await open(port, 5);
    assert.equal((await r.connect({ clientId: 'silent-v5', keepalive: 1 })).reasonCode, 0);
    const d = await r.next('disconnect', 6000);
    assert.equal(d.reasonCode, 0x8d);
    await r.waitClosed();
  });

  test('connect timeout - sockets that send no CONNECT are closed after connectionTimeout; one that sent it in time stays', async () => {
    const started = Date.now();
    const idle = await Promise.all(Array.from({ length: CLIENTS }, () => open(shortPort)));
    const ok = await open(shortPort);
    assert.equal((await ok.connect({ clientId: 'in-time', keepalive: 60 })).returnCode, 0);
    await Promise.all(idle.map((r) => r.waitClosed(10_000)));
    const took = Date.now() - started;
    console.log(`# connect timeout 1000 ms: ${CLIENTS} sockets without CONNECT closed within ${took} ms`);
    assert.ok(took >= 900, `closed after ${took} ms, before connectionTimeout 1000`);
    assert.ok(took <= 5000, `closed only after ${took} ms (connectionTimeout 1000)`);
    assert.ok(idle.every((r) => r.packets.length === 0), 'nothing is sent to a socket that never sent CONNECT');
    assert.equal(ok.closed, false, 'the client that sent CONNECT in time stays connected');
  });

  test('connect timeout - a CONNECT the server is still checking when the timeout runs out gets CONNACK Server busy (v5 0x89; 3.1.1: 3) before the close', async () => {
    // the password check of user `slow` takes 2.5 s (a loaded machine's hash queue), against the endpoint's 1 s
    const security = s.rt.security as { authenticate(...args: unknown[]): Promise<unknown> };
    const real = security.authenticate;
    security.authenticate = async function (this: unknown, ...args: unknown[]) {
      if (args[0] === 'slow') await new Promise((r) => setTimeout(r, 2500));
      return real.apply(this, args);
    };
    try {
      const v5 = await open(shortPort, 5);
      const v3 = await open(shortPort, 4);
      const started = Date.now();
      const [a5, a3] = await Promise.all([v5.connect({ clientId: 'slow5', username: 'slow', password: Buffer.from('x') }), v3.connect({ clientId: 'slow3', username: 'slow', password: Buffer.from('x') })]);
      const took = Date.now() - started;
      assert.equal(a5.reasonCode, 0x89, 'v5: Server busy');
      assert.match(String(a5.properties?.reasonString), /connect timeout/);
      assert.equal(a3.returnCode, 3, '3.1.1: Server unavailable');
      assert.ok(took >= 900 && took < 2400, `answered at the connect timeout (${took} ms), not when the check ended`);
      await Promise.all([v5.waitClosed(), v3.waitClosed()]);
      // a client that itself leaves the exchange unanswered (no CONNECT) still gets nothing (the test above)
    } finally {
      security.authenticate = real;
    }
  });
});
