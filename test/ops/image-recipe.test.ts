/**
 * The image recipe (docker/Dockerfile). No Docker engine runs here, so the test runs the recipe's dependency stage
 * itself: its RUN lines, in a scratch folder holding package.json and package-lock.json as the stage's COPY does, and
 * then loads what the runtime stage copies from it. An image built with `npm ci --omit=dev --ignore-scripts` alone
 * left i2c-bus unbuilt (no I2C in the image); this fails on that recipe.
 */
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { ROOT, removeDir, tempDir } from '../helpers.js';

interface Stage {
  from: string;
  name?: string;
  runs: string[];
  copies: string[];
}

function stages(dockerfile: string): Stage[] {
  // join continuation lines, drop comments
  const lines = dockerfile.replace(/\\\n/g, ' ').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
  const out: Stage[] = [];
  for (const l of lines) {
    const m = /^FROM\s+(\S+)(?:\s+AS\s+(\S+))?/i.exec(l);
    if (m) out.push({ from: m[1]!, name: m[2], runs: [], copies: [] });
    else if (/^RUN\s/i.test(l)) out.at(-1)!.runs.push(l.slice(4).trim());
    else if (/^COPY\s/i.test(l)) out.at(-1)!.copies.push(l.slice(5).trim());
  }
  return out;
}

const recipe = stages(readFileSync(join(ROOT, 'docker', 'Dockerfile'), 'utf8'));
const work = tempDir('switchyard-image-');
after(() => removeDir(work));

test('image - every stage runs a supported Node (22 or 24) and the runtime stage the same major as the stage that built its addons', () => {
  for (const s of recipe) assert.match(s.from, /^node:(22|24)[.-]/, `stage ${s.name ?? '(runtime)'} is ${s.from}`);
  const runtime = recipe.at(-1)!;
  const fromStages = runtime.copies.map((c) => /--from=(\S+)/.exec(c)?.[1]).filter((x): x is string => !!x);
  for (const name of fromStages) {
    const st = recipe.find((s) => s.name === name);
    assert.ok(st, `COPY --from=${name} names a stage`);
    assert.equal(/^node:(\d+)/.exec(st.from)![1], /^node:(\d+)/.exec(runtime.from)![1], `stage ${name} and the runtime use one Node major`);
  }
});

test('image - the production dependencies the runtime stage copies have I2C built and load (runs the deps stage)', { timeout: 600_000 }, () => {
  const runtime = recipe.at(-1)!;
  const modulesFrom = runtime.copies.map((c) => /--from=(\S+)\s+\S*node_modules/.exec(c)?.[1]).find((x) => x);
  assert.ok(modulesFrom, 'the runtime stage copies node_modules from a build stage (not npm ci --ignore-scripts in place)');
  const deps = recipe.find((s) => s.name === modulesFrom)!;
  copyFileSync(join(ROOT, 'package.json'), join(work, 'package.json'));
  copyFileSync(join(ROOT, 'package-lock.json'), join(work, 'package-lock.json'));
  for (const cmd of deps.runs) execFileSync('sh', ['-c', cmd], { cwd: work, stdio: 'pipe', timeout: 480_000 });
  assert.ok(!existsSync(join(work, 'node_modules', 'typescript')), 'no dev dependencies in the image');
  // what the broker's I2C driver loads (src/devices/i2c), and the store's addon
  const probe = `
    const i2c = require('i2c-bus');
    if (typeof i2c.openSync !== 'function') throw new Error('i2c-bus without openSync');
    require('classic-level');
    console.log('ok');`;
  const out = execFileSync(process.execPath, ['-e', probe], { cwd: work, encoding: 'utf8' });
  assert.equal(out.trim(), 'ok');
});
