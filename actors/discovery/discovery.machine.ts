import { assign, fromCallback, fromPromise, setup } from 'xstate';
import { backoffDelay, failedBackoff } from '../shared/backoff.js';

/**
 * The discovery manager (a singleton actor, systemId `discovery`):
 *
 *   stopped → starting → running → stopping → stopped
 *   starting (open failed) / running (agent broke) → failed → backoff → starting      (failed, backoff: `degraded`)
 *
 * The machine holds lifecycle only. Its I/O is supplied by the runtime (src/discovery/discovery.service.ts) with
 * `machine.provide`:
 * - `openAgent` (promise): opens the mDNS sockets and the NATS announcer, publishes the records, starts browsing;
 *   resolves with a handle;
 * - `agent` (callback): lives exactly as long as `running`; reports `agent.failed` when a socket breaks and closes
 *   the handle (goodbye records, NATS goodbye) when the state is left;
 * - `closeAgent` (promise): waits until the goodbyes are sent and the sockets are closed.
 */
export interface DiscoveryAgentLike {
  close(): Promise<void>;
  onError(cb: (err: Error) => void): void;
}

export interface DiscoveryInput {
  /** Start right away (otherwise wait for `discovery.start`). */
  autoStart: boolean;
  retryInitial: number;
  retryMax: number;
}

export interface DiscoveryContext extends DiscoveryInput {
  handle?: DiscoveryAgentLike;
  attempts: number;
  lastError?: string;
}

export type DiscoveryEvent = { type: 'discovery.start' } | { type: 'discovery.stop' } | { type: 'agent.failed'; error: string };

export const discoveryMachine = setup({
  types: {
    context: {} as DiscoveryContext,
    events: {} as DiscoveryEvent,
    input: {} as DiscoveryInput,
  },
  actors: {
    openAgent: fromPromise<DiscoveryAgentLike>(async () => {
      throw new Error('openAgent is supplied by the runtime');
    }),
    agent: fromCallback<DiscoveryEvent, { handle: DiscoveryAgentLike }>(({ input, sendBack }) => {
      input.handle.onError((err) => sendBack({ type: 'agent.failed', error: err.message }));
      return () => void input.handle.close();
    }),
    closeAgent: fromPromise<void, { handle?: DiscoveryAgentLike }>(async ({ input }) => {
      await input.handle?.close();
    }),
  },
  delays: {
    backoff: ({ context }) => backoffDelay(context.attempts, context.retryInitial, context.retryMax),
  },
  guards: {
    autoStart: ({ context }) => context.autoStart,
  },
  actions: {
    keepHandle: assign(({ event }) => ({ handle: (event as unknown as { output: DiscoveryAgentLike }).output, attempts: 0, lastError: undefined })),
    recordOpenError: assign(({ context, event }) => ({
      attempts: context.attempts + 1,
      lastError: String(((event as { error?: unknown }).error as Error | undefined)?.message ?? (event as { error?: unknown }).error),
      handle: undefined,
    })),
    recordAgentError: assign(({ context, event }) => ({
      attempts: context.attempts + 1,
      lastError: event.type === 'agent.failed' ? event.error : context.lastError,
    })),
    dropHandle: assign({ handle: undefined }),
  },
}).createMachine({
  id: 'discovery',
  context: ({ input }) => ({ ...input, attempts: 0 }),
  initial: 'init',
  states: {
    init: {
      always: [{ guard: 'autoStart', target: 'starting' }, { target: 'stopped' }],
    },
    stopped: {
      on: { 'discovery.start': 'starting' },
    },
    starting: {
      invoke: {
        src: 'openAgent',
        onDone: { target: 'running', actions: 'keepHandle' },
        onError: { target: 'failed', actions: 'recordOpenError' },
      },
      on: { 'discovery.stop': 'stopped' },
    },
    running: {
      invoke: { id: 'agent', src: 'agent', input: ({ context }) => ({ handle: context.handle! }) },
      on: {
        'discovery.stop': 'stopping',
        'agent.failed': { target: 'failed', actions: 'recordAgentError' },
      },
    },
    stopping: {
      invoke: {
        src: 'closeAgent',
        input: ({ context }) => ({ handle: context.handle }),
        onDone: { target: 'stopped', actions: 'dropHandle' },
        onError: { target: 'stopped', actions: 'dropHandle' },
      },
    },
    ...failedBackoff({ stop: 'discovery.stop', start: 'discovery.start', retry: 'starting' }),
  },
});

/** The state as the API names it: Started, Stopped, Starting, Stopping, Failed. */
export function discoveryStateName(value: unknown): 'Started' | 'Stopped' | 'Starting' | 'Stopping' | 'Failed' {
  switch (value) {
    case 'running':
      return 'Started';
    case 'starting':
    case 'init':
      return 'Starting';
    case 'stopping':
      return 'Stopping';
    case 'failed':
    case 'backoff':
      return 'Failed';
    default:
      return 'Stopped';
  }
}
