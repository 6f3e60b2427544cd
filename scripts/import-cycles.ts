/**
 * Import cycles among the TypeScript files under a folder (default `src`), type-only imports included: it reads
 * every `import ... from '<relative>'` / `export ... from '<relative>'` and reports the strongly connected
 * components with more than one file (a set of files that all reach each other through imports).
 *
 *   npx tsx scripts/import-cycles.ts [folder] [--only <path prefix>]
 *
 * `--only src/protocol/mqtt` restricts the graph to files under that prefix. Exits 0 either way: a report, not a
 * guard.
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

function walk(dir: string, out: string[]): string[] {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) walk(p, out);
    else if (p.endsWith('.ts') && !p.endsWith('.d.ts')) out.push(p);
  }
  return out;
}

const IMPORT = /(?:^|\n)\s*(?:import|export)\s[^'"]*?from\s+['"](\.[^'"]+)['"]/g;

/**
 * The import cycles among the files under `root` (absolute), as groups of files that all reach each other, largest
 * first; `only` (a path prefix relative to `cwd`) restricts the graph to files under it.
 */
export function importCycles(root: string, only?: string, cwd: string = process.cwd()): { files: number; cycles: string[][] } {
  const files = walk(root, []);
  const rel = (p: string): string => relative(cwd, p);
  const known = new Set(files);
  const graph = new Map<string, string[]>();
  for (const f of files) {
    if (only !== undefined && !rel(f).startsWith(only)) continue;
    const src = readFileSync(f, 'utf8');
    const deps: string[] = [];
    for (const m of src.matchAll(IMPORT)) {
      const target = resolve(dirname(f), m[1]!.replace(/\.js$/, '.ts'));
      if (known.has(target) && (only === undefined || rel(target).startsWith(only))) deps.push(target);
    }
    graph.set(f, deps);
  }

  // Tarjan's strongly connected components
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const on = new Set<string>();
  const sccs: string[][] = [];
  const connect = (v: string): void => {
    idx.set(v, index);
    low.set(v, index);
    index++;
    stack.push(v);
    on.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!idx.has(w)) {
        connect(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
    }
    if (low.get(v) === idx.get(v)) {
      const comp: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        on.delete(w);
        comp.push(w);
      } while (w !== v);
      if (comp.length > 1) sccs.push(comp.map(rel).sort());
    }
  };
  for (const v of graph.keys()) if (!idx.has(v)) connect(v);
  sccs.sort((a, b) => b.length - a.length);
  return { files: graph.size, cycles: sccs };
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const args = process.argv.slice(2);
  const onlyAt = args.indexOf('--only');
  const only = onlyAt >= 0 ? args[onlyAt + 1] : undefined;
  const root = resolve(args.find((a, i) => !a.startsWith('--') && i !== onlyAt + 1) ?? 'src');
  const { files, cycles } = importCycles(root, only);
  const inCycles = cycles.reduce((n, c) => n + c.length, 0);
  console.log(`files: ${files}, import cycles (strongly connected groups): ${cycles.length}, files in them: ${inCycles}`);
  for (const c of cycles) {
    console.log(`\n${c.length} files:`);
    for (const f of c) console.log(`  ${f}`);
  }
}
