import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, waitUntil, type TestServer } from '../helpers.js';
import { collectGarbage } from '../../src/runtime/reclaim.js';
import { mqttPort, RawClient } from './helpers.js';

/**
 * A connection the broker closes (here: a malformed packet after CONNECT) is garbage once its socket has closed.
 * It used to stay reachable for 2 s through the timer that destroys a socket whose peer does not close its side
 * (MqttConnection, session, socket: ~7 KB each), which the fuzzer's 96 clients turned into 6 MB of heap.
 */
describe('mqtt closed connections', () => {
  let s: TestServer;
  let port: number;
  before(async () => {
    s = await startServer({ auth: false });
    port = await mqttPort(s);
  });
  after(async () => {
    await s?.close();
  });

  test('mqtt - a connection the broker closed is released as soon as its socket has closed', async () => {
    const broker = s.rt.service('mqttBroker')!.broker!;
    const N = 40;
    const clients: RawClient[] = [];
    for (let i = 0; i < N; i++) {
      const c = await RawClient.open(port, 4);
      c.send({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: 4, clean: true, clientId: `rel-${i}`, keepalive: 30 });
      await c.next('connack');
      clients.push(c);
    }
    await waitUntil(() => broker.connections.size === N, 5000, 'every client connected');
    const refs = [...broker.connections.values()].map((c) => new WeakRef(c));
    // a packet of the reserved type 0: malformed, the broker closes the connection
    for (const c of clients) c.write(Buffer.from([0x00, 0x00]));
    await Promise.all(clients.map((c) => c.closedPromise));
    await waitUntil(() => broker.connections.size === 0, 5000, 'the broker dropped every connection');
    await new Promise((r) => setImmediate(r));
    collectGarbage();
    await new Promise((r) => setImmediate(r));
    collectGarbage();
    const alive = refs.filter((r) => r.deref() !== undefined).length;
    console.log(`# ${alive} of ${N} closed connections still reachable after a full GC`);
    assert.equal(alive, 0, 'closed connections are garbage');
  });
});
