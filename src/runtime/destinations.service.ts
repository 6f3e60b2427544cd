import type { AnyActorRef, Subscription } from 'xstate';
import { destinationMachine } from '../../actors/destinations/destination.machine.js';
import type { Runtime, Service } from './runtime.js';

/**
 * One `destination:<name>` actor per destination under the `destinations` supervisor: the existing ones once the
 * supervisor is up (after boot and after every restart), new ones on 'destination.created'; a deleted
 * destination's actor goes to `deleting` (final) and the supervisor drops it. Queue high/low-water notices move
 * the actor in and out of its `degraded` tag, which `/api/v1/server/status` reports as WARN. An actor (re)started
 * later reads the engine's current state (paused, above high-water) through its guards.
 *
 * Cost: about 2.5 KB of heap per actor (25 MiB for 10 000). XState copies a parent's `children` object on every
 * spawn, so the `destinations` supervisor is sharded (64 shard supervisors, see supervisor.machine.ts) to keep a
 * spawn O(n / 64) instead of O(n).
 *
 * System destinations (`$SYS/...`, any `$` name) get no actor: they are the server's own statistics, regenerated
 * at boot and not managed (they are also left out of every destination view).
 */
export function destinationActorId(name: string): string {
  return `destination:${name}`;
}

function isSystem(name: string): boolean {
  return name.startsWith('$');
}

/** The actor of a destination, while the server runs. */
export function destinationActor(rt: Runtime, name: string): AnyActorRef | undefined {
  return rt.childActor('destinations', destinationActorId(name));
}

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

      let sup: AnyActorRef | undefined;
      const spawn = (name: string, type: string) => {
        if (sup === undefined || isSystem(name)) return;
        rt.startChild('destinations', { id: destinationActorId(name), logic, input: { name, type } });
      };
      /** Spawn an actor for every destination that has none (the supervisor was just started). */
      const sync = () => {
        const engine = rt.engine;
        if (sup === undefined || engine === undefined) return;
        const existing = new Set(rt.childActors('destinations').map(([id]) => id));
        for (const name of engine.destinationNames()) {
          if (isSystem(name) || existing.has(destinationActorId(name))) continue;
          const d = engine.destination(name);
          if (d !== undefined) spawn(name, d.type);
        }
      };

      const onCreated = (name: string, type: string) => spawn(name, type);
      const onDeleted = (name: string) => {
        if (sup === undefined || isSystem(name)) return;
        destinationActor(rt, name)?.send({ type: 'destination.deleted' }); // → deleting (final); the supervisor drops it
        rt.stopChild('destinations', destinationActorId(name)); // also when it was crashed and waiting for a restart
      };
      const onHighWater = (name: string, depth: number) => {
        destinationActor(rt, name)?.send({ type: 'destination.highWater', depth });
      };
      const onLowWater = (name: string, depth: number) => {
        destinationActor(rt, name)?.send({ type: 'destination.lowWater', depth });
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

      cleanup = () => {
        rootSub?.unsubscribe();
        rootSub = undefined;
        rt.off('destination.created', onCreated);
        rt.off('destination.deleted', onDeleted);
        rt.off('destination.highWater', onHighWater);
        rt.off('destination.lowWater', onLowWater);
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
