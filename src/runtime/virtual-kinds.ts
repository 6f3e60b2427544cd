import { destinationMachine } from '../../actors/destinations/destination.machine.js';
import { subscriptionMachine } from '../../actors/subscriptions/subscription.machine.js';
import { defineActorKind } from './actor-kind.js';

/**
 * The virtual kinds (src/runtime/virtual-actors.ts): destinations and subscriptions are activated on demand under
 * their sharded supervisors; their services (destinations.service.ts, subscriptions.service.ts) spawn and command
 * them (src/api/routes/destinations/destination-control.routes.ts). Declared here so the registry's kinds, the diagrams and `allMachines` know them.
 */
const valueName = (value: unknown): string =>
  typeof value === 'string' ? value : JSON.stringify(value).replace(/["{}]/g, '').replace(/:/g, '.');

export const destinationKind = defineActorKind({
  kind: 'destination',
  machine: destinationMachine,
  supervisor: 'destinations',
  noun: 'Destination',
  stateName: (snap) => valueName(snap.value),
  routes: ['PATCH /api/v1/server/destinations/{destination}', 'POST /api/v1/server/destinations/{destination}/purge', 'DELETE /api/v1/server/destinations/{destination}'],
});

export const subscriptionKind = defineActorKind({
  kind: 'subscription',
  machine: subscriptionMachine,
  supervisor: 'subscriptions',
  noun: 'Subscription',
  stateName: (snap) => valueName(snap.value),
  routes: ['PATCH /api/v1/server/subscriptions/{subscription}'],
});
