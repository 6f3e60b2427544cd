import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT, startServer, type TestServer } from '../helpers.js';

interface StateDef {
  key: string;
  path: string;
  type: string;
  initial: string | null;
  tags: string[];
  invoke: string[];
  states: StateDef[];
}
interface TransitionDef {
  source: string;
  targets: string[];
  event: string;
  eventType: string;
  guard: string | null;
  actions: string[];
}
interface Definition {
  kind: string;
  root: StateDef;
  transitions: TransitionDef[];
}

const find = (s: StateDef, path: string): StateDef | undefined => (s.path === path ? s : s.states.map((c) => find(c, path)).find(Boolean));

/** GET /api/v1/server/machines and /machines/{kind}: the machine definitions the console draws. */
describe('machines', () => {
  let s: TestServer;
  before(async () => {
    s = await startServer();
  });
  after(async () => {
    await s?.close();
  });
  const get = async <T>(url: string): Promise<T> => {
    const r = await s.inject(url);
    assert.equal(r.statusCode, 200, `${url}: ${r.body}`);
    return r.json() as T;
  };

  test('machines - every machine kind is listed, the same kinds docs/machines draws', async () => {
    const list = await get<Array<{ kind: string; states: number; transitions: number }>>('/api/v1/server/machines');
    const kinds = list.map((m) => m.kind).sort();
    const docs = readdirSync(join(ROOT, 'docs', 'machines')).filter((f) => f.endsWith('.md')).map((f) => f.replace(/\.md$/, '')).sort();
    assert.deepEqual(kinds, docs);
    for (const k of ['server', 'supervisor', 'endpoint', 'destination', 'subscription', 'integration']) assert.ok(kinds.includes(k), k);
    const endpoint = list.find((m) => m.kind === 'endpoint')!;
    assert.ok(endpoint.states >= 8 && endpoint.transitions >= 10, JSON.stringify(endpoint));
  });

  test('machines - a definition has nested and parallel states, initial states, events and guards', async () => {
    const ep = await get<Definition>('/api/v1/server/machines/Endpoint'); // case-insensitive
    assert.equal(ep.kind, 'endpoint');
    assert.equal(ep.root.initial, 'init');
    const listening = find(ep.root, 'listening')!;
    assert.equal(listening.type, 'compound');
    const children = listening.states.map((c) => c.path);
    assert.ok(children.includes(`listening.${listening.initial}`), `the initial state ${listening.initial} is a child of listening`);
    assert.deepEqual(listening.invoke, ['listener']);
    for (const p of ['listening.started', 'listening.paused']) assert.ok(children.includes(p), p);
    assert.deepEqual(find(ep.root, 'backoff')!.tags, ['degraded']);
    const pause = ep.transitions.find((t) => t.eventType === 'endpoint.pause')!;
    assert.deepEqual([pause.source, pause.targets], ['listening.started', ['listening.paused']]);
    assert.ok(pause.actions.length > 0 && pause.actions.every((a) => typeof a === 'string' && a !== 'action'), `actions named: ${pause.actions}`);
    const auto = ep.transitions.find((t) => t.source === 'init' && t.guard === 'autoStart')!;
    assert.deepEqual([auto.event, auto.eventType, auto.targets], ['always', '', ['starting']]);
    assert.ok(ep.transitions.some((t) => t.source === 'backoff' && t.event === 'after backoff' && t.targets[0] === 'starting'));

    const dest = await get<Definition>('/api/v1/server/machines/destination');
    const live = find(dest.root, 'live')!;
    assert.equal(live.type, 'parallel');
    assert.equal(live.initial, null, 'a parallel state enters every region');
    assert.deepEqual(live.states.map((c) => [c.path, c.initial]), [['live.run', 'resolving'], ['live.load', 'resolving']]);
  });

  test('machines - every transition of the API is the one docs/machines/<kind>.md draws (one source)', async () => {
    for (const { kind } of await get<Array<{ kind: string }>>('/api/v1/server/machines')) {
      const d = await get<Definition>(`/api/v1/server/machines/${kind}`);
      const md = readFileSync(join(ROOT, 'docs', 'machines', `${kind}.md`), 'utf8');
      const node = (path: string) => `${kind}${path ? `.${path}` : ''}`.replace(/[^A-Za-z0-9_]/g, '_');
      // the Mermaid diagrams draw the states under the root; the root's own handlers (server: subtree.restart) are
      // in the API only
      for (const t of d.transitions.filter((x) => x.source !== '')) {
        const label = `${t.event}${t.guard ? ` [${t.guard}]` : ''}${t.actions.length ? ` / ${t.actions.join(', ')}` : ''}`;
        const lines = t.targets.length ? t.targets.map((to) => `${node(t.source)} --> ${node(to)} : ${label}`) : [`${node(t.source)} : on ${label}`];
        for (const line of lines) assert.ok(md.includes(`${line}\n`), `docs/machines/${kind}.md draws "${line}" (npm run diagrams)`);
      }
    }
  });

  test('machines - each live actor names a machine kind the API has', async () => {
    const kinds = new Set((await get<Array<{ kind: string }>>('/api/v1/server/machines')).map((m) => m.kind));
    for (const id of ['server', 'supervisor:endpoints', 'endpoint:MQTT Interface']) {
      const a = await get<{ machine: string }>(`/api/v1/server/actors/${encodeURIComponent(id)}`);
      assert.ok(kinds.has(a.machine), `${id}: ${a.machine}`);
    }
  });

  test('machines - an unknown kind is a JSON 404 naming the known ones; credentials are needed; OpenAPI describes both', async () => {
    const r = await s.inject('/api/v1/server/machines/nosuch');
    assert.equal(r.statusCode, 404);
    assert.match(r.json().status, /^No machine kind "nosuch"; known kinds: .*endpoint/);
    assert.equal((await s.app.inject('/api/v1/server/machines')).statusCode, 401);
    const doc = (await s.inject('/openapi.json')).json();
    assert.ok(doc.paths['/api/v1/server/machines']?.get);
    assert.ok(doc.paths['/api/v1/server/machines/{kind}']?.get);
    assert.ok(doc.components.schemas.MachineDefinition && doc.components.schemas.MachineState && doc.components.schemas.MachineTransition);
  });
});
