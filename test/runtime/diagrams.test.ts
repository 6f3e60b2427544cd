import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { allMachines } from '../../actors/index.js';
import { diagramMarkdown, machineToMermaid } from '../../src/runtime/diagrams.js';
import { ROOT } from '../helpers.js';

test('diagrams - every machine has a committed diagram that matches its definition (run npm run diagrams)', () => {
  for (const m of allMachines) {
    const file = join(ROOT, 'docs', 'machines', `${m.id}.md`);
    assert.ok(existsSync(file), `${file} is missing: run npm run diagrams`);
    assert.equal(readFileSync(file, 'utf8'), diagramMarkdown(m), `${file} is out of date: run npm run diagrams`);
  }
});

test('diagrams - the server diagram shows its lifecycle transitions', () => {
  const server = allMachines.find((m) => m.id === 'server')!;
  const text = machineToMermaid(server);
  assert.match(text, /\[\*\] --> server_booting/);
  assert.match(text, /server_running --> server_stopping : server\.restart/);
  assert.match(text, /server_stopping --> server_booting : done: stopping \[restartRequested\]/);
});
