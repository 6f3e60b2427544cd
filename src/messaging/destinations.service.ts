import { assign, type ActorRefFrom, type AnyActorRef, type SnapshotFrom, type Subscription } from 'xstate';
import { destinationMachine } from '../../actors/destinations/destination.machine.js';
import { NotFoundError, ServiceUnavailableError, ValidationError } from '../errors.js';
import { command, type CommandTarget } from '../runtime/command.js';
import type { Runtime, Service } from '../runtime/runtime.js';
import type { MessagingService } from './messaging.service.js';
import { Activations, makeRoom, PASSIVATE_AFTER_MS, PASSIVATE_SWEEP_MS, type VirtualActorKind } from '../runtime/virtual-actors.js';
import { actorState } from '../runtime/inspector.js';

/**
 * Destination actors are virtual (src/runtime/virtual-actors.ts): every destination has the identity
 * `destination:<name>`, listed from the engine's table, but a `destination` machine runs under the `destinations`
 * supervisor only while one is needed:
 * - activated by a registry lookup (`rt.actor('destination', name)`, `GET /api/v1/server/actors/{systemId}`, a
 *   command), by a queue reaching its high-water mark, and at (re)start of the supervisor for every destination
 *   that is not at rest (paused or above high-water);
 * - passivated by a sweep once back at rest (`live.run.active` and `live.load.normal`) and idle for
 *   PASSIVATE_AFTER_MS. Its state is the engine's record (`paused`, `highWater`), which the machine's guards read
 *   when it is activated again.
 * Creating a destination (a first publish to a new topic) activates nothing. Deleting one sends an activated actor
 * to `deleting` (final). Commands (`controlDestination`, `purgeDestination`, `deleteDestination` below) activate
 * the actor and go through the command helper. System destinations (`$SYS/...`, any `$` name) have no actor: they are the server's own
 * statistics and are left out of every destination view.
 */
export function destinationActorId(name: string): string {
  return `destination:${name}`;
}

function isSystem(name: string): boolean {
  return name.startsWith('$');
}

/** The actor of a destination (activated if it was passive), while the server runs; undefined for none. */
export function destinationActor(rt: Runtime, name: string): AnyActorRef | undefined {
  return rt.actor('destination', name);
}

const RESTING = 'live.run.active,load.normal';

/** What the destinations service is given (src/compose.ts); its start and stop order follows from it. */
export interface DestinationsDeps {
  messaging: MessagingService;
}

