#!/usr/bin/env node
// The `switchyard` command. Runs the compiled code in dist/ (built by `npm ci` / `npm run build`); in a checkout
// without dist/ (or with SWITCHYARD_FROM_SOURCE=1) the TypeScript sources through tsx (a devDependency).
import { existsSync } from 'node:fs';

const compiled = new URL('../dist/src/cli/main.js', import.meta.url);
let cli;
if (existsSync(compiled) && process.env.SWITCHYARD_FROM_SOURCE !== '1') {
  cli = await import(compiled.href);
} else {
  try {
    const { register } = await import('tsx/esm/api');
    register();
  } catch {
    process.stderr.write('switchyard: dist/ is missing and tsx is not installed; run `npm ci` (or `npm run build`) first\n');
    process.exit(1);
  }
  cli = await import(new URL('../src/cli/main.ts', import.meta.url).href);
}
cli.runCli(process.argv.slice(2));
