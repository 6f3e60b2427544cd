/**
 * The web console (docs/console.md): its bundle sizes and its first paint. Sizes of dist/console (built first when
 * a source is newer): the first page's JavaScript and CSS gzipped (main.js + style.css; target ≤ 60 KiB) and the
 * elkjs layout chunk (elk.js, loaded only by the statechart pages) apart. First paint: Debian's Chromium
 * (/usr/bin/chromium, through playwright-core) opens /console/ of a broker started as `npm start` starts it
 * (a child process on 127.0.0.1, authentication off so the overview is the first page), each time in a fresh
 * browser context (empty cache); measured in the page: first contentful paint (Paint Timing) and the moment the
 * overview shows the broker's health and subsystems (target ≤ 1 s), from the start of the navigation. Statechart:
 * the time from a PATCH that pauses or resumes an endpoint over REST to the endpoint actor's statechart highlighting
 * the new state (the issue's 1 s), measured in the page, over alternating pauses and resumes.
 */
import { copyFileSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { chromium } from 'playwright-core';
// @ts-expect-error a plain ES module without types (scripts/console.mjs)
import { CONSOLE_OUT, buildConsole, consoleUpToDate } from '../scripts/console.mjs';
import { CONFIG_DIR, removeDir, spawnBroker, tempDir } from '../test/helpers.js';
import { fmt, isMain, printReport, type BenchReport } from './report.js';

const LOADS = Number(process.env.BENCH_CONSOLE_LOADS ?? 7);
const TOGGLES = 10;
const ENDPOINT = 'MQTT Interface';
const FIRST_PAGE_TARGET = 60 * 1024;
const PAINT_TARGET_MS = 1000;
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'];

const gz = (f: string) => gzipSync(readFileSync(join(CONSOLE_OUT as string, f)), { level: 9 }).length;
const raw = (f: string) => readFileSync(join(CONSOLE_OUT as string, f)).length;
const kib = (n: number) => `${fmt(n / 1024, 1)} KiB`;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** Marks the moment the overview shows real data (health and the subsystem table), before any page script runs. */
const MARK_MEANINGFUL = `
  new MutationObserver((_, obs) => {
    const health = document.querySelector('[data-testid=health]');
    if (health && /^(Ok|Warning|Error)$/.test(health.textContent) && document.querySelector('main table tbody tr')) {
      window.__meaningful = performance.now();
      obs.disconnect();
    }
  }).observe(document, { subtree: true, childList: true, characterData: true });
`;

export async function run(): Promise<BenchReport> {
  if (!(consoleUpToDate as () => boolean)()) await (buildConsole as (o: { quiet: boolean }) => Promise<unknown>)({ quiet: true });
  const firstPage = gz('main.js') + gz('style.css');
  const rows: Array<[string, string]> = [
    ['main.js (raw / gzipped)', `${kib(raw('main.js'))} / ${kib(gz('main.js'))}`],
    ['style.css (raw / gzipped)', `${kib(raw('style.css'))} / ${kib(gz('style.css'))}`],
    ['index.html gzipped', kib(gz('index.html'))],
    ['first page JS + CSS gzipped', kib(firstPage)],
    ['elk.js chunk (statecharts only; raw / gzipped)', `${kib(raw('elk.js'))} / ${kib(gz('elk.js'))}`],
  ];

  const data = tempDir('switchyard-bench-console-');
  const config = tempDir('switchyard-bench-console-config-');
  for (const f of readdirSync(CONFIG_DIR)) if (f.endsWith('.yaml')) copyFileSync(join(CONFIG_DIR, f), join(config, f));
  const auth = readFileSync(join(CONFIG_DIR, 'AuthManager.yaml'), 'utf8');
  writeFileSync(join(config, 'AuthManager.yaml'), auth.replace('authenticationEnabled: true', 'authenticationEnabled: false'));
  const broker = await spawnBroker({ SWITCHYARD_DATA_DIR: data, SWITCHYARD_CONFIG_DIR: config });
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: CHROMIUM_ARGS });
  const fcp: number[] = [];
  const meaningful: number[] = [];
  const follow: number[] = [];
  let outside = 0;
  try {
    const url = `http://127.0.0.1:${broker.port}/console/`;
    for (let i = 0; i <= LOADS; i++) {
      const context = await browser.newContext({ viewport: { width: 1280, height: 800 } }); // an empty cache each time
      const page = await context.newPage();
      page.on('request', (r) => void (r.url().startsWith(`http://127.0.0.1:${broker.port}/`) || outside++));
      await page.addInitScript(MARK_MEANINGFUL);
      await page.goto(url);
      await page.waitForFunction(() => (window as unknown as { __meaningful?: number }).__meaningful !== undefined, undefined, { timeout: 30000 });
      const [paint, shown] = (await page.evaluate(`[performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? NaN, window.__meaningful]`)) as [number, number];
      await context.close();
      if (i === 0) continue; // the first load warms the broker (its first requests compile routes and schemas)
      fcp.push(paint);
      meaningful.push(shown);
    }

    // the statechart following transitions made over REST
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const page = await context.newPage();
    await page.goto(`${url}#/actor?id=${encodeURIComponent(`endpoint:${ENDPOINT}`)}`);
    const stream = page.waitForResponse((r) => r.url().includes('/api/v1/server/actors/sse/stream/') && r.status() === 200);
    await page.locator('svg[data-kind=endpoint]').waitFor({ timeout: 30000 });
    await stream;
    await page.evaluate(() => {
      const w = window as unknown as { __shown: Array<{ state: string; at: number }> };
      w.__shown = [];
      new MutationObserver(() => {
        const state = document.querySelector('svg[data-kind=endpoint]')?.getAttribute('data-active') ?? '';
        if (state !== w.__shown.at(-1)?.state) w.__shown.push({ state, at: Date.now() });
      }).observe(document.body, { subtree: true, attributes: true, attributeFilter: ['data-active'] });
    });
    const patch = `http://127.0.0.1:${broker.port}/api/v1/server/interface/${encodeURIComponent(ENDPOINT)}`;
    for (let i = 0; i < TOGGLES; i++) {
      const sent = Date.now();
      const r = await fetch(patch, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ state: i % 2 ? 'resumed' : 'paused' }) });
      if (!r.ok) throw new Error(`PATCH ${patch}: ${r.status} ${await r.text()}`);
      const want = i % 2 ? 'listening.started' : 'listening.paused';
      await page.waitForFunction((s) => (window as unknown as { __shown: Array<{ state: string }> }).__shown.some((x) => x.state === s), want, { timeout: 30000 });
      const shown = (await page.evaluate(() => (window as unknown as { __shown: Array<{ state: string; at: number }> }).__shown.splice(0))).find((x) => x.state === want)!;
      follow.push(shown.at - sent);
    }
    await context.close();
  } finally {
    await browser.close();
    await broker.stop();
    removeDir(data);
    removeDir(config);
  }
  rows.push(
    [`first contentful paint (median of ${LOADS} cold loads)`, `${fmt(median(fcp))} ms`],
    [`overview with data, first meaningful paint (median / max)`, `${fmt(median(meaningful))} / ${fmt(Math.max(...meaningful))} ms`],
    [`statechart follows a REST pause/resume (median / max of ${TOGGLES})`, `${fmt(median(follow))} / ${fmt(Math.max(...follow))} ms`],
    ['requests to anything but 127.0.0.1', fmt(outside)],
    ['load average (1 min) at the end: timings move with it', fmt(loadavg()[0]!, 2)],
  );
  return {
    title: 'Web console: bundle sizes and first paint (Chromium, loopback)',
    rows,
    target: `first page JS + CSS ≤ ${kib(FIRST_PAGE_TARGET)} gzipped (elk.js excluded); meaningful paint and statechart ≤ ${fmt(PAINT_TARGET_MS)} ms`,
    met: firstPage <= FIRST_PAGE_TARGET && median(meaningful) <= PAINT_TARGET_MS && Math.max(...follow) <= PAINT_TARGET_MS && outside === 0,
  };
}

if (isMain(import.meta.url)) printReport(await run());
