import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import type { CommandRecord } from '../../src/runtime/events.js';
import '../../src/compose.js'; // declares every actor kind
import { actorKinds } from '../../src/runtime/actor-kind.js';
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

/** Every lifecycle route of every area: the routes the actor kinds declare (src/runtime/actor-kind.ts). */
const KIND_ROUTES = [...new Set([...actorKinds().values()].flatMap((k) => k.spec.routes ?? []))];
/**
 * Every other non-GET route of the API, in every area: they change data (users, ACLs, schemas, models, messages),
 * not an actor's lifecycle. A new non-GET route must be declared by its actor kind or listed here.
 */
const NO_LIFECYCLE_ANYWHERE = [
  'POST /api/v1/login',
  'POST /api/v1/logout',
  'POST /api/v1/auth/users',
  'DELETE /api/v1/auth/users/{userUuid}',
  'PUT /api/v1/auth/users/{userUuid}/password',
  'POST /api/v1/auth/groups',
  'DELETE /api/v1/auth/groups/{groupUuid}',
  'POST /api/v1/auth/groups/{groupUuid}/{userUuid}',
  'DELETE /api/v1/auth/groups/{groupUuid}/{userUuid}',
  'PUT /api/v1/auth/resources/acl',
  'POST /api/v1/auth/acl/check',
  'DELETE /api/v1/server/cache',
  'DELETE /api/v1/server/connections/{connectionId}',
  'POST /api/v1/messaging/publish',
  'POST /api/v1/messaging/subscribe',
  'POST /api/v1/messaging/unsubscribe',
  'POST /api/v1/messaging/consume',
  'POST /api/v1/messaging/subscriptionDepth',
  'POST /api/v1/messaging/commit',
  'POST /api/v1/messaging/abort',
  'POST /api/v1/server/schemas',
  'DELETE /api/v1/server/schemas',
  'DELETE /api/v1/server/schemas/{schemaId}',
  'POST /api/v1/server/models/{modelName}',
  'DELETE /api/v1/server/models/{modelName}',
  'DELETE /api/v1/server/cluster/nodes/{nodeId}', // removes a gone node's lease from the bucket; the cluster actor's state is its own
];
/** Lifecycle routes whose request needs hardware: exercised by their own area's test. */
const EXERCISED_ELSEWHERE: Record<string, string> = { 'POST /api/v1/server/hardware/scan': 'test/devices/devices.test.ts (simulated I²C bus)' };

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
    for (const f of [...sourceFiles(join(ROOT, 'src', 'api')), join(ROOT, 'src', 'endpoints', 'endpoints.service.ts')]) {
      readFileSync(f, 'utf8')
        .split('\n')
        .forEach((line, i) => {
          if (/\.send\(\s*\{\s*type:\s*'(endpoint|server|supervisor|destination|subscription)\./.test(line)) offenders.push(`${relative(ROOT, f)}:${i + 1}: ${line.trim()}`);
        });
    }
    assert.deepEqual(offenders, []);
  });

  test('command - no direct commands in any service: integration, discovery, device and lockout commands go through the helper too', () => {
    const offenders: string[] = [];
    for (const f of ['runtime', 'links', 'discovery', 'devices', 'security', 'api'].flatMap((d) => sourceFiles(join(ROOT, 'src', d)))) {
      if (f.endsWith(join('runtime', 'command.ts')) || f.endsWith(join('runtime', 'runtime.ts'))) continue; // the helper and the kernel
      readFileSync(f, 'utf8')
        .split('\n')
        .forEach((line, i) => {
          // commands (imperative events); notices such as login.failed or destination.highWater are not commands
          if (/\.send\(\s*\{\s*type:\s*'(endpoint\.(start|stop|pause|resume)|server\.|integration\.(start|stop|pause|resume)|discovery\.(start|stop)|device\.(found|gone)|lockout\.reset)'/.test(line)) {
            offenders.push(`${relative(ROOT, f)}:${i + 1}: ${line.trim()}`);
          }
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

describe('command helper: the route table of every area', () => {
  let s: TestServer;
  const commands: CommandRecord[] = [];
  before(async () => {
    s = await startServer({
      overrides: {
        NetworkConnectionManager: { data: [{ name: 'Idle', url: 'mqtt://127.0.0.1:1', autoStart: false, linkConfigs: [] }] },
        DiscoveryManager: { enabled: true, mdns: false, nats: { enabled: false } },
      },
    });
    s.rt.on('actor.command', (c) => commands.push(c));
  });
  after(async () => {
    await s?.close();
  });

  test('command - route table of every area: each non-GET route is a lifecycle route its actor kind declares, or listed as changing none; each goes through the helper', async () => {
    const doc = (await s.inject('/openapi.json')).json() as { paths: Record<string, Record<string, unknown>> };
    const found: string[] = [];
    for (const [path, methods] of Object.entries(doc.paths)) {
      for (const m of Object.keys(methods)) if (['patch', 'put', 'post', 'delete'].includes(m)) found.push(`${m.toUpperCase()} ${path}`);
    }
    assert.deepEqual(found.filter((r) => !NO_LIFECYCLE_ANYWHERE.includes(r)).sort(), [...KIND_ROUTES].sort(), 'every changing route is declared by its actor kind or listed in NO_LIFECYCLE_ANYWHERE');
    for (const route of LIFECYCLE_ROUTES) assert.ok(KIND_ROUTES.includes(route), `${route} is declared by its actor kind`);
    for (const k of ['server', 'endpoint', 'integration', 'discovery', 'device', 'lockout', 'destination', 'subscription']) {
      assert.ok((actorKinds().get(k)?.spec.routes ?? []).length > 0, `kind ${k} declares its routes`);
    }

    // a user with a failed login has a lockout actor to unlock
    const user = await s.inject({ method: 'POST', url: '/api/v1/auth/users', payload: { username: 'guard-user', password: 'guard-password-1' } });
    assert.equal(user.statusCode, 201, user.body);
    await s.app.inject({ method: 'POST', url: '/api/v1/login', payload: { username: 'guard-user', password: 'wrong-password-1' } });
    const uuid = ((await s.inject('/api/v1/auth/users')).json() as Array<{ username: string; uniqueId: string }>).find((u) => u.username === 'guard-user')!.uniqueId;
    // the routes of the server, interface, destination and subscription areas are exercised by 'command helper' above
    const requests: Record<string, { method: 'PATCH' | 'DELETE'; url: string; payload?: object; systemId: string }> = {
      'PATCH /api/v1/server/integrations': { method: 'PATCH', url: '/api/v1/server/integrations', payload: { state: 'stopped' }, systemId: 'integration:Idle' },
      'PATCH /api/v1/server/integration/{name}': { method: 'PATCH', url: '/api/v1/server/integration/Idle', payload: { state: 'stopped' }, systemId: 'integration:Idle' },
      'PATCH /api/v1/server/discovery': { method: 'PATCH', url: '/api/v1/server/discovery', payload: { state: 'stopped' }, systemId: 'discovery' },
      'DELETE /api/v1/auth/user-lockouts/{userUuid}': { method: 'DELETE', url: `/api/v1/auth/user-lockouts/${uuid}`, systemId: 'lockout:guard-user' },
    };
    for (const route of KIND_ROUTES) {
      if (LIFECYCLE_ROUTES.includes(route) || EXERCISED_ELSEWHERE[route]) continue;
      const req = requests[route];
      assert.ok(req, `${route}: a request for it is in this table`);
      const before = commands.length;
      const r = await s.inject({ method: req.method, url: req.url, ...(req.payload ? { payload: req.payload } : {}) });
      assert.equal(r.statusCode, 200, `${route}: ${r.body}`);
      assert.ok(commands.slice(before).some((c) => c.systemId === req.systemId), `${route} went through the command helper for ${req.systemId}`);
    }
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
