import { assign, setup } from 'xstate';

/**
 * A durable subscription (a persistent session's subscription). Its state is the most telling of what the engine
 * records for it, in this order:
 * - `paused` — commanded (`subscription.pause`): copies are kept within its caps, nothing is delivered until
 *   `subscription.resume`; survives a restart;
 * - `hibernated` — its session is offline (messages are held and persisted by the engine);
 * - `full` — it holds its maximum (maxQueuedMessages / maxDepth or maxQueuedBytes); `policy` says what happens to
 *   more: `refuse` (QoS 1/2 publishes that would reach it are refused to their publisher, a QoS 0 copy replaces the
 *   oldest QoS 0 one) or `drop-new` (new copies are dropped and counted);
 * - `active` — none of these;
 * and it ends `closed` (unsubscribed, session ended) or `expired` (its session's expiry interval ran out).
 * Every notice goes back through `resolving`, which picks the state from the record, so a paused subscription
 * whose session goes offline stays `paused` (with `hibernating` in its context) and shows `hibernated` on resume.
 *
 * The engine tells the runtime of these changes; messages never pass through this actor. The guards read the
 * engine's record (supplied by the runtime with `machine.provide`, src/messaging/subscriptions.service.ts), so an
 * actor restarted by its supervisor with the spec it was first spawned with, or activated long after the
 * subscription was made (it is virtual: src/runtime/virtual-actors.ts), starts in the state the engine has now.
 * `hibernations` (times its session went offline) comes in with the input from the runtime's record.
 */
export interface SubscriptionInput {
  sessionId: string;
  filter: string;
  hibernating: boolean;
  /** Times the session went offline so far (kept by the runtime while the actor is passive). */
  hibernations?: number;
  paused?: boolean;
  full?: boolean;
  /** What happens to more messages while it is full (see above). */
  policy?: 'refuse' | 'drop-new';
}

export interface SubscriptionContext {
  sessionId: string;
  filter: string;
  hibernating: boolean;
  hibernations: number;
  paused: boolean;
  full: boolean;
  policy: 'refuse' | 'drop-new';
}

export type SubscriptionEvent =
  | { type: 'subscription.hibernated' }
  | { type: 'subscription.attached' }
  | { type: 'subscription.full' }
  | { type: 'subscription.room' }
  | { type: 'subscription.pause' }
  | { type: 'subscription.resume' }
  | { type: 'subscription.closed' }
  | { type: 'subscription.expired' };

export const subscriptionMachine = setup({
  types: {
    context: {} as SubscriptionContext,
    events: {} as SubscriptionEvent,
    input: {} as SubscriptionInput,
  },
  actions: {
    pauseSubscription: () => {},
    resumeSubscription: () => {},
  },
  guards: {
    isPaused: ({ context }) => context.paused,
    startsHibernating: ({ context }) => context.hibernating,
    isFull: ({ context }) => context.full,
  },
}).createMachine({
  id: 'subscription',
  context: ({ input }) => ({
    sessionId: input.sessionId,
    filter: input.filter,
    hibernating: input.hibernating,
    hibernations: input.hibernations ?? 0,
    paused: input.paused ?? false,
    full: input.full ?? false,
    policy: input.policy ?? 'refuse',
  }),
  initial: 'starting',
  on: {
    'subscription.hibernated': { target: '.starting', actions: assign(({ context }) => ({ hibernating: true, hibernations: context.hibernations + 1 })) },
    'subscription.attached': { target: '.starting', actions: assign({ hibernating: false }) },
    'subscription.full': { target: '.starting', actions: assign({ full: true }) },
    'subscription.room': { target: '.starting', actions: assign({ full: false }) },
    'subscription.closed': '.closed',
    'subscription.expired': '.expired',
  },
  states: {
    /** Resolving: the state the engine's record gives. */
    starting: {
      always: [{ guard: 'isPaused', target: 'paused' }, { guard: 'startsHibernating', target: 'hibernated' }, { guard: 'isFull', target: 'full' }, { target: 'active' }],
    },
    active: {
      entry: assign({ hibernating: false, paused: false, full: false }),
      on: { 'subscription.pause': { target: 'starting', actions: ['pauseSubscription', assign({ paused: true })] } },
    },
    hibernated: {
      entry: assign({ hibernating: true, paused: false }),
      on: { 'subscription.pause': { target: 'starting', actions: ['pauseSubscription', assign({ paused: true })] } },
    },
    full: {
      // no `degraded` tag: a full subscription is one client's backlog, not the server's health (/health stays Ok)
      entry: assign({ full: true, paused: false, hibernating: false }),
      on: { 'subscription.pause': { target: 'starting', actions: ['pauseSubscription', assign({ paused: true })] } },
    },
    paused: {
      entry: assign({ paused: true }),
      on: { 'subscription.resume': { target: 'starting', actions: ['resumeSubscription', assign({ paused: false })] } },
    },
    closed: { type: 'final' },
    expired: { type: 'final' },
  },
});
