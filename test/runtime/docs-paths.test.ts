import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { ROOT } from '../helpers.js';

/**
 * The guides say where the code is: every `src/...` path named in README.md and the docs (docs/*.md and the
 * generated pages below docs/) must exist, so a file that moves takes its documentation with it. Paths with a
 * placeholder (`src/api/routes/<area>/`, `{name}`, `*`) are patterns, not files, and are left out.
 */

function markdown(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? markdown(join(dir, e.name)) : e.name.endsWith('.md') ? [join(dir, e.name)] : []));
}

/** `src/...` paths in a text: after a space, quote, backtick or bracket; trailing sentence punctuation dropped. */
export function srcPaths(text: string): string[] {
  const out = new Set<string>();
  for (const m of text.matchAll(/(?<![\w./-])src\/[\w./<>{}*-]*/g)) {
    const p = m[0].replace(/[.,:;)-]+$/, '');
    if (/[<>{}*]/.test(p)) continue;
    out.add(p);
  }
  return [...out];
}

test('docs - every src/ path named in README.md and docs/ exists', () => {
  const files = [join(ROOT, 'README.md'), ...markdown(join(ROOT, 'docs'))];
  const missing: string[] = [];
  let named = 0;
  for (const f of files) {
    for (const p of srcPaths(readFileSync(f, 'utf8'))) {
      named++;
      if (!existsSync(join(ROOT, p))) missing.push(`${relative(ROOT, f)}: ${p}`);
    }
  }
  assert.ok(named > 50, `the scan found the paths the docs name (${named})`);
  assert.deepEqual(missing, []);
});

test('docs - the path scan reads paths the way the guides write them', () => {
  assert.deepEqual(srcPaths('see `src/runtime/runtime.ts`, (src/engine/ingress.ts). Also src/api/routes/<area>/ and src/messaging/'), ['src/runtime/runtime.ts', 'src/engine/ingress.ts', 'src/messaging/']);
  assert.deepEqual(srcPaths('not a path: mysrc/x.ts or a/src/y.ts'), []);
});
