import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { importCycles } from '../../scripts/import-cycles.js';

const ROOT = resolve(import.meta.dirname, '..', '..');

test('mqtt - no import cycle in src/protocol/mqtt: handlers see MqttConn/MqttBrokerApi (types.ts), never connection.ts or broker.ts', () => {
  const { files, cycles } = importCycles(resolve(ROOT, 'src'), 'src/protocol/mqtt', ROOT);
  assert.ok(files >= 15, `the scan read the folder (${files} files)`);
  assert.deepEqual(cycles, []);
});

test('mqtt - the import-cycle scan finds a cycle when there is one (type-only imports count)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'switchyard-cycles-'));
  try {
    writeFileSync(join(dir, 'a.ts'), "import type { B } from './b.js';\nexport interface A { b: B }\n");
    writeFileSync(join(dir, 'b.ts'), "import type {\n  A,\n} from './a.js';\nexport interface B { a?: A }\n");
    writeFileSync(join(dir, 'c.ts'), "import type { A } from './a.js';\nexport type C = A;\n");
    assert.deepEqual(importCycles(dir, undefined, dir).cycles, [['a.ts', 'b.ts']]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
