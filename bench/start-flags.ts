/**
 * The Node flags, environment and entry file `npm start` runs the broker with (package.json `scripts.start`:
 * `exec env K=V ... node <flags> dist/bundle/main.js`), read from package.json so that the benches measure what ships
 * and cannot drift from it. `BENCH_NODE_FLAGS` (space-separated; empty for V8's defaults) replaces the flags, e.g.
 * `BENCH_NODE_FLAGS=--max-semi-space-size=32` for the larger young generation. The benches start the built bundle
 * (`npm run bench` builds it first); `BENCH_ENTRY=tsx` starts src/main.ts through tsx instead (a worktree of an old
 * commit that has no build).
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';

const ROOT = resolve(import.meta.dirname, '..');
const START = String(JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).scripts.start);
const PARSED = /^exec (?:env ((?:\w+=\S+ )+))?node ((?:--\S+ )*)(\S+)$/.exec(START);
if (!PARSED) throw new Error(`bench/start-flags: package.json scripts.start is not "exec env K=V ... node --flags file": ${START}`);

/** npm start's environment variables (the malloc settings). */
export const START_ENV: Record<string, string> = Object.fromEntries((PARSED[1] ?? '').split(' ').filter(Boolean).map((kv) => kv.split('=', 2) as [string, string]));

/** npm start's Node flags, or BENCH_NODE_FLAGS when set. */
export const START_FLAGS: string[] = process.env.BENCH_NODE_FLAGS !== undefined ? process.env.BENCH_NODE_FLAGS.split(' ').filter(Boolean) : (PARSED[2] ?? '').split(' ').filter(Boolean);

/** npm start's entry file, relative to a checkout (dist/bundle/main.js). */
export const START_ENTRY: string = PARSED[3]!;

/** The newest modification time (ms) of the files under `dir`. */
function newest(dir: string): number {
  let t = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    t = Math.max(t, e.isDirectory() ? newest(p) : statSync(p).mtimeMs);
  }
  return t;
}

/**
 * The arguments after the Node flags that start the broker of checkout `root`: npm start's entry (the esbuild bundle),
 * or `--import tsx src/main.ts` with `BENCH_ENTRY=tsx`. Throws when the bundle is missing or older than a file under
 * src/: a bench of a stale build would measure other code than the checkout's.
 */
export function switchyardArgs(root: string = ROOT): string[] {
  if (process.env.BENCH_ENTRY === 'tsx') return ['--import', 'tsx', join(root, 'src/main.ts')];
  const entry = join(root, START_ENTRY);
  let built: number;
  try {
    built = statSync(entry).mtimeMs;
  } catch {
    throw new Error(`bench: ${entry} is missing: run \`npm run build\` in ${root} (or BENCH_ENTRY=tsx)`);
  }
  if (newest(join(root, 'src')) > built) throw new Error(`bench: ${entry} is older than a file under ${join(root, 'src')}: run \`npm run build\` (or BENCH_ENTRY=tsx)`);
  return [entry];
}
