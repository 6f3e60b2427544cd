/**
 * What a benchmark module returns and how the runner prints it. A bench module exports `run(): Promise<BenchReport>`
 * (and runs itself when executed directly: `tsx bench/<name>.ts`).
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

export interface BenchReport {
  title: string;
  /** Rows of [figure, value] printed as a two-column table. */
  rows: Array<[string, string]>;
  /** The target in words ('none set' when the bench has none). */
  target: string;
  /** Whether the target was met; undefined when there is none. */
  met?: boolean;
  /** The raw figures behind the rows, by name, for the summary table of `npm run bench` (bench/summary.ts). */
  figures?: Record<string, number>;
}

export function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

export function printReport(r: BenchReport): void {
  const rows: Array<[string, string]> = [...r.rows, ['target', r.target], ['met', r.met === undefined ? 'n/a' : r.met ? 'yes' : 'NO']];
  const w0 = Math.max(...rows.map(([k]) => k.length));
  const w1 = Math.max(...rows.map(([, v]) => v.length));
  const line = `+${'-'.repeat(w0 + 2)}+${'-'.repeat(w1 + 2)}+`;
  console.log(`\n${r.title}`);
  console.log(line);
  for (const [k, v] of rows) console.log(`| ${k.padEnd(w0)} | ${v.padStart(w1)} |`);
  console.log(line);
}

/** True when the module is the entry point (`tsx bench/x.ts`), so a bench can run on its own. */
export function isMain(url: string): boolean {
  const entry = process.argv[1];
  return entry !== undefined && url === pathToFileURL(resolve(entry)).href;
}
