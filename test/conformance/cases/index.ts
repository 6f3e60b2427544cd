/** Every case of the suite, for the catalogue check and scripts/conformance-table.ts. */
import { connectCases } from './connect.js';
import { controlCases } from './control.js';
import { publishCases } from './publish.js';
import { subscribeCases } from './subscribe.js';
import type { Case } from './types.js';

export const CASE_FILES: Array<{ file: string; cases: Case[] }> = [
  { file: 'test/conformance/connect.test.ts', cases: connectCases },
  { file: 'test/conformance/publish.test.ts', cases: publishCases },
  { file: 'test/conformance/subscribe.test.ts', cases: subscribeCases },
  { file: 'test/conformance/control.test.ts', cases: controlCases },
];
export const ALL_CASES: Case[] = CASE_FILES.flatMap((f) => f.cases);
