/**
 * Discovery over NATS (no multicast: DiscoveryManager.mdns false): a real nats-server on 127.0.0.1, two brokers,
 * one told the URL by DiscoveryManager.nats.url, the other finding it through its NATS integration link
 * (NetworkConnectionManager). They find each other, a stop says goodbye, announcements expire at their TTL, the
 * table is capped and garbage on the subject is ignored.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { startServer, waitUntil, type TestServer } from '../helpers.js';

let natsProc: ChildProcess;
let natsUrl = '';
let a: TestServer;
let b: TestServer;
let raw: NatsConnection;

async function startNats(): Promise<void> {
  natsProc = spawn('nats-server', ['-a', '127.0.0.1', '-p', '-1'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  await new Promise<void>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`nats-server did not start: ${log}`)), 15000);
    const onData = (d: Buffer) => {
      log += d;
      const m = /Listening for client connections on 127\.0\.0\.1:(\d+)/.exec(log);
      if (m) {
        clearTimeout(t);
        natsUrl = `nats://127.0.0.1:${m[1]}`;
        resolve();
      }
    };
    natsProc.stderr!.on('data', onData);
    natsProc.stdout!.on('data', onData);
  });
}

const names = async (s: TestServer, filter?: string) => {
  const r = await s.inject(`/api/v1/server/discovery${filter === undefined ? '' : `?filter=${encodeURIComponent(filter)}`}`);
  assert.equal(r.statusCode, 200, r.body);
  return (r.json() as Array<{ serverName: string }>).map((x) => x.serverName);
};

before(async () => {
  await startNats();
  const dm = { enabled: true, mdns: false, ttl: 30, maxServers: 3, nats: { interval: 5000 } };
  a = await startServer({ overrides: { DiscoveryManager: { ...dm, nats: { ...dm.nats, url: natsUrl } } } });
  b = await startServer({
    overrides: {
      DiscoveryManager: dm,
      // the NATS link's URL is where b announces (its links carry nothing here)
      NetworkConnectionManager: { data: [{ name: 'federation', url: natsUrl, autoStart: false }] },
    } as never,
  });
  await Promise.all([a.app.listen({ port: 0, host: '127.0.0.1' }), b.app.listen({ port: 0, host: '127.0.0.1' })]);
  raw = await connect({ servers: natsUrl });
});

after(async () => {
  await raw?.close();
  await a?.close();
  await b?.close();
  natsProc?.kill();
});

test('discovery - NATS: two brokers find each other through the announcement subject, with their REST port', async () => {
  await waitUntil(async () => (await names(a)).includes(b.rt.serverName) && (await names(b)).includes(a.rt.serverName), 15000, 'found over NATS');
  const entry = (await a.inject('/api/v1/server/discovery')).json().find((s: { serverName: string }) => s.serverName === b.rt.serverName);
  assert.deepEqual(entry.via, ['nats']);
  assert.equal(entry.systemTopicPrefix, '$SYS');
  assert.equal(entry.schemaSupport, true);
  const port = (b.app.server.address() as { port: number }).port;
  assert.equal(entry.services.restApi.port, port);
  assert.equal(entry.services.restApi.properties['server name'], b.rt.serverName);
  assert.deepEqual(await names(a, 'schemaSupport = TRUE OR systemTopicPrefix IS NOT NULL'), [b.rt.serverName]);
});

test('discovery - NATS: announcements expire at their TTL; the table holds at most maxServers; garbage is ignored', async () => {
  raw.publish('switchyard.discovery', 'not json');
  raw.publish('switchyard.discovery', JSON.stringify({ kind: 'announce', ttl: 'x', server: {} }));
  raw.publish('switchyard.discovery', Buffer.alloc(70000, 0x7b));
  for (let i = 0; i < 10; i++) {
    raw.publish('switchyard.discovery', JSON.stringify({ kind: 'announce', ttl: 2, server: { serverName: `fake-${i}`, schemaSupport: false, services: { restApi: { protocol: 'http', port: 1, transport: 'tcp', addresses: ['192.0.2.1'], properties: {} } } } }));
  }
  await raw.flush();
  await waitUntil(async () => (await names(a)).some((n) => n.startsWith('fake-')), 5000, 'fakes listed');
  const listed = await names(a);
  assert.equal(listed.length, 3, `maxServers 3: ${listed}`);
  assert.ok(listed.includes(b.rt.serverName), 'the known server stays when the table is full');
  assert.deepEqual(await names(a, 'schemaSupport = FALSE'), listed.filter((n) => n.startsWith('fake-')));
  // TTL 2 s, never announced again: gone; b (TTL 30 s, announced every 5 s) stays
  await waitUntil(async () => !(await names(a)).some((n) => n.startsWith('fake-')), 10000, 'fakes expired');
  assert.deepEqual(await names(a), [b.rt.serverName]);
});

test('discovery - NATS: stopped says goodbye (the peer drops the entry long before its TTL); started announces again', async () => {
  const commands: Array<{ systemId: string; event: string; outcome: string }> = [];
  b.rt.on('actor.command', (c) => commands.push(c));
  const r = await b.inject({ method: 'PATCH', url: '/api/v1/server/discovery', payload: { state: 'stopped' } });
  assert.deepEqual(r.json(), { status: 'Success' });
  assert.deepEqual(commands.map((c) => [c.systemId, c.event, c.outcome]), [['discovery', 'discovery.stop', 'sent']], 'through the command helper');
  await waitUntil(async () => !(await names(a)).includes(b.rt.serverName), 5000, 'goodbye seen');
  assert.deepEqual(await names(b), []);
  assert.equal(b.rt.service('discovery')!.subsystemStatus().status, 'STOPPED');
  assert.equal(a.rt.service('discovery')!.subsystemStatus().status, 'OK');
  const s = await b.inject({ method: 'PATCH', url: '/api/v1/server/discovery', payload: { state: 'started' } });
  assert.deepEqual(s.json(), { status: 'Success' });
  await waitUntil(async () => (await names(a)).includes(b.rt.serverName) && (await names(b)).includes(a.rt.serverName), 10000, 'found again');
});

test('discovery - an interface that does not exist: the manager fails, backs off and keeps retrying (no socket opened), status WARN; stopped ends the retries', async () => {
  const c = await startServer({ overrides: { DiscoveryManager: { enabled: true, hostnames: 'no-such-if0', retryInitial: 50, retryMax: 200 } } });
  try {
    await c.app.listen({ port: 0, host: '127.0.0.1' });
    const svc = c.rt.service('discovery')!;
    await waitUntil(() => svc.state() === 'Failed', 10000, 'failed');
    const st = svc.subsystemStatus();
    assert.equal(st.status, 'WARN');
    assert.match(st.comment, /no interface named "no-such-if0"/);
    const actor = c.rt.actor('discovery', '')!;
    await waitUntil(() => (actor.getSnapshot().context.attempts ?? 0) >= 3, 10000, 'retried with backoff');
    assert.deepEqual(await names(c), []);
    const r = await c.inject({ method: 'PATCH', url: '/api/v1/server/discovery', payload: { state: 'stopped' } });
    assert.deepEqual([r.statusCode, r.json()], [200, { status: 'Success' }]);
    assert.equal(svc.state(), 'Stopped');
  } finally {
    await c.close();
  }
});

test('discovery - NATS: a live peer stays listed across its announcements (no gone/found pair per interval); a service it stops naming goes, the server goes only on goodbye', async () => {
  const peer = 'steady-peer';
  const svc = (port: number) => ({ protocol: 'http', port, transport: 'tcp', addresses: ['192.0.2.7'], properties: {} });
  const announce = (services: Record<string, unknown>) =>
    raw.publish('switchyard.discovery', JSON.stringify({ kind: 'announce', ttl: 30, server: { serverName: peer, schemaSupport: false, services } }));
  const logLines = async () => ((await a.inject('/api/v1/server/log')).json().logEntries as Array<{ message: string }>).map((e) => e.message);
  const count = (lines: string[], what: RegExp) => lines.filter((l) => what.test(l)).length;
  const changes: string[] = [];
  const watch = setInterval(() => {
    void names(a).then((n) => changes.push(n.includes(peer) ? 'listed' : 'missing'));
  }, 20);
  try {
    for (let i = 0; i < 15; i++) {
      announce({ restApi: svc(8080), mqtt: svc(1883) });
      await raw.flush();
      await new Promise((r) => setTimeout(r, 100));
    }
    await waitUntil(async () => (await names(a)).includes(peer), 5000, 'peer listed');
    const lines = await logLines();
    const found = count(lines, new RegExp(`found server ${peer}\\b`));
    const gone = count(lines, new RegExp(`server ${peer} is gone`));
    console.log(`# discovery: 15 announcements of a live peer -> ${found} "found" and ${gone} "gone" log lines; REST view missing ${changes.slice(changes.indexOf('listed')).filter((c) => c === 'missing').length} times after first listed`);
    assert.equal(found, 1, 'found once');
    assert.equal(gone, 0, 'never gone while it announces');
    assert.equal(changes.slice(changes.indexOf('listed')).filter((c) => c === 'missing').length, 0, 'never missing from the list once found');
    // an announcement that no longer names a service: that service goes, the server stays
    announce({ restApi: svc(8080) });
    await raw.flush();
    await waitUntil(async () => {
      const e = (await a.inject('/api/v1/server/discovery')).json().find((s: { serverName: string }) => s.serverName === peer);
      return e !== undefined && Object.keys(e.services).join() === 'restApi';
    }, 5000, 'mqtt service removed');
    assert.equal(count(await logLines(), new RegExp(`server ${peer} is gone`)), 0);
    // goodbye: gone at once, one line
    raw.publish('switchyard.discovery', JSON.stringify({ kind: 'goodbye', serverName: peer }));
    await raw.flush();
    await waitUntil(async () => !(await names(a)).includes(peer), 5000, 'goodbye seen');
    assert.equal(count(await logLines(), new RegExp(`server ${peer} is gone`)), 1);
  } finally {
    clearInterval(watch);
  }
});
