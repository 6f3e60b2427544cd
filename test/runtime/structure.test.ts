import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { importCycles } from '../../scripts/import-cycles.js';
import { ROOT } from '../helpers.js';

/**
 * Structure a reader can check again (DESIGN.md: composition at the top, src/runtime/ a kernel): the import graph
 * has no cycles, and the kernel does not reach up into the domains.
 */

/** Folders of src/ that are infrastructure every layer may use. */
const INFRASTRUCTURE = new Set(['runtime', 'config', 'store', 'errors.ts', 'log.ts', 'log-limit.ts']);

/** Static imports and re-exports, and inline type imports (`import('../engine/index.js').Engine`). */
const IMPORTS = /(?:(?:^|\n)\s*(?:import|export)\s[^'"]*?from\s+['"](\.[^'"]+)['"])|(?:\bimport\(\s*['"](\.[^'"]+)['"]\s*\))/g;

function walk(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(join(dir, e.name)) : e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [join(dir, e.name)] : []));
}

/** `runtime/x.ts -> engine` for every relative import of a file under src/runtime/ that lands in another src/ folder. */
function upwardImports(): string[] {
  const src = join(ROOT, 'src');
  const out = new Set<string>();
  for (const f of walk(join(src, 'runtime'))) {
    for (const m of readFileSync(f, 'utf8').matchAll(IMPORTS)) {
      const target = resolve(dirname(f), (m[1] ?? m[2])!);
      const rel = relative(src, target);
      if (rel.startsWith('..')) continue; // actors/ (the machines) is below the kernel
      const top = rel.split('/')[0]!;
      if (INFRASTRUCTURE.has(top) || INFRASTRUCTURE.has(top.replace(/\.js$/, '.ts'))) continue;
      out.add(`${relative(src, f)} -> ${top}`);
    }
  }
  return [...out].sort();
}

test('structure - no import cycle anywhere in src/ (npx tsx scripts/import-cycles.ts reports 0)', () => {
  const { files, cycles } = importCycles(join(ROOT, 'src'), undefined, ROOT);
  assert.ok(files > 150, `the scan read src/ (${files} files)`);
  assert.deepEqual(cycles, []);
});

test('structure - no import from src/runtime/ into a domain folder (the kernel names no engine, security or protocol type)', () => {
  // the domains widen the kernel's narrow interfaces by declaration merging (RuntimeEngine, RuntimeSecurity,
  // RuntimeServices, RuntimeEvents) and are put together in src/compose.ts
  assert.deepEqual(upwardImports(), []);
});

test('structure - src/config/ imports no domain: the domains register their sections at the composition root (src/sections.ts)', () => {
  const src = join(ROOT, 'src');
  const found: string[] = [];
  for (const f of walk(join(src, 'config'))) {
    for (const m of readFileSync(f, 'utf8').matchAll(/(?:^|\n)\s*(?:import|export)\s[^'"]*?from\s+['"](\.[^'"]+)['"]/g)) {
      const rel = relative(src, resolve(dirname(f), m[1]!));
      const top = rel.split('/')[0]!;
      if (!rel.startsWith('..') && !INFRASTRUCTURE.has(top) && !INFRASTRUCTURE.has(top.replace(/\.js$/, '.ts'))) found.push(`${relative(src, f)} -> ${rel}`);
    }
  }
  // the address/CIDR parser is a leaf utility (no imports of its own) shared by the core sections and the transports
  assert.deepEqual(found.filter((l) => !l.endsWith('-> transport/address-list.js')), []);
});

test('structure - src/runtime/ never imports the composition root', () => {
  for (const f of walk(join(ROOT, 'src', 'runtime'))) assert.doesNotMatch(readFileSync(f, 'utf8'), /from '\.\.\/compose\.js'/, relative(ROOT, f));
});
