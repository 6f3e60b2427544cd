// Builds the web console (console/, docs/console.md) into dist/console: console/main.js bundled by esbuild with
// preact and htm (one ES module, minified, no CDN, nothing fetched at run time), index.html and style.css copied.
// Run by `npm run build` (scripts/bundle.mjs) and so by the `prepare` script of `npm ci`; the console tests run it
// too (test/console/), so they always test the current sources. About a second.
import { build } from 'esbuild';
import { copyFileSync, existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { readFileSync } from 'node:fs';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const CONSOLE_SRC = `${ROOT}console`;
export const CONSOLE_OUT = `${ROOT}dist/console`;
/** The files the broker serves (src/api/routes/console/console.routes.ts serves exactly what is in dist/console). */
const COPIED = ['index.html', 'style.css', 'favicon.svg'];

/** Builds dist/console; returns the size of each file, raw and gzipped. */
export async function buildConsole({ out = CONSOLE_OUT, quiet = false } = {}) {
  const tmp = `${out}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  await build({
    entryPoints: [`${CONSOLE_SRC}/main.js`],
    outfile: `${tmp}/main.js`,
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: ['chrome110', 'firefox110', 'safari16'],
    minify: true,
    charset: 'utf8',
    legalComments: 'none',
    logLevel: 'warning',
  });
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
  for (const f of ['main.js', ...COPIED]) {
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
  if (!existsSync(`${out}/index.html`) || !existsSync(`${out}/main.js`)) return false;
  const built = statSync(`${out}/index.html`).mtimeMs;
  const sources = [...readdirSync(CONSOLE_SRC).map((f) => `${CONSOLE_SRC}/${f}`), fileURLToPath(import.meta.url)];
  return sources.every((f) => statSync(f).mtimeMs <= built);
}

// `node scripts/console.mjs` builds; with --if-stale only when a source is newer than the build (the tests).
if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  if (!(process.argv.includes('--if-stale') && consoleUpToDate())) await buildConsole();
}
