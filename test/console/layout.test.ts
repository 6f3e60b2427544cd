import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Browser, Page } from 'playwright-core';
import { adminPasswordOf, removeDir, spawnBroker, tempDir, type BrokerProcess } from '../helpers.js';
import { assertAccessible, assertClean, buildConsoleIfStale, launchChromium, login, watch } from './browser.js';

/**
 * The console's layout (issue 23, item 5: readable at 1280x800 and on a narrow screen, keyboard navigation), in
 * Chromium against a broker in a child process. The pages are grouped in the navigation (each page module names its
 * `group`): a left sidebar of one column at 1280x800, so the content starts at the top of the window; a "Menu"
 * disclosure button on a phone (390x844) that opens and closes the same links, every one reachable by keyboard.
 */
const GROUPS: Array<[string, string[]]> = [
  ['Messaging', ['Overview', 'Endpoints', 'Connections', 'Destinations']],
  ['Actors', ['Actors', 'Machines']],
  ['Security', ['Users', 'Groups', 'ACLs']],
  ['Integrations & devices', ['Integrations', 'Discovery', 'Hardware', 'LoRa']],
  ['Data', ['Schemas', 'Models']],
  ['Operations', ['Logs', 'Config']],
];
const LINKS = GROUPS.flatMap(([, links]) => links);
const PHONE = { width: 390, height: 844 };

/** The navigation as shown: each group's label and its links, read from the lists labelled by their group. */
const navGroups = (page: Page) =>
  page.evaluate(() =>
    [...document.querySelectorAll('nav[aria-label="Console pages"] ul[aria-labelledby]')].map((ul) => [
      document.getElementById(ul.getAttribute('aria-labelledby')!)?.textContent ?? '',
      [...ul.querySelectorAll('a')].map((a) => a.textContent ?? ''),
    ]),
  );
const focused = (page: Page) => page.evaluate(() => `${document.activeElement?.tagName} ${document.activeElement?.textContent?.trim()}`);
const top = async (page: Page, selector: string) => (await page.locator(selector).first().boundingBox())?.y ?? Number.NaN;
/** Waits for the page's data: no "Loading…" left in the content. */
const loaded = (page: Page) => page.waitForFunction(() => ![...document.querySelectorAll('main [role=status]')].some((s) => s.textContent === 'Loading…'));
const noHorizontalScroll = (page: Page) => page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);

