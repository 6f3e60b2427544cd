import { and, assign, enqueueActions, sendTo, setup, type AnyActorLogic } from 'xstate';
import { backoffDelay } from '../shared/backoff.js';

/**
 * A one-for-one supervisor (OTP style). It starts children from specs, restarts a crashed child after a backoff
 * (doubling from `backoffInitial` up to `backoffMax`), and counts restarts within `period` ms. When a crash would
 * exceed `intensity` restarts in that window the budget is spent: every child is stopped and the supervisor goes to
 * `failed`, which the runtime reports in `/api/v1/server/status` and `/health`. Supervisors only supervise.
 *
 * Scale: XState copies a parent's `children` object on every spawn and stop, and an object with thousands of keys
 * makes that slow (measured: 5 000 children under one parent took 9.3 s to spawn). A supervisor of a dynamic set
 * that can grow large (destinations, durable subscriptions, lockouts) is started with `shards: [k1, k2, ...]`: it
 * supervises shard supervisors (`<name>#<i>`, RabbitMQ's `_sup_sup`), each sharded again by the rest of the list,
 * and routes each `child.start` / `child.stop` to the shard chosen by a hash of the child id. Shards are spawned
 * when their first child arrives. With [32, 32] a spawn touches a parent of about n / 1024 children. The
 * supervisor's own bookkeeping (`specs`, `attempts`) is kept in mutable maps, changed in place by its actions, for
 * the same reason; nothing reads old snapshots of them.
 */
export interface ChildSpec {
  id: string;
  logic: AnyActorLogic;
  input?: unknown;
  /**
   * The actor's key in the actor system's registry (`system.get(systemId)`), `<kind>:<name>`. Defaults to `id`
   * when `id` has that form (`endpoint:MQTT Interface`, `destination:sensors/a`); shard supervisors (`name#i`) have
   * none, so they stay hidden behind the registry.
   */
  systemId?: string;
}

const KIND_PREFIX = /^[a-z][a-z0-9-]*:/;

/** The registry key of a child spec (undefined: not registered). */
export function systemIdOfSpec(spec: ChildSpec): string | undefined {
  return spec.systemId ?? (KIND_PREFIX.test(spec.id) ? spec.id : undefined);
}

export interface SupervisorInput {
  name: string;
  children?: ChildSpec[];
  intensity: number;
  period: number;
  backoffInitial: number;
  backoffMax: number;
  /** Supervise shard supervisors instead of the children directly: `shards[0]` of them, each sharded by the rest. */
  shards?: number[];
  /** Used by shards: this level's hash is `floor(hash / divisor) % shards[0]`. */
  divisor?: number;
}

export interface SupervisorContext extends SupervisorInput {
  specs: Map<string, ChildSpec>;
  restarts: number[];
  attempts: Map<string, number>;
  pending: string[];
  lastError?: string;
  now: () => number;
  /** Children counted (for the status view without walking the children object). */
  childCount: number;
}

export type SupervisorEvent =
  | { type: 'child.start'; spec: ChildSpec }
  | { type: 'child.stop'; id: string }
  | { type: 'child.restart'; id: string }
  | { type: 'supervisor.reset' }
  /** From a child supervisor (a shard) that spent its budget: restart it after a backoff, or fail too. */
  | { type: 'supervisor.failed'; id: string; error: string }
  | { type: 'supervisor.recovered'; id: string }
  /** Raised after the backoff: send the failed child supervisor `supervisor.reset`. */
  | { type: 'child.reset'; id: string }
  | { type: `xstate.error.actor.${string}`; error: unknown }
  | { type: `xstate.done.actor.${string}`; output?: unknown };

