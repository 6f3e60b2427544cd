import { setup } from 'xstate';

/**
 * One destination (topic, queue, temporary topic or queue). The engine routes its messages; this actor holds its
 * lifecycle: `active ⇄ paused` (delivery held while paused), the `degraded` tag while a queue is above its
 * high-water mark, and `deleting` (final) once the engine has deleted it. Two regions run side by side under
 * `live`: `run` (active/paused) and `load` (normal/degraded).
 *
 * No I/O here: `pauseDestination` / `resumeDestination` and the guards reading the engine's current state at
 * (re)start are supplied by the runtime with `machine.provide` (src/runtime/destinations.service.ts).
 */
export interface DestinationInput {
  name: string;
  /** Topic, Queue, TemporaryTopic or TemporaryQueue. */
  type: string;
}

export type DestinationContext = DestinationInput;

export type DestinationEvent =
  | { type: 'destination.pause' }
  | { type: 'destination.resume' }
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
  },
  guards: {
    /** The engine already holds delivery (the actor was restarted while paused). */
    wasPaused: () => false,
    /** The queue is above its high-water mark right now. */
    wasAboveHighWater: () => false,
  },
}).createMachine({
  id: 'destination',
  context: ({ input }) => ({ name: input.name, type: input.type }),
  initial: 'live',
  states: {
    live: {
      type: 'parallel',
      on: { 'destination.deleted': 'deleting' },
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