export function destinationsService(deps: DestinationsDeps): Service {
  let cleanup: (() => void) | undefined;
  return {
    name: 'destinations',
    dependsOn: Object.keys(deps),
    async start(rt: Runtime) {
      const engine = deps.messaging.requireEngine(); // the same engine until this service stops
      const logic = destinationMachine.provide({
        actions: {
          pauseDestination: ({ context }) => void engine.pauseDestination(context.name).catch(() => {}), // a store failure is reported by the engine
          resumeDestination: ({ context }) => void engine.resumeDestination(context.name).catch(() => {}),
          purgeDestination: assign({ purged: ({ context }) => (engine.hasDestination(context.name) ? engine.purgeDestination(context.name) : 0) }),
          deleteDestination: ({ context }) => {
            // the engine's deleted notice (onDeleted below) stops the actor once it has reached `deleting`
            if (engine.hasDestination(context.name)) void engine.deleteDestination(context.name, { force: true }).catch(() => {});
          },
        },
        guards: {
          wasPaused: ({ context }) => engine.hasDestination(context.name) && engine.isPaused(context.name),
          wasAboveHighWater: ({ context }) => engine.isAboveHighWater(context.name),
        },
      });
      const activations = new Activations(() => rt.now());
      // system destinations are counted as they come and go, so the actor count is O(1)
      let systemCount = 0;
      for (const name of engine.destinationNameIterator()) if (isSystem(name)) systemCount++;

      const exists = (name: string) => !isSystem(name) && engine.hasDestination(name);
      const live = (name: string) => rt.childActor('destinations', destinationActorId(name));
      const maxActive = rt.config.MessageDaemon.virtualActors.maxActive;
      const atRest = (name: string) => {
        const ref = live(name);
        return ref === undefined || ((ref.getSnapshot() as { status: string }).status === 'active' && actorState(ref) === RESTING);
      };
      let overCapLoggedAt = -Infinity;
      const activate = (name: string): AnyActorRef | undefined => {
        const current = live(name);
        if (current !== undefined) {
          activations.touch(name);
          return current;
        }
        const type = engine.destinationType(name);
        if (type === undefined || isSystem(name) || rt.supervisor('destinations') === undefined) return undefined;
        if (!makeRoom(activations, maxActive, atRest, (n) => rt.stopChild('destinations', destinationActorId(n)), name) && rt.now() - overCapLoggedAt >= 60_000) {
          overCapLoggedAt = rt.now();
          rt.log.warn({ kind: 'destination', active: activations.size, maxActive }, 'virtual actors: activating beyond MessageDaemon.virtualActors.maxActive (every active destination actor is busy)');
        }
        rt.startChild('destinations', { id: destinationActorId(name), logic, input: { name, type } });
        const ref = live(name);
        if (ref !== undefined) activations.track(name, ref);
        return ref;
      };
      const kind: VirtualActorKind = {
        kind: 'destination',
        supervisor: 'destinations',
        machine: 'destination',
        count: () => Math.max(0, engine.destinationCount - systemCount),
        names: function* () {
          for (const name of engine.destinationNameIterator()) if (!isSystem(name)) yield name;
        },
        slice: (from, n) => {
          const out: string[] = [];
          let i = 0;
          for (const name of engine.destinationNameIterator()) {
            if (out.length >= n) break;
            if (name.charCodeAt(0) === 36 /* $ */ || i++ < from) continue;
            out.push(name);
          }
          return out;
        },
        has: exists,
        view: (name) => {
          const type = engine.destinationType(name);
          if (type === undefined || isSystem(name)) return undefined;
          const degraded = engine.isAboveHighWater(name);
          return { value: { live: { run: engine.isPaused(name) ? 'paused' : 'active', load: degraded ? 'degraded' : 'normal' } }, tags: degraded ? ['degraded'] : [], context: { name, type } };
        },
        live,
        activate,
        touch: (name) => activations.touch(name),
        activeCount: () => rt.childActors('destinations').filter(([id]) => id.startsWith('destination:')).length,
        passivateIdle: (idleMs) => {
          let n = 0;
          for (const [id, ref] of rt.childActors('destinations')) {
            if (!id.startsWith('destination:')) continue;
            const name = id.slice('destination:'.length);
            if (activations.idleFor(name) === Infinity) activations.track(name, ref); // restarted by its supervisor
            const snap = ref.getSnapshot() as { status: string };
            if (snap.status !== 'active' || actorState(ref) !== RESTING || activations.idleFor(name) < idleMs) continue;
            activations.forget(name);
            rt.stopChild('destinations', id);
            n++;
          }
          return n;
        },
      };
      rt.registerVirtualKind(kind);

      let sup: AnyActorRef | undefined;
      /** The supervisor was just (re)started: activate every destination that is not at rest. */
      const sync = () => {
        activations.clear();
        if (sup === undefined) return;
        // at most the cap: the others stay passive, their state read from the engine's record (a paused destination
        // holds its delivery in the engine, with or without a machine)
        for (const name of engine.destinationNameIterator()) {
          if (activations.size >= maxActive) break;
          if (isSystem(name)) continue;
          if (engine.isPaused(name) || engine.isAboveHighWater(name)) activate(name);
        }
      };

      const onCreated = (name: string) => {
        if (isSystem(name)) systemCount++;
      };
      const onDeleted = (name: string) => {
        if (isSystem(name)) {
          systemCount = Math.max(0, systemCount - 1);
          return;
        }
        if (sup === undefined) return;
        const ref = live(name);
        if (ref === undefined) return; // passive: nothing to stop
        activations.forget(name);
        ref.send({ type: 'destination.deleted' }); // → deleting (final); the supervisor drops it
        rt.stopChild('destinations', destinationActorId(name)); // also when it was crashed and waiting for a restart
      };
      const onHighWater = (name: string, depth: number) => {
        // a lifecycle event that needs a machine: activation reads the engine's record (already above the mark)
        const ref = live(name);
        if (ref !== undefined) ref.send({ type: 'destination.highWater', depth });
        else if (sup !== undefined) activate(name);
      };
      const onLowWater = (name: string, depth: number) => {
        live(name)?.send({ type: 'destination.lowWater', depth }); // a passive actor is already at rest
      };
      rt.on('destination.created', onCreated);
      rt.on('destination.deleted', onDeleted);
      rt.on('destination.highWater', onHighWater);
      rt.on('destination.lowWater', onLowWater);

      // Services start while the server is `booting`; the supervisors are spawned when it enters `running`.
      const watch = () => {
        const current = rt.supervisor('destinations');
        if (current === sup) return;
        sup = current;
        sync();
      };
      let rootSub: Subscription | undefined = rt.rootActor?.subscribe({ next: watch, error: () => {} });
      watch();
      const passivation = setInterval(() => kind.passivateIdle(PASSIVATE_AFTER_MS), PASSIVATE_SWEEP_MS);
      passivation.unref();

      cleanup = () => {
        clearInterval(passivation);
        rootSub?.unsubscribe();
        rootSub = undefined;
        rt.unregisterVirtualKind('destination');
        rt.off('destination.created', onCreated);
        rt.off('destination.deleted', onDeleted);
        rt.off('destination.highWater', onHighWater);
        rt.off('destination.lowWater', onLowWater);
        activations.clear();
        sup = undefined;
      };
    },
    async stop() {
      // the actors themselves are stopped with the supervisor tree (child-first) before services stop
      cleanup?.();
      cleanup = undefined;
    },
  };
}

