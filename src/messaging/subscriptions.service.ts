import type { ActorRefFrom, AnyActorRef, SnapshotFrom, Subscription as RootSubscription } from 'xstate';
import { subscriptionMachine } from '../../actors/subscriptions/subscription.machine.js';
import type { DurableChange, Subscription } from '../engine/index.js';
import { NotFoundError, ServiceUnavailableError, ValidationError } from '../errors.js';
import { command, type CommandTarget } from '../runtime/command.js';
import { actorState } from '../runtime/inspector.js';
import type { Runtime, Service } from '../runtime/runtime.js';
import type { MessagingService } from './messaging.service.js';
import { Activations, makeRoom, PASSIVATE_AFTER_MS, PASSIVATE_SWEEP_MS, type VirtualActorKind } from '../runtime/virtual-actors.js';


/**
 * Subscription actors are virtual (src/runtime/virtual-actors.ts): every durable subscription (a persistent
 * session's) has the identity `subscription:<key>` (`<url-encoded session>|<filter>`), listed from the engine's
 * subscription table, and a `subscription` machine runs under the `subscriptions` supervisor only once a registry
 * lookup (a command, an inspection) activates it, as do the lifecycle events that need a machine: an online
 * subscription reaching its cap (`full`), and being paused (a command, or found paused after a restart). Its state is the engine's record
 * (`paused`, `hibernating`, `full`) plus the number of hibernations kept here; the sweep passivates an activated
 * actor back at rest (`active` or `hibernated`) and idle for PASSIVATE_AFTER_MS. Non-durable subscriptions live
 * exactly as long as their connection and have no actor.
 */
export function subscriptionActorId(key: string): string {
  return `subscription:${key}`;
}

const RESTING = new Set(['active', 'hibernated']);

/** The state the machine resolves to from the engine's record (subscription.machine.ts, `starting`). */
function recordState(sub: Subscription): 'paused' | 'hibernated' | 'full' | 'active' {
  return sub.paused ? 'paused' : sub.hibernating ? 'hibernated' : sub.full ? 'full' : 'active';
}

function policyOf(sub: Subscription): 'refuse' | 'drop-new' {
  return sub.refuseWhenFull ? 'refuse' : 'drop-new';
}

/** What the subscriptions service is given (src/compose.ts); its start and stop order follows from it. */
export interface SubscriptionsDeps {
  messaging: MessagingService;
}

