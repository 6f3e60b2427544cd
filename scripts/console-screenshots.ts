// Screenshots of the web console's pages for docs/console/ (README "Console", docs/console.md), at 1280x800 in the
// light theme, and narrow.png: a phone (390x844) with the navigation opened from its Menu button. Against a broker
// started here with a little real data (an MQTT client, a few destinations; users, a group, an ACL, a schema and a
// model made over REST; an integration link to a closed port and an I²C device on a bus that does not exist, in their
// real, failing states; a LoRa radio on the simulated RN2483 of test/lora, hearing nodes).
// Run by hand after changing a page: `npx tsx scripts/console-screenshots.ts [name ...]` (all pages, or only those
// named, e.g. `actor machines narrow`; needs /usr/bin/chromium and a built console: `node scripts/console.mjs`).
// Everything runs on 127.0.0.1; the broker and the browser are stopped after.
import { copyFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import mqtt from 'mqtt';
import { chromium } from 'playwright-core';
import { PtyPair, Rn2483Sim } from '../test/lora/rn2483-sim.js';
import { CONFIG_DIR, ROOT, adminPasswordOf, removeDir, spawnBroker, tempDir } from '../test/helpers.js';

const OUT = join(ROOT, 'docs/console');
const data = tempDir('switchyard-screenshots-');
const config = tempDir('switchyard-screenshots-config-');
for (const f of readdirSync(CONFIG_DIR)) if (f.endsWith('.yaml')) copyFileSync(join(CONFIG_DIR, f), join(config, f));
writeFileSync(
  join(config, 'NetworkConnectionManager.yaml'),
  `NetworkConnectionManager:\n  data:\n    - name: site-b\n      url: mqtt://127.0.0.1:9\n      linkConfigs:\n        - { direction: push, localNamespace: 'plant/#', remoteNamespace: 'site-a/', qualityOfService: 1 }\n`,
);
const pty = new PtyPair(tempDir('switchyard-screenshots-lora-'));
await pty.start();
const modem = await Rn2483Sim.open(pty.sim);
writeFileSync(
  join(config, 'Devices.yaml'),
  `DeviceManager:\n  buses:\n    - bus: 97\n      devices: [{ name: weather, address: 0x76, driver: bme280, topic: sensors/weather }]\n` +
    `LoRaDeviceManager:\n  data: [{ name: field-radio, type: loraSerial, serialConfig: { port: ${pty.radio} }, address: 1 }]\n`,
);
const broker = await spawnBroker({ SWITCHYARD_DATA_DIR: data, SWITCHYARD_CONFIG_DIR: config });
const base = `http://127.0.0.1:${broker.port}`;
const password = adminPasswordOf(data);
const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'] });
let client: mqtt.MqttClient | undefined;
try {
  const interfaces = (await (await fetch(`${base}/api/v1/server/interfaces`, { headers: { authorization: `Basic ${Buffer.from(`admin:${password}`).toString('base64')}` } })).json()) as Array<{ name: string; port: number }>;
  const port = interfaces.find((e) => e.name === 'MQTT Interface')!.port;
  client = await mqtt.connectAsync(`mqtt://127.0.0.1:${port}`, { clientId: 'line-3-sensor-hub', username: 'admin', password, reconnectPeriod: 0 });
  await client.subscribeAsync('plant/#', { qos: 1 });
  for (const t of ['plant/line-1/temperature', 'plant/line-1/pressure', 'plant/line-2/temperature', 'plant/line-3/vibration', 'alerts/critical']) {
    for (let i = 0; i < 5; i++) await client.publishAsync(t, String(20 + i), { qos: 1, retain: i === 4 });
  }
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, colorScheme: 'light' });
  const page = await context.newPage();
  const only = process.argv.slice(2);
  await page.goto(`${base}/console/`);
  await page.getByLabel('User name').waitFor();
  if (only.length === 0 || only.includes('login')) await page.screenshot({ path: join(OUT, 'login.png') });
  await page.getByLabel('User name').fill('admin');
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByRole('heading', { level: 1, name: 'Overview' }).waitFor();
  const auth = { authorization: `Basic ${Buffer.from(`admin:${password}`).toString('base64')}`, 'content-type': 'application/json' };
  const rest = async (path: string, method = 'GET', body?: unknown) => (await fetch(`${base}${path}`, { method, headers: auth, body: body === undefined ? undefined : JSON.stringify(body) })).json();
  // the management pages' data
  const users: Array<{ uniqueId: string }> = [];
  for (const username of ['anna.k', 'ben.o', 'night-shift']) users.push(await rest('/api/v1/auth/users', 'POST', { username, password: `${username}-password-1` }));
  const group = await rest('/api/v1/auth/groups', 'POST', 'line-operators');
  await rest('/api/v1/auth/groups', 'POST', 'maintenance');
  for (const u of users.slice(0, 2)) await rest(`/api/v1/auth/groups/${group.uniqueId}/${u.uniqueId}`, 'POST', {});
  await rest('/api/v1/auth/resources/acl', 'PUT', { resourceType: 'Topic', resourceKey: 'plant', entries: [{ principalType: 'GROUP', principalId: group.uniqueId, effect: 'ALLOW', permissions: ['publish', 'subscribe'] }, { principalType: 'IDENTITY', principalId: users[2].uniqueId, effect: 'DENY', permissions: ['publish'] }] });
  const schema = (uniqueId: string, name: string, props: Record<string, unknown>) => JSON.stringify({ uniqueId, name, format: 'json', schema: { type: 'object', properties: props } });
  await rest('/api/v1/server/schemas', 'POST', { context: 'plant/+/temperature', schema: schema('line-temperature', 'Line temperature', { celsius: { type: 'number' } }) });
  await rest('/api/v1/server/schemas', 'POST', { context: 'plant/+/pressure', schema: schema('line-pressure', 'Line pressure', { bar: { type: 'number' } }) });
  for (const name of ['anomaly-detector', 'vibration-kmeans']) {
    const form = new FormData();
    form.append('file', new Blob([`{"model":"${name}"}`]), `${name}.bin`);
    await fetch(`${base}/api/v1/server/models/${name}`, { method: 'POST', headers: { authorization: auth.authorization }, body: form });
  }
  for (const [node, rssi] of [[7, -62], [12, -88]] as const) await modem.inject(Buffer.concat([Buffer.from([1, node, 0, 0]), Buffer.from(`{"node":${node}}`)]), rssi, 9);
  await fetch(`${base}/api/v1/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'intruder', password: 'wrong' }) }); // a WARN in the log
  const shots: Array<[string, string, string, (() => Promise<void>)?]> = [
    ['overview', '#/overview', 'Store'],
    ['endpoints', '#/endpoints', 'MQTT Interface'],
    ['connections', '#/connections', 'line-3-sensor-hub'],
    ['destinations', '#/destinations?prefix=plant', 'line-1/'],
    ['actors', '#/actors', 'server'],
    // the endpoint's statechart just after a pause made over REST: the new state highlighted, the transition marked
    ['actor', `#/actor?id=${encodeURIComponent('endpoint:MQTT Interface')}`, 'Following live transitions', async () => {
      await page.locator('svg[data-kind=endpoint]').waitFor();
      await fetch(`${base}/api/v1/server/interface/MQTT%20Interface`, { method: 'PATCH', headers: auth, body: JSON.stringify({ state: 'paused' }) });
      await page.locator('svg[data-active="listening.paused"]').waitFor();
    }],
    ['machines', '#/machines', 'destination', async () => void (await page.locator('svg[data-kind=destination]').waitFor())],
    ['users', '#/users', 'night-shift'],
    ['groups', '#/groups', 'line-operators'],
    ['acl', `#/acl?type=Topic&key=plant&identity=${users[2].uniqueId}&permission=publish`, 'DENY'],
    ['integrations', '#/integrations', 'site-b'],
    ['hardware', '#/hardware', 'weather'],
    ['lora', '#/lora', 'field-radio'],
    ['schemas', '#/schemas', 'line-temperature'],
    ['models', '#/models', 'anomaly-detector'],
    ['logs', '#/logs', 'Logs', async () => void (await page.locator('ol.log li').first().waitFor())],
    ['config', '#/config?section=RestApi', 'enableConsole'],
    ['destination', `#/destination?name=${encodeURIComponent('plant/line-1/temperature')}&live=1`, 'Publish a message', async () => {
      await page.getByTestId('live-state').filter({ hasText: 'Subscribed' }).waitFor();
      for (const c of [21.5, 21.75, 22]) await client!.publishAsync('plant/line-1/temperature', JSON.stringify({ celsius: c }), { qos: 1 });
      await page.getByTestId('messages').getByRole('cell', { name: '{"celsius":22}' }).waitFor();
      await page.getByRole('heading', { name: 'Publish a message' }).evaluate((h) => h.scrollIntoView()); // the publish form and the live view
    }],
    ['connection', '#/connection?client=line-3-sensor-hub', 'plant/#'],
  ];
  for (const [name, hash, text, ready] of shots.filter(([n]) => only.length === 0 || only.includes(n))) {
    await page.goto(`${base}/console/${hash}`);
    await page.getByText(text, { exact: true }).first().waitFor();
    await ready?.();
    await new Promise((r) => setTimeout(r, 1200)); // a rate sample or two; an animation run to its end
    await page.screenshot({ path: join(OUT, `${name}.png`) });
    process.stdout.write(`docs/console/${name}.png\n`);
  }
  if (only.length === 0 || only.includes('narrow')) {
    // a phone (390x844), the same session: the overview with the navigation opened from its Menu button
    const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, colorScheme: 'light', storageState: await context.storageState() });
    const small = await phone.newPage();
    await small.goto(`${base}/console/#/overview`);
    await small.getByText('Store', { exact: true }).first().waitFor();
    await small.getByRole('button', { name: 'Menu' }).click();
    await small.getByRole('navigation', { name: 'Console pages' }).waitFor();
    await new Promise((r) => setTimeout(r, 1200));
    await small.screenshot({ path: join(OUT, 'narrow.png') });
    process.stdout.write('docs/console/narrow.png\n');
    await phone.close();
  }
} finally {
  await client?.endAsync(true);
  await browser.close();
  await broker.stop();
  await modem.close();
  await pty.stop();
  removeDir(data);
  removeDir(config);
  removeDir(pty.dir);
}
