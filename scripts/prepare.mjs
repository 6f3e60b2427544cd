// The `prepare` script (npm ci, npm install, and npm exec / npx, which installs the checkout into its cache as a
// file: dependency and runs prepare again): builds dist/ only when it is missing or older than what it is built
// from. Before, the first `npx switchyard` in a checkout rebuilt dist/ (~45 s) although `npm ci` had just built it.
// `npm run build` always builds. SWITCHYARD_BUILD=always forces a build here, SWITCHYARD_BUILD=never skips it.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

const root = process.cwd(); // npm runs lifecycle scripts in the package's folder
const outputs = ['dist/src/cli/main.js', 'dist/src/main.js', 'dist/bundle/main.js', 'dist/console/index.html'].map((f) => join(root, f));
const inputs = ['src', 'actors', 'console', 'scripts/bundle.mjs', 'scripts/console.mjs', 'tsconfig.json', 'tsconfig.build.json', 'package.json'].map((f) => join(root, f));

/** The newest modification time under a file or folder (node_modules and dot-folders skipped). */
function newest(path) {
  if (!existsSync(path)) return 0;
  const st = statSync(path);
  if (!st.isDirectory()) return st.mtimeMs;
  let t = 0;
  for (const e of readdirSync(path, { withFileTypes: true })) {
    if (e.name.startsWith('.') || e.name === 'node_modules') continue;
    t = Math.max(t, newest(join(path, e.name)));
  }
  return t;
}

const mode = process.env.SWITCHYARD_BUILD ?? 'auto';
let why;
if (mode === 'never') why = undefined;
else if (mode === 'always') why = 'SWITCHYARD_BUILD=always';
else if (outputs.some((f) => !existsSync(f))) why = 'dist/ is missing';
else {
  const built = Math.min(...outputs.map((f) => statSync(f).mtimeMs));
  const src = Math.max(...inputs.map(newest));
  if (src > built) why = 'sources are newer than dist/';
}
if (why) {
  process.stderr.write(`switchyard prepare: building dist/ (${why})\n`);
  execFileSync(process.platform === 'win32' ? 'npm.cmd' : 'npm', ['run', 'build'], { cwd: root, stdio: 'inherit' });
} else {
  process.stderr.write(`switchyard prepare: dist/ is up to date${mode === 'never' ? ' (SWITCHYARD_BUILD=never)' : ''}; not rebuilt (npm run build forces it)\n`);
}
