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
 * - at most `MessageDaemon.virtualActors.maxActive` (default 1 000) are activated per kind: an activation at
 *   the cap first passivates the least recently used actor at rest, else the least recently used one idle for
 *   EVICT_BUSY_AFTER_MS (see `makeRoom`), so inspecting 100 000 actors one by one holds at most the cap;
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
  /** A lookup of an activated one (`rt.actorById`): it becomes the most recently used (see `makeRoom`). */
  touch(name: string): void;
}

/**
 * An activated actor that is not at rest (paused, full, above high-water) is passivated to make room only once its
 * snapshot has not changed for this long, so a command still waiting for its actor to settle is never cut short.
 */
export const EVICT_BUSY_AFTER_MS = 1000;

/**
 * Activation bookkeeping shared by the virtual kinds: the activated names, least recently used first, and when each
 * was last used (activated, looked up, or its snapshot changed). `touch` on every use; `restingAndIdle` decides
 * passivation; `victim` chooses what to passivate when the kind is at its cap (`MessageDaemon.virtualActors.maxActive`).
 */
export class Activations {
  /** Last use per activated name; a Map keeps insertion order, and a use re-inserts, so the first key is the LRU. */
  private readonly touched = new Map<string, number>();
  private readonly subs = new Map<string, { unsubscribe(): void }>();

  constructor(private readonly now: () => number) {}

  track(name: string, ref: AnyActorRef): void {
    this.subs.get(name)?.unsubscribe();
    this.touched.delete(name);
    this.touched.set(name, this.now());
    this.subs.set(name, ref.subscribe({ next: () => this.touch(name), error: () => {}, complete: () => this.forget(name) }));
  }

  /** A use of a tracked actor (an activation through the kind, a snapshot change): it becomes the most recently used. */
  touch(name: string): void {
    if (!this.touched.delete(name)) return;
    this.touched.set(name, this.now());
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

  /**
   * The activated actor to passivate to make room for one more, or undefined when none may go: the least recently
   * used one at rest; failing that, the least recently used one whose snapshot has not changed for
   * EVICT_BUSY_AFTER_MS (its state — paused, full, above high-water — is in the engine's record, which the next
   * activation resumes from). `except` (the one being activated) is never chosen.
   */
  victim(atRest: (name: string) => boolean, except?: string): string | undefined {
    let busy: string | undefined;
    const now = this.now();
    for (const [name, t] of this.touched) {
      if (name === except) continue;
      if (atRest(name)) return name;
      if (busy === undefined && now - t >= EVICT_BUSY_AFTER_MS) busy = name;
    }
    return busy;
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

/**
 * Makes room for one more activated actor of a kind at its cap (`max`): passivates `victim`s until fewer than `max`
 * are activated. Returns false when none could go (every activated actor is busy and was used within
 * EVICT_BUSY_AFTER_MS): the caller activates beyond the cap all the same, so a command or an inspection always gets
 * its actor, and the next activation or the periodic sweep passivates back down.
 */
export function makeRoom(activations: Activations, max: number, atRest: (name: string) => boolean, passivate: (name: string) => void, except: string): boolean {
  while (activations.size >= max) {
    const name = activations.victim(atRest, except);
    if (name === undefined) return false;
    activations.forget(name);
    passivate(name);
  }
  return true;
}
