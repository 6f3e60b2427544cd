import { assign, enqueueActions, fromCallback, fromPromise, raise, setup } from 'xstate';
import { backoffDelay as sharedBackoff } from '../shared/backoff.js';

/**
 * One integration link (DESIGN.md, actor tree: `integration:<name>` under the `integrations` supervisor). Both MAPS
 * vocabularies are in the state value:
 *
 *   run state (IntegrationInfoDTO.state):        stopped | started | paused          → Stopped / Started / Paused
 *   connection state (IntegrationStatusDTO.state) inside started:
 *     disconnected → connecting → connected → establishing → established
 *     connecting / establishing failed, or the established transport lost → delayed (backoff) → connecting
 *   stopped is the connection state Shutdown; paused is Disconnected (the transport is closed: nothing flows in
 *   either direction, push messages wait in the link's persistent outbox, remote QoS >= 1 messages wait in the
 *   remote durable state; resume reconnects and drains the outbox in order).
 *
 * The backoff doubles from `backoffInitial` up to `backoffMax` (the cap), less a random `jitter` fraction. A second
 * region of `started` watches how long the link has been unestablished: past the cap it is `stalled`, tagged
 * `degraded`, which makes the integrations subsystem WARN and `/health` Warning, naming the link.
 *
 * The machine holds lifecycle only; its I/O is supplied with `machine.provide` by the link manager
 * (src/links/link-manager.ts): `connectTransport` (promise: open the transport, resolves with it), `establishLinks`
 * (promise: the pull receives and the push outboxes on that transport), `linkFlow` (callback: lives exactly as long as
 * `established`; reports `transport.lost`; on exit the push outboxes stop sending), the `closeTransport` action (the
 * manager's bookkeeping when a connection ends) and `transportHolder`. No message is an event here.
 *
 * One owner: the open transport is held by `transportHolder`, a callback invoked for as long as `started` lasts. It is
 * handed the transport when connecting succeeds, closes it when the link goes Delayed, and closes whatever it holds
 * when `started` is left (stop, pause) or the actor itself is stopped. The context keeps a reference for the
 * establishing and flowing steps to use; nobody else keeps one.
 */
/** What the holder closes: an open link transport. */
export interface LinkTransportLike {
  close(): Promise<void>;
}

function isTransport(x: unknown): x is LinkTransportLike {
  return typeof x === 'object' && x !== null && typeof (x as { close?: unknown }).close === 'function';
}

export type TransportHolderEvent = { type: 'transport.hold'; transport: LinkTransportLike } | { type: 'transport.release' };
export interface IntegrationInput {
  name: string;
  /** Start right away (otherwise wait for `integration.start`). */
  autoStart: boolean;
  backoffInitial: number;
  backoffMax: number;
  /** 0..1: fraction of each wait taken away at random. */
  jitter: number;
}

export interface IntegrationContext extends IntegrationInput {
  /** The open transport while connected (held, and closed, by `transportHolder`). */
  transport?: LinkTransportLike;
  /** Failed attempts since the link was last established. */
  attempts: number;
  lastError?: string;
  /** The wait chosen for the current `delayed` state, ms. */
  delayMs: number;
}

export type IntegrationEvent =
  | { type: 'integration.start' }
  | { type: 'integration.stop' }
  | { type: 'integration.pause' }
  | { type: 'integration.resume' }
  | { type: 'transport.lost'; reason: string }
  | { type: 'link.established' }
  | { type: 'link.lost' };

/** The wait before attempt n+1 after n failures: initial·2^(n-1), capped, less up to `jitter` of it at random. */
export function backoffDelay(ctx: Pick<IntegrationContext, 'attempts' | 'backoffInitial' | 'backoffMax' | 'jitter'>, random: () => number = Math.random): number {
  return sharedBackoff(ctx.attempts, ctx.backoffInitial, ctx.backoffMax, ctx.jitter, random);
}

function errorText(event: unknown): string {
  const e = (event as { error?: unknown }).error;
  return e instanceof Error ? e.message : String(e);
}

