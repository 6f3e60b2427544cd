import type { AnyActorRef } from 'xstate';
import { subscriptionMachine } from '../../actors/subscriptions/subscription.machine.js';
import type { DurableChange, Subscription } from '../engine/index.js';
import { actorState } from './inspector.js';
import type { Runtime, Service } from './runtime.js';
import { Activations, PASSIVATE_AFTER_MS, PASSIVATE_SWEEP_MS, type VirtualActorKind } from './virtual-actors.js';


/**
 * Subscription actors are virtual (src/runtime/virtual-actors.ts): every durable subscription (a persistent
 * session's) has the identity `subscription:<key>` (`<url-encoded session>|<filter>`), listed from the engine's
 * subscription table, and a `subscription` machine runs under the `subscriptions` supervisor only once a registry
 * lookup (a command, an inspection) activates it. Its state is the engine's record (`hibernating`) plus the number
 * of hibernations kept here; the sweep passivates an activated actor back at rest (`active` or `hibernated`) and
 * idle for PASSIVATE_AFTER_MS. Non-durable subscriptions live exactly as long as their connection and have no actor.
 */
export function subscriptionActorId(key: string): string {
  return `subscription:${key}`;
}

const RESTING = new Set(['active', 'hibernated']);

export function subscriptionsService(): Service {
  let cleanup: (() => void) | undefined;
  return {
    name: 'subscriptions',
    dependsOn: ['messaging'],
    async start(rt) {
      // a (re)activated actor starts in the engine's current state
      const logic = subscriptionMachine.provide({
        guards: {
          startsHibernating: ({ context }) => rt.engine?.subscription(context.sessionId, context.filter)?.hibernating ?? context.hibernating,
        },
      });
      /** Hibernations per subscription key (the part of the actor's state the engine does not keep). */
      const hibernations = new Map<string, number>();
      const activations = new Activations(() => rt.now());

      const lookup = (key: string): Subscription | undefined => {
        const i = key.indexOf('|');
        if (i < 0) return undefined;
        let sessionId: string;
        try {
          sessionId = decodeURIComponent(key.slice(0, i));
        } catch {
          return undefined;
        }
        const sub = rt.engine?.subscription(sessionId, key.slice(i + 1));
        return sub !== undefined && sub.durable && !sub.closed ? sub : undefined;
      };
      const live = (key: string) => rt.childActor('subscriptions', subscriptionActorId(key));
      const activate = (key: string): AnyActorRef | undefined => {
        const current = live(key);
        if (current !== undefined) return current;
        const sub = lookup(key);
        if (sub === undefined || rt.supervisor('subscriptions') === undefined) return undefined;
        rt.startChild('subscriptions', {
          id: subscriptionActorId(key),
          logic,
          input: { sessionId: sub.sessionId, filter: sub.filter, hibernating: sub.hibernating, hibernations: hibernations.get(key) ?? 0 },
        });
        const ref = live(key);
        if (ref !== undefined) activations.track(key, ref);
        return ref;
      };
      const kind: VirtualActorKind = {
        kind: 'subscription',
        supervisor: 'subscriptions',
        machine: 'subscription',
        count: () => rt.engine?.durableSubscriptions().length ?? 0,
        names: function* () {
          for (const sub of rt.engine?.durableSubscriptions() ?? []) yield sub.key;
        },
        slice: (from, n) => (rt.engine?.durableSubscriptions() ?? []).slice(from, from + n).map((sub) => sub.key),
        has: (key) => lookup(key) !== undefined,
        view: (key) => {
          const sub = lookup(key);
          if (sub === undefined) return undefined;
          return {
            value: sub.hibernating ? 'hibernated' : 'active',
            tags: [],
            context: { sessionId: sub.sessionId, filter: sub.filter, hibernating: sub.hibernating, hibernations: hibernations.get(key) ?? 0 },
          };
        },
        live,
        activate,
        activeCount: () => rt.childActors('subscriptions').filter(([id]) => id.startsWith('subscription:')).length,
        passivateIdle: (idleMs) => {
          let n = 0;
          for (const [id, ref] of rt.childActors('subscriptions')) {
            if (!id.startsWith('subscription:')) continue;
            const key = id.slice('subscription:'.length);
            if (activations.idleFor(key) === Infinity) activations.track(key, ref);
            const snap = ref.getSnapshot() as { status: string };
            if (snap.status !== 'active' || !RESTING.has(actorState(ref)) || activations.idleFor(key) < idleMs) continue;
            activations.forget(key);
            rt.stopChild('subscriptions', id);
            n++;
          }
          return n;
        },
      };
      rt.registerVirtualKind(kind);

      const listener = (sub: Subscription, change: DurableChange) => {
        if (change === 'hibernated') hibernations.set(sub.key, (hibernations.get(sub.key) ?? 0) + 1);
        const ref = live(sub.key);
        if (change === 'closed' || change === 'expired') {
          hibernations.delete(sub.key);
          activations.forget(sub.key);
          if (ref !== undefined) {
            ref.send({ type: 'subscription.closed' }); // → closed (final); the supervisor drops it
            rt.stopChild('subscriptions', subscriptionActorId(sub.key));
          }
          return;
        }
        if (ref !== undefined && change !== 'created') ref.send({ type: `subscription.${change}` });
      };
      rt.on('subscription.changed', listener);
      const passivation = setInterval(() => kind.passivateIdle(PASSIVATE_AFTER_MS), PASSIVATE_SWEEP_MS);
      passivation.unref();
      cleanup = () => {
        clearInterval(passivation);
        rt.off('subscription.changed', listener);
        rt.unregisterVirtualKind('subscription');
        activations.clear();
      };
    },
    async stop() {
      cleanup?.();
      cleanup = undefined;
    },
  };
}
