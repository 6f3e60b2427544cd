import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type BrowserContextOptions, type Page } from 'playwright-core';
import { ROOT } from '../helpers.js';

/**
 * What the console tests share: Debian's Chromium (as .ci/run installs it) through playwright-core, a page watched
 * for its requests and console errors, the axe-core check, the login and the navigation.
 */
export const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'];
const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

/** Builds the console when a source is newer than dist/console (about a second), so the current sources are tested. */
export function buildConsoleIfStale(): void {
  execFileSync(process.execPath, [join(ROOT, 'scripts/console.mjs'), '--if-stale'], { cwd: ROOT, stdio: 'ignore' });
}

export function launchChromium(): Promise<Browser> {
  return chromium.launch({ executablePath: '/usr/bin/chromium', args: CHROMIUM_ARGS, timeout: 60000 });
}

export interface Watched {
  context: BrowserContext;
  page: Page;
  /** every URL the page requested */
  requests: string[];
  /** console errors and uncaught exceptions */
  errors: Array<{ text: string; url: string }>;
  close(): Promise<void>;
}

export async function watch(browser: Browser, colorScheme: 'light' | 'dark' = 'light', options: BrowserContextOptions = {}): Promise<Watched> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, colorScheme, ...options });
  const page = await context.newPage();
  page.setDefaultTimeout(30000); // generous: CI runs this beside other suites on 2 cores
  const requests: string[] = [];
  const errors: Watched['errors'] = [];
  page.on('request', (r) => requests.push(r.url()));
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push({ text: m.text(), url: m.location().url });
  });
  page.on('pageerror', (e) => errors.push({ text: String(e), url: '' }));
  return { context, page, requests, errors, close: () => context.close() };
}

/** Nothing but the broker; no console error except the expected failed answers given as [status, path]. */
export function assertClean(w: Watched, origin: string, expected: Array<[number, string]> = []): void {
  const outside = w.requests.filter((u) => !u.startsWith(`${origin}/`));
  assert.deepEqual(outside, [], 'every request goes to the broker on 127.0.0.1');
  assert.ok(w.requests.length > 5, `the console made its requests (${w.requests.length})`);
  const unexpected = w.errors.filter((e) => !expected.some(([code, path]) => e.text.includes(`status of ${code}`) && e.url.startsWith(`${origin}${path}`)));
  assert.deepEqual(unexpected, [], 'no console errors');
}

/** axe-core in the page (evaluated through the DevTools protocol: the console's CSP allows no injected script). */
export async function assertAccessible(page: Page, what: string): Promise<void> {
  if (!(await page.evaluate('typeof window.axe'))?.toString().includes('object')) await page.evaluate(AXE_SOURCE);
  const result = (await page.evaluate(`window.axe.run(document, { resultTypes: ['violations'] })`)) as {
    violations: Array<{ id: string; impact: string; help: string; nodes: Array<{ target: string[] }> }>;
  };
  const bad = result.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`);
  assert.deepEqual(bad, [], `${what}: no serious or critical accessibility violation`);
  // readable at the window's size (1280x800 unless a test asks for another): nothing wider than the window
  assert.equal(await page.evaluate('document.documentElement.scrollWidth <= window.innerWidth'), true, `${what}: no horizontal scrolling at ${page.viewportSize()?.width} px`);
}

export async function login(page: Page, origin: string, user: { username: string; password: string }): Promise<void> {
  await page.goto(`${origin}/console/`);
  await page.getByLabel('User name').fill(user.username);
  await page.getByLabel('Password').fill(user.password);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByRole('heading', { level: 1, name: 'Overview' }).waitFor();
}

export async function goTo(page: Page, name: string): Promise<void> {
  await page.getByRole('navigation', { name: 'Console pages' }).getByRole('link', { name }).click();
  await page.getByRole('heading', { level: 1, name }).waitFor();
}
