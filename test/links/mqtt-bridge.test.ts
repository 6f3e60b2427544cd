import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import type { MqttClient } from 'mqtt';
import { removeDir, startServer, tempDir, type TestServer } from '../helpers.js';
import { collect, connectClient, freePort, publishMany, startMosquitto, until, type Mosquitto } from './helpers.js';

/**
 * An MQTT bridge link from an in-process Switchyard to a real mosquitto (its own port, config and persistence dir):
 * push site-a/# → fed/site-a/, pull fed/site-b/# → site-b/, QoS 1 end to end.
 */
describe('MQTT bridge to mosquitto', () => {
  const dir = tempDir('switchyard-mosq-');
  let mosq: Mosquitto;
  let mport = 0;
  let s: TestServer;
  let local: MqttClient; // on Switchyard
  const clients: MqttClient[] = [];
  const fromPull: Array<{ topic: string; payload: string }> = [];

  before(async () => {
    mport = await freePort();
    mosq = await startMosquitto(join(dir, 'mosq'), mport);
    s = await startServer({
      overrides: {
        AuthManager: { authenticationEnabled: false, authorisationEnabled: false },
        NetworkConnectionManager: {
          data: [
            {
              name: 'mosq',
              url: `mqtt://127.0.0.1:${mport}`,
              backoff: { initial: 100, max: 1000, jitter: 0.2 },
              linkConfigs: [
                { direction: 'push', localNamespace: 'site-a/#', remoteNamespace: 'fed/site-a/', qualityOfService: 1 },
                { direction: 'pull', localNamespace: 'site-b/', remoteNamespace: 'fed/site-b/#', qualityOfService: 1 },
                { direction: 'push', localNamespace: 'q2/', remoteNamespace: 'fed/q2/', qualityOfService: 2 },
                { direction: 'pull', localNamespace: 'q2in/', remoteNamespace: 'fed/q2in/', qualityOfService: 2 },
              ],
              willConfig: { topic: 'bridges/mosq/state', payload: 'offline', qos: 1 },
            },
            // two links to the same broker, one out and one in, over one namespace: a loop unless the links stop it
            { name: 'loop-out', url: `mqtt://127.0.0.1:${mport}`, backoff: { initial: 100, max: 1000, jitter: 0.2 }, linkConfigs: [{ direction: 'push', localNamespace: 'loop/#', remoteNamespace: 'loop/', qualityOfService: 1 }] },
            { name: 'loop-in', url: `mqtt://127.0.0.1:${mport}`, backoff: { initial: 100, max: 1000, jitter: 0.2 }, linkConfigs: [{ direction: 'pull', localNamespace: 'loop/', remoteNamespace: 'loop/#', qualityOfService: 1 }] },
          ],
        },
      },
    });
    const port = s.rt.service('endpoints')!.entries.get('MQTT Interface')!.handle!.port;
    local = await connectClient(port, { clientId: 'local-sub' });
    clients.push(local);
    await collect(local, 'site-b/#', fromPull);
    await until(() => linkState() === 'Established', 10000, 'link established');
  });
  after(async () => {
    for (const c of clients) c.end(true);
    await s?.close();
    await mosq?.stop('SIGKILL');
    removeDir(dir);
  });

  const linkState = () => s.rt.service('integrations')!.connectionState(s.rt.service('integrations')!.find('mosq'));
  const status = async () => (await s.inject({ url: '/api/v1/server/integration/mosq/status' })).json() as { state: string; outbox: number; messagesSent: number; messagesReceived: number };
  const localPublisher = async () => {
    const port = s.rt.service('endpoints')!.entries.get('MQTT Interface')!.handle!.port;
    const c = await connectClient(port, { clientId: `pub-${clients.length}` });
    clients.push(c);
    return c;
  };
  const remoteClient = async (clientId: string) => {
    const c = await connectClient(mport, { clientId });
    clients.push(c);
    return c;
  };

  test('links - push and pull through mosquitto: every QoS 1 message arrives once, mapped into the other namespace, in order', async () => {
    const remoteGot: Array<{ topic: string; payload: string }> = [];
    const rsub = await remoteClient('remote-sub-1');
    await collect(rsub, 'fed/site-a/#', remoteGot);
    const pub = await localPublisher();
    await publishMany(pub, () => 'site-a/t', 200, 1, 'a');
    const rpub = await remoteClient('remote-pub-1');
    const pulledBefore = fromPull.length;
    await publishMany(rpub, () => 'fed/site-b/x', 200, 1, 'b');
    await until(() => remoteGot.length >= 200 && fromPull.length - pulledBefore >= 200, 15000, 'both directions');
    await new Promise((r) => setTimeout(r, 200)); // a duplicate would show up now
    assert.equal(remoteGot.length, 200);
    assert.deepEqual(remoteGot.map((m) => m.payload), Array.from({ length: 200 }, (_, i) => `a-${i}`));
    assert.ok(remoteGot.every((m) => m.topic === 'fed/site-a/t'));
    const pulled = fromPull.slice(pulledBefore);
    assert.equal(pulled.length, 200);
    assert.deepEqual(pulled.map((m) => m.payload), Array.from({ length: 200 }, (_, i) => `b-${i}`));
    assert.ok(pulled.every((m) => m.topic === 'site-b/x'));
    const st = await status();
    assert.ok(st.messagesSent >= 200 && st.messagesReceived >= 200, JSON.stringify(st));
    rsub.end(true);
  });

  test('links - QoS 2 end to end in both directions', async () => {
    const remoteQos: number[] = [];
    const rsub = await remoteClient('remote-q2-sub');
    rsub.on('message', (topic, _p, packet) => {
      if (topic.startsWith('fed/q2/')) remoteQos.push(packet.qos);
    });
    await rsub.subscribeAsync('fed/q2/#', { qos: 2 });
    const localQos: number[] = [];
    const lsub = await localPublisher();
    lsub.on('message', (topic, _p, packet) => {
      if (topic.startsWith('q2in/')) localQos.push(packet.qos);
    });
    await lsub.subscribeAsync('q2in/#', { qos: 2 });
    const pub = await localPublisher();
    await publishMany(pub, () => 'q2/x', 50, 2, 'two');
    const rpub = await remoteClient('remote-q2-pub');
    await publishMany(rpub, () => 'fed/q2in/y', 50, 2, 'two-in');
    await until(() => remoteQos.length >= 50 && localQos.length >= 50, 15000, 'QoS 2 both ways');
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(remoteQos.length, 50);
    assert.equal(localQos.length, 50);
    assert.ok(remoteQos.every((q) => q === 2) && localQos.every((q) => q === 2));
    rsub.end(true);
  });

  test('links - the will from willConfig is published when the link connection drops, and the link reconnects', async () => {
    const wills: string[] = [];
    const wsub = await remoteClient('remote-will-sub');
    wsub.on('message', (topic, payload) => {
      if (topic === 'bridges/mosq/state') wills.push(payload.toString());
    });
    await wsub.subscribeAsync('bridges/mosq/state', { qos: 1 });
    const svc = s.rt.service('integrations')!;
    const entry = svc.find('mosq');
    const before = entry.counters.connects;
    // the socket dies without DISCONNECT (as when the network goes)
    (entry.transport as unknown as { client: { stream: { destroy(): void } } }).client.stream.destroy();
    await until(() => wills.length >= 1, 10000, 'will published');
    assert.deepEqual(wills, ['offline']);
    await until(() => linkState() === 'Established' && entry.counters.connects > before, 10000, 'reconnected');
    wsub.end(true);
  });

  test('links - no loops: our own messages coming back are dropped and counted, messages that came in over a link are not pushed out again', async () => {
    const svc = s.rt.service('integrations')!;
    await until(() => ['loop-out', 'loop-in'].every((n) => svc.connectionState(svc.find(n)) === 'Established'), 10000, 'loop links established');
    const remoteGot: Array<{ topic: string; payload: string }> = [];
    const rsub = await remoteClient('remote-loop-sub');
    await collect(rsub, 'loop/#', remoteGot);
    const localGot: Array<{ topic: string; payload: string }> = [];
    const lsub = await localPublisher();
    await collect(lsub, 'loop/#', localGot);
    // published here: loop-out pushes it; loop-in receives it back with our origin and drops it
    const pub = await localPublisher();
    await publishMany(pub, () => 'loop/a', 50, 1, 'here');
    // published there: loop-in pulls it; loop-out must not push it back
    const rpub = await remoteClient('remote-loop-pub');
    await publishMany(rpub, () => 'loop/b', 50, 1, 'there');
    await until(() => svc.find('loop-in').counters.loopsDropped >= 50 && localGot.filter((m) => m.topic === 'loop/b').length >= 50, 15000, 'loops dropped');
    await new Promise((r) => setTimeout(r, 500)); // a loop would keep going now
    assert.equal(svc.find('loop-in').counters.loopsDropped, 50, 'each own message came back once and was dropped');
    assert.equal(localGot.filter((m) => m.topic === 'loop/a').length, 50, 'local subscriber: each local message once');
    assert.equal(localGot.filter((m) => m.topic === 'loop/b').length, 50, 'local subscriber: each remote message once');
    assert.equal(remoteGot.filter((m) => m.topic === 'loop/a').length, 50, 'remote subscriber: each pushed message once');
    assert.equal(remoteGot.filter((m) => m.topic === 'loop/b').length, 50, 'remote subscriber: remote messages not pushed back');
    assert.equal(svc.find('loop-out').counters.messagesSent, 50);
    const st = (await s.inject({ url: '/api/v1/server/integration/loop-in/status' })).json() as { loopsDropped: number };
    assert.equal(st.loopsDropped, 50);
    await s.inject({ method: 'PATCH', url: '/api/v1/server/integration/loop-out', payload: { state: 'stopped' } });
    await s.inject({ method: 'PATCH', url: '/api/v1/server/integration/loop-in', payload: { state: 'stopped' } });
    rsub.end(true);
  });

  test('links - paused: nothing flows, the outbox holds; across a mosquitto restart, resume drains it in order and the remote queue arrives', async () => {
    assert.equal((await s.inject({ method: 'PATCH', url: '/api/v1/server/integration/mosq', payload: { state: 'paused' } })).json().status, 'Success');
    assert.equal(linkState(), 'Disconnected');
    const remoteGot: Array<{ topic: string; payload: string }> = [];
    const rsub = await remoteClient('remote-sub-2');
    await collect(rsub, 'fed/site-a/#', remoteGot);
    const pub = await localPublisher();
    await publishMany(pub, () => 'site-a/p', 300, 1, 'p'); // every one PUBACKed: it is in the outbox
    const rpub = await remoteClient('remote-pub-2');
    const pulledBefore = fromPull.length;
    await publishMany(rpub, () => 'fed/site-b/q', 300, 1, 'q'); // queued by mosquitto for the link's persistent session
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(remoteGot.length, 0, 'paused: nothing pushed');
    assert.equal(fromPull.length, pulledBefore, 'paused: nothing pulled');
    assert.equal((await status()).outbox, 300);

    // mosquitto restarts (its persistence keeps the link's session and the 300 queued for it)
    rsub.end(true);
    rpub.end(true);
    await mosq.stop('SIGTERM');
    mosq = await startMosquitto(join(dir, 'mosq'), mport);
    const remoteAfter: Array<{ topic: string; payload: string }> = [];
    const rsub2 = await remoteClient('remote-sub-3');
    await collect(rsub2, 'fed/site-a/#', remoteAfter);

    assert.equal((await s.inject({ method: 'PATCH', url: '/api/v1/server/integration/mosq', payload: { state: 'resumed' } })).json().status, 'Success');
    await until(() => remoteAfter.length >= 300 && fromPull.length - pulledBefore >= 300, 20000, 'outbox drained and remote queue received').catch(async (err) => {
      throw new Error(`${(err as Error).message}: pushed ${remoteAfter.length}, pulled ${fromPull.length - pulledBefore}, status ${JSON.stringify(await status())}`);
    });
    await new Promise((r) => setTimeout(r, 200));
    assert.deepEqual(remoteAfter.map((m) => m.payload), Array.from({ length: 300 }, (_, i) => `p-${i}`), 'the outbox drains in publish order, each once');
    const pulled = fromPull.slice(pulledBefore).map((m) => m.payload);
    assert.equal(pulled.length, 300);
    assert.deepEqual(pulled, Array.from({ length: 300 }, (_, i) => `q-${i}`));
    assert.equal((await status()).outbox, 0);
    rsub2.end(true);
  });

  test('links - mosquitto killed: the link goes Delayed, /health Warning after the cap, QoS 1 published meanwhile arrives after it returns', async () => {
    await until(() => linkState() === 'Established', 10000, 'established');
    await mosq.stop('SIGKILL');
    await until(() => ['Delayed', 'Connecting'].includes(linkState()), 10000, 'Delayed');
    const pub = await localPublisher();
    await publishMany(pub, () => 'site-a/k', 100, 1, 'k');
    assert.ok(['Delayed', 'Connecting'].includes((await status()).state));
    await until(async () => (await s.app.inject({ url: '/health' })).body === 'Warning', 10000, '/health Warning');
    assert.equal((await s.app.inject({ url: '/health' })).headers['x-switchyard-stalled-integrations'], 'mosq');
    mosq = await startMosquitto(join(dir, 'mosq'), mport);
    const remoteGot: Array<{ topic: string; payload: string }> = [];
    const rsub = await remoteClient('remote-sub-4');
    await collect(rsub, 'fed/site-a/#', remoteGot);
    await until(() => remoteGot.length >= 100, 20000, 'outbox sent after the outage');
    assert.equal(linkState(), 'Established');
    assert.deepEqual(remoteGot.map((m) => m.payload), Array.from({ length: 100 }, (_, i) => `k-${i}`));
    await until(async () => (await s.app.inject({ url: '/health' })).body === 'Ok', 5000, '/health Ok again');
  });
});
