import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { ROOT } from '../helpers.js';

/**
 * The engine (src/engine/) never imports XState: messages are routed by plain function calls and only the runtime
 * (src/runtime/) turns engine notices into actor events. This test reads every source file under src/engine/ and
 * fails on any import, re-export, dynamic import or require of `xstate` or an `@xstate/` package.
 */
const XSTATE_IMPORT = /(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+|\brequire\s*\(\s*)['"](?:xstate|@xstate\/[^'"]*)(?:\/[^'"]*)?['"]/;

export function xstateImports(source: string): string[] {
  return source.split('\n').filter((line) => XSTATE_IMPORT.test(line));
}

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...sourceFiles(p));
    else if (/\.(ts|js|mts|cts|mjs|cjs)$/.test(e.name)) out.push(p);
  }
  return out;
}

test('engine guard - the rule is checked: every form of importing xstate is recognised, other imports are not', () => {
  const broken = [
    "import { setup } from 'xstate';",
    'import type { AnyActorRef } from "xstate";',
    "export { createActor } from 'xstate';",
    "const x = await import('xstate');",
    "const y = require('xstate');",
    "import { createTestModel } from '@xstate/graph';",
    "import 'xstate';",
  ];
  for (const line of broken) assert.equal(xstateImports(line).length, 1, `recognised: ${line}`);
  const fine = ["import { Engine } from './engine.js';", "// the runtime maps these to XState events", "const state = 'xstate-like';"];
  for (const line of fine) assert.equal(xstateImports(line).length, 0, `not an import: ${line}`);
});

test('engine guard - nothing under src/engine/ imports xstate', () => {
  const dir = join(ROOT, 'src', 'engine');
  const files = sourceFiles(dir);
  assert.ok(files.length > 5, 'the engine sources were found');
  const offenders = files.flatMap((f) => xstateImports(readFileSync(f, 'utf8')).map((line) => `${relative(ROOT, f)}: ${line.trim()}`));
  assert.deepEqual(offenders, [], 'the engine must not import xstate (only src/runtime/ and actors/ may)');
});
