import { assign, setup } from 'xstate';

/**
 * One destination (topic, queue, temporary topic or queue). The engine routes its messages; this actor holds its
 * lifecycle: `active ⇄ paused` (delivery held while paused), the `degraded` tag while a queue is above its
 * high-water mark, and `deleting` (final) once the engine has deleted it. Two regions run side by side under
 * `live`: `run` (active/paused) and `load` (normal/degraded).
 *
 * Commanded over REST (src/messaging/destinations.service.ts, through the command helper): `destination.pause`,
 * `destination.resume`, `destination.purge` (either run state; `purged` holds the count of the last one) and
 * `destination.delete` (→ `deleting`).
 *
 * No I/O here: `pauseDestination` / `resumeDestination` / `purgeDestination` / `deleteDestination` and the guards
 * reading the engine's current state at (re)start are supplied by the runtime with `machine.provide`
 * (src/messaging/destinations.service.ts).
 */
export interface DestinationInput {
  name: string;
  /** Topic, Queue, TemporaryTopic or TemporaryQueue. */
  type: string;
}

export interface DestinationContext extends DestinationInput {
  /** Messages dropped by the last `destination.purge` (0 before any). */
  purged: number;
}

export type DestinationEvent =
  | { type: 'destination.pause' }
  | { type: 'destination.resume' }
  | { type: 'destination.purge' }
  | { type: 'destination.delete' }
  | { type: 'destination.highWater'; depth: number }
  | { type: 'destination.lowWater'; depth: number }
  | { type: 'destination.deleted' };

export const destinationMachine = setup({
  types: {
    context: {} as DestinationContext,
    events: {} as DestinationEvent,
    input: {} as DestinationInput,
  },
  actions: {
    pauseDestination: () => {},
    resumeDestination: () => {},
    /** Drops the stored messages and records how many in `purged` (the runtime supplies an `assign` doing both). */
    purgeDestination: assign({ purged: 0 }),
    deleteDestination: () => {},
  },
  guards: {
    /** The engine already holds delivery (the actor was restarted while paused). */
    wasPaused: () => false,
    /** The queue is above its high-water mark right now. */
    wasAboveHighWater: () => false,
  },
}).createMachine({
  id: 'destination',
  context: ({ input }) => ({ name: input.name, type: input.type, purged: 0 }),
  initial: 'live',
  states: {
    live: {
      type: 'parallel',
      on: {
        'destination.deleted': 'deleting',
        'destination.delete': { target: 'deleting', actions: 'deleteDestination' },
        'destination.purge': { actions: 'purgeDestination' },
      },
      states: {
        run: {
          initial: 'resolving',
          states: {
            resolving: {
              always: [{ guard: 'wasPaused', target: 'paused' }, { target: 'active' }],
            },
            active: {
              on: { 'destination.pause': { target: 'paused', actions: 'pauseDestination' } },
            },
            paused: {
              on: { 'destination.resume': { target: 'active', actions: 'resumeDestination' } },
            },
          },
        },
        load: {
          initial: 'resolving',
          states: {
            resolving: {
              always: [{ guard: 'wasAboveHighWater', target: 'degraded' }, { target: 'normal' }],
            },
            normal: {
              on: { 'destination.highWater': 'degraded' },
            },
            degraded: {
              tags: ['degraded'],
              on: { 'destination.lowWater': 'normal' },
            },
          },
        },
      },
    },
    deleting: { type: 'final' },
  },
});
