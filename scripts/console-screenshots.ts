// Screenshots of the web console's pages for docs/console/ (README "Console", docs/console.md), at 1280x800 in the
// light theme, against a broker started here with a little real data (an MQTT client, a few destinations).
// Run by hand after changing a page: `npx tsx scripts/console-screenshots.ts [name ...]` (all pages, or only those
// named, e.g. `actor machines`; needs /usr/bin/chromium and a built console: `node scripts/console.mjs`). Everything runs on 127.0.0.1; the broker and the browser are stopped after.
import { join } from 'node:path';
import mqtt from 'mqtt';
import { chromium } from 'playwright-core';
import { ROOT, adminPasswordOf, removeDir, spawnBroker, tempDir } from '../test/helpers.js';

const OUT = join(ROOT, 'docs/console');
const data = tempDir('switchyard-screenshots-');
const broker = await spawnBroker({ SWITCHYARD_DATA_DIR: data });
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
  ];
  for (const [name, hash, text, ready] of shots.filter(([n]) => only.length === 0 || only.includes(n))) {
    await page.goto(`${base}/console/${hash}`);
    await page.getByText(text, { exact: true }).first().waitFor();
    await ready?.();
    await new Promise((r) => setTimeout(r, 1200)); // a rate sample or two; an animation run to its end
    await page.screenshot({ path: join(OUT, `${name}.png`) });
    process.stdout.write(`docs/console/${name}.png\n`);
  }
} finally {
  await client?.endAsync(true);
  await browser.close();
  await broker.stop();
  removeDir(data);
}
