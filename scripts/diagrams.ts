import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { allMachines } from '../actors/index.js';
import { loraMachine } from '../actors/lora/lora.machine.js';
import { deviceMachine } from '../actors/devices/device.machine.js';
import { discoveryMachine } from '../actors/discovery/discovery.machine.js';
import { diagramMarkdown } from '../src/runtime/diagrams.js';

/** Writes docs/machines/<machine>.md, a Mermaid state diagram for every machine definition. */
const dir = join(import.meta.dirname ?? new URL('.', import.meta.url).pathname, '..', 'docs', 'machines');
mkdirSync(dir, { recursive: true });
for (const m of new Set([...allMachines, loraMachine, deviceMachine, discoveryMachine])) {
  const file = join(dir, `${m.id}.md`);
  writeFileSync(file, diagramMarkdown(m));
  console.log(`wrote ${file}`);
}
