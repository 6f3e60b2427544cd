/**
 * The Node flags and environment `npm start` runs the broker with (package.json `scripts.start`:
 * `exec env K=V ... node <flags> dist/bundle/main.js`), read from package.json so that the benches measure what ships
 * and cannot drift from it. `BENCH_NODE_FLAGS` (space-separated; empty for V8's defaults) replaces the flags, e.g.
 * `BENCH_NODE_FLAGS=--max-semi-space-size=32` for the larger young generation.
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

const ROOT = resolve(import.meta.dirname, '..');
const START = String(JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).scripts.start);
const PARSED = /^exec (?:env ((?:\w+=\S+ )+))?node ((?:--\S+ )*)\S+$/.exec(START);
if (!PARSED) throw new Error(`bench/start-flags: package.json scripts.start is not "exec env K=V ... node --flags file": ${START}`);

/** npm start's environment variables (the malloc settings). */
export const START_ENV: Record<string, string> = Object.fromEntries((PARSED[1] ?? '').split(' ').filter(Boolean).map((kv) => kv.split('=', 2) as [string, string]));

/** npm start's Node flags, or BENCH_NODE_FLAGS when set. */
export const START_FLAGS: string[] = process.env.BENCH_NODE_FLAGS !== undefined ? process.env.BENCH_NODE_FLAGS.split(' ').filter(Boolean) : (PARSED[2] ?? '').split(' ').filter(Boolean);
