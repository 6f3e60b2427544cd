/**
 * The suite's own bookkeeping: every statement of MQTT 3.1.1 and 5.0 is either proved by a test of ./cases or carries
 * the reason it is not testable from outside; no test names a statement that does not exist; a test with a documented
 * deviation proves only its own statement. docs/conformance.md is generated from the same data
 * (scripts/conformance-table.ts): the table there must be the one the script writes now.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from '../helpers.js';
import { ALL_CASES, CASE_FILES } from './cases/index.js';
import { STATEMENTS, UNTESTABLE_IDS } from './statements.js';
import { testName } from './harness.js';
import { conformanceMarkdown, TABLE_BEGIN, TABLE_END } from '../../scripts/conformance-table.js';

const key = (id: string, v: number) => `${v}:${id}`;

describe('conformance catalogue', () => {
  const known = new Set(STATEMENTS.map((s) => key(s.id, s.v)));

  test('conformance catalogue - 3.1.1 and 5.0 appendix B counts (137 and 251 statements)', () => {
    assert.equal(STATEMENTS.filter((s) => s.v === 4).length, 137);
    assert.equal(STATEMENTS.filter((s) => s.v === 5).length, 251);
    assert.equal(known.size, STATEMENTS.length, 'no statement listed twice');
  });

  test('conformance catalogue - every test names statements that exist', () => {
    for (const c of ALL_CASES) for (const id of [c.id, ...(c.covers ?? [])]) assert.ok(known.has(key(id, c.v)), `${testName(c)}: ${id} is not a ${c.v === 4 ? '3.1.1' : '5.0'} statement`);
    for (const u of UNTESTABLE_IDS) assert.ok(known.has(key(u.id, u.v)), `untestable ${u.id} (${u.v}) is not a statement`);
  });

  test('conformance catalogue - every statement is tested or says why it cannot be', () => {
    const tested = new Set(ALL_CASES.flatMap((c) => [c.id, ...(c.covers ?? [])].map((id) => key(id, c.v))));
    const open = STATEMENTS.filter((s) => !tested.has(key(s.id, s.v)) && s.untestable === undefined).map((s) => `${s.id} (${s.v === 4 ? '3.1.1' : '5.0'})`);
    assert.deepEqual(open, []);
    const both = STATEMENTS.filter((s) => tested.has(key(s.id, s.v)) && s.untestable !== undefined).map((s) => s.id);
    assert.deepEqual(both, [], 'tested statements do not also carry an untestable reason');
  });

  test('conformance catalogue - a test with a deviation proves only its own statement; test names are unique per file', () => {
    for (const c of ALL_CASES) if (c.deviation) assert.equal(c.covers, undefined, `${testName(c)} has a deviation and covers other statements`);
    for (const f of CASE_FILES) {
      const names = f.cases.map(testName);
      assert.equal(new Set(names).size, names.length, `${f.file}: duplicate test names`);
    }
  });

  test('conformance catalogue - docs/conformance.md holds the table the script generates', () => {
    const doc = readFileSync(join(ROOT, 'docs/conformance.md'), 'utf8');
    const i = doc.indexOf(TABLE_BEGIN);
    const j = doc.indexOf(TABLE_END);
    assert.ok(i >= 0 && j > i, 'markers in docs/conformance.md');
    assert.equal(doc.slice(i, j + TABLE_END.length), conformanceMarkdown(), 'run `npx tsx scripts/conformance-table.ts` and commit docs/conformance.md');
  });
});