// --------------------------------------------------------------------------------------------------------------
// Commands (REST: src/api/routes/destinations/destination-control.routes.ts), each through the command helper

type DestinationRef = ActorRefFrom<typeof destinationMachine>;
type DestinationSnapshot = SnapshotFrom<typeof destinationMachine>;

/** The state as the API names it: Active, Paused, Deleting. */
export function destinationStateName(snap: DestinationSnapshot): string {
  if (snap.matches('deleting')) return 'Deleting';
  return snap.matches({ live: { run: 'paused' } }) ? 'Paused' : 'Active';
}

const REQUESTS: Array<[string, { type: 'destination.pause' | 'destination.resume' | 'destination.purge' | 'destination.delete' }]> = [
  ['paused', { type: 'destination.pause' }],
  ['resumed', { type: 'destination.resume' }],
  ['purge', { type: 'destination.purge' }],
  ['delete', { type: 'destination.delete' }],
];

/** The existing, non-system destination's actor (activated), or a 404 / 503 saying why there is none. */
function destinationTarget(rt: Runtime, name: string): CommandTarget<DestinationRef> {
  const engine = rt.requireEngine(); // 503 while the server is not running
  if (isSystem(name) || !engine.hasDestination(name)) throw new NotFoundError(`Destination not found: ${name}`);
  const ref = destinationActor(rt, name) as DestinationRef | undefined;
  if (ref === undefined) throw new ServiceUnavailableError(`Destination "${name}" has no actor while the server is not running; try again`);
  return {
    ref,
    label: `Destination "${name}"`,
    systemId: destinationActorId(name),
    stateName: destinationStateName,
    accepts: (snap) => REQUESTS.filter(([, e]) => snap.can(e)).map(([w]) => w),
  };
}

/**
 * `paused` | `resumed` (case-insensitive) on one destination: the state it is in → `changed: false`; otherwise the
 * actor takes `destination.pause` / `destination.resume` and the engine holds or releases delivery. Resolves once
 * the paused flag (and, on resume, the routed hold) is written.
 */
export async function controlDestination(rt: Runtime, name: string, requested: string): Promise<{ changed: boolean; state: string }> {
  const want = requested.trim().toLowerCase();
  if (want !== 'paused' && want !== 'resumed') throw new ValidationError(`state must be paused or resumed, got "${requested.slice(0, 64)}"`);
  const target = destinationTarget(rt, name);
  const paused = want === 'paused';
  const { changed, snapshot } = await command((r) => rt.emit('actor.command', r), target, {
    event: { type: paused ? 'destination.pause' : 'destination.resume' },
    what: want,
    already: (snap) => snap.matches({ live: { run: paused ? 'paused' : 'active' } }),
    settled: (snap) => snap.status !== 'active' || snap.matches({ live: { run: paused ? 'paused' : 'active' } }),
  });
  await rt.engine?.flush();
  return { changed, state: destinationStateName(snapshot) };
}

/** Drops the destination's waiting messages (Engine.purgeDestination) through its actor; returns how many. */
export async function purgeDestination(rt: Runtime, name: string): Promise<number> {
  const target = destinationTarget(rt, name);
  // the actor takes the event synchronously (its action purges and assigns the count), so it has settled at once
  const { snapshot } = await command((r) => rt.emit('actor.command', r), target, {
    event: { type: 'destination.purge' },
    what: 'purged',
    already: () => false,
    settled: () => true,
  });
  await rt.engine?.flush();
  return snapshot.context.purged;
}

/**
 * Deletes the destination through its actor (→ `deleting`, final): its stored, held and retained messages go, the
 * copies waiting in subscription buffers go, a queue's consumers are unsubscribed. Resolves once written.
 */
export async function deleteDestination(rt: Runtime, name: string): Promise<void> {
  const target = destinationTarget(rt, name);
  await command((r) => rt.emit('actor.command', r), target, {
    event: { type: 'destination.delete' },
    what: 'deleted',
    already: () => false,
    settled: (snap) => snap.status !== 'active' || snap.matches('deleting'),
  });
  await rt.engine?.flush();
}