export const integrationMachine = setup({
  types: {
    context: {} as IntegrationContext,
    events: {} as IntegrationEvent,
    input: {} as IntegrationInput,
  },
  actors: {
    // resolves with the open transport, typed void so fakes that resolve with nothing fit (keepTransport checks it)
    connectTransport: fromPromise<void, { name: string }>(async () => {
      throw new Error('connectTransport is supplied by the link manager');
    }),
    establishLinks: fromPromise<void, { name: string; transport?: LinkTransportLike }>(async () => {
      throw new Error('establishLinks is supplied by the link manager');
    }),
    linkFlow: fromCallback<IntegrationEvent, { name: string; transport?: LinkTransportLike }>(() => () => {}),
    transportHolder: fromCallback<TransportHolderEvent, { name: string }>(({ receive }) => {
      let held: LinkTransportLike | undefined;
      const release = () => {
        void held?.close().catch(() => {});
        held = undefined;
      };
      receive((e) => {
        if (e.type === 'transport.hold') {
          release();
          held = e.transport;
        } else release();
      });
      return release;
    }),
  },
  delays: {
    backoff: ({ context }) => context.delayMs,
    stallLimit: ({ context }) => context.backoffMax,
  },
  guards: {
    autoStart: ({ context }) => context.autoStart,
  },
  actions: {
    closeTransport: (_args, _params: { name: string }) => {},
    recordFailure: assign(({ context, event }) => {
      const attempts = context.attempts + 1;
      const lastError = event.type === 'transport.lost' ? event.reason : errorText(event);
      return { attempts, lastError, delayMs: backoffDelay({ ...context, attempts }) };
    }),
    resetAttempts: assign({ attempts: 0, delayMs: 0 }),
    /** Connected: the holder takes the transport (a fake connect that resolves with nothing hands over nothing). */
    keepTransport: enqueueActions(({ enqueue, event }) => {
      const transport = (event as unknown as { output?: unknown }).output;
      if (!isTransport(transport)) return;
      enqueue.assign({ transport });
      enqueue.sendTo('transportHolder', { type: 'transport.hold', transport } satisfies TransportHolderEvent);
    }),
    /** The connection ended (Delayed): the holder closes the transport. */
    releaseTransport: enqueueActions(({ enqueue }) => {
      enqueue.assign({ transport: undefined });
      enqueue.sendTo('transportHolder', { type: 'transport.release' } satisfies TransportHolderEvent);
    }),
    clearError: assign({ lastError: undefined, attempts: 0, delayMs: 0 }),
  },
}).createMachine({
  id: 'integration',
  context: ({ input }) => ({ ...input, attempts: 0, delayMs: 0 }),
  initial: 'init',
  states: {
    init: {
      always: [{ guard: 'autoStart', target: 'started' }, { target: 'stopped' }],
    },
    stopped: {
      entry: 'clearError',
      on: { 'integration.start': 'started' },
    },
    started: {
      type: 'parallel',
      // the holder lives as long as `started`: leaving it (stop, pause) or stopping the actor closes the transport
      invoke: { id: 'transportHolder', src: 'transportHolder', input: ({ context }) => ({ name: context.name }) },
      exit: [{ type: 'closeTransport', params: ({ context }) => ({ name: context.name }) }, assign({ transport: undefined })],
      on: {
        'integration.stop': 'stopped',
        'integration.pause': 'paused',
      },
      states: {
        connection: {
          initial: 'disconnected',
          states: {
            disconnected: {
              always: 'connecting',
            },
            connecting: {
              invoke: {
                src: 'connectTransport',
                input: ({ context }) => ({ name: context.name }),
                onDone: { target: 'connected', actions: 'keepTransport' },
                onError: { target: 'delayed', actions: 'recordFailure' },
              },
            },
            connected: {
              always: 'establishing',
            },
            establishing: {
              invoke: {
                src: 'establishLinks',
                input: ({ context }) => ({ name: context.name, transport: context.transport }),
                onDone: 'established',
                onError: { target: 'delayed', actions: 'recordFailure' },
              },
            },
            established: {
              entry: ['resetAttempts', raise({ type: 'link.established' })],
              exit: raise({ type: 'link.lost' }),
              invoke: { id: 'linkFlow', src: 'linkFlow', input: ({ context }) => ({ name: context.name, transport: context.transport }) },
              on: {
                'transport.lost': { target: 'delayed', actions: 'recordFailure' },
              },
            },
            delayed: {
              entry: [{ type: 'closeTransport', params: ({ context }) => ({ name: context.name }) }, 'releaseTransport'],
              after: { backoff: 'connecting' },
            },
          },
        },
        health: {
          initial: 'waiting',
          states: {
            waiting: {
              after: { stallLimit: 'stalled' },
              on: { 'link.established': 'ok' },
            },
            stalled: {
              tags: ['degraded'],
              on: { 'link.established': 'ok' },
            },
            ok: {
              on: { 'link.lost': 'waiting' },
            },
          },
        },
      },
    },
    paused: {
      on: { 'integration.resume': 'started', 'integration.stop': 'stopped' },
    },
  },
});

export type IntegrationRunState = 'Started' | 'Stopped' | 'Paused';
export type IntegrationConnectionState = 'Disconnected' | 'Connecting' | 'Connected' | 'Establishing' | 'Established' | 'Delayed' | 'Shutdown';

/** The MAPS run state (IntegrationInfoDTO.state) of a snapshot value. */
export function integrationRunState(value: unknown): IntegrationRunState {
  if (value && typeof value === 'object' && 'started' in value) return 'Started';
  return value === 'paused' ? 'Paused' : 'Stopped';
}

/** The MAPS connection state (IntegrationStatusDTO.state) of a snapshot value. */
export function integrationConnectionState(value: unknown): IntegrationConnectionState {
  if (value && typeof value === 'object' && 'started' in value) {
    const c = (value as { started: { connection?: string } }).started.connection ?? 'disconnected';
    return (c.charAt(0).toUpperCase() + c.slice(1)) as IntegrationConnectionState;
  }
  return value === 'paused' ? 'Disconnected' : 'Shutdown';
}
