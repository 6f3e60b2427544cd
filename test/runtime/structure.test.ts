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

/** The files of src/runtime/ that are the kernel proper: they import no domain at all. */
const KERNEL = ['actor-kind.ts', 'command.ts', 'registry.ts', 'inspector.ts', 'service-order.ts', 'virtual-actors.ts', 'diagrams.ts', 'virtual-kinds.ts'];

/**
 * Imports from src/runtime/ into a domain folder that are still there, each with why. The list only shrinks: a new
 * one fails this test. (The domain services that still live in src/runtime/ move to their folders once the engineers
 * working on them are done; runtime.ts and events.ts name the engine's and security's types.)
 */
const KNOWN_UPWARD = new Set([
  'runtime/events.ts -> engine', // event payload types
  'runtime/events.ts -> security',
  'runtime/runtime.ts -> engine', // rt.engine's type
  'runtime/runtime.ts -> security', // the open security installed until the security service runs
]);

function walk(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(join(dir, e.name)) : e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [join(dir, e.name)] : []));
}

/** `runtime/x.ts -> engine` for every relative import of a file under src/runtime/ that lands in another src/ folder. */
function upwardImports(): string[] {
  const src = join(ROOT, 'src');
  const out = new Set<string>();
  for (const f of walk(join(src, 'runtime'))) {
    for (const m of readFileSync(f, 'utf8').matchAll(/(?:^|\n)\s*(?:import|export)\s[^'"]*?from\s+['"](\.[^'"]+)['"]/g)) {
      const target = resolve(dirname(f), m[1]!);
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

test('structure - the kernel files of src/runtime/ import no domain folder', () => {
  const bad = upwardImports().filter((l) => KERNEL.some((k) => l.startsWith(`runtime/${k} `)));
  assert.deepEqual(bad, []);
});

test('structure - no new import from src/runtime/ into a domain folder (the known ones only shrink)', () => {
  const now = upwardImports();
  assert.deepEqual(now.filter((l) => !KNOWN_UPWARD.has(l)), [], 'a new upward import from the kernel: compose it in src/compose.ts or pass it in as a typed argument');
  assert.ok(!now.some((l) => /-> (api|links|discovery|devices|schemas|models|cli|compose)/.test(l)), 'src/runtime/ never imports a service of another area (composition is src/compose.ts)');
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
