import { assign, fromCallback, fromPromise, setup } from 'xstate';
import { backoffDelay, failedBackoff } from '../shared/backoff.js';

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
 *   when the state is left (stop, failure, or the actor itself being stopped). The actor is the handle's only
 *   owner: the service reads it from the snapshot and never closes it;
 * - `closeListener` (promise): waits until the listener and its connections are closed.
 * No connection and no message is an event here.
 *
 * Paused is sticky: `paused` in the context is set by a pause and cleared by a resume or a stop, so an endpoint
 * paused when its listener broke binds again paused (it does not come back Started after the failure).
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
  /** The operator paused it: it stays paused across a failure and a new bind, until resumed or stopped. */
  paused: boolean;
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

/**
 * The `listener` actor's body: pauses a listener bound while paused, forwards pause / resume, reports a broken
 * listener, and closes the handle on exit (the actor is its only owner). The runtime wraps it to wait for the close.
 */
export function runListener({ input, receive, sendBack }: { input: { handle: ListenerLike; paused: boolean }; receive: (fn: (e: EndpointEvent) => void) => void; sendBack: (e: EndpointEvent) => void }): () => Promise<void> {
  if (input.paused) input.handle.pause(); // bound again after a failure while paused: still refusing connections
  input.handle.onError((err) => sendBack({ type: 'listener.failed', error: err.message }));
  receive((e) => {
    if (e.type === 'endpoint.pause') input.handle.pause();
    else if (e.type === 'endpoint.resume') input.handle.resume();
  });
  return () => input.handle.close();
}

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
    listener: fromCallback(runListener),
    closeListener: fromPromise<void, { handle?: ListenerLike }>(async ({ input }) => {
      await input.handle?.close();
    }),
  },
  delays: {
    backoff: ({ context }) => backoffDelay(context.attempts, context.retryInitial, context.retryMax),
  },
  guards: {
    autoStart: ({ context }) => context.autoStart,
    wasPaused: ({ context }) => context.paused,
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
      // closed by the listener's exit: nobody reads a dead handle from the snapshot
      handle: undefined,
      port: undefined,
    })),
    dropHandle: assign({ handle: undefined, port: undefined }),
    markPaused: assign({ paused: true }),
    clearPaused: assign({ paused: false }),
    forwardToListener: ({ event, self }) => {
      const child = self.getSnapshot().children.listener as { send(e: EndpointEvent): void } | undefined;
      child?.send(event);
    },
  },
}).createMachine({
  id: 'endpoint',
  context: ({ input }) => ({ ...input, attempts: 0, paused: false }),
  initial: 'init',
  states: {
    init: {
      always: [{ guard: 'autoStart', target: 'starting' }, { target: 'stopped' }],
    },
    stopped: {
      entry: 'clearPaused',
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
      invoke: { id: 'listener', src: 'listener', input: ({ context }) => ({ handle: context.handle!, paused: context.paused }) },
      initial: 'bound',
      states: {
        bound: {
          always: [{ guard: 'wasPaused', target: 'paused' }, { target: 'started' }],
        },
        started: {
          on: { 'endpoint.pause': { target: 'paused', actions: ['markPaused', 'forwardToListener'] } },
        },
        paused: {
          on: { 'endpoint.resume': { target: 'started', actions: ['clearPaused', 'forwardToListener'] } },
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
    ...failedBackoff({ stop: 'endpoint.stop', start: 'endpoint.start', retry: 'starting' }),
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
