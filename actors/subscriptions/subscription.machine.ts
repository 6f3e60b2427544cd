import { assign, setup } from 'xstate';

/**
 * A durable subscription (a persistent session's subscription): active while its session is connected,
 * hibernated while it is offline (messages are held and persisted by the engine), closed when it ends. The
 * engine tells the runtime of these lifecycle changes; messages never pass through this actor.
 *
 * After a restart (its supervisor restarts it with the spec it was first spawned with) the actor starts in the
 * state the engine has now: the runtime supplies `startsHibernating` reading the live subscription, and the
 * context's `hibernating` follows the state it is in.
 */
export interface SubscriptionInput {
  sessionId: string;
  filter: string;
  hibernating: boolean;
}

export type SubscriptionEvent = { type: 'subscription.hibernated' } | { type: 'subscription.attached' } | { type: 'subscription.closed' };

export const subscriptionMachine = setup({
  types: {
    context: {} as SubscriptionInput & { hibernations: number },
    events: {} as SubscriptionEvent,
    input: {} as SubscriptionInput,
  },
  guards: {
    startsHibernating: ({ context }) => context.hibernating,
  },
}).createMachine({
  id: 'subscription',
  context: ({ input }) => ({ ...input, hibernations: 0 }),
  initial: 'starting',
  states: {
    starting: {
      always: [{ guard: 'startsHibernating', target: 'hibernated' }, { target: 'active' }],
    },
    active: {
      entry: assign({ hibernating: false }),
      on: {
        'subscription.hibernated': 'hibernated',
        'subscription.closed': 'closed',
      },
    },
    hibernated: {
      entry: assign(({ context }) => ({ hibernating: true, hibernations: context.hibernations + 1 })),
      on: {
        'subscription.attached': 'active',
        'subscription.closed': 'closed',
      },
    },
    closed: { type: 'final' },
  },
});
