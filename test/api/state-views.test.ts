/**
 * Views of actor state are never served stale from the REST response cache (issue 21 item 1): the interface views
 * are cached (as in MAPS) but dropped the moment an endpoint changes state; the other state views (integrations,
 * hardware, LoRa, discovery, actors, server status) are not cached at all. The serial unplug runs over a real socat
 * pty pair whose socat process is killed by pid, as in test/serial/.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { removeDir, startServer, tempDir, waitUntil, type TestServer } from '../helpers.js';
import { ptyPair, type PtyPair } from '../serial/pty.js';

interface Info {
  name: string;
  state: string;
}

async function cacheInfo(s: TestServer): Promise<{ cacheHits: number; cacheMisses: number; cacheSize: number }> {
  const r = await s.inject('/api/v1/server/cache');
  assert.equal(r.statusCode, 200, r.body);
  return r.json();
}

/** The state a client reads: no cache clearing in between (that is the point). */
async function listed(s: TestServer, name: string): Promise<string> {
  const r = await s.inject('/api/v1/server/interfaces');
  assert.equal(r.statusCode, 200, r.body);
  const e = (r.json() as Info[]).find((i) => i.name === name);
  assert.ok(e, `endpoint ${name} listed`);
  return e.state;
}
async function one(s: TestServer, name: string): Promise<string> {
  const r = await s.inject(`/api/v1/server/interface/${encodeURIComponent(name)}`);
  assert.equal(r.statusCode, 200, r.body);
  return (r.json() as Info).state;
}

describe('state views - interfaces after a serial unplug', () => {
  let dir: string;
  let pair: PtyPair | undefined;
  let s: TestServer | undefined;

  before(async () => {
    dir = tempDir('switchyard-state-views-');
    pair = await ptyPair(join(dir, 'broker-side'), join(dir, 'client-side'));
    s = await startServer({
      overrides: {
        // a long backoff: after the unplug the endpoint stays Failed (not Starting) while the test looks
        NetworkManager: {
          retryInitial: 20000,
          retryMax: 20000,
          data: [{ name: 'line', url: `serial://${pair.a}`, endPointConfig: { type: 'serial', serialDevice: { baudRate: 9600 } }, protocolConfigs: [{ type: 'mqtt' }] }],
        },
        RestApi: { enableCache: true, cacheLifetime: 30000 },
      },
    });
  });

  after(async () => {
    await s?.close();
    await pair?.stop(); // kills socat by pid (if the test did not) and waits for its links to go
    removeDir(dir);
  });

  test('state views - a serial unplug shows Failed in the interface list and the interface within 1 s, though both were cached', async () => {
    const server = s!;
    await waitUntil(async () => (await one(server, 'line')) === 'Started', 15000, 'line Started');
    // warm the cache: the second reads are answered from it
    assert.equal(await listed(server, 'line'), 'Started');
    assert.equal(await one(server, 'line'), 'Started');
    const before = await cacheInfo(server);
    assert.equal(await listed(server, 'line'), 'Started');
    assert.equal(await one(server, 'line'), 'Started');
    const warm = await cacheInfo(server);
    assert.equal(warm.cacheHits - before.cacheHits, 2, 'both views were answered from the cache');

    const unplugged = Date.now();
    await pair!.stop(); // socat killed by pid: both pty links vanish, as when a USB adapter is pulled
    let seen: { list: string; one: string } = { list: '', one: '' };
    await waitUntil(
      async () => {
        seen = { list: await listed(server, 'line'), one: await one(server, 'line') };
        return seen.list === 'Failed' && seen.one === 'Failed';
      },
      5000,
      'Failed shown',
    ).catch(() => assert.fail(`after the unplug the views still answer ${JSON.stringify(seen)} (cache lifetime 30 s)`));
    const elapsed = Date.now() - unplugged;
    console.log(`state views: serial unplug -> Failed in GET /interfaces and /interface/line after ${elapsed} ms`);
    assert.ok(elapsed < 1000, `Failed shown after ${elapsed} ms, not within 1 s`);
    // and it is the actor's state, not a guess: the actor is failed / in backoff
    assert.match(String(server.rt.actor('endpoint', 'line')!.getSnapshot().value), /^(failed|backoff)$/);
  });
});

describe('state views - the cache and the other views', () => {
  let s: TestServer | undefined;

  before(async () => {
    s = await startServer({
      overrides: {
        NetworkManager: { data: [{ name: 'tcp', url: 'tcp://127.0.0.1:0/', protocolConfigs: [{ type: 'mqtt' }] }] },
        RestApi: { enableCache: true, cacheLifetime: 30000 },
      },
    });
  });

  after(async () => {
    await s?.close();
  });

  test('state views - an endpoint paused behind the REST API (a direct actor event) is shown Paused at once; resumed, Started', async () => {
    const server = s!;
    await waitUntil(async () => (await one(server, 'tcp')) === 'Started', 15000, 'tcp Started');
    assert.equal(await listed(server, 'tcp'), 'Started');
    const before = await cacheInfo(server);
    assert.equal(await listed(server, 'tcp'), 'Started');
    assert.equal(await one(server, 'tcp'), 'Started');
    assert.equal((await cacheInfo(server)).cacheHits - before.cacheHits, 2, 'answered from the cache');

    const actor = server.rt.actor('endpoint', 'tcp')!;
    actor.send({ type: 'endpoint.pause' });
    assert.equal(await listed(server, 'tcp'), 'Paused');
    assert.equal(await one(server, 'tcp'), 'Paused');
    // cached again while nothing moves
    const paused = await cacheInfo(server);
    assert.equal(await listed(server, 'tcp'), 'Paused');
    assert.equal((await cacheInfo(server)).cacheHits - paused.cacheHits, 1);
    actor.send({ type: 'endpoint.resume' });
    assert.equal(await listed(server, 'tcp'), 'Started');
    assert.equal(await one(server, 'tcp'), 'Started');
  });

  test('state views - integrations, hardware, LoRa, discovery, actors and server status never touch the cache', async () => {
    const server = s!;
    const urls = [
      '/api/v1/server/integrations',
      '/api/v1/server/integrations/status',
      '/api/v1/server/hardware',
      '/api/v1/device/lora',
      '/api/v1/server/discovery',
      '/api/v1/server/actors',
      '/api/v1/server/actors/tree',
      '/api/v1/server/actors/endpoint:tcp',
      '/api/v1/server/status',
      '/api/v1/server/health',
    ];
    const before = await cacheInfo(server);
    for (const url of urls) {
      for (let i = 0; i < 2; i++) {
        const r = await server.inject(url);
        assert.equal(r.statusCode, 200, `${url}: ${r.body}`);
      }
    }
    const afterInfo = await cacheInfo(server);
    assert.deepEqual(
      { hits: afterInfo.cacheHits - before.cacheHits, misses: afterInfo.cacheMisses - before.cacheMisses, size: afterInfo.cacheSize - before.cacheSize },
      { hits: 0, misses: 0, size: 0 },
      'no state view is stored in or answered from the response cache',
    );
  });
});
