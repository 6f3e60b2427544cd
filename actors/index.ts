import type { AnyStateMachine } from 'xstate';
import { serverMachine } from './server/server.machine.js';
import { supervisorMachine } from './supervisor/supervisor.machine.js';

/** Every machine definition, for `npm run diagrams` and its up-to-date test. */
export const allMachines: AnyStateMachine[] = [serverMachine, supervisorMachine];
