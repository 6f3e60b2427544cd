import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, type TestServer } from '../helpers.js';
import { freePort, until } from './helpers.js';

const INFO_FIELDS = ['config', 'state'];
const STATUS_FIELDS = ['bytesReceived', 'bytesSent', 'errors', 'interfaceName', 'lastReadTime', 'lastWriteTime', 'messagesReceived', 'messagesSent', 'state', 'statistics'];
const SUMMARY_FIELDS = [
  'adapter',
  'bytesRead',
  'bytesWritten',
  'connectedTimeMs',
  'id',
  'lastRead',
  'lastWrite',
  'name',
  'overFlow',
  'protocolName',
  'protocolVersion',
  'proxyAddress',
  'totalBytesRead',
  'totalBytesWritten',
  'totalOverflow',
  'totalUnderflow',
  'underFlow',
  'user',
];

describe('integration routes', () => {
  let s: TestServer;
  before(async () => {
    const closed = await freePort(); // nothing listens there: the link keeps backing off
    s = await startServer({
      overrides: {
        MessageDaemon: { systemTopicInterval: 200 },
        NetworkConnectionManager: {
          data: [
            {
              name: 'Site-B',
              url: `mqtt://127.0.0.1:${closed}`,
              authConfig: { username: 'bridge', password: 'secret-password' },
              backoff: { initial: 50, max: 200, jitter: 0 },
              linkConfigs: [{ direction: 'push', localNamespace: 'site-a/#', remoteNamespace: 'fed/site-a/', qualityOfService: 1 }],
            },
            { name: 'idle', url: `mqtt://127.0.0.1:${closed}`, autoStart: false, linkConfigs: [] },
          ],
        },
      },
    });
  });
  after(async () => {
    await s?.close();
  });

  const get = async (url: string) => {
    const r = await s.inject({ url });
    return { status: r.statusCode, body: r.json() as unknown };
  };
  const patch = async (url: string, payload?: unknown) => {
    const r = await s.inject({ method: 'PATCH', url, ...(payload === undefined ? {} : { payload: payload as object }) });
    return { status: r.statusCode, body: r.json() as { status: string } };
  };

  test('links - GET /integrations lists IntegrationInfoDTO with the password masked; filter on state and config#name; bad filter 400', async () => {
    const all = await get('/api/v1/server/integrations');
    assert.equal(all.status, 200);
    // the service specification: an object with `data` (the list) and `globalConfig`
    assert.deepEqual(Object.keys(all.body as object).sort(), ['data', 'globalConfig']);
    assert.equal(typeof (all.body as unknown as { globalConfig: { inFlight: number } }).globalConfig.inFlight, 'number');
    const list = (all.body as unknown as { data: unknown }).data as Array<{ config: { name: string; authConfig?: { password?: string } }; state: string }>;
    assert.deepEqual(list.map((i) => [i.config.name, i.state]), [
      ['Site-B', 'Started'],
      ['idle', 'Stopped'],
    ]);
    for (const i of list) assert.deepEqual(Object.keys(i).sort(), INFO_FIELDS);
    assert.equal(list[0]!.config.authConfig?.password, '********');
    assert.ok(!JSON.stringify(list).includes('secret-password'));

    const started = await get(`/api/v1/server/integrations?filter=${encodeURIComponent("state = 'started'")}`);
    assert.deepEqual((started.body as unknown as { data: Array<{ config: { name: string } }> }).data.map((i) => i.config.name), ['Site-B']);
    const byName = await get(`/api/v1/server/integrations?filter=${encodeURIComponent("config#name = 'idle'")}`);
    assert.deepEqual((byName.body as unknown as { data: Array<{ config: { name: string } }> }).data.map((i) => i.config.name), ['idle']);
    for (const bad of ['state = ', "state = 'x' AND", '(((', '']) {
      const r = await get(`/api/v1/server/integrations?filter=${encodeURIComponent(bad)}`);
      assert.equal(r.status, 400, bad);
      assert.match((r.body as { status: string }).status, /^Invalid filter/);
    }
    const badStatus = await get(`/api/v1/server/integrations/status?filter=${encodeURIComponent('state ==')}`);
    assert.equal(badStatus.status, 400);
  });

  test('links - a link that cannot connect shows Delayed with its error, and after its backoff cap /health is Warning naming it', async () => {
    await until(async () => ((await get('/api/v1/server/integration/site-b/status')).body as { state: string }).state === 'Delayed', 5000, 'Delayed');
    const st = (await get('/api/v1/server/integration/SITE-B/status')).body as Record<string, unknown>;
    for (const f of STATUS_FIELDS) assert.ok(f in st, `IntegrationStatusDTO.${f}`);
    assert.equal(st.interfaceName, 'Site-B');
    assert.equal(st.runState, 'Started');
    assert.match(String(st.lastError), /ECONNREFUSED|connect/i);
    assert.ok((st.errors as number) >= 1);
    assert.equal(typeof st.statistics, 'string', 'statistics is a string holding JSON (service specification)');
    const stats = JSON.parse(st.statistics as string) as Record<string, { name: string; unitName: string; stats: Record<string, number> }>;
    assert.ok(stats['Messages Sent'] && stats['Messages Sent'].unitName === 'Messages/s');

    await until(async () => (await s.app.inject({ url: '/health' })).body === 'Warning', 5000, '/health Warning');
    const h = await s.app.inject({ url: '/health' });
    assert.equal(h.headers['x-switchyard-stalled-integrations'], 'Site-B');
    const sub = (await get('/api/v1/server/status')).body as Array<{ name: string; status: string; comment: string }>;
    const integ = sub.find((x) => x.name === 'Integrations')!;
    assert.equal(integ.status, 'WARN');
    assert.match(integ.comment, /integration:Site-B/);

    const all = ((await get('/api/v1/server/integrations/status')).body as unknown as { list: Array<{ interfaceName: string; state: string }> }).list;
    assert.deepEqual(all.map((x) => [x.interfaceName, x.state]), [
      ['Site-B', 'Delayed'],
      ['idle', 'Shutdown'],
    ]);
    const filtered = ((await get(`/api/v1/server/integrations/status?filter=${encodeURIComponent("state = 'shutdown'")}`)).body as unknown as { list: Array<{ interfaceName: string }> }).list;
    assert.deepEqual(filtered.map((x) => x.interfaceName), ['idle']);
  });

  test('links - unknown name 404, names match case-insensitively, the connection is an EndPointSummaryDTO', async () => {
    const info = await get('/api/v1/server/integration/IDLE');
    assert.equal(info.status, 200);
    assert.equal((info.body as { state: string }).state, 'Stopped');
    for (const url of ['/api/v1/server/integration/nope', '/api/v1/server/integration/nope/status', '/api/v1/server/integration/nope/connection']) {
      const r = await get(url);
      assert.equal(r.status, 404, url);
      assert.match((r.body as { status: string }).status, /^Integration not found/);
    }
    const p = await patch('/api/v1/server/integration/nope', { state: 'stopped' });
    assert.equal(p.status, 404);
    const conn = (await get('/api/v1/server/integration/site-b/connection')).body as Record<string, unknown>;
    for (const f of SUMMARY_FIELDS) assert.ok(f in conn, `EndPointSummaryDTO.${f}`);
    assert.equal(conn.name, 'Site-B');
    assert.equal(conn.user, 'bridge');
    assert.equal(conn.adapter, 'mqtt');
    assert.equal(conn.protocolName, 'Not Detected', 'not connected: defaults');
  });

  test('links - PATCH one link: paused/resumed/stopped/started case-insensitive, visible at once; bad state 400, No change, 409', async () => {
    assert.deepEqual(await patch('/api/v1/server/integration/site-b', { state: ' PAUSED ' }), { status: 200, body: { status: 'Success' } });
    assert.equal(((await get('/api/v1/server/integration/site-b')).body as { state: string }).state, 'Paused');
    assert.equal(((await get('/api/v1/server/integration/site-b/status')).body as { state: string }).state, 'Disconnected');
    assert.deepEqual(await patch('/api/v1/server/integration/site-b', { state: 'paused' }), { status: 200, body: { status: 'No change' } });
    assert.deepEqual(await patch('/api/v1/server/integration/site-b', { state: 'Resumed' }), { status: 200, body: { status: 'Success' } });
    assert.equal(((await get('/api/v1/server/integration/site-b')).body as { state: string }).state, 'Started');
    const bad = await patch('/api/v1/server/integration/site-b', { state: 'exploded' });
    assert.equal(bad.status, 400);
    assert.match(bad.body.status, /^Unknown action/);
    const none = await patch('/api/v1/server/integration/site-b', {});
    assert.equal(none.status, 400);
    assert.equal(none.body.status, 'State is required');
    const noBody = await patch('/api/v1/server/integration/site-b');
    assert.equal(noBody.status, 400);
    const notObject = await s.inject({ method: 'PATCH', url: '/api/v1/server/integration/site-b', payload: '"stopped"', headers: { 'content-type': 'application/json' } });
    assert.equal(notObject.statusCode, 400);
    const conflict = await patch('/api/v1/server/integration/idle', { state: 'paused' });
    assert.equal(conflict.status, 409);
    assert.match(conflict.body.status, /Stopped/);
  });

  test('links - PATCH all: stopped then started; unknown action 400', async () => {
    assert.deepEqual(await patch('/api/v1/server/integrations', { state: 'Stopped' }), { status: 200, body: { status: 'Success' } });
    const list = ((await get('/api/v1/server/integrations')).body as unknown as { data: Array<{ state: string }> }).data;
    assert.deepEqual(list.map((i) => i.state), ['Stopped', 'Stopped']);
    const st = ((await get('/api/v1/server/integrations/status')).body as unknown as { list: Array<{ state: string }> }).list;
    assert.deepEqual(st.map((i) => i.state), ['Shutdown', 'Shutdown']);
    assert.equal((await s.app.inject({ url: '/health' })).body, 'Ok', 'a stopped link is no warning');
    const bad = await patch('/api/v1/server/integrations', { state: 'restart' });
    assert.equal(bad.status, 400);
    assert.match(bad.body.status, /^Unknown action/);
    assert.equal((await patch('/api/v1/server/integrations', {})).body.status, 'State is required');
    assert.deepEqual(await patch('/api/v1/server/integrations', { state: 'STARTED' }), { status: 200, body: { status: 'Success' } });
    const again = ((await get('/api/v1/server/integrations')).body as unknown as { data: Array<{ state: string }> }).data;
    assert.deepEqual(again.map((i) => i.state), ['Started', 'Started']);
  });

  test('links - a server restart brings the links back with their configuration', async () => {
    await s.rt.restart();
    const list = ((await get('/api/v1/server/integrations')).body as unknown as { data: Array<{ config: { name: string }; state: string }> }).data;
    assert.deepEqual(list.map((i) => [i.config.name, i.state]), [
      ['Site-B', 'Started'],
      ['idle', 'Stopped'],
    ]);
    await until(async () => ((await get('/api/v1/server/integration/site-b/status')).body as { state: string }).state === 'Delayed', 5000, 'Delayed again');
  });

  test('links - the link actor is inspectable: state, accepted requests, transitions', async () => {
    const r = await get(`/api/v1/server/actors/${encodeURIComponent('integration:Site-B')}`);
    assert.equal(r.status, 200);
    const text = JSON.stringify(r.body);
    assert.match(text, /integration\.stop/);
    assert.match(text, /started/);
  });

  test('links - per-link series on /metrics and $SYS/server/integration/<name>/status, the link in $SYS/server/interface/status', async () => {
    const m = await s.app.inject({ url: '/metrics' });
    assert.match(m.body, /switchyard_link_state\{link="Site-B"\} \d/);
    assert.match(m.body, /switchyard_link_outbox_messages\{link="idle"\} 0/);
    assert.match(m.body, /switchyard_link_errors_total\{link="Site-B"\} [1-9]/);
    await until(() => s.rt.engine?.retained('$SYS/server/integration/Site-B/status') !== undefined, 5000, '$SYS integration status');
    const sys = JSON.parse(s.rt.engine!.retained('$SYS/server/integration/Site-B/status')!.payload.toString()) as { interfaceName: string };
    assert.equal(sys.interfaceName, 'Site-B');
    const ifs = JSON.parse(s.rt.engine!.retained('$SYS/server/interface/status')!.payload.toString()) as Array<{ interfaceName: string }>;
    assert.ok(ifs.some((x) => x.interfaceName === 'integration:Site-B'));
  });
});

