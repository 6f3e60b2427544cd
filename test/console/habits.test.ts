import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import mqtt from 'mqtt';
import type { Browser } from 'playwright-core';
import { adminPasswordOf, removeDir, spawnBroker, tempDir, type BrokerProcess } from '../helpers.js';
import { assertAccessible, assertClean, buildConsoleIfStale, goTo, launchChromium, login, watch } from './browser.js';

/**
 * The habits people expect of a console (issue 23, item 5), in Chromium against a broker in a child process: "copy
 * as curl" gives the command that does the same thing, times are shown in the viewer's zone and numbers with their
 * units, the transition timeline is walked with the keyboard.
 */
const ENDPOINT = 'MQTT Interface';
const run = promisify(execFile);

describe('console habits', () => {
  let browser: Browser;
  let broker: BrokerProcess;
  let data = '';
  let base = '';
  let auth = '';
  const password = () => adminPasswordOf(data);
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
  const endpoint = async () => ((await rest('/api/v1/server/interfaces')) as Array<{ name: string; state: string; port: number }>).find((e) => e.name === ENDPOINT)!;
  /** A copied command run by a shell, with the password added where curl would ask for it. */
  const runCurl = async (command: string) => {
    assert.ok(!command.includes(password()), 'no password in the copied command');
    const withPassword = command.replace("-u 'admin'", `-u 'admin:${password()}'`);
    assert.notEqual(withPassword, command, 'the command names the user');
    return (await run('sh', ['-c', withPassword])).stdout;
  };

  before(async () => {
    buildConsoleIfStale();
    data = tempDir('switchyard-habits-');
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

  test('console habits - "copy as curl" copies the command that does the same action, without the password', async () => {
    const w = await watch(browser);
    const { page, context } = w;
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: base });
    try {
      await login(page, base, { username: 'admin', password: password() });
      await goTo(page, 'Endpoints');
      const row = page.locator(`tr[data-endpoint="${ENDPOINT}"]`);
      await row.locator('[data-testid=state]').filter({ hasText: /^Started$/ }).waitFor();

      await page.getByRole('button', { name: `Copy as curl: Pause ${ENDPOINT}`, exact: true }).click();
      const shown = row.getByRole('status').filter({ hasText: /^Copied: / }).locator('code');
      await shown.waitFor();
      const command = (await shown.textContent())!;
      assert.equal(await page.evaluate('navigator.clipboard.readText()'), command, 'the command is on the clipboard');
      assert.equal(command, `curl --fail-with-body -X PATCH -u 'admin' -H 'Content-Type: application/json' --data '{"state":"paused"}' '${base}/api/v1/server/interface/MQTT%20Interface'`);
      assert.equal((await endpoint()).state, 'Started', 'copying did not act');
      assert.match(await runCurl(command), /"status":"Success"/);
      assert.equal((await endpoint()).state, 'Paused', 'the copied command paused the endpoint');
      await row.locator('[data-testid=state]').filter({ hasText: /^Paused$/ }).waitFor(); // and the console saw it live
      await assertAccessible(page, 'endpoints with a copied command');

      // the page's own data too
      await page.getByRole('button', { name: 'Copy as curl: the data of Endpoints', exact: true }).click();
      const list = JSON.parse(await runCurl((await page.locator('.page-head code').textContent())!)) as Array<{ name: string; state: string }>;
      assert.equal(list.find((e) => e.name === ENDPOINT)?.state, 'Paused');
      assertClean(w, base, [[401, '/api/v1/session']]);
    } finally {
      await w.close();
      if ((await endpoint()).state !== 'Started') await rest(`/api/v1/server/interface/${encodeURIComponent(ENDPOINT)}`, { method: 'PATCH', body: { state: 'resumed' } });
    }
  });

  test("console habits - times in the viewer's zone, numbers with their units", async () => {
    const client = await mqtt.connectAsync(`mqtt://127.0.0.1:${(await endpoint()).port}`, { clientId: 'habits-client', username: 'admin', password: password(), reconnectPeriod: 0 });
    const zones: Record<string, string> = {};
    try {
      await client.publishAsync('habits/a', 'x', { qos: 1 });
      for (const [timezoneId, label] of [['Asia/Tokyo', 'GMT+9'], ['America/Sao_Paulo', 'GMT-3']] as const) {
        const w = await watch(browser, 'light', { timezoneId, locale: 'en-GB' });
        const { page } = w;
        try {
          await login(page, base, { username: 'admin', password: password() });
          await page.getByTestId('rate-published').filter({ hasText: / msg\/s$/ }).waitFor();
          await page.getByText(/^\d[\d,]* msg$/).first().waitFor(); // messages published, with the unit
          await page.getByTestId('connections').filter({ hasText: /^\d+ open$/ }).waitFor();
          await goTo(page, 'Connections');
          const cell = page.getByRole('row').filter({ hasText: 'habits-client' });
          const time = cell.locator('time');
          await time.waitFor();
          const shown = (await time.textContent())!;
          assert.ok(shown.endsWith(label), `${timezoneId}: "${shown}" names the viewer's zone`);
          const at = Date.parse((await time.getAttribute('datetime'))!);
          assert.ok(Math.abs(Date.now() - at) < 10 * 60_000, 'the machine-readable time is the connection time');
          assert.match((await cell.textContent())!, /\d(\.\d)? (B|KiB)/, 'bytes with their unit');
          zones[timezoneId] = shown;
          assertClean(w, base, [[401, '/api/v1/session']]);
        } finally {
          await w.close();
        }
      }
      assert.notEqual(zones['Asia/Tokyo']!.replace(/ GMT.*$/, ''), zones['America/Sao_Paulo']!.replace(/ GMT.*$/, ''), 'the same moment, shown in each viewer’s zone');
    } finally {
      await client.endAsync(true);
    }
  });

  test('console habits - the transition timeline is walked with the arrow keys', async () => {
    const w = await watch(browser);
    const { page } = w;
    try {
      await login(page, base, { username: 'admin', password: password() });
      await page.goto(`${base}/console/#/actor?id=${encodeURIComponent(`endpoint:${ENDPOINT}`)}`);
      const chart = page.locator('svg[data-kind=endpoint]');
      await chart.waitFor();
      const stream = await rest(`/api/v1/server/actors/${encodeURIComponent(`endpoint:${ENDPOINT}`)}`);
      const now = stream.state as string;
      await page.locator(`svg[data-active="${now}"]`).waitFor();
      const items = page.locator('ol.timeline button');
      const n = await items.count();
      assert.ok(n >= 2, `a timeline (${n})`);
      await items.first().focus();
      await page.keyboard.press('ArrowDown');
      await page.getByText(`Showing transition ${n - 1} of ${n}`).waitFor();
      assert.equal(await page.evaluate('document.activeElement.getAttribute("aria-pressed")'), 'true', 'the focused transition is the one shown');
      const older = /→ (\S+)/.exec((await items.nth(1).textContent())!)![1]!;
      await page.locator(`svg[data-active="${older}"]`).waitFor();
      await page.keyboard.press('End');
      await page.getByText(`Showing transition 1 of ${n}`).waitFor();
      await page.keyboard.press('Home');
      await page.getByText('Following live transitions').waitFor();
      await page.locator(`svg[data-active="${now}"]`).waitFor();
      assertClean(w, base, [[401, '/api/v1/session']]);
    } finally {
      await w.close();
    }
  });
});
