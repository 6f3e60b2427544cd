// The production bundle that `npm start` runs (dist/bundle/main.js), built after tsc by `npm run build` (so by the
// `prepare` script of `npm ci`). Why: an idle broker keeps the source text of every module it loaded in its heap
// (V8 needs it to compile functions lazily), and zod alone brings 830 KB of sources, all 40-odd of its locales
// among them, several stored as two-byte strings because of a few non-ASCII characters. esbuild bundles our code
// with the pure-JavaScript ESM packages listed in BUNDLED, drops what is never imported (tree shaking: zod's
// locales), minifies it and writes it as ASCII (one byte per character in V8). Measured with bench/footprint:
// about 3.5 MiB less heap at idle. Every other package stays external and is loaded from node_modules as before:
// native modules (classic-level, serialport, i2c-bus, cbor-extract), packages that read files next to their own
// code (@fastify/swagger-ui, pino's workers) and the lazily loaded ones (mqtt, NATS, ajv, protobufjs, ml-*).
// Code loaded on demand (dynamic import) goes to separate chunks, loaded when first used as before.
// esbuild is a devDependency (the one tsx uses too): like tsc, it is needed to build, not to run.
import { build } from 'esbuild';
import { rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const OUT = `${ROOT}dist/bundle`;
const BUNDLED = new Set(['zod', 'fastify-type-provider-zod', 'xstate', 'jose', 'yaml']);

rmSync(OUT, { recursive: true, force: true });
await build({
  entryPoints: [`${ROOT}src/main.ts`],
  outdir: OUT,
  bundle: true,
  splitting: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  minify: true,
  keepNames: true, // errors name themselves with new.target.name (src/errors.ts); logs show class names
  charset: 'ascii',
  legalComments: 'none',
  logLevel: 'warning',
  // for the CommonJS code inside the bundle (yaml) that requires Node built-ins
  banner: { js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);" },
  plugins: [
    {
      name: 'external-packages',
      setup(b) {
        b.onResolve({ filter: /^[^./]/ }, (args) => {
          const parts = args.path.split('/');
          const name = args.path.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
          return BUNDLED.has(name) ? undefined : { external: true };
        });
      },
    },
  ],
});

// The web console (console/ → dist/console, scripts/console.mjs).
await (await import('./console.mjs')).buildConsole();