/** Spawns a child whose logic is only known at run time (the typed API wants logic named in `setup`). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function spawnSpec(enqueue: { spawnChild: (...args: any[]) => unknown }, spec: ChildSpec): void {
  const systemId = systemIdOfSpec(spec);
  enqueue.spawnChild(spec.logic, systemId === undefined ? { id: spec.id, input: spec.input } : { id: spec.id, input: spec.input, systemId });
}

/** FNV-1a of a child id. */
export function hashId(id: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) {
    h ^= id.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** The shard a child id belongs to at a level with `shards` shards and the given divisor. */
export function shardOf(id: string, shards: number, divisor = 1): number {
  return Math.floor(hashId(id) / divisor) % shards;
}

/** The path of shard supervisor ids from a sharded supervisor down to the one that holds `id`. */
export function shardPath(name: string, id: string, shards: number[]): string[] {
  const path: string[] = [];
  let current = name;
  let divisor = 1;
  for (const k of shards) {
    current = shardId(current, shardOf(id, k, divisor));
    path.push(current);
    divisor *= k;
  }
  return path;
}

export function shardId(name: string, index: number): string {
  return `${name}#${index}`;
}

/** The child a done/error event is about: `childId` of a normalised event (below), else the suffix of its type. */
function childIdOf(event: { type: string }): string {
  return (event as { childId?: string }).childId ?? event.type.replace(/^xstate\.(error|done)\.actor\./, '');
}

/** The one type each kind of child event takes inside the supervisor (see normaliseChildEvent). */
const CHILD_DONE = 'xstate.done.actor.(child)';
const CHILD_ERROR = 'xstate.error.actor.(child)';

/**
 * XState memoises the transition candidates of each state node per event type, forever (a module-level cache keyed
 * by the state node). A child that finishes or crashes sends its parent `xstate.done.actor.<child id>` /
 * `xstate.error.actor.<child id>`, so a supervisor of a dynamic set (one child per topic, subscription, user)
 * would keep one cache entry per child ever seen: about 300 bytes of heap per topic published once, never given
 * back (bench/idle-destinations). Destinations and subscriptions are virtual now, so a topic published once no
 * longer spawns a child, but an activated one that is deleted or closed still finishes under its supervisor, and so
 * does every lockout actor (`forgotten` is final) whose user name may be new each time: measured on a supervisor of
 * 20 000 more distinct children that each finished (2026-11-27), +297 B of heap per child after a full GC
 * without this, +2 B with it. Inside the supervisor these events take one fixed type each, with the child's
 * id in `childId`; the type keeps its `xstate.done.actor.` / `xstate.error.actor.` prefix, which XState checks
 * (an unhandled error event fails the supervisor), and the inspection stream still shows the original event.
 */
function normaliseChildEvent<E extends { type: string }>(event: E): E {
  const t = event.type;
  if (t.startsWith('xstate.done.actor.') && t !== CHILD_DONE) return { ...event, type: CHILD_DONE, childId: t.slice(18) };
  if (t.startsWith('xstate.error.actor.') && t !== CHILD_ERROR) return { ...event, type: CHILD_ERROR, childId: t.slice(19) };
  return event;
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

export function backoffFor(ctx: Pick<SupervisorContext, 'backoffInitial' | 'backoffMax'>, attempt: number): number {
  return backoffDelay(attempt, ctx.backoffInitial, ctx.backoffMax);
}

function isSharded(ctx: SupervisorContext): boolean {
  return (ctx.shards?.length ?? 0) > 0;
}

/** The spec of shard `i` of a sharded supervisor. */
function shardSpec(ctx: SupervisorContext, i: number, logic: AnyActorLogic, children: ChildSpec[] = []): ChildSpec {
  const [k, ...rest] = ctx.shards!;
  return {
    id: shardId(ctx.name, i),
    logic,
    input: {
      name: shardId(ctx.name, i),
      children,
      intensity: ctx.intensity,
      period: ctx.period,
      backoffInitial: ctx.backoffInitial,
      backoffMax: ctx.backoffMax,
      shards: rest.length ? rest : undefined,
      divisor: (ctx.divisor ?? 1) * k,
      now: ctx.now,
    },
  };
}

function shardIndex(ctx: SupervisorContext, id: string): number {
  return shardOf(id, ctx.shards![0], ctx.divisor ?? 1);
}

function logicOf(self: unknown): AnyActorLogic {
  return (self as { logic: AnyActorLogic }).logic;
}

export const supervisorMachine = setup({
  types: {
    context: {} as SupervisorContext,
    events: {} as SupervisorEvent,
    input: {} as SupervisorInput & { now?: () => number },
  },
  guards: {
    isKnownChild: ({ context, event }) => context.specs.has(childIdOf(event)),
    isKnownSupervisor: ({ context, event }) => event.type === 'supervisor.failed' && context.specs.has(event.id),
    hasBudget: ({ context }) => {
      const since = context.now() - context.period;
      return context.restarts.filter((t) => t > since).length < context.intensity;
    },
    sharded: ({ context }) => isSharded(context),
  },
  actions: {
    startChildren: enqueueActions(({ context, enqueue, self }) => {
      if (isSharded(context) && context.specs.size === 0) {
        // First start: the initial children go to their shards (shards are supervisors like this one).
        const parts = new Map<number, ChildSpec[]>();
        for (const spec of context.children ?? []) {
          const i = shardIndex(context, spec.id);
          parts.set(i, [...(parts.get(i) ?? []), spec]);
        }
        for (const [i, children] of parts) context.specs.set(shardId(context.name, i), shardSpec(context, i, logicOf(self), children));
      }
      for (const spec of context.specs.values()) spawnSpec(enqueue, spec);
      context.childCount = context.specs.size;
    }),
    stopChildren: enqueueActions(({ context, enqueue }) => {
      for (const id of context.specs.keys()) enqueue.stopChild(id);
      for (const id of context.pending) enqueue.cancel(`restart:${id}`);
      context.childCount = 0;
    }),
    forwardToShard: enqueueActions(({ context, event, enqueue, self }) => {
      const id = event.type === 'child.start' ? event.spec.id : event.type === 'child.stop' ? event.id : undefined;
      if (id === undefined) return;
      const i = shardIndex(context, id);
      const target = shardId(context.name, i);
      if (!context.specs.has(target)) {
        if (event.type === 'child.stop') return;
        // Shards are spawned when their first child arrives; the event waits in the new shard's mailbox.
        const spec = shardSpec(context, i, logicOf(self));
        context.specs.set(target, spec);
        context.childCount = context.specs.size;
        spawnSpec(enqueue, spec);
      }
      enqueue(sendTo(target, event));
    }),
    addChild: enqueueActions(({ context, event, enqueue }) => {
      if (event.type !== 'child.start') return;
      const { spec } = event;
      if (context.specs.has(spec.id)) enqueue.stopChild(spec.id);
      if (context.pending.includes(spec.id)) {
        // a restart was pending for the old one: the new spec replaces it (two actors may not share a systemId)
        enqueue.cancel(`restart:${spec.id}`);
        enqueue.assign({ pending: context.pending.filter((p) => p !== spec.id) });
      }
      context.specs.set(spec.id, spec);
      context.attempts.set(spec.id, 0);
      context.childCount = context.specs.size;
      spawnSpec(enqueue, spec);
    }),
    removeChild: enqueueActions(({ context, event, enqueue }) => {
      const id = event.type === 'child.stop' ? event.id : childIdOf(event);
      if (!context.specs.has(id)) return;
      enqueue.stopChild(id);
      if (context.pending.includes(id)) {
        enqueue.cancel(`restart:${id}`);
        enqueue.assign({ pending: context.pending.filter((p) => p !== id) });
      }
      context.specs.delete(id);
      context.attempts.delete(id);
      context.childCount = context.specs.size;
    }),
    scheduleRestart: enqueueActions(({ context, event, enqueue }) => {
      const id = childIdOf(event);
      const attempt = (context.attempts.get(id) ?? 0) + 1;
      context.attempts.set(id, attempt);
      const now = context.now();
      enqueue.assign({
        restarts: [...context.restarts.filter((t) => t > now - context.period), now],
        pending: [...context.pending.filter((p) => p !== id), id],
        lastError: `${id}: ${describe((event as { error?: unknown }).error)}`,
      });
      enqueue.stopChild(id);
      enqueue.raise({ type: 'child.restart', id }, { delay: backoffFor(context, attempt), id: `restart:${id}` });
    }),
    restartChild: enqueueActions(({ context, event, enqueue }) => {
      if (event.type !== 'child.restart') return;
      const spec = context.specs.get(event.id);
      enqueue.assign({ pending: context.pending.filter((p) => p !== event.id) });
      if (!spec) return;
      spawnSpec(enqueue, spec);
    }),
    recordFailure: assign(({ context, event }) => ({
      lastError: `restart budget spent (${context.intensity} restarts within ${context.period} ms); last crash: ${childIdOf(event)}: ${describe((event as { error?: unknown }).error)}`,
      pending: [],
    })),
    scheduleSupervisorReset: enqueueActions(({ context, event, enqueue }) => {
      if (event.type !== 'supervisor.failed') return;
      const attempt = (context.attempts.get(event.id) ?? 0) + 1;
      context.attempts.set(event.id, attempt);
      const now = context.now();
      enqueue.assign({
        restarts: [...context.restarts.filter((t) => t > now - context.period), now],
        pending: [...context.pending.filter((p) => p !== event.id), event.id],
        lastError: `${event.id}: ${event.error}`,
      });
      enqueue.raise({ type: 'child.reset', id: event.id }, { delay: backoffFor(context, attempt), id: `restart:${event.id}` });
    }),
    resetChildSupervisor: enqueueActions(({ context, event, enqueue }) => {
      if (event.type !== 'child.reset') return;
      enqueue.assign({ pending: context.pending.filter((p) => p !== event.id) });
      if (context.specs.has(event.id)) enqueue.sendTo(event.id, { type: 'supervisor.reset' });
    }),
    recordSupervisorFailure: assign(({ context, event }) => ({
      lastError: `restart budget spent (${context.intensity} restarts within ${context.period} ms); last failure: ${event.type === 'supervisor.failed' ? `${event.id}: ${event.error}` : 'unknown'}`,
      pending: [],
    })),
    /** Tell the parent (the server, or the sharded supervisor above a shard) that this subtree gave up. */
    escalate: enqueueActions(({ context, enqueue, self }) => {
      if ((self as unknown as { _parent?: unknown })._parent === undefined) return;
      enqueue.sendParent({ type: 'supervisor.failed', id: context.name, error: context.lastError ?? 'failed' });
    }),
    announceRecovery: enqueueActions(({ context, enqueue, self }) => {
      if ((self as unknown as { _parent?: unknown })._parent === undefined) return;
      enqueue.sendParent({ type: 'supervisor.recovered', id: context.name });
    }),
    resetBudget: enqueueActions(({ context, enqueue }) => {
      context.attempts.clear();
      enqueue.assign({ restarts: [], lastError: undefined, pending: [] });
    }),
    rememberSpec: ({ context, event }) => {
      if (event.type === 'child.start') context.specs.set(event.spec.id, event.spec);
      else if (event.type === 'child.stop') context.specs.delete(event.id);
    },
  },
}).createMachine({
  id: 'supervisor',
  context: ({ input }) => ({
    ...input,
    // a sharded supervisor hands its initial children to its shards (see startChildren)
    specs: new Map(input.shards?.length ? [] : (input.children ?? []).map((c) => [c.id, c])),
    restarts: [],
    attempts: new Map(),
    pending: [],
    now: input.now ?? Date.now,
    childCount: 0,
  }),
  initial: 'running',
  states: {
    running: {
      entry: 'startChildren',
      on: {
        'child.start': [{ guard: 'sharded', actions: 'forwardToShard' }, { actions: 'addChild' }],
        'child.stop': [{ guard: 'sharded', actions: 'forwardToShard' }, { actions: 'removeChild' }],
        'child.restart': { actions: 'restartChild' },
        'xstate.error.actor.*': [
          { guard: and(['isKnownChild', 'hasBudget']), actions: 'scheduleRestart' },
          { guard: 'isKnownChild', target: 'failed', actions: 'recordFailure' },
        ],
        'xstate.done.actor.*': { actions: 'removeChild' },
        'supervisor.failed': [
          { guard: and(['isKnownSupervisor', 'hasBudget']), actions: 'scheduleSupervisorReset' },
          { guard: 'isKnownSupervisor', target: 'failed', actions: 'recordSupervisorFailure' },
        ],
        'child.reset': { actions: 'resetChildSupervisor' },
      },
    },
    failed: {
      tags: ['failed'],
      entry: ['stopChildren', 'escalate'],
      on: {
        'supervisor.reset': { target: 'running', actions: ['resetBudget', 'announceRecovery'] },
        'child.start': { actions: 'rememberSpec' },
        'child.stop': { actions: 'rememberSpec' },
      },
    },
  },
});

{
  // every supervisor actor runs this machine object (shards too: logicOf(self)), so the wrapper covers them all
  const transition = supervisorMachine.transition.bind(supervisorMachine);
  supervisorMachine.transition = (snapshot, event, scope) => transition(snapshot, normaliseChildEvent(event), scope);
}
