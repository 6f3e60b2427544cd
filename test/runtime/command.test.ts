import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import type { CommandRecord } from '../../src/runtime/events.js';
import { ROOT, startServer, type TestServer } from '../helpers.js';

/**
 * The one command helper (src/runtime/command.ts): every lifecycle-changing route goes through it, a request for
 * the state an actor is in is 200 "No change", one its state cannot take is a 409 naming the state and what it
 * accepts.
 */

/** Every route that changes an actor's lifecycle. A new non-GET route in these areas must be classified here. */
const LIFECYCLE_ROUTES = [
  'PATCH /api/v1/server',
  'PATCH /api/v1/server/interfaces',
  'PATCH /api/v1/server/interface/{endpoint}',
  'PUT /api/v1/server/interface/{endpoint}',
  'PATCH /api/v1/server/destinations/{destination}',
  'POST /api/v1/server/destinations/{destination}/purge',
  'PATCH /api/v1/server/subscriptions/{subscription}',
  'DELETE /api/v1/server/destinations/{destination}',
];
/** Non-GET routes in those areas that change no lifecycle. */
const NOT_LIFECYCLE = ['DELETE /api/v1/server/cache'];
const LIFECYCLE_AREA = /^\/api\/v1\/server(\/interfaces?(\/.*)?|\/actors.*|\/destinations(\/.*)?|\/subscriptions(\/.*)?|)$/;

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? sourceFiles(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []));
}

