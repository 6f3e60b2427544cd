import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { SseClient } from '../sse-client.js';
import { startServer, waitUntil, type TestServer } from '../helpers.js';

/** Actor inspection over REST: a page, one actor with accepted events and transition history, live SSE, 404. */
describe('actor inspection', () => {
  let s: TestServer;
  let base: string;
  before(async () => {
    s = await startServer();
    await s.app.listen({ port: 0, host: '127.0.0.1' });
    const a = s.app.server.address() as { port: number };
    base = `http://127.0.0.1:${a.port}`;
  });
  after(async () => {
    await s?.close();
  });

  test('actors - a page of actors filtered by kind, state and prefix', async () => {
    const sups = (await s.inject('/api/v1/server/actors?kind=supervisor')).json();
    assert.equal(sups.total, 7);
    assert.deepEqual(
      sups.items.map((r: { systemId: string }) => r.systemId),
      ['supervisor:destinations', 'supervisor:subscriptions', 'supervisor:endpoints', 'supervisor:integrations', 'supervisor:devices', 'supervisor:lora', 'supervisor:lockouts'],
    );
    for (const r of sups.items) assert.equal(r.parent, 'server');
    const eps = (await s.inject('/api/v1/server/actors?kind=endpoint&state=listening')).json();
    assert.equal(eps.total, 2);
    assert.deepEqual(Object.keys(eps.items[0]).sort(), ['childCount', 'children', 'kind', 'name', 'parent', 'state', 'status', 'systemId']);
    assert.equal(eps.items[0].parent, 'supervisor:endpoints');
    const page = (await s.inject('/api/v1/server/actors?prefix=supervisor:&limit=2&offset=2')).json();
    assert.deepEqual([page.total, page.offset, page.limit, page.items.length], [7, 2, 2, 2]);
    assert.equal(page.items[0].systemId, 'supervisor:endpoints');
    assert.deepEqual((await s.inject('/api/v1/server/actors?kind=endpoint')).json().items.map((r: { name: string }) => r.name).sort(), ['MQTT Interface', 'MQTT WebSocket Interface']);
    const sup = (await s.inject('/api/v1/server/actors?kind=supervisor&prefix=supervisor:endpoints')).json().items[0];
    assert.deepEqual(sup.children.sort(), ['endpoint:MQTT Interface', 'endpoint:MQTT WebSocket Interface']);
    assert.equal((await s.inject('/api/v1/server/actors?limit=0')).statusCode, 400);
    assert.equal((await s.app.inject('/api/v1/server/actors')).statusCode, 401, 'needs credentials (view_stats)');
  });

  test('actors - one actor: state, accepted events, safe context, transitions; 404 for an unknown id', async () => {
    const url = `/api/v1/server/actors/${encodeURIComponent('endpoint:MQTT Interface')}`;
    assert.equal((await s.inject({ method: 'PATCH', url: '/api/v1/server/interface/MQTT%20Interface', payload: { state: 'paused' } })).statusCode, 200);
    const one = (await s.inject(url)).json();
    assert.equal(one.systemId, 'endpoint:MQTT Interface');
    assert.equal(one.kind, 'endpoint');
    assert.equal(one.machine, 'endpoint');
    assert.equal(one.state, 'listening.paused');
    assert.deepEqual(one.accepts.sort(), ['endpoint.resume', 'endpoint.stop', 'listener.failed']);
    assert.equal(one.context.name, 'MQTT Interface');
    assert.equal(one.context.handle, undefined, 'no objects or functions in the context view');
    const steps = one.transitions.map((t: { from: string; to: string; event: string }) => `${t.from}->${t.to} on ${t.event}`);
    assert.deepEqual(steps.slice(-1), ['listening.started->listening.paused on endpoint.pause']);
    assert.ok(one.transitions.every((t: { at: number }) => typeof t.at === 'number' && t.at > 0));
    assert.equal((await s.inject({ method: 'PATCH', url: '/api/v1/server/interface/MQTT%20Interface', payload: { state: 'resumed' } })).statusCode, 200);
    assert.equal((await s.inject(url)).json().transitions.at(-1).event, 'endpoint.resume');

    const dest = `/api/v1/server/actors/${encodeURIComponent('supervisor:destinations')}`;
    assert.equal((await s.inject(dest)).json().parent, 'server');
    const missing = await s.inject(`/api/v1/server/actors/${encodeURIComponent('endpoint:nothing')}`);
    assert.equal(missing.statusCode, 404);
    assert.match(missing.json().status, /No live actor has the systemId "endpoint:nothing"/);
  });

  test('actors - SSE: live transitions filtered by kind, with the stream token', async () => {
    const token = (await s.inject('/api/v1/server/actors/sse')).body;
    assert.match(token, /^[0-9a-f-]{36}$/);
    const c = new SseClient(`${base}/api/v1/server/actors/sse/stream/${token}?kind=endpoint`);
    await c.started;
    assert.equal(c.status, 200);
    try {
      await waitUntil(() => c.comments.includes('connected'), 5000, 'stream open');
      // a destination actor is created too (filtered out by kind)
      await s.inject({ method: 'POST', url: '/api/v1/messaging/publish', payload: { destinationName: 'inspect/x', payload: Buffer.from('x').toString('base64') } });
      await s.inject({ method: 'PATCH', url: '/api/v1/server/interface/MQTT%20Interface', payload: { state: 'paused' } });
      await c.waitFor((evs) => evs.some((e) => e.event === 'actorTransition' && JSON.parse(e.data).to === 'listening.paused'));
      const t = JSON.parse(c.events.find((e) => e.event === 'actorTransition')!.data);
      assert.deepEqual(Object.keys(t).sort(), ['at', 'event', 'from', 'kind', 'systemId', 'to']);
      assert.ok(c.events.every((e) => JSON.parse(e.data).kind === 'endpoint'), 'only endpoint transitions');
    } finally {
      c.close();
      await s.inject({ method: 'PATCH', url: '/api/v1/server/interface/MQTT%20Interface', payload: { state: 'resumed' } });
    }
    const reused = await s.app.inject(`/api/v1/server/actors/sse/stream/${token}`);
    assert.equal(reused.statusCode, 403, 'a token is single use');
  });

  test('actors - SSE: a client that falls behind loses the oldest transitions and is told how many', async () => {
    const token = (await s.inject('/api/v1/server/actors/sse')).body;
    const c = new SseClient(`${base}/api/v1/server/actors/sse/stream/${token}?kind=flood`);
    await c.started;
    try {
      await waitUntil(() => c.comments.includes('connected'), 5000, 'stream open');
      // 5 000 transitions in one go: the stream cannot send any of them before the last is queued
      for (let i = 0; i < 5000; i++) s.rt.emit('actor.transition', { systemId: `flood:${i}`, kind: 'flood', from: 'a', to: 'b', event: 'e', at: i });
      await c.waitFor((evs) => evs.some((e) => e.event === 'actorTransition' && JSON.parse(e.data).systemId === 'flood:4999'), 10000);
      // the first one may already be on its way when the flood starts; everything after it is capped at 1 000
      const i = c.events.findIndex((e) => e.event === 'actorTransitionsLost');
      assert.ok(i >= 0, 'told that transitions were dropped');
      const lost = JSON.parse(c.events[i]!.data).lost as number;
      const kept = c.events.slice(i + 1).filter((e) => e.event === 'actorTransition').map((e) => JSON.parse(e.data).systemId);
      assert.equal(kept.length, 1000, 'at most 1 000 queued for the client');
      assert.equal(kept[0], 'flood:4000', 'the oldest were dropped, the newest kept');
      assert.equal(lost + kept.length + c.events.slice(0, i).filter((e) => e.event === 'actorTransition').length, 5000, 'every transition is either delivered or counted as lost');
    } finally {
      c.close();
    }
  });

  test('actors - the whole tree stays available for small trees, children paged', async () => {
    const tree = (await s.inject('/api/v1/server/actors/tree?limit=3')).json();
    assert.equal(tree.machine, 'server');
    assert.equal(tree.childCount, 7);
    assert.equal(tree.children.length, 3);
  });
});
