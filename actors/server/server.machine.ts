import { assign, enqueueActions, fromPromise, setup } from 'xstate';
import { spawnSpec, type ChildSpec } from '../supervisor/supervisor.machine.js';

/**
 * The root actor. booting → running → stopping → stopped; a restart is stopping → booting, which rebuilds the
 * supervisor tree in-process (the supervisors are spawned on entering booting, so services can use them while they
 * boot, and stopped child-first on leaving running, before the services flush). I/O (opening the engine, closing listeners, flushing the store) is supplied by the
 * runtime as the `boot` and `shutdown` actors.
 */
export interface ServerInput {
  /** The supervisors (and other top-level actors) spawned each time the server enters `running`. */
  children: () => ChildSpec[];
}

export interface ServerContext extends ServerInput {
  bootCount: number;
  restartRequested: boolean;
  error?: string;
  childIds: string[];
}

export type ServerEvent = { type: 'server.restart' } | { type: 'server.shutdown' };

export const serverMachine = setup({
  types: {
    context: {} as ServerContext,
    events: {} as ServerEvent,
    input: {} as ServerInput,
  },
  actors: {
    boot: fromPromise<void, { bootCount: number }>(async () => {}),
    shutdown: fromPromise<void, { restart: boolean }>(async () => {}),
  },
  guards: {
    restartRequested: ({ context }) => context.restartRequested,
  },
  actions: {
    spawnChildren: enqueueActions(({ context, enqueue }) => {
      const specs = context.children();
      for (const spec of specs) spawnSpec(enqueue, spec);
      enqueue.assign({ childIds: specs.map((s) => s.id) });
    }),
    stopChildren: enqueueActions(({ context, enqueue }) => {
      for (const id of [...context.childIds].reverse()) enqueue.stopChild(id);
      enqueue.assign({ childIds: [] });
    }),
  },
}).createMachine({
  id: 'server',
  context: ({ input }) => ({ ...input, bootCount: 0, restartRequested: false, childIds: [] }),
  initial: 'booting',
  states: {
    booting: {
      // The supervisors exist while services boot, so a service can spawn actors under them during boot.
      entry: 'spawnChildren',
      invoke: {
        src: 'boot',
        input: ({ context }) => ({ bootCount: context.bootCount }),
        onDone: { target: 'running', actions: assign(({ context }) => ({ bootCount: context.bootCount + 1, error: undefined })) },
        onError: { target: 'failed', actions: assign(({ event }) => ({ error: String((event.error as Error)?.message ?? event.error) })) },
      },
    },
    running: {
      exit: 'stopChildren',
      on: {
        'server.restart': { target: 'stopping', actions: assign({ restartRequested: true }) },
        'server.shutdown': { target: 'stopping', actions: assign({ restartRequested: false }) },
      },
    },
    stopping: {
      invoke: {
        src: 'shutdown',
        input: ({ context }) => ({ restart: context.restartRequested }),
        onDone: [{ guard: 'restartRequested', target: 'booting' }, { target: 'stopped' }],
        onError: { target: 'stopped', actions: assign(({ event }) => ({ error: String((event.error as Error)?.message ?? event.error) })) },
      },
    },
    failed: {
      tags: ['failed'],
      entry: 'stopChildren',
      on: { 'server.shutdown': 'stopped', 'server.restart': 'booting' },
    },
    stopped: { type: 'final' },
  },
});
