import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, readdirSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import mqtt from 'mqtt';
import type { Browser, Page } from 'playwright-core';
import { CONFIG_DIR, adminPasswordOf, removeDir, spawnBroker, tempDir, type BrokerProcess } from '../helpers.js';
import { PtyPair, Rn2483Sim } from '../lora/rn2483-sim.js';
import { assertAccessible, assertClean, buildConsoleIfStale, goTo, launchChromium, login, watch } from './browser.js';

/**
 * The console's management pages (issue 23, item 2: users, groups and ACLs, integrations, discovery, hardware, LoRa,
 * schemas, models, logs, config, and the destination and connection detail views) in Chromium against a broker in a
 * child process, started as the README starts it with a config folder that adds an integration link (to a closed
 * port on 127.0.0.1: it backs off, its outbox fills), an I²C device on a bus that does not exist, and a LoRa radio on
 * a pseudo-terminal whose other end is the simulated RN2483 modem of test/lora (socat, stopped by pid), which hears a
 * node; so those pages list real objects in their real states.
 *
 * The data is made through the REST API first (a user, a group, a schema, a model, messages); every page is checked
 * for that data, for no request anywhere but the broker on 127.0.0.1, no console error and no serious or critical
 * axe-core violation.
 */
const VIEWER = { username: 'mgmt-viewer', password: 'viewer-password-1' };
const LINK = 'site-b';
const MODEL_BYTES = Buffer.from('{"format":"opaque","note":"console model test"}');