describe('integration outbox cap', () => {
  let s: TestServer;
  before(async () => {
    const closed = await freePort();
    s = await startServer({
      overrides: {
        AuthManager: { authenticationEnabled: false, authorisationEnabled: false },
        NetworkConnectionManager: {
          data: [
            {
              name: 'capped',
              url: `mqtt://127.0.0.1:${closed}`,
              maxOutbox: 5,
              backoff: { initial: 1000, max: 60000, jitter: 0 },
              linkConfigs: [{ direction: 'push', localNamespace: 'cap/#', remoteNamespace: 'remote/', qualityOfService: 1 }],
            },
            {
              name: 'bytes',
              url: `mqtt://127.0.0.1:${closed}`,
              maxOutboxBytes: 64 * 1024,
              backoff: { initial: 1000, max: 60000, jitter: 0 },
              linkConfigs: [{ direction: 'push', localNamespace: 'big/#', remoteNamespace: 'remote/', qualityOfService: 1 }],
            },
          ],
        },
        // client subscriptions get a small byte cap: an outbox does not use it, it has maxOutboxBytes
        DestinationManager: { maxQueuedBytes: 16 * 1024 },
      },
    });
  });
  after(async () => {
    await s?.close();
  });

  test('links - a full outbox refuses QoS 1 publishes (MQTT 5 PUBACK 0x97) and lets a QoS 0 copy replace the oldest QoS 0 copy', async () => {
    const port = s.rt.service('endpoints')!.entries.get('MQTT Interface')!.handle!.port;
    const { connectClient } = await import('./helpers.js');
    const c = await connectClient(port, { clientId: 'cap-pub' });
    try {
      await c.publishAsync('cap/a', 'zero-1', { qos: 0 });
      await c.publishAsync('cap/a', 'zero-2', { qos: 0 });
      for (let i = 0; i < 3; i++) await c.publishAsync('cap/a', `one-${i}`, { qos: 1 });
      const svc = s.rt.service('integrations')!;
      const entry = svc.find('capped');
      await until(() => svc.manager!.outboxDepth(entry) === 5, 3000, 'outbox full');
      await assert.rejects(c.publishAsync('cap/a', 'one-refused', { qos: 1 }), (err: Error & { code?: number }) => err.code === 0x97);
      await c.publishAsync('cap/a', 'zero-3', { qos: 0 });
      await new Promise((r) => setTimeout(r, 100));
      const sub = s.rt.engine!.subscription('link:capped#0', 'cap/#')!;
      const held: string[] = [];
      sub.held.removeWhere(
        (m) => {
          held.push(m.payload.toString());
          return false; // only looks
        },
        () => {},
      );
      assert.deepEqual(held, ['zero-2', 'one-0', 'one-1', 'one-2', 'zero-3'], 'the oldest QoS 0 copy made room; the refused QoS 1 never entered');
      const st = (await s.inject({ url: '/api/v1/server/integration/capped/status' })).json() as { outbox: number };
      assert.equal(st.outbox, 5);
    } finally {
      c.end(true);
    }
  });

  test('links - an outbox is full at maxOutboxBytes (not at the 16 KiB maxQueuedBytes of client subscriptions): 8 KiB QoS 1 messages, the sixth refused with 0x97', async () => {
    const port = s.rt.service('endpoints')!.entries.get('MQTT Interface')!.handle!.port;
    const { connectClient } = await import('./helpers.js');
    const c = await connectClient(port, { clientId: 'bytes-pub' });
    const svc = s.rt.service('integrations')!;
    const entry = svc.find('bytes');
    try {
      let accepted = 0;
      let refused = 0;
      for (let i = 0; i < 12; i++) {
        await c.publishAsync('big/a', Buffer.alloc(8 * 1024, i), { qos: 1 }).then(
          () => accepted++,
          (err: Error & { code?: number }) => {
            assert.equal(err.code, 0x97, String(err));
            refused++;
          },
        );
      }
      // 8 KiB + 512 B counted per message: the outbox takes messages while below 64 KiB (8 of them), then refuses
      assert.ok(accepted > 2, `more than the 16 KiB client cap holds: ${accepted} accepted`);
      assert.ok(accepted <= 9 && refused >= 3, `the 64 KiB outbox cap holds: ${accepted} accepted, ${refused} refused`);
      assert.equal(svc.manager!.outboxDepth(entry), accepted);
    } finally {
      c.end(true);
    }
  });
});