describe('console layout', () => {
  let browser: Browser;
  let broker: BrokerProcess;
  let data = '';
  let base = '';
  const admin = () => ({ username: 'admin', password: adminPasswordOf(data) });

  before(async () => {
    buildConsoleIfStale();
    data = tempDir('switchyard-layout-');
    broker = await spawnBroker({ SWITCHYARD_DATA_DIR: data });
    base = `http://127.0.0.1:${broker.port}`;
    browser = await launchChromium();
  });

  after(async () => {
    await browser?.close();
    await broker?.stop();
    if (data) removeDir(data);
  });

  test('console layout - at 1280x800 the grouped navigation is one column beside the content, which starts within 100 px of the top', async () => {
    const w = await watch(browser);
    const { page } = w;
    try {
      await login(page, base, admin());
      assert.deepEqual(await navGroups(page), GROUPS, 'the pages under their groups, in order');
      assert.equal(await page.getByRole('button', { name: 'Menu' }).isVisible(), false, 'no menu button on a wide screen');
      const nav = page.getByRole('navigation', { name: 'Console pages' });
      const boxes = await nav.getByRole('link').evaluateAll((links) => links.map((a) => a.getBoundingClientRect().toJSON() as DOMRect));
      assert.equal(boxes.length, LINKS.length);
      assert.equal(new Set(boxes.map((b) => Math.round(b.left))).size, 1, 'every link starts at the same x: one column');
      assert.ok(boxes.every((b, i) => i === 0 || b.top >= boxes[i - 1]!.bottom), 'each link below the one before');
      assert.ok(boxes.every((b) => b.bottom <= 800), `every link within the 800 px window (the last ends at ${Math.round(boxes.at(-1)!.bottom)} px)`);
      const mainLeft = (await page.locator('main').boundingBox())!.x;
      assert.ok(boxes.every((b) => b.right <= mainLeft), 'the navigation is beside the content, not above it');
      for (const label of LINKS) {
        await nav.getByRole('link', { name: label, exact: true }).click();
        await page.getByRole('heading', { level: 1, name: label }).waitFor();
        await loaded(page);
        const [mainTop, headingTop] = [await top(page, 'main'), await top(page, 'main h1')];
        assert.ok(mainTop < 100 && headingTop < 100, `${label}: the content starts at ${Math.round(mainTop)} px, its heading at ${Math.round(headingTop)} px (< 100)`);
        assert.deepEqual(await nav.locator('[aria-current=page]').allTextContents(), [label], `${label}: the current page is marked`);
        await assertAccessible(page, `${label} at 1280x800`);
      }
      // a detail page marks its group
      await page.goto(`${base}/console/#/actor?id=server`);
      await page.getByRole('heading', { level: 1 }).filter({ hasText: 'server' }).waitFor();
      assert.deepEqual(await nav.locator('[aria-current=page]').count(), 0, 'a detail page is not a navigation entry');
      assert.deepEqual(await nav.locator('.group-label.current').allTextContents(), ['Actors']);
      assertClean(w, base, [[401, '/api/v1/session']]);
    } finally {
      await w.close();
    }
  });

  test('console layout - on a phone (390x844) the Menu button opens and closes the navigation, every page by keyboard, no horizontal scroll', async () => {
    const w = await watch(browser, 'light', { viewport: PHONE });
    const { page } = w;
    try {
      await page.goto(`${base}/console/`);
      await page.getByLabel('User name').waitFor();
      await assertAccessible(page, 'login on a phone');
      await login(page, base, admin());
      const menu = page.getByRole('button', { name: 'Menu' });
      const nav = page.getByRole('navigation', { name: 'Console pages' });
      assert.equal(await menu.getAttribute('aria-expanded'), 'false');
      assert.equal(await nav.isVisible(), false, 'the navigation is folded away');
      await page.getByRole('rowheader', { name: 'Store' }).waitFor();
      assert.ok((await top(page, 'main h1')) < 100, 'the overview starts at the top of the screen');
      assert.equal(await noHorizontalScroll(page), true, 'overview: no horizontal scroll');
      await assertAccessible(page, 'overview on a phone (menu closed)');

      // the mouse (a tap): opens, closes
      await menu.click();
      assert.equal(await menu.getAttribute('aria-expanded'), 'true');
      await nav.getByRole('link', { name: 'Overview' }).waitFor();
      assert.equal(await page.getByText('Signed in as').isVisible(), true, 'the user and Log out are in the menu');
      await assertAccessible(page, 'overview on a phone (menu open)');
      await menu.click();
      assert.equal(await menu.getAttribute('aria-expanded'), 'false');
      await nav.waitFor({ state: 'hidden' });

      // the keyboard: from the skip link, Tab reaches the button, Enter opens it, Tab walks every page link in order
      await page.getByRole('link', { name: 'Skip to content' }).focus();
      await page.keyboard.press('Tab');
      assert.equal(await focused(page), 'BUTTON Menu');
      await page.keyboard.press('Enter');
      assert.equal(await menu.getAttribute('aria-expanded'), 'true');
      const walked: string[] = [];
      for (let i = 0; i < LINKS.length; i++) {
        await page.keyboard.press('Tab');
        walked.push(await focused(page));
      }
      assert.deepEqual(walked, LINKS.map((l) => `A ${l}`), 'every page link, in order');
      await page.keyboard.press('Escape');
      assert.equal(await menu.getAttribute('aria-expanded'), 'false', 'Escape closes the menu');
      assert.equal(await focused(page), 'BUTTON Menu', 'and gives the focus back to the button');

      // every page opened from the menu by keyboard: the menu closes, the page's heading takes the focus
      for (const [i, label] of LINKS.entries()) {
        await menu.focus();
        await page.keyboard.press('Enter');
        for (let t = 0; t <= i; t++) await page.keyboard.press('Tab');
        await page.keyboard.press('Enter');
        await page.getByRole('heading', { level: 1, name: label }).waitFor();
        await page.locator('h1:focus').waitFor();
        await loaded(page);
        assert.equal(await menu.getAttribute('aria-expanded'), 'false', `${label}: choosing a page closes the menu`);
        assert.equal(await noHorizontalScroll(page), true, `${label}: no horizontal scroll at 390 px`);
        await assertAccessible(page, `${label} on a phone`);
      }
      await page.goto(`${base}/console/#/users`);
      await page.getByRole('rowheader', { name: 'admin', exact: true }).waitFor();
      assert.equal(await noHorizontalScroll(page), true, 'users: no horizontal scroll');
      await assertAccessible(page, 'users on a phone');
      assertClean(w, base, [[401, '/api/v1/session']]);
    } finally {
      await w.close();
    }
  });
});
