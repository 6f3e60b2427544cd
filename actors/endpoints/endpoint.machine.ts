import { assign, fromCallback, fromPromise, setup } from 'xstate';

/**
 * One network endpoint (DESIGN.md, actor tree):
 *
 *   stopped → starting → started ⇄ paused → stopping → stopped
 *   starting (bind failed) → failed → backoff → starting      (failed and backoff are tagged `degraded`)
 *
 * The machine holds lifecycle only. Its I/O is supplied by the runtime with `machine.provide`:
 * - `bindListener` (promise): binds the socket, resolves with a handle;
 * - `listener` (callback): lives exactly as long as the listening states (started, paused); it forwards
 *   pause / resume to the handle, reports `listener.failed` when the bound listener breaks, and closes the handle
 *   when the state is left (stop, failure, or the actor itself being stopped);
 * - `closeListener` (promise): waits until the listener and its connections are closed.
 * No connection and no message is an event here.
 */
export interface ListenerLike {
  readonly port: number;
  pause(): void;
  resume(): void;
  close(): Promise<void>;
  onError(cb: (err: Error) => void): void;
}

export interface EndpointInput {
  name: string;
  /** Start right away (otherwise wait for `endpoint.start`). */
  autoStart: boolean;
  retryInitial: number;
  retryMax: number;
}

export interface EndpointContext extends EndpointInput {
  handle?: ListenerLike;
  port?: number;
  attempts: number;
  lastError?: string;
}

export type EndpointEvent =
  | { type: 'endpoint.start' }
  | { type: 'endpoint.stop' }
  | { type: 'endpoint.pause' }
  | { type: 'endpoint.resume' }
  | { type: 'listener.failed'; error: string };

export const endpointMachine = setup({
  types: {
    context: {} as EndpointContext,
    events: {} as EndpointEvent,
    input: {} as EndpointInput,
  },
  actors: {
    bindListener: fromPromise<ListenerLike, { name: string }>(async () => {
      throw new Error('bindListener is supplied by the runtime');
    }),
    listener: fromCallback<EndpointEvent, { handle: ListenerLike }>(({ input, receive, sendBack }) => {
      input.handle.onError((err) => sendBack({ type: 'listener.failed', error: err.message }));
      receive((e) => {
        if (e.type === 'endpoint.pause') input.handle.pause();
        else if (e.type === 'endpoint.resume') input.handle.resume();
      });
      return () => void input.handle.close();
    }),
    closeListener: fromPromise<void, { handle?: ListenerLike }>(async ({ input }) => {
      await input.handle?.close();
    }),
  },
  delays: {
    backoff: ({ context }) => Math.min(context.retryMax, context.retryInitial * 2 ** Math.max(0, context.attempts - 1)),
  },
  guards: {
    autoStart: ({ context }) => context.autoStart,
  },
  actions: {
    keepHandle: assign(({ event }) => {
      const handle = (event as unknown as { output: ListenerLike }).output;
      return { handle, port: handle.port, attempts: 0, lastError: undefined };
    }),
    recordBindError: assign(({ context, event }) => ({
      attempts: context.attempts + 1,
      lastError: String(((event as { error?: unknown }).error as Error | undefined)?.message ?? (event as { error?: unknown }).error),
      handle: undefined,
    })),
    recordListenerError: assign(({ context, event }) => ({
      attempts: context.attempts + 1,
      lastError: event.type === 'listener.failed' ? event.error : context.lastError,
    })),
    dropHandle: assign({ handle: undefined, port: undefined }),
    forwardToListener: ({ event, self }) => {
      const child = self.getSnapshot().children.listener as { send(e: EndpointEvent): void } | undefined;
      child?.send(event);
    },
  },
}).createMachine({
  id: 'endpoint',
  context: ({ input }) => ({ ...input, attempts: 0 }),
  initial: 'init',
  states: {
    init: {
      always: [{ guard: 'autoStart', target: 'starting' }, { target: 'stopped' }],
    },
    stopped: {
      on: { 'endpoint.start': 'starting' },
    },
    starting: {
      invoke: {
        src: 'bindListener',
        input: ({ context }) => ({ name: context.name }),
        onDone: { target: 'listening', actions: 'keepHandle' },
        onError: { target: 'failed', actions: 'recordBindError' },
      },
      on: { 'endpoint.stop': 'stopped' },
    },
    listening: {
      invoke: { id: 'listener', src: 'listener', input: ({ context }) => ({ handle: context.handle! }) },
      initial: 'started',
      states: {
        started: {
          on: { 'endpoint.pause': { target: 'paused', actions: 'forwardToListener' } },
        },
        paused: {
          on: { 'endpoint.resume': { target: 'started', actions: 'forwardToListener' } },
        },
      },
      on: {
        'endpoint.stop': 'stopping',
        'listener.failed': { target: 'failed', actions: 'recordListenerError' },
      },
    },
    stopping: {
      invoke: {
        src: 'closeListener',
        input: ({ context }) => ({ handle: context.handle }),
        onDone: { target: 'stopped', actions: 'dropHandle' },
        onError: { target: 'stopped', actions: 'dropHandle' },
      },
    },
    failed: {
      tags: ['degraded'],
      after: { 0: 'backoff' },
      on: { 'endpoint.stop': 'stopped' },
    },
    backoff: {
      tags: ['degraded'],
      after: { backoff: 'starting' },
      on: { 'endpoint.stop': 'stopped', 'endpoint.start': 'starting' },
    },
  },
});

/** The MAPS state name of a snapshot value: Started, Stopped, Paused, or Failed (binding failed / retrying). */
export function endpointStateName(value: unknown): 'Started' | 'Stopped' | 'Paused' | 'Failed' | 'Starting' | 'Stopping' {
  if (value && typeof value === 'object' && 'listening' in value) return (value as { listening: string }).listening === 'paused' ? 'Paused' : 'Started';
  switch (value) {
    case 'starting':
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
