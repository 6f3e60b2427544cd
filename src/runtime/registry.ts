import type { AnyStateMachine } from 'xstate';
import type { destinationMachine } from '../../actors/destinations/destination.machine.js';
import type { endpointMachine } from '../../actors/endpoints/endpoint.machine.js';
import type { lockoutMachine } from '../../actors/lockout/lockout.machine.js';
import type { serverMachine } from '../../actors/server/server.machine.js';
import type { subscriptionMachine } from '../../actors/subscriptions/subscription.machine.js';
import type { supervisorMachine } from '../../actors/supervisor/supervisor.machine.js';

/**
 * The typed actor registry. Every actor the runtime spawns is registered in XState's actor system under a
 * `systemId` of the form `<kind>:<name>` (`endpoint:MQTT Interface`, `destination:sensors/a`, `lockout:alice`,
 * `supervisor:endpoints`; the root is `server`), and `rt.actor(kind, name)` returns it typed as the machine of that
 * kind. A new actor kind adds itself here by declaration merging, next to its service:
 *
 *   declare module '../runtime/registry.js' {
 *     interface ActorKinds { integration: typeof integrationMachine }
 *   }
 *
 * Shard supervisors (`destinations#3#17`) are not registered: the registry hides where an actor sits.
 */
export interface ActorKinds {
  server: typeof serverMachine;
  supervisor: typeof supervisorMachine;
  endpoint: typeof endpointMachine;
  destination: typeof destinationMachine;
  subscription: typeof subscriptionMachine;
  lockout: typeof lockoutMachine;
}

export type ActorKind = keyof ActorKinds;

// compile-time check that every kind is a machine
type _AllMachines = ActorKinds[ActorKind] extends AnyStateMachine ? true : never;
export const _allMachines: _AllMachines = true;

/** `<kind>:<name>`; a singleton kind (the root `server`, later `discovery`) has the name '' and the systemId `<kind>`. */
export function systemIdOf(kind: string, name: string): string {
  return name === '' ? kind : `${kind}:${name}`;
}

/** `endpoint:MQTT Interface` → { kind: 'endpoint', name: 'MQTT Interface' }; `server` → { kind: 'server', name: '' }. */
export function parseSystemId(systemId: string): { kind: string; name: string } {
  const i = systemId.indexOf(':');
  return i < 0 ? { kind: systemId, name: '' } : { kind: systemId.slice(0, i), name: systemId.slice(i + 1) };
}

/**
 * The one name look-up of every kind's entries (endpoints, links, radios): the exact name first, then the name
 * compared case-insensitively (MAPS names are matched so). `alsoMatches` adds another key (an endpoint's uniqueId).
 */
export function findByName<T extends { name: string }>(entries: ReadonlyMap<string, T>, key: string, alsoMatches?: (entry: T, lower: string) => boolean): T | undefined {
  const exact = entries.get(key);
  if (exact) return exact;
  const lower = key.toLowerCase();
  for (const e of entries.values()) if (e.name.toLowerCase() === lower || alsoMatches?.(e, lower)) return e;
  return undefined;
}