describe('console management pages', () => {
  let browser: Browser;
  let broker: BrokerProcess;
  const dirs: string[] = [];
  let base = '';
  let auth = '';
  let pty: PtyPair | undefined;
  let modem: Rn2483Sim | undefined;
  const admin = () => ({ username: 'admin', password: adminPasswordOf(dirs[0]!) });

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
  const mqttPort = async () => ((await rest('/api/v1/server/interfaces')) as Array<{ name: string; port: number }>).find((e) => e.name === 'MQTT Interface')!.port;
  const linkState = async () => ((await rest('/api/v1/server/integrations/status')).list as Array<{ interfaceName: string; runState: string }>).find((l) => l.interfaceName === LINK)?.runState;

  before(async () => {
    buildConsoleIfStale();
    const data = tempDir('switchyard-console-mgmt-');
    const config = tempDir('switchyard-console-mgmt-config-');
    dirs.push(data, config);
    for (const f of readdirSync(CONFIG_DIR)) if (f.endsWith('.yaml')) copyFileSync(join(CONFIG_DIR, f), join(config, f));
    // a port that was free a moment ago: nothing listens there, so the link backs off and keeps its outbox
    const closed = await new Promise<number>((res) => {
      const s = createServer().listen(0, '127.0.0.1', () => {
        const port = (s.address() as { port: number }).port;
        s.close(() => res(port));
      });
    });
    writeFileSync(
      join(config, 'NetworkConnectionManager.yaml'),
      `NetworkConnectionManager:
  data:
    - name: ${LINK}
      url: mqtt://127.0.0.1:${closed}
      linkConfigs:
        - { direction: push, localNamespace: 'plant/#', remoteNamespace: 'site-a/', qualityOfService: 1 }
  globalConfig:
    backoff: { initial: 1000, max: 5000, jitter: 0.2 }
`,
    );
    pty = new PtyPair(tempDir('switchyard-console-mgmt-lora-'));
    dirs.push(pty.dir);
    await pty.start();
    modem = await Rn2483Sim.open(pty.sim);
    writeFileSync(
      join(config, 'Devices.yaml'),
      `DeviceManager:
  buses:
    - bus: 97
      devices: [{ name: weather, address: 0x76, driver: bme280, topic: sensors/weather }]
LoRaDeviceManager:
  data: [{ name: field-radio, type: loraSerial, serialConfig: { port: ${pty.radio} }, address: 1 }]
`,
    );
    broker = await spawnBroker({ SWITCHYARD_DATA_DIR: data, SWITCHYARD_CONFIG_DIR: config });
    base = `http://127.0.0.1:${broker.port}`;
    auth = `Basic ${Buffer.from(`admin:${adminPasswordOf(data)}`).toString('base64')}`;

    // real data, made through the API: a user who may look but not manage, a group, a schema, a model, messages
    const viewer = await rest('/api/v1/auth/users', { method: 'POST', body: VIEWER });
    const group = await rest('/api/v1/auth/groups', { method: 'POST', body: 'line-operators' });
    await rest(`/api/v1/auth/groups/${group.uniqueId}/${viewer.uniqueId}`, { method: 'POST', body: {} });
    const server = (await rest('/api/v1/name')) as string;
    const acl = await rest(`/api/v1/auth/resources/acl?resourceType=Server&resourceKey=${encodeURIComponent(server)}`);
    await rest('/api/v1/auth/resources/acl', {
      method: 'PUT',
      body: { resourceType: 'Server', resourceKey: server, entries: [...acl.entries, { principalType: 'IDENTITY', principalId: viewer.uniqueId, effect: 'ALLOW', permissions: ['view_stats', 'view_config'] }] },
    });
    const schema = { uniqueId: 'line-temperature', name: 'Line temperature', format: 'json', schema: { type: 'object', properties: { celsius: { type: 'number' } } } };
    await rest('/api/v1/server/schemas', { method: 'POST', body: { context: 'plant/+/temperature', schema: JSON.stringify(schema) } });
    const form = new FormData();
    form.append('file', new Blob([MODEL_BYTES]), 'anomaly.bin');
    const up = await fetch(`${base}/api/v1/server/models/anomaly-detector`, { method: 'POST', headers: { authorization: auth }, body: form });
    assert.equal(up.status, 200, await up.text());
    for (const t of ['plant/line-1/temperature', 'plant/line-2/temperature']) {
      await rest('/api/v1/messaging/publish', { method: 'POST', body: { destinationName: t, message: { payload: Buffer.from('{"celsius":21.5}').toString('base64') }, retain: true } });
    }
    // node 7 is heard: a RadioHead frame to radio address 1 (to, from, id, flags, payload)
    await modem.inject(Buffer.concat([Buffer.from([1, 7, 0, 0]), Buffer.from('{"temperature":21.5}')]), -62, 9);
    browser = await launchChromium();
  });

  after(async () => {
    await browser?.close();
    await broker?.stop();
    await modem?.close();
    await pty?.stop();
    for (const d of dirs) removeDir(d);
  });

  const open = async (page: Page, hash: string, heading: string | RegExp) => {
    await page.goto(`${base}/console/#${hash}`);
    await page.getByRole('heading', { level: 1, name: heading }).waitFor();
  };

  test('console management - users, groups and ACLs: create, membership, the ACL editor and the access check explained', async () => {
    const w = await watch(browser);
    const { page } = w;
    try {
      await login(page, base, admin());
      await goTo(page, 'Users');
      await page.getByRole('link', { name: VIEWER.username }).waitFor();
      await page.getByLabel('New user name').fill('night-shift');
      await page.getByLabel('Password', { exact: true }).fill('night-shift-password-1');
      await page.getByRole('button', { name: 'Create user', exact: true }).click();
      await page.getByRole('status').filter({ hasText: 'Create user night-shift: ' }).waitFor();
      await page.getByRole('link', { name: 'night-shift' }).waitFor();
      const users = (await rest('/api/v1/auth/users')) as Array<{ username: string; uniqueId: string }>;
      const night = users.find((u) => u.username === 'night-shift');
      assert.ok(night, 'the broker has the new user');
      await assertAccessible(page, 'users');

      // its detail: join a group
      await page.getByRole('link', { name: 'night-shift' }).click();
      await page.getByRole('heading', { level: 1, name: 'User night-shift' }).waitFor();
      assert.match(page.url(), new RegExp(`#/user\\?id=${night.uniqueId}$`), 'the user has its own URL');
      await page.getByLabel('Add to group').selectOption({ label: 'line-operators' });
      await page.getByRole('button', { name: 'Add', exact: true }).click();
      await page.getByRole('button', { name: 'Remove night-shift from line-operators', exact: true }).waitFor();
      await assertAccessible(page, 'user');
      await page.getByRole('link', { name: 'line-operators' }).first().click();
      await page.getByRole('heading', { level: 1, name: 'Group line-operators' }).waitFor();
      await page.getByRole('rowheader', { name: 'night-shift' }).waitFor();
      await page.getByRole('rowheader', { name: VIEWER.username }).waitFor();
      await assertAccessible(page, 'group');

      // groups: a new one, and a list long enough to page
      await goTo(page, 'Groups');
      await page.getByLabel('New group name').fill('maintenance');
      await page.getByRole('button', { name: 'Create group', exact: true }).click();
      await page.getByRole('link', { name: 'maintenance', exact: true }).waitFor();
      assert.ok(((await rest('/api/v1/auth/groups')) as Array<{ name: string }>).some((g) => g.name === 'maintenance'));
      for (let i = 0; i < 60; i += 10) {
        await Promise.all(Array.from({ length: 10 }, (_, j) => rest('/api/v1/auth/groups', { method: 'POST', body: `bulk-${String(i + j).padStart(3, '0')}` })));
      }
      await page.reload();
      await page.getByText(/^6\d of 6\d groups$/).waitFor();
      assert.equal(await page.locator('tbody tr').count(), 50, 'one page of 50 rows');
      await page.getByRole('navigation', { name: 'Group pages' }).getByRole('link', { name: 'Next' }).click();
      await page.getByText(/^Page 2 of 2$/).waitFor();
      assert.match(page.url(), /#\/groups\?page=1$/);
      await page.getByRole('searchbox').fill('bulk-05');
      await page.getByText(/^10 of 6\d groups$/).waitFor();
      await assertAccessible(page, 'groups');

      // the ACL of a topic: an entry for the group, saved with PUT, then the access check explains the decision
      await goTo(page, 'ACLs');
      await page.getByLabel('Resource type').selectOption('Topic');
      await page.getByLabel('Resource key').fill('plant');
      await page.getByRole('button', { name: 'Open ACL' }).click();
      await page.getByRole('heading', { name: 'ACL of Topic plant' }).waitFor();
      await page.getByLabel('Principal').selectOption({ label: 'line-operators' });
      await page.getByLabel('Effect').selectOption('DENY');
      await page.getByRole('checkbox', { name: 'publish', exact: true }).check();
      await page.getByRole('button', { name: 'Add entry' }).click();
      await page.getByText('1 entries (changed, not saved)').waitFor();
      await page.getByRole('button', { name: 'Save ACL', exact: true }).click();
      await page.getByRole('status').filter({ hasText: 'Save the ACL of Topic plant: ' }).waitFor();
      const saved = await rest('/api/v1/auth/resources/acl?resourceType=Topic&resourceKey=plant');
      assert.deepEqual(saved.entries.map((e: { effect: string; permissions: string[] }) => [e.effect, e.permissions]), [['DENY', ['publish']]]);
      assert.match(page.url(), /#\/acl\?type=Topic&key=plant$/, 'the resource is in the URL');

      await page.getByRole('combobox', { name: /^User/ }).selectOption({ label: 'night-shift' });
      await page.getByRole('combobox', { name: /^Permission/ }).selectOption('publish');
      await page.getByRole('button', { name: 'Check on Topic plant' }).click();
      const decision = page.getByTestId('decision');
      await decision.filter({ hasText: 'DENY' }).waitFor();
      await page.getByText(/DENY: publish on Topic plant for user 'night-shift'/).waitFor();
      await page.getByText(/GROUP line-operators .* DENY \[publish\] on Topic plant/).waitFor();
      assert.match(page.url(), new RegExp(`identity=${night.uniqueId}&permission=publish`), 'the check is in the URL');
      await assertAccessible(page, 'ACLs with an access check');
      assertClean(w, base, [[401, '/api/v1/session']]);
    } finally {
      await w.close();
    }
  });

  test('console management - integrations, discovery, hardware, LoRa, schemas, models and config show the broker’s data', async () => {
    const w = await watch(browser, 'dark'); // these pages in the dark theme (axe checks the contrast)
    const { page } = w;
    try {
      await login(page, base, admin());
      // the link backs off (nothing listens at its peer's port), so published plant/ messages wait in its outbox
      await rest('/api/v1/messaging/publish', { method: 'POST', body: { destinationName: 'plant/line-3/pressure', message: { payload: Buffer.from('3.1').toString('base64'), qualityOfService: 1 } } });
      await goTo(page, 'Integrations');
      const row = page.locator(`tr[data-link="${LINK}"]`);
      await row.locator('[data-testid=run-state]').filter({ hasText: /^Started$/ }).waitFor();
      await row.getByText(/^[1-9]\d* msg$/).first().waitFor(); // the outbox
      await page.getByRole('button', { name: `Pause ${LINK}`, exact: true }).click();
      await row.locator('[data-testid=run-state]').filter({ hasText: /^Paused$/ }).waitFor();
      assert.equal(await linkState(), 'Paused', 'the broker paused the link');
      await page.getByRole('button', { name: `Resume ${LINK}`, exact: true }).click();
      await row.locator('[data-testid=run-state]').filter({ hasText: /^Started$/ }).waitFor();
      assert.equal(await linkState(), 'Started');
      await page.getByRole('button', { name: `Copy as curl: Stop ${LINK}`, exact: true }).click(); // copied, not done
      await row.locator('.curl-out code').filter({ hasText: `curl --fail-with-body -X PATCH -u 'admin' -H 'Content-Type: application/json' --data '{"state":"stopped"}' '${base}/api/v1/server/integration/${LINK}'` }).waitFor();
      assert.equal(await linkState(), 'Started');
      await assertAccessible(page, 'integrations (dark)');
      await row.getByRole('link', { name: LINK }).click();
      await page.getByRole('heading', { level: 1, name: `Integration ${LINK}` }).waitFor();
      await page.getByText('"direction": "push"').waitFor(); // its configuration
      await page.getByRole('rowheader', { name: 'Messages Sent' }).waitFor();
      await assertAccessible(page, 'integration (dark)');

      await goTo(page, 'Discovery');
      await page.getByText(/servers heard/).waitFor();
      await assertAccessible(page, 'discovery (dark)');
      await goTo(page, 'Hardware');
      await page.getByRole('rowheader', { name: 'weather' }).waitFor();
      await page.getByRole('row').filter({ hasText: 'weather' }).getByRole('cell', { name: /^(Detected|Online|Polling|Error|Offline)$/ }).waitFor();
      await assertAccessible(page, 'hardware (dark)');
      await goTo(page, 'LoRa');
      await page.getByRole('heading', { name: 'field-radio Online' }).waitFor();
      await page.getByText('1 nodes heard').waitFor();
      const node = page.getByRole('row').filter({ has: page.getByRole('rowheader', { name: '7', exact: true }) });
      await node.getByRole('cell', { name: '-62 dBm' }).waitFor();
      await assertAccessible(page, 'LoRa (dark)');

      await goTo(page, 'Schemas');
      await page.getByRole('rowheader', { name: 'line-temperature' }).waitFor();
      await page.getByRole('rowheader', { name: 'plant/+/temperature' }).waitFor(); // its binding
      await assertAccessible(page, 'schemas (dark)');
      await page.getByLabel('Context (destination name or topic filter)').fill('plant/+/pressure');
      await page.getByLabel(/^Schema configuration/).fill(JSON.stringify({ uniqueId: 'line-pressure', name: 'Line pressure', format: 'json', schema: { type: 'number' } }));
      await page.getByRole('button', { name: 'Add schema', exact: true }).click();
      await page.getByRole('status').filter({ hasText: 'Add schema: line-pressure version 1' }).waitFor();
      await page.getByRole('rowheader', { name: 'plant/+/pressure' }).waitFor();
      await page.getByRole('link', { name: 'line-temperature' }).first().click();
      await page.getByRole('heading', { level: 1, name: 'Schema line-temperature' }).waitFor();
      await page.getByText('"celsius": {').waitFor();
      await assertAccessible(page, 'schema (dark)');

      await goTo(page, 'Models');
      await page.getByRole('rowheader', { name: 'anomaly-detector' }).waitFor();
      await page.getByLabel('Model file').setInputFiles({ name: 'drift.bin', mimeType: 'application/octet-stream', buffer: Buffer.from('drift model bytes') });
      await page.getByRole('button', { name: 'Upload' }).click();
      await page.getByRole('rowheader', { name: 'drift.bin' }).waitFor();
      const download = await page.evaluate(`fetch(document.querySelector('a[aria-label="Download anomaly-detector"]').href).then((r) => r.text())`);
      assert.equal(download, MODEL_BYTES.toString(), 'the download link gives the model');
      await page.getByRole('button', { name: 'Delete drift.bin', exact: true }).click();
      await page.getByRole('button', { name: 'Confirm: Delete drift.bin', exact: true }).click();
      await page.getByRole('status').filter({ hasText: 'Delete model drift.bin: Success' }).waitFor();
      assert.deepEqual(await rest('/api/v1/server/models'), ['anomaly-detector']);
      await assertAccessible(page, 'models (dark)');

      await goTo(page, 'Config');
      await page.getByRole('link', { name: 'RestApi' }).click();
      await page.getByRole('heading', { level: 1, name: 'Config RestApi' }).waitFor();
      const key = page.getByRole('row').filter({ has: page.getByRole('rowheader', { name: 'enableConsole', exact: true }) });
      await key.getByText(/the web console at \/console\//).waitFor(); // its description, from the JSON Schema
      assert.match((await key.textContent())!, /true\s*boolean\s*true/);
      assert.match(page.url(), /#\/config\?section=RestApi$/);
      await assertAccessible(page, 'config (dark)');
      assertClean(w, base, [[401, '/api/v1/session']]);
    } finally {
      await w.close();
      if ((await linkState()) !== 'Started') await rest(`/api/v1/server/integration/${LINK}`, { method: 'PATCH', body: { state: 'resumed' } });
    }
  });

  test('console management - logs follow the broker live, filtered by level and text', async () => {
    const w = await watch(browser);
    const { page } = w;
    try {
      await login(page, base, admin());
      await goTo(page, 'Logs');
      await page.getByTestId('log-state').filter({ hasText: /^Live/ }).waitFor();
      await page.locator('ol.log li').filter({ hasText: 'server running' }).waitFor(); // the stored entries first
      await page.evaluate('window.__sameDocument = true');
      // a failed login is logged as a WARN: it arrives through the stream, without a reload
      const r = await fetch(`${base}/api/v1/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'intruder-7', password: 'wrong' }) });
      assert.equal(r.status, 401);
      const warn = page.locator('ol.log li.log-WARN').filter({ hasText: 'intruder-7' });
      await warn.first().waitFor();
      await page.getByLabel('Lowest level').selectOption('WARN');
      await page.locator('ol.log li.log-INFO').first().waitFor({ state: 'detached' });
      await warn.first().waitFor();
      await page.getByLabel('Text').fill('intruder-7');
      await warn.first().waitFor();
      assert.equal(await page.locator('ol.log li').filter({ hasNotText: 'intruder-7' }).count(), 0, 'only the matching entries');
      assert.match(page.url(), /#\/logs\?level=WARN&q=intruder-7$/);
      assert.equal(await page.evaluate('window.__sameDocument'), true);
      await assertAccessible(page, 'logs');
      assertClean(w, base, [[401, '/api/v1/session']]);
    } finally {
      await w.close();
    }
  });

  test('console management - a destination: publish, the live subscription, the retained message and links to the connection and actors', async () => {
    const w = await watch(browser);
    const { page } = w;
    const client = await mqtt.connectAsync(`mqtt://127.0.0.1:${await mqttPort()}`, { clientId: 'line-1-display', username: 'admin', password: admin().password, reconnectPeriod: 0, clean: false });
    try {
      await client.subscribeAsync('plant/line-1/#', { qos: 1 });
      await login(page, base, admin());
      await goTo(page, 'Destinations');
      await page.getByRole('link', { name: 'plant/' }).click();
      await page.getByRole('link', { name: 'line-1/' }).click();
      await page.getByRole('link', { name: 'temperature', exact: true }).click();
      await page.getByRole('heading', { level: 1, name: 'Destination plant/line-1/temperature' }).waitFor();
      await page.getByRole('link', { name: 'line-temperature' }).waitFor(); // its schema
      const sub = page.getByRole('row').filter({ hasText: 'plant/line-1/#' });
      await sub.getByRole('link', { name: 'mqtt:line-1-display' }).waitFor();
      assert.equal(await sub.getByRole('link', { name: 'subscription' }).getAttribute('href'), `#/actor?id=${encodeURIComponent(`subscription:${encodeURIComponent('mqtt:line-1-display')}|plant/line-1/#`)}`);

      await page.getByRole('button', { name: 'Show the retained message' }).click();
      await page.getByRole('table', { name: 'Retained message' }).getByRole('cell', { name: '{"celsius":21.5}' }).waitFor();

      await page.getByRole('button', { name: 'Subscribe live' }).click();
      await page.getByTestId('live-state').filter({ hasText: 'Subscribed' }).waitFor();
      assert.match(page.url(), /live=1$/, 'the live view has its URL');
      await page.getByLabel('Payload (text)').fill('{"celsius":23.25}');
      await page.getByRole('button', { name: 'Publish', exact: true }).click();
      await page.getByRole('status').filter({ hasText: 'Publish to plant/line-1/temperature: ' }).waitFor();
      await page.getByTestId('messages').getByRole('cell', { name: '{"celsius":23.25}' }).waitFor();
      // a publish from elsewhere arrives too
      await client.publishAsync('plant/line-1/temperature', '{"celsius":24}', { qos: 1 });
      await page.getByTestId('messages').getByRole('cell', { name: '{"celsius":24}' }).waitFor();
      // a burst: the view keeps the last 100 and renders at most 10 times a second, however fast messages come
      await page.evaluate(`(() => {
        const w = window; w.__renders = []; 
        new MutationObserver(() => w.__renders.push(performance.now())).observe(document.querySelector('[data-testid=messages] tbody'), { childList: true, subtree: true, characterData: true });
      })()`);
      for (let i = 0; i < 300; i++) client.publish('plant/line-1/temperature', `{"celsius":${30 + i / 100}}`, { qos: 0 });
      await page.getByTestId('messages').getByRole('cell', { name: '{"celsius":32.99}' }).waitFor();
      assert.equal(await page.getByTestId('messages').locator('tbody tr').count(), 100, 'the last 100 messages kept');
      const renders = (await page.evaluate('window.__renders')) as number[];
      const span = renders[renders.length - 1]! - renders[0]!;
      process.stdout.write(`# live subscription: 300 messages shown in ${renders.length} renders over ${Math.round(span)} ms\n`);
      assert.ok(renders.length <= Math.floor(span / 100) + 2, `at most 10 renders a second: ${renders.length} renders in ${Math.round(span)} ms`);
      await assertAccessible(page, 'destination with a live subscription');

      // the session's connection, its subscriptions, back to the destination
      await sub.getByRole('link', { name: 'mqtt:line-1-display' }).click();
      await page.getByRole('heading', { level: 1, name: 'Connection line-1-display' }).waitFor();
      await page.getByRole('link', { name: 'MQTT Interface' }).waitFor(); // its endpoint's actor
      await page.getByRole('rowheader', { name: 'plant/line-1/#' }).waitFor();
      await assertAccessible(page, 'connection');
      await page.getByRole('rowheader', { name: 'plant/line-1/#' }).getByRole('link').click();
      await page.getByRole('heading', { level: 1, name: 'Destinations' }).waitFor();
      assert.match(page.url(), /prefix=plant%2Fline-1$/, 'a wildcard filter opens its namespace');

      // and from the connections list
      await goTo(page, 'Connections');
      await page.getByRole('row').filter({ hasText: 'line-1-display' }).getByRole('link').click();
      await page.getByRole('heading', { level: 1, name: 'Connection line-1-display' }).waitFor();
      await page.getByRole('button', { name: 'Disconnect line-1-display', exact: true }).click();
      const closed = new Promise<void>((res) => client.once('close', () => res()));
      await page.getByRole('button', { name: 'Confirm: Disconnect line-1-display', exact: true }).click();
      await page.getByRole('status').filter({ hasText: 'Disconnect line-1-display: ' }).waitFor();
      await closed;
      assertClean(w, base, [[401, '/api/v1/session']]);
    } finally {
      await client.endAsync(true);
      await w.close();
    }
  });

  test('console management - a user without the permission sees the reason of the 403 and nothing changes', async () => {
    const w = await watch(browser);
    const { page } = w;
    try {
      await login(page, base, VIEWER);
      await open(page, '/groups', 'Groups');
      await page.getByRole('alert').filter({ hasText: 'needs the permission manage_authentication' }).waitFor(); // the list itself
      await page.getByLabel('New group name').fill('viewer-made');
      await page.getByRole('button', { name: 'Create group', exact: true }).click();
      const alert = page.getByRole('alert').filter({ hasText: 'POST /api/v1/auth/groups' });
      await alert.waitFor();
      assert.match((await alert.textContent())!, /^Access denied: POST \/api\/v1\/auth\/groups needs the permission manage_authentication on Server .+\(HTTP 403\)$/);
      assert.ok(!((await rest('/api/v1/auth/groups')) as Array<{ name: string }>).some((g) => g.name === 'viewer-made'), 'no group was made');
      await assertAccessible(page, 'groups refused');
      // what the user may see, it sees: the config (view_config)
      await open(page, '/config?section=RestApi', 'Config RestApi');
      await page.getByRole('rowheader', { name: 'enableConsole', exact: true }).waitFor();
      assertClean(w, base, [
        [401, '/api/v1/session'],
        [403, '/api/v1/auth/groups'],
      ]);
    } finally {
      await w.close();
    }
  });
});
