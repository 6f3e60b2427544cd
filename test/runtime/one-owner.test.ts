import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createConnection, createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { waitFor } from 'xstate';
import { startNats, type NatsServer } from '../federation/nats-server.js';
import { MQTT_TEST_ENV, ROOT, startServer, waitUntil, type TestServer } from '../helpers.js';
import { freePort } from '../links/helpers.js';

/**
 * One owner per resource: the invoked actor owns its listener, modem or agent and closes it on exit; services keep
 * no second handle; a paused endpoint or link whose resource fails and recovers comes back paused.
 */

/** Does a TCP connection to the port get an open socket that stays open for a moment (not refused, not destroyed)? */
function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = createConnection({ host: '127.0.0.1', port });
    let settled = false;
    const done = (v: boolean) => {
      if (settled) return;
      settled = true;
      sock.destroy();
      resolve(v);
    };
    sock.once('error', () => done(false));
    sock.once('close', () => done(false));
    sock.once('connect', () => setTimeout(() => done(true), 300));
  });
}

function listenOn(port: number): Promise<Server | undefined> {
  return new Promise((resolve) => {
    const srv = createServer((s) => s.destroy());
    srv.once('error', () => resolve(undefined));
    srv.listen(port, '127.0.0.1', () => resolve(srv));
  });
}

describe('one owner: a paused endpoint', () => {
  let s: TestServer;
  let squatter: Server | undefined;
  before(async () => {
    // a fixed port (not 0): a new bind must get the same port back, which another process can take meanwhile
    const port = await freePort();
    s = await startServer({ auth: false, env: { ...MQTT_TEST_ENV, SWITCHYARD_MQTT_PORT: String(port) }, overrides: { NetworkManager: { retryInitial: 300, retryMax: 600 } } });
  });
  after(async () => {
    await new Promise<void>((r) => (squatter ? squatter.close(() => r()) : r()));
    await s?.close();
  });

  test('one owner - a paused endpoint whose listener breaks while its port is taken comes back Paused once the port is free', async () => {
    const url = '/api/v1/server/interface/MQTT%20Interface';
    const ep = s.rt.service('endpoints')!.entries.get('MQTT Interface')!;
    const port = ep.handle!.port;
    assert.equal((await s.inject({ method: 'PATCH', url, payload: { state: 'paused' } })).statusCode, 200);
    assert.equal((await s.inject(url)).json().state, 'Paused');
    assert.equal(await accepts(port), false, 'a paused endpoint refuses connections');

    // the listener breaks (as when the OS reports an error on it): the actor closes it, and another process takes the port
    const actor = s.rt.actor('endpoint', 'MQTT Interface')!;
    actor.send({ type: 'listener.failed', error: 'simulated listener failure' });
    await waitFor(actor, (snap) => snap.value === 'failed' || snap.value === 'backoff', { timeout: 5000 });
    assert.equal(ep.handle, undefined, 'the service holds no handle of its own: the closed listener is gone with the state');
    await waitUntil(async () => (squatter = await listenOn(port)) !== undefined, 5000, 'the test takes the port');
    // while the port is taken every bind fails: the endpoint stays Failed
    await waitUntil(() => (actor.getSnapshot().context.lastError ?? '').includes('EADDRINUSE'), 10000, 'a bind failed on the taken port')
    assert.equal((await s.inject(url)).json().state, 'Failed');

    await new Promise<void>((r) => squatter!.close(() => r()));
    squatter = undefined;
    await waitFor(actor, (snap) => typeof snap.value === 'object', { timeout: 10000 });
    assert.equal((await s.inject(url)).json().state, 'Paused', 'it binds again and is still Paused (the old code came back Started)');
    assert.equal(s.rt.service('endpoints')!.entries.get('MQTT Interface')!.handle?.port, port, 'the same port, read from the actor');
    assert.equal(await accepts(port), false, 'still refusing connections');
    assert.equal((await s.inject({ method: 'PATCH', url, payload: { state: 'resumed' } })).statusCode, 200);
    assert.equal((await s.inject(url)).json().state, 'Started');
    assert.equal(await accepts(port), true, 'resumed: connections are accepted');
  });
});

describe('one owner: a paused link', () => {
  let nats: NatsServer | undefined;
  let s: TestServer | undefined;
  before(async () => {
    nats = await startNats({ jetstream: false });
    s = await startServer({
      auth: false,
      overrides: {
        NetworkConnectionManager: {
          data: [{ name: 'peer', url: nats.url, backoff: { initial: 100, max: 400, jitter: 0 }, linkConfigs: [{ direction: 'push', localNamespace: 'out/#', remoteNamespace: 'in.', qualityOfService: 0 }] }],
        },
      },
    });
  });
  after(async () => {
    await s?.close();
    await nats?.dispose();
  });

  test('one owner - a paused link whose peer (a real nats-server) restarts comes back Paused, not connected', async () => {
    const rt = s!.rt;
    const status = async () => (await s!.inject('/api/v1/server/integration/peer/status')).json() as { state: string; runState: string };
    await waitUntil(async () => (await status()).state === 'Established', 15000, 'link established');
    assert.equal((await s!.inject({ method: 'PATCH', url: '/api/v1/server/integration/peer', payload: { state: 'paused' } })).statusCode, 200);
    assert.deepEqual(await status(), { ...(await status()), runState: 'Paused', state: 'Disconnected' });
    await nats!.stop('SIGKILL');
    await nats!.restart();
    // longer than the link's whole backoff: a link that reconnected on its own would be Established by now
    await new Promise((r) => setTimeout(r, 1500));
    const after = await status();
    assert.equal(after.runState, 'Paused');
    assert.equal(after.state, 'Disconnected');
    assert.equal(rt.actor('integration', 'peer')!.getSnapshot().value, 'paused');
    assert.equal((await s!.inject({ method: 'PATCH', url: '/api/v1/server/integration/peer', payload: { state: 'resumed' } })).statusCode, 200);
    await waitUntil(async () => (await status()).state === 'Established', 15000, 'resumed: established again');
  });
});

test('one owner - no service keeps a resource its actor owns (listener, link transport, modem, mDNS agent): they read the snapshot', () => {
  const src = (p: string) => readFileSync(join(ROOT, p), 'utf8');
  const offenders: string[] = [];
  const rules: Array<[string, RegExp, string]> = [
    ['src/endpoints/endpoints.service.ts', /\bentry\.handle\s*=|\be\.handle\s*=|handle:\s*undefined|\.handle\?*\.close\(/, 'an endpoint listener kept or closed by the service'],
    ['src/endpoints/endpoint-views.ts', /\.handle\s*=[^=]/, 'an endpoint listener stored by the views'],
    ['src/devices/lora/lora.service.ts', /new Map<string, Rn2483>|this\.modems\b|modems\.(set|get|delete)\(/, 'a LoRa modem kept by the service'],
    ['src/links/link-manager.ts', /\bgeneration\b|\.transport\s*=[^=]|^\s*transport\?:\s*LinkTransport/, 'a link transport kept by the link manager, or a generation counter'],
    ['src/links/nats-shares.ts', /\bgeneration\b/, 'a generation counter'],
    ['src/discovery/discovery.service.ts', /private agent\b|this\.agent\s*=|this\.agent\?*\.close\(/, 'the discovery agent kept or closed by the service'],
  ];
  for (const [file, re, what] of rules) {
    src(file)
      .split('\n')
      .forEach((line, i) => {
        if (re.test(line)) offenders.push(`${file}:${i + 1}: ${what}: ${line.trim()}`);
      });
  }
  assert.deepEqual(offenders, []);
});
