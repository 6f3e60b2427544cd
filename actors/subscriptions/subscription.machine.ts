import { assign, setup } from 'xstate';

/**
 * A durable subscription (a persistent session's subscription): active while its session is connected,
 * hibernated while it is offline (messages are held and persisted by the engine), closed when it ends. The
 * engine tells the runtime of these lifecycle changes; messages never pass through this actor.
 *
 * After a restart (its supervisor restarts it with the spec it was first spawned with) the actor starts in the
 * state the engine has now: the runtime supplies `startsHibernating` reading the live subscription, and the
 * context's `hibernating` follows the state it is in. The actor is virtual (src/runtime/virtual-actors.ts): it can
 * be activated long after the subscription was made, so `hibernations` (times its session went offline) comes in
 * with the input from the runtime's record and counts the `subscription.hibernated` events it sees itself.
 */
export interface SubscriptionInput {
  sessionId: string;
  filter: string;
  hibernating: boolean;
  /** Times the session went offline so far (kept by the runtime while the actor is passive). */
  hibernations?: number;
}

export type SubscriptionEvent = { type: 'subscription.hibernated' } | { type: 'subscription.attached' } | { type: 'subscription.closed' };

export const subscriptionMachine = setup({
  types: {
    context: {} as Omit<SubscriptionInput, 'hibernations'> & { hibernations: number },
    events: {} as SubscriptionEvent,
    input: {} as SubscriptionInput,
  },
  guards: {
    startsHibernating: ({ context }) => context.hibernating,
  },
}).createMachine({
  id: 'subscription',
  context: ({ input }) => ({ sessionId: input.sessionId, filter: input.filter, hibernating: input.hibernating, hibernations: input.hibernations ?? 0 }),
  initial: 'starting',
  states: {
    starting: {
      always: [{ guard: 'startsHibernating', target: 'hibernated' }, { target: 'active' }],
    },
    active: {
      entry: assign({ hibernating: false }),
      on: {
        'subscription.hibernated': { target: 'hibernated', actions: assign(({ context }) => ({ hibernations: context.hibernations + 1 })) },
        'subscription.closed': 'closed',
      },
    },
    hibernated: {
      entry: assign({ hibernating: true }),
      on: {
        'subscription.attached': 'active',
        'subscription.closed': 'closed',
      },
    },
    closed: { type: 'final' },
  },
});