export function subscriptionsService(deps: SubscriptionsDeps): Service {
  let cleanup: (() => void) | undefined;
  return {
    name: 'subscriptions',
    dependsOn: Object.keys(deps),
    async start(rt) {
      const engine = deps.messaging.requireEngine(); // the same engine until this service stops
      // a (re)activated actor starts in the engine's current state
      const record = (sessionId: string, filter: string) => engine.subscription(sessionId, filter);
      const logic = subscriptionMachine.provide({
        actions: {
          pauseSubscription: ({ context }) => void engine.pauseSubscription(context.sessionId, context.filter).catch(() => {}), // a store failure is reported by the engine
          resumeSubscription: ({ context }) => void engine.resumeSubscription(context.sessionId, context.filter).catch(() => {}),
        },
        guards: {
          isPaused: ({ context }) => record(context.sessionId, context.filter)?.paused ?? context.paused,
          startsHibernating: ({ context }) => record(context.sessionId, context.filter)?.hibernating ?? context.hibernating,
          isFull: ({ context }) => record(context.sessionId, context.filter)?.full ?? context.full,
        },
      });
      /** Hibernations per subscription key (the part of the actor's state the engine does not keep). */
      const hibernations = new Map<string, number>();
      const activations = new Activations(() => rt.now());
      /** The actor's record from the engine's: an activation's input and a passive actor's context are the same. */
      const recordOf = (sub: Subscription, key: string) => ({
        sessionId: sub.sessionId,
        filter: sub.filter,
        hibernating: sub.hibernating,
        hibernations: hibernations.get(key) ?? 0,
        paused: sub.paused,
        full: sub.full,
        policy: policyOf(sub),
      });

      const lookup = (key: string): Subscription | undefined => {
        const i = key.indexOf('|');
        if (i < 0) return undefined;
        let sessionId: string;
        try {
          sessionId = decodeURIComponent(key.slice(0, i));
        } catch {
          return undefined;
        }
        const sub = engine.subscription(sessionId, key.slice(i + 1));
        return sub !== undefined && sub.durable && !sub.closed ? sub : undefined;
      };
      const live = (key: string) => rt.childActor('subscriptions', subscriptionActorId(key));
      const maxActive = rt.config.MessageDaemon.virtualActors.maxActive;
      const atRest = (key: string) => {
        const ref = live(key);
        return ref === undefined || ((ref.getSnapshot() as { status: string }).status === 'active' && RESTING.has(actorState(ref)));
      };
      let overCapLoggedAt = -Infinity;
      const activate = (key: string): AnyActorRef | undefined => {
        const current = live(key);
        if (current !== undefined) {
          activations.touch(key);
          return current;
        }
        const sub = lookup(key);
        if (sub === undefined || rt.supervisor('subscriptions') === undefined) return undefined;
        if (!makeRoom(activations, maxActive, atRest, (k) => rt.stopChild('subscriptions', subscriptionActorId(k)), key) && rt.now() - overCapLoggedAt >= 60_000) {
          overCapLoggedAt = rt.now();
          rt.log.warn({ kind: 'subscription', active: activations.size, maxActive }, 'virtual actors: activating beyond MessageDaemon.virtualActors.maxActive (every active subscription actor is busy)');
        }
        rt.startChild('subscriptions', {
          id: subscriptionActorId(key),
          logic,
          input: recordOf(sub, key),
        });
        const ref = live(key);
        if (ref !== undefined) activations.track(key, ref);
        return ref;
      };
      const kind: VirtualActorKind = {
        kind: 'subscription',
        supervisor: 'subscriptions',
        machine: 'subscription',
        count: () => engine.durableSubscriptionCount, // the engine counts them as they come and go
        names: function* () {
          for (const sub of engine.eachDurableSubscription()) yield sub.key;
        },
        slice: (from, n) => {
          const out: string[] = [];
          let i = 0;
          for (const sub of engine.eachDurableSubscription()) {
            if (i++ < from) continue;
            out.push(sub.key);
            if (out.length >= n) break;
          }
          return out;
        },
        has: (key) => lookup(key) !== undefined,
        view: (key) => {
          const sub = lookup(key);
          if (sub === undefined) return undefined;
          const value = recordState(sub);
          return {
            value,
            tags: [],
            context: recordOf(sub, key),
          };
        },
        live,
        activate,
        touch: (name) => activations.touch(name),
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
            ref.send({ type: `subscription.${change}` }); // → closed / expired (final); the supervisor drops it
            rt.stopChild('subscriptions', subscriptionActorId(sub.key));
          }
          return;
        }
        if (ref !== undefined && change !== 'created') ref.send({ type: `subscription.${change}` });
        else if (ref === undefined && change === 'created' && sub.paused) activate(sub.key); // made again paused (a restart)
      };
      const onFull = (sub: Subscription, full: boolean) => {
        if (!sub.durable || sub.closed) return;
        const ref = live(sub.key);
        if (ref !== undefined) ref.send({ type: full ? 'subscription.full' : 'subscription.room' });
        // flow control reached by an online subscription: a lifecycle event that needs a machine. An offline one's
        // state stays `hibernated` (the more telling one; `full` is in its context), so a broadcast that fills the
        // queues of 100 000 offline sessions at once activates nothing.
        else if (full && !sub.hibernating) activate(sub.key);
      };
      rt.on('subscription.changed', listener);
      rt.on('subscription.full', onFull);

      // Services start while the server is `booting`; the supervisors are spawned when it enters `running`: then
      // (and after a supervisor restart) every subscription not at rest (paused, full) is activated.
      let sup: AnyActorRef | undefined;
      const watch = () => {
        const current = rt.supervisor('subscriptions');
        if (current === sup) return;
        sup = current;
        activations.clear();
        if (sup === undefined) return;
        // at most the cap: the others stay passive, their state read from the engine's record
        for (const sub of engine.durableSubscriptions()) {
          if (activations.size >= maxActive) break;
          if (sub.paused || (sub.full && !sub.hibernating)) activate(sub.key);
        }
      };
      let rootSub: RootSubscription | undefined = rt.rootActor?.subscribe({ next: watch, error: () => {} });
      watch();
      const passivation = setInterval(() => kind.passivateIdle(PASSIVATE_AFTER_MS), PASSIVATE_SWEEP_MS);
      passivation.unref();
      cleanup = () => {
        clearInterval(passivation);
        rt.off('subscription.changed', listener);
        rt.off('subscription.full', onFull);
        rootSub?.unsubscribe();
        rootSub = undefined;
        sup = undefined;
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

// --------------------------------------------------------------------------------------------------------------
// Commands (REST: src/api/routes/destinations/destination-control.routes.ts), through the command helper

type SubscriptionRef = ActorRefFrom<typeof subscriptionMachine>;
type SubscriptionSnapshot = SnapshotFrom<typeof subscriptionMachine>;

const STATE_NAMES: Record<string, string> = { active: 'Active', paused: 'Paused', hibernated: 'Hibernated', full: 'Full', closed: 'Closed', expired: 'Expired', starting: 'Starting' };

/** The state as the API names it: Active, Paused, Hibernated, Full, Closed, Expired. */
export function subscriptionStateName(snap: SubscriptionSnapshot): string {
  return STATE_NAMES[String(snap.value)] ?? String(snap.value);
}

/**
 * `paused` | `resumed` (case-insensitive) on one durable subscription, by its actor name (`<url-encoded session>|<filter>`):
 * paused when paused, or resumed when not paused → `changed: false`; otherwise the actor takes the event and the
 * engine holds or releases delivery. Resolves once the durable flag is written.
 */
export async function controlSubscription(rt: Runtime, key: string, requested: string): Promise<{ changed: boolean; state: string }> {
  const want = requested.trim().toLowerCase();
  if (want !== 'paused' && want !== 'resumed') throw new ValidationError(`state must be paused or resumed, got "${requested.slice(0, 64)}"`);
  rt.requireEngine(); // 503 while the server is not running
  const ref = rt.actor('subscription', key) as SubscriptionRef | undefined;
  if (ref === undefined) {
    if (rt.virtualKind('subscription')?.has(key) === true) throw new ServiceUnavailableError(`Subscription "${key}" has no actor while the server is not running; try again`);
    throw new NotFoundError(`Subscription not found: no durable subscription is named "${key}" (<url-encoded session id>|<filter>, as GET /api/v1/server/actors?kind=subscription lists them)`);
  }
  const paused = want === 'paused';
  const target: CommandTarget<SubscriptionRef> = {
    ref,
    label: `Subscription "${key}"`,
    systemId: subscriptionActorId(key),
    stateName: subscriptionStateName,
    accepts: (snap) => [snap.can({ type: 'subscription.pause' }) ? 'paused' : '', snap.can({ type: 'subscription.resume' }) ? 'resumed' : ''].filter(Boolean),
  };
  const { changed, snapshot } = await command((r) => rt.emit('actor.command', r), target, {
    event: { type: paused ? 'subscription.pause' : 'subscription.resume' },
    what: want,
    already: (snap) => (paused ? snap.matches('paused') : snap.status === 'active' && !snap.matches('paused')),
    settled: (snap) => snap.status !== 'active' || (paused ? snap.matches('paused') : !snap.matches('paused')),
  });
  await rt.engine?.flush();
  return { changed, state: subscriptionStateName(snapshot) };
}
