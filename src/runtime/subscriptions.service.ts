import { subscriptionMachine } from '../../actors/subscriptions/subscription.machine.js';
import type { Subscription } from '../engine/index.js';
import type { Runtime, Service } from './runtime.js';

type Change = 'created' | 'hibernated' | 'attached' | 'closed';

/**
 * One `subscription:<session>|<filter>` actor per durable subscription under the `subscriptions` supervisor,
 * following the engine's lifecycle notices. Non-durable subscriptions live exactly as long as their connection
 * and get no actor (so 100 000 of them cost no actors).
 */
export function subscriptionsService(): Service {
  let listener: ((sub: Subscription, change: Change) => void) | undefined;
  const actorId = (sub: Subscription) => `subscription:${sub.key}`;
  // a restarted actor starts in the engine's current state, not in the one of its first spawn
  const logicFor = (rt: Runtime) =>
    subscriptionMachine.provide({
      guards: {
        startsHibernating: ({ context }) => rt.engine?.subscription(context.sessionId, context.filter)?.hibernating ?? context.hibernating,
      },
    });
  const spawn = (rt: Runtime, sub: Subscription) =>
    rt.startChild('subscriptions', {
      id: actorId(sub),
      logic: logicFor(rt),
      input: { sessionId: sub.sessionId, filter: sub.filter, hibernating: sub.hibernating },
    });
  return {
    name: 'subscriptions',
    dependsOn: ['messaging'],
    async start(rt) {
      listener = (sub, change) => {
        if (!rt.supervisor('subscriptions')) return;
        const child = rt.childActor('subscriptions', actorId(sub));
        if (change === 'created' || !child) {
          if (change !== 'closed') spawn(rt, sub);
          return;
        }
        child.send({ type: `subscription.${change}` });
      };
      rt.on('subscription.changed', listener);
    },
    running(rt) {
      // Durable subscriptions re-made while booting (persistent sessions restored) before the tree was up.
      for (const sub of rt.engine?.durableSubscriptions() ?? []) {
        if (!rt.childActor('subscriptions', actorId(sub))) spawn(rt, sub);
      }
    },
    async stop(rt) {
      if (listener) rt.off('subscription.changed', listener);
      listener = undefined;
    },
  };
}
