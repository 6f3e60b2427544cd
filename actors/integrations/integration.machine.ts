import { assign, fromCallback, fromPromise, raise, setup } from 'xstate';
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
 * (src/links/link-manager.ts): `connectTransport` (promise: open the transport), `establishLinks` (promise: the pull
 * receives and the push outboxes), `linkFlow` (callback: lives exactly as long as `established`; reports
 * `transport.lost`; on exit the push outboxes stop sending) and the `closeTransport` action. No message is an event here.
 */
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
    connectTransport: fromPromise<void, { name: string }>(async () => {
      throw new Error('connectTransport is supplied by the link manager');
    }),
    establishLinks: fromPromise<void, { name: string }>(async () => {
      throw new Error('establishLinks is supplied by the link manager');
    }),
    linkFlow: fromCallback<IntegrationEvent, { name: string }>(() => () => {}),
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
      exit: { type: 'closeTransport', params: ({ context }) => ({ name: context.name }) },
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
                onDone: 'connected',
                onError: { target: 'delayed', actions: 'recordFailure' },
              },
            },
            connected: {
              always: 'establishing',
            },
            establishing: {
              invoke: {
                src: 'establishLinks',
                input: ({ context }) => ({ name: context.name }),
                onDone: 'established',
                onError: { target: 'delayed', actions: 'recordFailure' },
              },
            },
            established: {
              entry: ['resetAttempts', raise({ type: 'link.established' })],
              exit: raise({ type: 'link.lost' }),
              invoke: { id: 'linkFlow', src: 'linkFlow', input: ({ context }) => ({ name: context.name }) },
              on: {
                'transport.lost': { target: 'delayed', actions: 'recordFailure' },
              },
            },
            delayed: {
              entry: { type: 'closeTransport', params: ({ context }) => ({ name: context.name }) },
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
