#!/usr/bin/env node
/**
 * `npm run fuzz`: coverage-guided fuzzing of the MQTT decoders with jsfuzz (fuzz/targets.ts), each target time-boxed.
 *
 *   npm run fuzz                         every target, 60 s each (FUZZ_SECONDS or --seconds N to change)
 *   npm run fuzz -- --seconds 10 ack     only the named targets (publish, ack, properties, framer, scanner)
 *   npm run fuzz -- --save               also keep the inputs that found new coverage in fuzz/corpus/<target>/
 *                                        (at most CORPUS_CAP files per target, smallest first)
 *
 * jsfuzz instruments CommonJS through a require hook and runs forever, so this script compiles fuzz/targets.ts and
 * the sources it imports to CommonJS (esbuild, one file per source so coverage is per file) under
 * node_modules/.cache/switchyard-fuzz/, runs jsfuzz in a scratch directory (new inputs go there, the repo corpus is
 * read as seeds), stops it with SIGINT after the time box (its worker then writes its coverage), and prints per target:
 * executions, jsfuzz's coverage count, statements and branches covered in our decoder files, and findings (a crash:
 * an exception other than MqttProtocolError, a failed oracle, a hang past --timeout, an out-of-memory). A finding's
 * input is kept in fuzz/findings/ and printed in hex; the exit code is 1 when there is one.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const TARGETS = ['publish', 'ack', 'properties', 'framer', 'scanner'];
const CORPUS_CAP = 48;
/** Our files whose coverage is reported (relative to the repo). */
const OURS = ['src/protocol/mqtt/codec.ts', 'src/protocol/mqtt/parser.ts', 'src/links/mqtt-guard.ts'];

const args = process.argv.slice(2);
let seconds = Number(process.env.FUZZ_SECONDS ?? 60);
let save = false;
let timeout = 10;
const chosen = [];
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  if (a === '--seconds') seconds = Number(args[++i]);
  else if (a === '--timeout') timeout = Number(args[++i]);
  else if (a === '--save') save = true;
  else if (TARGETS.includes(a)) chosen.push(a);
  else {
    console.error(`unknown argument ${a}; targets: ${TARGETS.join(', ')}`);
    process.exit(2);
  }
}
if (!(seconds > 0)) {
  console.error('--seconds must be a positive number');
  process.exit(2);
}
const targets = chosen.length > 0 ? chosen : TARGETS;

const OUT = join(ROOT, 'node_modules/.cache/switchyard-fuzz');
rmSync(OUT, { recursive: true, force: true });
mkdirSync(OUT, { recursive: true });
// the repo's package.json says "type": "module"; jsfuzz's require hook needs CommonJS .js files
writeFileSync(join(OUT, 'package.json'), '{"type":"commonjs"}\n');
await build({
  entryPoints: ['fuzz/targets.ts', 'src/protocol/mqtt/codec.ts', 'src/protocol/mqtt/parser.ts', 'src/protocol/mqtt/reason.ts', 'src/links/mqtt-guard.ts'].map((f) => join(ROOT, f)),
  absWorkingDir: ROOT,
  outbase: ROOT,
  outdir: OUT,
  bundle: false,
  format: 'cjs',
  platform: 'node',
  // istanbul-lib-instrument 3 (jsfuzz's) parses ES2019
  target: 'es2019',
  logLevel: 'warning',
});
for (const t of targets) {
  writeFileSync(join(OUT, `fuzz/target-${t}.js`), `module.exports = { fuzz: require('./targets.js').${t} };\n`);
}

const JSFUZZ = join(ROOT, 'node_modules/jsfuzz/build/src/index.js');

function coverageOf(covFile) {
  if (!existsSync(covFile)) return undefined;
  const cov = JSON.parse(readFileSync(covFile, 'utf8'));
  const out = {};
  for (const f of OURS) {
    const key = Object.keys(cov).find((k) => k.endsWith(f.replace(/\.ts$/, '.js')));
    if (key === undefined) continue;
    const c = cov[key];
    const s = Object.values(c.s);
    const b = Object.values(c.b).flat();
    out[f] = { statements: [s.filter((n) => n > 0).length, s.length], branches: [b.filter((n) => n > 0).length, b.length] };
  }
  return out;
}

