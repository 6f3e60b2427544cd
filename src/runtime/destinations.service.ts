import type { AnyActorRef, Subscription } from 'xstate';
import { destinationMachine } from '../../actors/destinations/destination.machine.js';
import type { Runtime, Service } from './runtime.js';
import { Activations, PASSIVATE_AFTER_MS, PASSIVATE_SWEEP_MS, type VirtualActorKind } from './virtual-actors.js';
import { actorState } from './inspector.js';

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
 * to `deleting` (final). System destinations (`$SYS/...`, any `$` name) have no actor: they are the server's own
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

export function destinationsService(): Service {
  let cleanup: (() => void) | undefined;
  return {
    name: 'destinations',
    dependsOn: ['messaging'],
    async start(rt: Runtime) {
      const logic = destinationMachine.provide({
        actions: {
          pauseDestination: ({ context }) => rt.engine?.pauseDestination(context.name),
          resumeDestination: ({ context }) => rt.engine?.resumeDestination(context.name),
        },
        guards: {
          wasPaused: ({ context }) => rt.engine?.hasDestination(context.name) === true && rt.engine.isPaused(context.name),
          wasAboveHighWater: ({ context }) => rt.engine?.isAboveHighWater(context.name) === true,
        },
      });
      const activations = new Activations(() => rt.now());
      // system destinations are counted as they come and go, so the actor count is O(1)
      let systemCount = 0;
      for (const name of rt.engine?.destinationNameIterator() ?? []) if (isSystem(name)) systemCount++;

      const exists = (name: string) => !isSystem(name) && rt.engine?.hasDestination(name) === true;
      const live = (name: string) => rt.childActor('destinations', destinationActorId(name));
      const activate = (name: string): AnyActorRef | undefined => {
        const current = live(name);
        if (current !== undefined) return current;
        const type = rt.engine?.destinationType(name);
        if (type === undefined || isSystem(name) || rt.supervisor('destinations') === undefined) return undefined;
        rt.startChild('destinations', { id: destinationActorId(name), logic, input: { name, type } });
        const ref = live(name);
        if (ref !== undefined) activations.track(name, ref);
        return ref;
      };
      const kind: VirtualActorKind = {
        kind: 'destination',
        supervisor: 'destinations',
        machine: 'destination',
        count: () => Math.max(0, (rt.engine?.destinationCount ?? 0) - systemCount),
        names: function* () {
          for (const name of rt.engine?.destinationNameIterator() ?? []) if (!isSystem(name)) yield name;
        },
        slice: (from, n) => {
          const out: string[] = [];
          let i = 0;
          for (const name of rt.engine?.destinationNameIterator() ?? []) {
            if (out.length >= n) break;
            if (name.charCodeAt(0) === 36 /* $ */ || i++ < from) continue;
            out.push(name);
          }
          return out;
        },
        has: exists,
        view: (name) => {
          const e = rt.engine;
          const type = e?.destinationType(name);
          if (e === undefined || type === undefined || isSystem(name)) return undefined;
          const degraded = e.isAboveHighWater(name);
          return { value: { live: { run: e.isPaused(name) ? 'paused' : 'active', load: degraded ? 'degraded' : 'normal' } }, tags: degraded ? ['degraded'] : [], context: { name, type } };
        },
        live,
        activate,
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
        const engine = rt.engine;
        activations.clear();
        if (sup === undefined || engine === undefined) return;
        for (const name of engine.destinationNameIterator()) {
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