test('links - a wrong link configuration stops start-up with one line naming the key', async () => {
  const { loadConfig } = await import('../../src/config/load.js');
  const { CONFIG_DIR } = await import('../helpers.js');
  const bad = (data: unknown[]) => () => loadConfig({ configDir: CONFIG_DIR, env: {}, overrides: { NetworkConnectionManager: { data } } });
  assert.throws(bad([{ name: 'x', url: 'http://h:1' }]), (e: Error) => /NetworkConnectionManager.*'data\.0\.url'.*nats:\/\//.test(e.message) && !e.message.includes('\n'));
  assert.throws(bad([{ name: 'x', url: 'mqtt://h:1', linkConfigs: [{ direction: 'sideways', localNamespace: 'a/', remoteNamespace: 'b/' }] }]), /data\.0\.linkConfigs\.0\.direction/);
  assert.throws(bad([{ name: 'x', url: 'mqtt://h:1', cost: 'cheap' }]), /data\.0\.cost/);
  assert.throws(bad([{ name: 'x', url: 'mqtt://h:1' }, { name: 'X', url: 'mqtt://h:2' }]), /unique/);
  const ok = loadConfig({ configDir: CONFIG_DIR, env: {} });
  assert.deepEqual(ok.config.NetworkConnectionManager.data, [], 'the shipped configuration has no links');
  assert.equal(ok.config.NetworkConnectionManager.globalConfig.backoff.max, 30000);
});