describe('command helper', () => {
  let s: TestServer;
  const commands: CommandRecord[] = [];
  before(async () => {
    s = await startServer({ auth: false });
    s.rt.on('actor.command', (c) => commands.push(c));
  });
  after(async () => {
    await s?.close();
  });

  test('command - route table: every lifecycle-changing route goes through the command helper', async () => {
    const doc = (await s.inject('/openapi.json')).json() as { paths: Record<string, Record<string, unknown>> };
    const found: string[] = [];
    for (const [path, methods] of Object.entries(doc.paths)) {
      if (!LIFECYCLE_AREA.test(path)) continue;
      for (const m of Object.keys(methods)) if (['patch', 'put', 'post', 'delete'].includes(m)) found.push(`${m.toUpperCase()} ${path}`);
    }
    assert.deepEqual(found.filter((r) => !NOT_LIFECYCLE.includes(r)).sort(), [...LIFECYCLE_ROUTES].sort(), 'every changing route of the server and interface areas is a known lifecycle route');

    const cfg = (await s.inject('/api/v1/server/interface/MQTT%20Interface')).json().config;
    await s.rt.engine!.publish('guard/topic', { payload: 'x' });
    const guardSub = s.rt.engine!.subscribe({ sessionId: 'guard', filter: 'guard/#', durable: true, qos: 1, sink: { kind: 'push', deliver: () => true } });
    const requests: Record<string, { method: 'PATCH' | 'PUT' | 'POST' | 'DELETE'; url: string; payload: object }> = {
      'PATCH /api/v1/server/interfaces': { method: 'PATCH', url: '/api/v1/server/interfaces', payload: { state: 'paused' } },
      'PATCH /api/v1/server/interface/{endpoint}': { method: 'PATCH', url: '/api/v1/server/interface/MQTT%20Interface', payload: { state: 'resumed' } },
      'PUT /api/v1/server/interface/{endpoint}': { method: 'PUT', url: '/api/v1/server/interface/MQTT%20Interface', payload: { ...cfg, authenticationRealm: cfg.authenticationRealm ?? 'default' } },
      // shutdown in-process only emits 'shutdown-requested' (main.ts is not listening here)
      'PATCH /api/v1/server': { method: 'PATCH', url: '/api/v1/server', payload: { state: 'shutdown' } },
      'PATCH /api/v1/server/destinations/{destination}': { method: 'PATCH', url: '/api/v1/server/destinations/guard%2Ftopic', payload: { state: 'paused' } },
      'POST /api/v1/server/destinations/{destination}/purge': { method: 'POST', url: '/api/v1/server/destinations/guard%2Ftopic/purge', payload: {} },
      'PATCH /api/v1/server/subscriptions/{subscription}': { method: 'PATCH', url: `/api/v1/server/subscriptions/${encodeURIComponent(guardSub.key)}`, payload: { state: 'paused' } },
      'DELETE /api/v1/server/destinations/{destination}': { method: 'DELETE', url: '/api/v1/server/destinations/guard%2Ftopic', payload: {} },
    };
    for (const route of LIFECYCLE_ROUTES) {
      const before = commands.length;
      const r = await s.inject(requests[route]!);
      assert.equal(r.statusCode, 200, `${route}: ${r.body}`);
      assert.ok(commands.length > before, `${route} went through the command helper`);
    }
  });

  test('command - no direct mutation: REST code and the endpoint service send no lifecycle event themselves', () => {
    const offenders: string[] = [];
    for (const f of [...sourceFiles(join(ROOT, 'src', 'api')), join(ROOT, 'src', 'runtime', 'endpoints.service.ts')]) {
      readFileSync(f, 'utf8')
        .split('\n')
        .forEach((line, i) => {
          if (/\.send\(\s*\{\s*type:\s*'(endpoint|server|supervisor|destination|subscription)\./.test(line)) offenders.push(`${relative(ROOT, f)}:${i + 1}: ${line.trim()}`);
        });
    }
    assert.deepEqual(offenders, []);
  });

  test('command - PATCH an interface to the state it is in is 200 "No change"; an impossible move is a 409 naming the state', async () => {
    const url = '/api/v1/server/interface/MQTT%20Interface';
    const patch = (state: string) => s.inject({ method: 'PATCH', url, payload: { state } });
    assert.equal((await s.inject(url)).json().state, 'Started');
    assert.deepEqual((await patch('started')).json(), { status: 'No change' });
    assert.deepEqual((await patch('resumed')).json(), { status: 'No change' }, 'resuming a started endpoint changes nothing');
    const paused = await patch('paused');
    assert.deepEqual([paused.statusCode, paused.json()], [200, { status: 'Success' }]);
    const again = await patch('paused');
    assert.deepEqual([again.statusCode, again.json()], [200, { status: 'No change' }]);
    assert.equal((await patch('stopped')).statusCode, 200);
    assert.equal((await s.inject(url)).json().state, 'Stopped');
    const impossible = await patch('paused');
    assert.equal(impossible.statusCode, 409);
    assert.match(impossible.json().status, /^Endpoint "MQTT Interface" is Stopped; it cannot be paused now \(it accepts: started, stopped\)$/);
    const noop = await patch('stopped');
    assert.deepEqual([noop.statusCode, noop.json()], [200, { status: 'No change' }]);
    assert.equal((await patch('started')).statusCode, 200);
    assert.equal((await s.inject(url)).json().state, 'Started');
    const outcomes = commands.filter((c) => c.systemId === 'endpoint:MQTT Interface').map((c) => c.outcome);
    assert.ok(outcomes.includes('no-change') && outcomes.includes('conflict') && outcomes.includes('sent'));
  });

  test('command - the registry: rt.actor(kind, name) finds actors by systemId, shards stay hidden', () => {
    const ep = s.rt.actor('endpoint', 'MQTT Interface');
    assert.ok(ep, 'endpoint:MQTT Interface is registered');
    assert.equal(ep.getSnapshot().context.name, 'MQTT Interface');
    assert.ok(s.rt.actor('supervisor', 'destinations'));
    assert.equal(s.rt.actor('endpoint', 'nothing'), undefined);
    assert.equal(s.rt.actorById('destinations#0'), undefined, 'shard supervisors are not registered');
  });
});

describe('interface management switch', () => {
  let s: TestServer | undefined;
  after(async () => {
    await s?.close();
  });
  test('command - RestApi.enableInterfaceManagement false leaves out the interface and connection routes (as MAPS)', async () => {
    s = await startServer({ auth: false, overrides: { RestApi: { enableInterfaceManagement: false } } });
    assert.equal((await s.inject('/api/v1/server/interfaces')).statusCode, 404);
    assert.equal((await s.inject({ method: 'PATCH', url: '/api/v1/server/interface/MQTT%20Interface', payload: { state: 'paused' } })).statusCode, 404);
    assert.equal((await s.inject('/api/v1/server/connections')).statusCode, 404);
    assert.equal((await s.inject('/api/v1/server/status')).statusCode, 200);
  });
});

describe('command helper without REST', () => {
  test('command - an actor that does not settle in time is a 503 saying what it is still doing (never a 500)', async () => {
    const { createActor, setup } = await import('xstate');
    const { command } = await import('../../src/runtime/command.js');
    const m = setup({}).createMachine({ id: 'slow', initial: 'idle', states: { idle: { on: { go: 'starting' } }, starting: {} } });
    const ref = createActor(m).start();
    const records: string[] = [];
    const target = { ref, label: 'Thing "x"', systemId: 'thing:x', stateName: (s: { value: unknown }) => String(s.value), accepts: () => ['go'] };
    await assert.rejects(
      command((r) => records.push(r.outcome), target, { event: { type: 'go' }, already: () => false, settled: (s) => s.value !== 'starting', timeoutMs: 50 }),
      (err: Error & { statusCode?: number }) => err.statusCode === 503 && /Thing "x" took "go" but is still starting after 50 ms/.test(err.message),
    );
    assert.deepEqual(records, ['sent', 'timeout']);
    await assert.rejects(
      command((r) => records.push(r.outcome), target, { event: { type: 'go' }, already: () => false, settled: () => true }),
      (err: Error & { statusCode?: number }) => err.statusCode === 409 && /Thing "x" is starting; it cannot take "go" now \(it accepts: go\)/.test(err.message),
    );
    ref.stop();
  });
});
