// Builds the web console (console/, docs/console.md) into dist/console: console/main.js bundled by esbuild with
// preact, htm, console/lib/ and every console/pages/*.js (one ES module, minified, no CDN, nothing fetched at run
// time); console/elk.js (the elkjs layout, for the statechart pages only) bundled on its own into dist/console/elk.js,
// which main.js imports lazily; index.html and style.css copied.
// Run by `npm run build` (scripts/bundle.mjs) and so by the `prepare` script of `npm ci`; the console tests run it
// too (test/console/), so they always test the current sources. About a second.
import { build } from 'esbuild';
import { copyFileSync, existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { readFileSync } from 'node:fs';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const CONSOLE_SRC = `${ROOT}console`;
export const CONSOLE_OUT = `${ROOT}dist/console`;
/** The files the broker serves (src/api/routes/console/console.routes.ts serves exactly what is in dist/console). */
const COPIED = ['index.html', 'style.css', 'favicon.svg'];
/** Bundled on their own: main.js (the first page) and elk.js (loaded by the statechart pages only). */
export const BUNDLES = ['main.js', 'elk.js'];
/** What main.js imports by absolute URL, at run time (not bundled into it). */
const LAZY = ['/console/elk.js'];

/**
 * `import { PAGES } from 'console:pages'`: every console/pages/*.js (each exports `page = { path, label, group, order,
 * view }`), ordered by `order` then path, so a new page is a new file and no list elsewhere changes.
 */
const pagesPlugin = {
  name: 'console-pages',
  setup(b) {
    b.onResolve({ filter: /^console:pages$/ }, () => ({ path: 'pages', namespace: 'console-pages' }));
    b.onLoad({ filter: /.*/, namespace: 'console-pages' }, () => {
      const files = readdirSync(join(CONSOLE_SRC, 'pages')).filter((f) => f.endsWith('.js')).sort();
      const lines = files.map((f, i) => `import { page as p${i} } from ${JSON.stringify(join(CONSOLE_SRC, 'pages', f))};`);
      lines.push(`export const PAGES = [${files.map((_, i) => `p${i}`).join(', ')}].sort((a, b) => (a.order ?? 1000) - (b.order ?? 1000) || a.path.localeCompare(b.path));`);
      return { contents: lines.join('\n'), resolveDir: CONSOLE_SRC, loader: 'js', watchDirs: [join(CONSOLE_SRC, 'pages')] };
    });
  },
};

/** Builds dist/console; returns the size of each file, raw and gzipped. */
export async function buildConsole({ out = CONSOLE_OUT, quiet = false } = {}) {
  const tmp = `${out}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  const common = {
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: ['chrome110', 'firefox110', 'safari16'],
    minify: true,
    charset: 'utf8',
    legalComments: 'none',
    logLevel: 'warning',
  };
  await build({ ...common, entryPoints: [`${CONSOLE_SRC}/main.js`], outfile: `${tmp}/main.js`, external: LAZY, plugins: [pagesPlugin] });
  await build({ ...common, entryPoints: [`${CONSOLE_SRC}/elk.js`], outfile: `${tmp}/elk.js` });
  for (const f of COPIED) copyFileSync(`${CONSOLE_SRC}/${f}`, `${tmp}/${f}`);
  // replace the old build (a broker serving it meanwhile may miss a file for a moment; the tests build only if stale)
  rmSync(out, { recursive: true, force: true });
  mkdirSync(`${out}/..`, { recursive: true });
  try {
    renameSync(tmp, out);
  } catch (err) {
    if (err.code !== 'ENOTEMPTY' && err.code !== 'EEXIST') throw err;
    rmSync(tmp, { recursive: true, force: true }); // built at the same moment by another process: theirs stays
  }
  const sizes = {};
  for (const f of [...BUNDLES, ...COPIED]) {
    const b = readFileSync(`${out}/${f}`);
    sizes[f] = { bytes: statSync(`${out}/${f}`).size, gzip: gzipSync(b).length };
  }
  if (!quiet) {
    const parts = Object.entries(sizes).map(([f, s]) => `${f} ${s.bytes} B (${s.gzip} B gzipped)`);
    process.stderr.write(`switchyard console: built dist/console: ${parts.join(', ')}\n`);
  }
  return sizes;
}

/** dist/console exists and is newer than every file of console/ and this script. */
export function consoleUpToDate(out = CONSOLE_OUT) {
  if (!existsSync(`${out}/index.html`) || !BUNDLES.every((f) => existsSync(`${out}/${f}`))) return false;
  const built = statSync(`${out}/index.html`).mtimeMs;
  return newest(CONSOLE_SRC) <= built && statSync(fileURLToPath(import.meta.url)).mtimeMs <= built;
}

/** The newest modification time of a file or of anything under a folder (console/lib/, console/pages/ too). */
function newest(path) {
  const st = statSync(path);
  if (!st.isDirectory()) return st.mtimeMs;
  let t = st.mtimeMs; // a file removed from a folder changes the folder's time
  for (const e of readdirSync(path)) t = Math.max(t, newest(join(path, e)));
  return t;
}

// `node scripts/console.mjs` builds; with --if-stale only when a source is newer than the build (the tests).
if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  if (!(process.argv.includes('--if-stale') && consoleUpToDate())) await buildConsole();
}
