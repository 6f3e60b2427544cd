import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { machineCatalog } from '../actors/catalog.js';
import { diagramMarkdown } from '../src/runtime/diagrams.js';

/**
 * Writes docs/machines/<machine>.md, a Mermaid state diagram for every machine kind of actors/catalog.ts: the same
 * list GET /api/v1/server/machines serves to the console.
 */
const dir = join(import.meta.dirname ?? new URL('.', import.meta.url).pathname, '..', 'docs', 'machines');
mkdirSync(dir, { recursive: true });
for (const m of machineCatalog) {
  const file = join(dir, `${m.id}.md`);
  writeFileSync(file, diagramMarkdown(m));
  console.log(`wrote ${file}`);
}
