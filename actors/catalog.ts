import type { AnyStateMachine } from 'xstate';
import { allMachines } from './index.js';
import { deviceMachine } from './devices/device.machine.js';
import { discoveryMachine } from './discovery/discovery.machine.js';
import { loraMachine } from './lora/lora.machine.js';

/**
 * Every machine kind, one per machine id: what `npm run diagrams` draws into docs/machines/<id>.md and what
 * `GET /api/v1/server/machines` serves (the console's statecharts), so the two come from the same machine objects.
 * allMachines plus the machines it does not list yet (LoRa, devices, discovery); a machine listed in both counts once.
 */
export const machineCatalog: readonly AnyStateMachine[] = [...new Map([...allMachines, loraMachine, deviceMachine, discoveryMachine].map((m) => [m.id, m])).values()];
