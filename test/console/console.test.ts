import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import mqtt from 'mqtt';
import type { Browser } from 'playwright-core';
import { CONFIG_DIR, adminPasswordOf, removeDir, spawnBroker, tempDir, type BrokerProcess } from '../helpers.js';
import { assertAccessible, assertClean, buildConsoleIfStale, goTo, launchChromium, login, watch as watchPage } from './browser.js';

/**
 * The web console (docs/console.md) in a real Chromium (Debian's, as .ci/run installs it) against real brokers in
 * child processes, one with authentication on and one with it off. The console is built from console/ first when
 * a source is newer than dist/console (scripts/console.mjs --if-stale, about a second), so the current sources are
 * what is tested.
 *
 * Every page is checked for: real data on it; no request to anything but the broker on 127.0.0.1; no console error
 * (an expected 401/403 answer, which Chromium reports as "Failed to load resource", is allowed only where a test
 * asks for it); no serious or critical axe-core violation.
 */
const ENDPOINT = 'MQTT Interface';
const VIEWER = { username: 'console-viewer', password: 'viewer-password-1' };

describe('console', () => {
  let browser: Browser;
  let broker: BrokerProcess;
  let open: BrokerProcess; // authentication off
  const dirs: string[] = [];
  let base = '';
  let adminAuth = '';

  const rest = async (path: string, init: { method?: string; body?: unknown } = {}) => {
    const r = await fetch(`${base}${path}`, {
      method: init.method ?? 'GET',
      headers: { authorization: adminAuth, ...(init.body !== undefined ? { 'content-type': 'application/json' } : {}) },
      body: init.body !== undefined ? JSON.stringify(init.body) : undefined,
    });
    const text = await r.text();
    assert.ok(r.ok, `${init.method ?? 'GET'} ${path}: ${r.status} ${text}`);
    return text ? JSON.parse(text) : undefined;
  };
  const endpointState = async () => ((await rest('/api/v1/server/interfaces')) as Array<{ name: string; state: string }>).find((e) => e.name === ENDPOINT)?.state;

  before(async () => {
    buildConsoleIfStale();
    const data = tempDir('switchyard-console-');
    const openData = tempDir('switchyard-console-open-');
    const openConfig = tempDir('switchyard-console-config-');
    dirs.push(data, openData, openConfig);
    for (const f of readdirSync(CONFIG_DIR)) if (f.endsWith('.yaml')) copyFileSync(join(CONFIG_DIR, f), join(openConfig, f));
    const auth = readFileSync(join(CONFIG_DIR, 'AuthManager.yaml'), 'utf8');
    assert.match(auth, /authenticationEnabled: true/);
    writeFileSync(join(openConfig, 'AuthManager.yaml'), auth.replace('authenticationEnabled: true', 'authenticationEnabled: false'));
    [broker, open] = await Promise.all([
      spawnBroker({ SWITCHYARD_DATA_DIR: data }),
      spawnBroker({ SWITCHYARD_DATA_DIR: openData, SWITCHYARD_CONFIG_DIR: openConfig }),
    ]);
    base = `http://127.0.0.1:${broker.port}`;
    adminAuth = `Basic ${Buffer.from(`admin:${adminPasswordOf(data)}`).toString('base64')}`;
    // real data: a destination tree, and a user who may look (view_stats) but not manage endpoints
    await rest('/api/v1/messaging/publish', { method: 'POST', body: { destinationName: 'console/plant/temperature', message: { payload: Buffer.from('21.5').toString('base64') } } });
    const viewer = await rest('/api/v1/auth/users', { method: 'POST', body: VIEWER });
    const server = (await rest('/api/v1/name')) as string;
    const acl = await rest(`/api/v1/auth/resources/acl?resourceType=Server&resourceKey=${encodeURIComponent(server)}`);
    await rest('/api/v1/auth/resources/acl', {
      method: 'PUT',
      body: { resourceType: 'Server', resourceKey: server, entries: [...acl.entries, { principalType: 'IDENTITY', principalId: viewer.uniqueId, effect: 'ALLOW', permissions: ['view_stats'] }] },
    });
    browser = await launchChromium();
  });

  after(async () => {
    await browser?.close();
    await Promise.all([broker?.stop(), open?.stop()]);
    for (const d of dirs) removeDir(d);
  });

  const watch = (colorScheme: 'light' | 'dark' = 'light') => watchPage(browser, colorScheme);

  test('console - / redirects to /console/, served under a strict Content-Security-Policy', async () => {
    const root = await fetch(`${base}/`, { redirect: 'manual' });
    assert.equal(root.status, 302);
    assert.equal(root.headers.get('location'), '/console/');
    const page = await fetch(`${base}/console/`);
    assert.equal(page.status, 200);
    assert.match(page.headers.get('content-type') ?? '', /text\/html/);
    const csp = page.headers.get('content-security-policy') ?? '';
    assert.match(csp, /default-src 'self'/);
    assert.match(csp, /script-src 'self'(;|$)/);
    assert.doesNotMatch(csp, /unsafe-eval|unsafe-inline/);
    const body = await page.text();
    assert.doesNotMatch(body, /<script(?![^>]*\bsrc=)[^>]*>/, 'no inline script');
    const js = await fetch(`${base}/console/main.js`);
    assert.equal(js.status, 200);
    assert.match(js.headers.get('content-type') ?? '', /javascript/);
    assert.match(js.headers.get('content-security-policy') ?? '', /default-src 'self'/);
  });

  test('console - logs in and every page shows real data from the API', async () => {
    const w = await watch();
    const { page } = w;
    try {
      await page.goto(`${base}/console/`);
      await page.getByLabel('User name').waitFor();
      await assertAccessible(page, 'login');
      await login(page, base, { username: 'admin', password: adminPasswordOf(dirs[0]!) });
      await page.getByText('Signed in as').waitFor();
      await page.getByTestId('health').filter({ hasText: /^(Ok|Warning)$/ }).waitFor();
      await page.getByRole('rowheader', { name: 'Store' }).waitFor();
      await page.getByTestId('rate-published').filter({ hasText: /msg\/s$/ }).waitFor();
      await assertAccessible(page, 'overview');

      await goTo(page, 'Endpoints');
      await page.locator(`tr[data-endpoint="${ENDPOINT}"] [data-testid=state]`).filter({ hasText: /^Started$/ }).waitFor();
      await page.getByRole('rowheader', { name: 'MQTT WebSocket Interface' }).waitFor();
      await assertAccessible(page, 'endpoints');

      await goTo(page, 'Connections');
      await page.getByRole('cell', { name: /^REST/ }).first().waitFor(); // the console's own REST session
      await page.getByRole('cell', { name: 'admin', exact: true }).first().waitFor();
      await assertAccessible(page, 'connections');

      await goTo(page, 'Destinations');
      await page.getByRole('link', { name: 'console/' }).click();
      await page.getByRole('link', { name: 'plant/' }).click();
      await page.getByRole('rowheader', { name: 'temperature' }).waitFor();
      assert.match(page.url(), /#\/destinations\?prefix=console%2Fplant$/, 'the namespace position is in the URL');
      await assertAccessible(page, 'destinations');

      await goTo(page, 'Actors');
      await page.getByRole('rowheader', { name: `endpoint:${ENDPOINT}`, exact: true }).waitFor();
      await page.getByLabel('Kind').fill('supervisor');
      await page.getByRole('button', { name: 'Filter' }).click();
      await page.getByText('actors of kind supervisor').waitFor();
      await page.getByRole('rowheader', { name: 'supervisor:endpoints' }).waitFor();
      assert.equal(await page.getByRole('rowheader', { name: `endpoint:${ENDPOINT}`, exact: true }).count(), 0, 'the kind filter applies');
      assert.match(page.url(), /#\/actors\?kind=supervisor$/);
      await assertAccessible(page, 'actors');

      // each page has its own URL: opened directly, it shows the same view
      await page.goto(`${base}/console/#/endpoints`);
      await page.getByRole('heading', { level: 1, name: 'Endpoints' }).waitFor();
      await page.locator('h1:focus').waitFor(); // the page has moved the focus to its heading (after rendering)
      // keyboard: from the skip link, Tab walks the navigation, Enter opens a page and focus moves to its heading
      const focused = () => page.evaluate("document.activeElement && document.activeElement.tagName + ' ' + document.activeElement.textContent");
      await page.getByRole('link', { name: 'Skip to content' }).focus();
      await page.keyboard.press('Tab');
      assert.equal(await focused(), 'A Overview', 'Tab reaches the navigation');
      for (let i = 0; i < 4; i++) await page.keyboard.press('Tab');
      assert.equal(await focused(), 'A Actors');
      await page.keyboard.press('Enter');
      await page.getByRole('heading', { level: 1, name: 'Actors' }).waitFor();
      await page.locator('h1:focus').waitFor(); // the new page's heading takes the focus
      await page.getByRole('link', { name: 'Skip to content' }).focus();
      await page.keyboard.press('Enter');
      assert.equal(await focused(), 'H1 Actors', 'the skip link moves the focus to the content');
      assertClean(w, base, [[401, '/api/v1/session']]); // before the login: "not logged in"
    } finally {
      await w.close();
    }
  });

  test('console - stopping and starting an endpoint from the console shows each state without a reload', async () => {
    const w = await watch();
    const { page } = w;
    try {
      await login(page, base, { username: 'admin', password: adminPasswordOf(dirs[0]!) });
      const stream = page.waitForResponse((r) => r.url().includes('/api/v1/server/actors/sse/stream/') && r.status() === 200);
      await goTo(page, 'Endpoints');
      await stream; // the live transition stream is open
      await page.evaluate('window.__sameDocument = true');
      const row = page.locator(`tr[data-endpoint="${ENDPOINT}"]`);
      const state = (s: string) => row.locator('[data-testid=state]').filter({ hasText: new RegExp(`^${s}$`) });
      await state('Started').waitFor();

      await page.getByRole('button', { name: `Stop ${ENDPOINT}`, exact: true }).click();
      await state('Stopped').waitFor();
      assert.equal(await endpointState(), 'Stopped', 'the broker stopped it');
      await page.getByRole('status').filter({ hasText: `Stop ${ENDPOINT}: Success` }).waitFor();

      await page.getByRole('button', { name: `Start ${ENDPOINT}`, exact: true }).click();
      await state('Started').waitFor();
      assert.equal(await endpointState(), 'Started');

      // a change made elsewhere (here over REST) arrives through the actor transition stream
      await rest(`/api/v1/server/interface/${encodeURIComponent(ENDPOINT)}`, { method: 'PATCH', body: { state: 'paused' } });
      await state('Paused').waitFor();
      await page.getByRole('button', { name: `Resume ${ENDPOINT}`, exact: true }).click();
      await state('Started').waitFor();
      assert.equal(await endpointState(), 'Started');

      assert.equal(await page.evaluate('window.__sameDocument'), true, 'the page was never reloaded');
      assertClean(w, base, [[401, '/api/v1/session']]);
    } finally {
      await w.close();
      if ((await endpointState()) !== 'Started') await rest(`/api/v1/server/interface/${encodeURIComponent(ENDPOINT)}`, { method: 'PATCH', body: { state: 'started' } });
    }
  });

  test('console - a user without manage_interfaces sees the reason of the 403 and nothing changes', async () => {
    const w = await watch();
    const { page } = w;
    try {
      await login(page, base, VIEWER);
      await page.getByText(`Signed in as ${VIEWER.username}`).waitFor();
      await goTo(page, 'Endpoints');
      const row = page.locator(`tr[data-endpoint="${ENDPOINT}"]`);
      await row.locator('[data-testid=state]').filter({ hasText: /^Started$/ }).waitFor();
      await page.getByRole('button', { name: `Stop ${ENDPOINT}`, exact: true }).click();
      const alert = page.getByRole('alert');
      await alert.filter({ hasText: 'needs the permission manage_interfaces' }).waitFor();
      assert.match((await alert.textContent()) ?? '', /^Access denied: PATCH \/api\/v1\/server\/interface\/:endpoint needs the permission manage_interfaces on Server .+\(HTTP 403\)$/);
      assert.equal(await endpointState(), 'Started', 'the endpoint was not stopped');
      await assertAccessible(page, 'endpoints with an error');
      assertClean(w, base, [
        [401, '/api/v1/session'],
        [403, '/api/v1/server/interface/'],
      ]);
    } finally {
      await w.close();
    }
  });

  test('console - with authentication off it opens without a login and every page works (dark theme)', async () => {
    const origin = `http://127.0.0.1:${open.port}`;
    const w = await watch('dark'); // the system asks for dark: the console follows (and axe checks its contrast)
    const { page } = w;
    let client: mqtt.MqttClient | undefined;
    try {
      await page.goto(`${origin}/`); // redirected to /console/
      await page.getByRole('heading', { level: 1, name: 'Overview' }).waitFor();
      await page.getByText('Authentication is off').waitFor();
      await page.getByRole('rowheader', { name: 'Store' }).waitFor();
      assert.equal(await page.getByLabel('Password').count(), 0, 'no login form');
      const background = await page.evaluate('getComputedStyle(document.body).backgroundColor');
      assert.equal(background, 'rgb(21, 23, 27)', 'the dark theme');
      await assertAccessible(page, 'overview (dark)');
      await goTo(page, 'Endpoints');
      await page.locator(`tr[data-endpoint="${ENDPOINT}"] [data-testid=state]`).filter({ hasText: /^Started$/ }).waitFor();
      await assertAccessible(page, 'endpoints (dark)');
      const port = ((await (await fetch(`${origin}/api/v1/server/interfaces`)).json()) as Array<{ name: string; port: number }>).find((e) => e.name === ENDPOINT)!.port;
      client = await mqtt.connectAsync(`mqtt://127.0.0.1:${port}`, { clientId: 'console-test-client', reconnectPeriod: 0 });
      await goTo(page, 'Connections');
      await page.getByRole('cell', { name: 'console-test-client' }).waitFor(); // refreshed every 5 s
      await assertAccessible(page, 'connections (dark)');
      await goTo(page, 'Destinations');
      await page.getByText(/entries under the root/).waitFor();
      await assertAccessible(page, 'destinations (dark)');
      await goTo(page, 'Actors');
      await page.getByRole('rowheader', { name: 'server', exact: true }).waitFor();
      await assertAccessible(page, 'actors (dark)');
      assertClean(w, origin);
    } finally {
      await client?.endAsync(true);
      await w.close();
    }
  });
});
