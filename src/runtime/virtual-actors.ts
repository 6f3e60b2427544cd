import type { AnyActorRef } from 'xstate';

/**
 * Virtual actors (Orleans' virtual actors, Akka's passivation) for the kinds that come in large numbers:
 * destinations and subscriptions. Each always has an identity (`destination:<name>`, `subscription:<key>`) that
 * the registry (`rt.actor`, `rt.actorById`), the actor API and the status views can list, inspect and command,
 * but an XState instance exists only while one is needed:
 *
 * - **activated** on demand: a registry lookup (a REST command or an inspection of the one actor), or a lifecycle
 *   event that needs a machine (a queue above its high-water mark, a paused destination);
 * - **passivated** by the owning service's sweep once it is back in its resting state and has seen no snapshot
 *   change for `PASSIVATE_AFTER_MS`;
 * - its state lives in the engine's record (paused, above high-water, hibernating), so an activation resumes it
 *   (the machines' `resolving`/`starting` states read it through guards) and a passive actor's state for the list
 *   views is read from the same record (`view`).
 *
 * Listing is paged from the engine's own tables (`names`, `count`), never from live XState instances; publishing
 * to a new topic activates nothing.
 */
export const PASSIVATE_AFTER_MS = 30_000;
/** How often a virtual kind's service looks for actors to passivate. */
export const PASSIVATE_SWEEP_MS = 10_000;

/** What the list and tree views show of a virtual actor without activating it. */
export interface VirtualView {
  /** The state value its machine would be in (same shape as the machine's snapshot value). */
  value: unknown;
  tags: string[];
  context: Record<string, unknown>;
}

export interface VirtualActorKind {
  /** The systemId prefix: `destination`. */
  kind: string;
  /** The supervisor its activated instances run under (a `SupervisorName` of runtime.ts). */
  supervisor: string;
  /** The machine id (`destination`), as the tree view shows it. */
  machine: string;
  /** Number of actors of this kind (from the engine's tables, O(1)). */
  count(): number;
  /** Every name, in the engine's table order (lazily: a page stops iterating once it is full). */
  names(): Iterable<string>;
  /** At most `n` names from the `from`-th on, in the order of `names()` (a plain loop: pages deep into 100 000s). */
  slice(from: number, n: number): string[];
  /** Whether an actor of that name exists (its resource exists in the engine). */
  has(name: string): boolean;
  /** Its state from the engine's record; undefined when it does not exist. */
  view(name: string): VirtualView | undefined;
  /** Its live XState instance, if activated. */
  live(name: string): AnyActorRef | undefined;
  /** Activates it (spawns its machine under the supervisor, resuming from the engine's record) and returns it. */
  activate(name: string): AnyActorRef | undefined;
  /** Passivates every activated actor at rest and idle for at least `idleMs`; returns how many. */
  passivateIdle(idleMs: number): number;
  /** Number of activated instances. */
  activeCount(): number;
}

/**
 * Activation bookkeeping shared by the virtual kinds: the activated names and when their snapshot last changed.
 * `touch` on activation and on every snapshot; `restingAndIdle` decides passivation.
 */
export class Activations {
  private readonly touched = new Map<string, number>();
  private readonly subs = new Map<string, { unsubscribe(): void }>();

  constructor(private readonly now: () => number) {}

  track(name: string, ref: AnyActorRef): void {
    this.subs.get(name)?.unsubscribe();
    this.touched.set(name, this.now());
    this.subs.set(name, ref.subscribe({ next: () => this.touched.set(name, this.now()), error: () => {}, complete: () => this.forget(name) }));
  }

  forget(name: string): void {
    this.subs.get(name)?.unsubscribe();
    this.subs.delete(name);
    this.touched.delete(name);
  }

  names(): string[] {
    return [...this.touched.keys()];
  }

  idleFor(name: string): number {
    const t = this.touched.get(name);
    return t === undefined ? Infinity : this.now() - t;
  }

  get size(): number {
    return this.touched.size;
  }

  clear(): void {
    for (const s of this.subs.values()) s.unsubscribe();
    this.subs.clear();
    this.touched.clear();
  }
}
