import type { AnyStateMachine } from 'xstate';
import { clusterMachine } from './cluster/cluster.machine.js';
import { endpointMachine } from './endpoints/endpoint.machine.js';
import { integrationMachine } from './integrations/integration.machine.js';
import { destinationMachine } from './destinations/destination.machine.js';
import { deviceMachine } from './devices/device.machine.js';
import { discoveryMachine } from './discovery/discovery.machine.js';
import { loraMachine } from './lora/lora.machine.js';
import { lockoutMachine } from './lockout/lockout.machine.js';
import { serverMachine } from './server/server.machine.js';
import { subscriptionMachine } from './subscriptions/subscription.machine.js';
import { supervisorMachine } from './supervisor/supervisor.machine.js';

/**
 * Every machine definition, for `npm run diagrams` and its up-to-date test; test/runtime/actor-kinds.test.ts checks
 * it against the declared actor kinds (src/runtime/actor-kind.ts), so a new kind cannot miss its diagram.
 */
export const allMachines: AnyStateMachine[] = [
  serverMachine,
  supervisorMachine,
  destinationMachine,
  subscriptionMachine,
  lockoutMachine,
  endpointMachine,
  integrationMachine,
  discoveryMachine,
  deviceMachine,
  loraMachine,
  clusterMachine,
];
