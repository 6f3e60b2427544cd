import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Browser } from 'playwright-core';
import { adminPasswordOf, removeDir, spawnBroker, tempDir, type BrokerProcess } from '../helpers.js';
import { assertAccessible, assertClean, buildConsoleIfStale, goTo, launchChromium, login, watch } from './browser.js';

/**
 * The console's statecharts (docs/console.md, "Statecharts") in Chromium against a broker in a child process: an
 * actor's machine drawn with elkjs under the console's Content-Security-Policy (no eval, no worker), its current
 * state highlighted and followed live from the transition stream, its timeline stepped through; the Machines page
 * with every machine kind. elkjs (dist/console/elk.js) is fetched by these pages only.
 */
const ENDPOINT = 'MQTT Interface';
const ACTOR = `endpoint:${ENDPOINT}`;

describe('console statecharts', () => {
  let browser: Browser;
  let broker: BrokerProcess;
  let data = '';
  let base = '';
  let auth = '';
  const rest = async (path: string, init: { method?: string; body?: unknown } = {}) => {
    const r = await fetch(`${base}${path}`, {
      method: init.method ?? 'GET',
      headers: { authorization: auth, ...(init.body !== undefined ? { 'content-type': 'application/json' } : {}) },
      body: init.body !== undefined ? JSON.stringify(init.body) : undefined,
    });
    const text = await r.text();
    assert.ok(r.ok, `${init.method ?? 'GET'} ${path}: ${r.status} ${text}`);
    return text ? JSON.parse(text) : undefined;
  };
  const actorState = async () => ((await rest(`/api/v1/server/actors/${encodeURIComponent(ACTOR)}`)) as { state: string }).state;
  const admin = () => ({ username: 'admin', password: adminPasswordOf(data) });

  before(async () => {
    buildConsoleIfStale();
    data = tempDir('switchyard-statecharts-');
    broker = await spawnBroker({ SWITCHYARD_DATA_DIR: data });
    base = `http://127.0.0.1:${broker.port}`;
    auth = `Basic ${Buffer.from(`admin:${adminPasswordOf(data)}`).toString('base64')}`;
    browser = await launchChromium();
  });

  after(async () => {
    await browser?.close();
    await broker?.stop();
    if (data) removeDir(data);
  });

  test("console statecharts - an actor's statechart highlights its current state and follows a transition made over REST", async () => {
    const w = await watch(browser);
    const { page } = w;
    const requestTimes: Array<{ url: string; at: number }> = [];
    page.on('request', (r) => requestTimes.push({ url: r.url(), at: Date.now() }));
    try {
      await login(page, base, admin());
      assert.equal(w.requests.filter((u) => u.endsWith('/console/elk.js')).length, 0, 'the first page does not load elkjs');
      await goTo(page, 'Actors');
      const stream = page.waitForResponse((r) => r.url().includes('/api/v1/server/actors/sse/stream/') && r.status() === 200);
      await page.getByRole('link', { name: ACTOR, exact: true }).click();
      await page.getByRole('heading', { level: 1, name: `Actor ${ACTOR}` }).waitFor();
      assert.match(page.url(), /#\/actor\?id=endpoint%3AMQTT\+Interface$/, 'the actor view has its own URL');
      const before = await actorState();
      const chart = page.locator('svg[data-kind=endpoint]');
      await chart.waitFor();
      assert.equal(w.requests.filter((u) => u === `${base}/console/elk.js`).length, 1, 'elkjs is loaded by the statechart page, once');
      // the current state is highlighted: the leaf and its ancestors, nothing else
      await page.locator(`svg[data-active="${before}"]`).waitFor();
      const active = await page.locator('svg[data-kind=endpoint] g.state.active').evaluateAll((gs) => gs.map((g) => g.getAttribute('data-state')));
      assert.deepEqual(active.sort(), before.split('.').map((_, i, a) => a.slice(0, i + 1).join('.')).sort());
      assert.ok((await chart.locator('g.edge').count()) >= 10, 'transitions are drawn');
      assert.ok((await chart.getByText('endpoint.pause', { exact: true }).count()) >= 1, 'edges are labelled with their events');
      await stream;

      // pause over REST: the highlight moves, from the transition stream (not a reload of the actor)
      await page.evaluate(() => {
        const w = window as unknown as { __activeAt?: Record<string, number> };
        w.__activeAt = {};
        new MutationObserver(() => {
          const v = document.querySelector('svg[data-kind=endpoint]')?.getAttribute('data-active') ?? '';
          w.__activeAt![v] ??= Date.now();
        }).observe(document.body, { subtree: true, attributes: true, attributeFilter: ['data-active'] });
      });
      const sent = Date.now();
      await rest(`/api/v1/server/interface/${encodeURIComponent(ENDPOINT)}`, { method: 'PATCH', body: { state: 'paused' } });
      const paused = await actorState();
      assert.notEqual(paused, before);
      await page.locator(`svg[data-active="${paused}"]`).waitFor();
      const shownAt = (await page.evaluate(`window.__activeAt[${JSON.stringify(paused)}]`)) as number;
      const reads = requestTimes.filter((r) => r.url.includes(`/api/v1/server/actors/${encodeURIComponent(ACTOR)}`) && r.at >= sent && r.at <= shownAt);
      assert.deepEqual(reads, [], 'the new state came from the transition stream');
      process.stdout.write(`# statechart: REST pause -> highlighted ${paused} in ${shownAt - sent} ms\n`);
      const fired = chart.locator('g.edge.fired');
      assert.ok((await fired.count()) >= 1, 'the transition taken is marked');
      assert.match((await fired.first().textContent()) ?? '', /endpoint\.pause/);
      await page.getByTestId('actor-state').filter({ hasText: new RegExp(`^${paused.replace('.', '\\.')}$`) }).waitFor();
      const newest = page.locator('ol.timeline li').first();
      assert.match((await newest.textContent()) ?? '', new RegExp(`${before.replace('.', '\\.')} → ${paused.replace('.', '\\.')} on endpoint\\.pause`));
      await assertAccessible(page, 'actor');

      // step back through the timeline, then follow live again
      await page.getByRole('button', { name: 'Step back' }).click();
      await page.locator(`svg[data-active="${before}"]`).waitFor();
      await page.getByText(/^Showing transition \d+ of \d+$/).waitFor();
      await page.getByRole('button', { name: 'Follow live' }).click();
      await page.locator(`svg[data-active="${paused}"]`).waitFor();
      await page.getByText('Following live transitions').waitFor();

      // and the way back, live too
      await rest(`/api/v1/server/interface/${encodeURIComponent(ENDPOINT)}`, { method: 'PATCH', body: { state: 'resumed' } });
      await page.locator(`svg[data-active="${await actorState()}"]`).waitFor();
      assertClean(w, base, [[401, '/api/v1/session']]);
    } finally {
      await w.close();
      if ((await actorState()) !== 'listening.started') await rest(`/api/v1/server/interface/${encodeURIComponent(ENDPOINT)}`, { method: 'PATCH', body: { state: 'resumed' } }).catch(() => undefined);
    }
  });

  test('console statecharts - the Machines page draws every machine kind (dark theme)', async () => {
    const w = await watch(browser, 'dark');
    const { page } = w;
    try {
      await login(page, base, admin());
      await goTo(page, 'Machines');
      const kinds = ((await rest('/api/v1/server/machines')) as Array<{ kind: string; states: number }>).map((m) => m.kind);
      assert.ok(kinds.length >= 7);
      for (const kind of kinds) {
        const chart = page.locator(`svg[data-kind="${kind}"]`);
        await chart.waitFor();
        assert.ok((await chart.locator('g.state').count()) >= 2, `${kind}: its states are drawn`);
        assert.equal(await chart.locator('g.state.active').count(), 0, `${kind}: no state is current on the Machines page`);
      }
      // nested and parallel: the destination machine's parallel state holds its two regions, drawn inside it
      const box = async (state: string) => page.locator(`svg[data-kind=destination] g[data-state="${state}"] > rect`).first().boundingBox();
      const live = (await box('live'))!;
      for (const region of ['live.run', 'live.load']) {
        const r = (await box(region))!;
        assert.ok(r.x >= live.x && r.y >= live.y && r.x + r.width <= live.x + live.width && r.y + r.height <= live.y + live.height, `${region} is drawn inside live`);
      }
      await page.getByRole('navigation', { name: 'Machine kinds' }).getByRole('link', { name: 'endpoint', exact: true }).click();
      await page.locator('svg[data-kind="destination"]').waitFor({ state: 'detached' });
      await page.locator('svg[data-kind="endpoint"]').waitFor();
      assert.match(page.url(), /#\/machines\?kind=endpoint$/);
      await assertAccessible(page, 'machines (dark)');
      assertClean(w, base, [[401, '/api/v1/session']]);
    } finally {
      await w.close();
    }
  });
});