async function fuzzOne(target) {
  const work = mkdtempSync(join(tmpdir(), `switchyard-fuzz-${target}-`));
  const fresh = join(work, 'new');
  const corpus = join(ROOT, 'fuzz/corpus', target);
  mkdirSync(corpus, { recursive: true });
  const entry = relative(work, join(OUT, `fuzz/target-${target}.js`));
  const child = spawn(process.execPath, [JSFUZZ, entry, fresh, corpus, '--timeout', String(timeout), '--rss-limit-mb', '1024'], {
    cwd: work,
    detached: true, // its own process group: SIGINT reaches jsfuzz and its worker, nothing else
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const stopTimer = setTimeout(() => {
    try {
      process.kill(-child.pid, 'SIGINT');
    } catch {
      /* already gone */
    }
  }, seconds * 1000);
  const killTimer = setTimeout(() => {
    try {
      process.kill(-child.pid, 'SIGKILL');
    } catch {
      /* already gone */
    }
  }, (seconds + 20) * 1000);
  await exited;
  clearTimeout(stopTimer);
  clearTimeout(killTimer);

  const stats = [...out.matchAll(/^#(\d+) (?:NEW|PULSE)\s+cov: (\d+) corp: (\d+) exec\/s: (\d+)/gm)];
  const last = stats.at(-1);
  const findings = [];
  for (const m of out.matchAll(/crash was written to (\S+)/g)) {
    const file = join(work, m[1]);
    const bytes = existsSync(file) ? readFileSync(file) : Buffer.alloc(0);
    const sha = createHash('sha256').update(bytes).digest('hex').slice(0, 16);
    const kept = join(ROOT, 'fuzz/findings', `${target}-${sha}`);
    mkdirSync(dirname(kept), { recursive: true });
    writeFileSync(kept, bytes);
    const why = /timeout reached/.test(out) ? 'hang' : /MEMORY OOM/.test(out) ? 'out of memory' : (out.match(/^(\w*Error|FuzzFinding)[^\n]*/m)?.[0] ?? 'crash');
    findings.push({ file: relative(ROOT, kept), hex: bytes.toString('hex'), why });
  }
  const newInputs = existsSync(fresh) ? readdirSync(fresh) : [];
  if (save) {
    const have = readdirSync(corpus).length;
    const room = Math.max(0, CORPUS_CAP - have);
    const bySize = newInputs.map((f) => ({ f, size: statSync(join(fresh, f)).size })).sort((a, b) => a.size - b.size);
    for (const { f } of bySize.slice(0, room)) copyFileSync(join(fresh, f), join(corpus, f));
  }
  const result = {
    target,
    executions: last ? Number(last[1]) : 0,
    jsfuzzCoverage: last ? Number(last[2]) : 0,
    execPerSecond: last ? Number(last[4]) : 0,
    corpus: readdirSync(corpus).length,
    newInputs: newInputs.length,
    coverage: coverageOf(join(work, '.nyc_output/cov.json')),
    findings,
  };
  rmSync(work, { recursive: true, force: true });
  return result;
}

console.log(`jsfuzz ${JSON.parse(readFileSync(join(ROOT, 'node_modules/jsfuzz/package.json'), 'utf8')).version} on Node ${process.version}: ${targets.join(', ')}, ${seconds} s each`);
const results = [];
for (const t of targets) {
  const r = await fuzzOne(t);
  results.push(r);
  const cov = Object.entries(r.coverage ?? {})
    .map(([f, c]) => `${f.split('/').at(-1)} statements ${c.statements[0]}/${c.statements[1]} branches ${c.branches[0]}/${c.branches[1]}`)
    .join('; ');
  console.log(
    `${t.padEnd(10)} executions ${r.executions} (last report; ${r.execPerSecond}/s)  jsfuzz cov ${r.jsfuzzCoverage}  ${cov || 'coverage: none written'}  ` +
      `corpus ${r.corpus} (+${r.newInputs} new${save ? '' : ', not saved'})  findings ${r.findings.length}`,
  );
  for (const f of r.findings) console.log(`  FINDING ${f.why}: ${f.file} hex=${f.hex.length <= 400 ? f.hex : f.hex.slice(0, 400) + '...'}`);
}
const total = results.reduce((n, r) => n + r.findings.length, 0);
console.log(`findings: ${total}`);
process.exitCode = total > 0 ? 1 : 0;
