import { and, assign, enqueueActions, setup, type AnyActorLogic } from 'xstate';

/**
 * A one-for-one supervisor (OTP style). It starts children from specs, restarts a crashed child after a backoff
 * (doubling from `backoffInitial` up to `backoffMax`), and counts restarts within `period` ms. When a crash would
 * exceed `intensity` restarts in that window the budget is spent: every child is stopped and the supervisor goes to
 * `failed`, which the runtime reports in `/api/v1/server/status` and `/health`. Supervisors only supervise.
 */
export interface ChildSpec {
  id: string;
  logic: AnyActorLogic;
  input?: unknown;
}

export interface SupervisorInput {
  name: string;
  children?: ChildSpec[];
  intensity: number;
  period: number;
  backoffInitial: number;
  backoffMax: number;
}

export interface SupervisorContext extends SupervisorInput {
  specs: Record<string, ChildSpec>;
  restarts: number[];
  attempts: Record<string, number>;
  pending: string[];
  lastError?: string;
  now: () => number;
}

export type SupervisorEvent =
  | { type: 'child.start'; spec: ChildSpec }
  | { type: 'child.stop'; id: string }
  | { type: 'child.restart'; id: string }
  | { type: 'supervisor.reset' }
  | { type: `xstate.error.actor.${string}`; error: unknown }
  | { type: `xstate.done.actor.${string}`; output?: unknown };

/** Spawns a child whose logic is only known at run time (the typed API wants logic named in `setup`). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function spawnSpec(enqueue: { spawnChild: (...args: any[]) => unknown }, spec: ChildSpec): void {
  enqueue.spawnChild(spec.logic, { id: spec.id, input: spec.input });
}

function childIdOf(eventType: string): string {
  return eventType.replace(/^xstate\.(error|done)\.actor\./, '');
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

export function backoffFor(ctx: Pick<SupervisorContext, 'backoffInitial' | 'backoffMax'>, attempt: number): number {
  return Math.min(ctx.backoffMax, ctx.backoffInitial * 2 ** Math.max(0, attempt - 1));
}

export const supervisorMachine = setup({
  types: {
    context: {} as SupervisorContext,
    events: {} as SupervisorEvent,
    input: {} as SupervisorInput & { now?: () => number },
  },
  guards: {
    isKnownChild: ({ context, event }) => childIdOf(event.type) in context.specs,
    hasBudget: ({ context }) => {
      const since = context.now() - context.period;
      return context.restarts.filter((t) => t > since).length < context.intensity;
    },
  },
  actions: {
    startChildren: enqueueActions(({ context, enqueue }) => {
      for (const spec of Object.values(context.specs)) spawnSpec(enqueue, spec);
    }),
    stopChildren: enqueueActions(({ context, enqueue }) => {
      for (const id of Object.keys(context.specs)) enqueue.stopChild(id);
      for (const id of context.pending) enqueue.cancel(`restart:${id}`);
    }),
    addChild: enqueueActions(({ context, event, enqueue }) => {
      if (event.type !== 'child.start') return;
      const { spec } = event;
      if (context.specs[spec.id]) enqueue.stopChild(spec.id);
      enqueue.assign({ specs: { ...context.specs, [spec.id]: spec }, attempts: { ...context.attempts, [spec.id]: 0 } });
      spawnSpec(enqueue, spec);
    }),
    removeChild: enqueueActions(({ context, event, enqueue }) => {
      const id = event.type === 'child.stop' ? event.id : childIdOf(event.type);
      if (!(id in context.specs)) return;
      enqueue.stopChild(id);
      enqueue.cancel(`restart:${id}`);
      const specs = { ...context.specs };
      delete specs[id];
      const attempts = { ...context.attempts };
      delete attempts[id];
      enqueue.assign({ specs, attempts, pending: context.pending.filter((p) => p !== id) });
    }),
    scheduleRestart: enqueueActions(({ context, event, enqueue }) => {
      const id = childIdOf(event.type);
      const attempt = (context.attempts[id] ?? 0) + 1;
      const now = context.now();
      enqueue.assign({
        restarts: [...context.restarts.filter((t) => t > now - context.period), now],
        attempts: { ...context.attempts, [id]: attempt },
        pending: [...context.pending.filter((p) => p !== id), id],
        lastError: `${id}: ${describe((event as { error?: unknown }).error)}`,
      });
      enqueue.stopChild(id);
      enqueue.raise({ type: 'child.restart', id }, { delay: backoffFor(context, attempt), id: `restart:${id}` });
    }),
    restartChild: enqueueActions(({ context, event, enqueue }) => {
      if (event.type !== 'child.restart') return;
      const spec = context.specs[event.id];
      enqueue.assign({ pending: context.pending.filter((p) => p !== event.id) });
      if (!spec) return;
      spawnSpec(enqueue, spec);
    }),
    recordFailure: assign(({ context, event }) => ({
      lastError: `restart budget spent (${context.intensity} restarts within ${context.period} ms); last crash: ${childIdOf(event.type)}: ${describe((event as { error?: unknown }).error)}`,
      pending: [],
    })),
    resetBudget: assign({ restarts: [], attempts: {}, lastError: undefined, pending: [] }),
  },
}).createMachine({
  id: 'supervisor',
  context: ({ input }) => ({
    ...input,
    specs: Object.fromEntries((input.children ?? []).map((c) => [c.id, c])),
    restarts: [],
    attempts: {},
    pending: [],
    now: input.now ?? Date.now,
  }),
  initial: 'running',
  states: {
    running: {
      entry: 'startChildren',
      on: {
        'child.start': { actions: 'addChild' },
        'child.stop': { actions: 'removeChild' },
        'child.restart': { actions: 'restartChild' },
        'xstate.error.actor.*': [
          { guard: and(['isKnownChild', 'hasBudget']), actions: 'scheduleRestart' },
          { guard: 'isKnownChild', target: 'failed', actions: 'recordFailure' },
        ],
        'xstate.done.actor.*': { actions: 'removeChild' },
      },
    },
    failed: {
      tags: ['failed'],
      entry: 'stopChildren',
      on: {
        'supervisor.reset': { target: 'running', actions: 'resetBudget' },
        'child.start': {
          actions: assign(({ context, event }) => ({ specs: { ...context.specs, [event.spec.id]: event.spec } })),
        },
        'child.stop': {
          actions: assign(({ context, event }) => {
            const specs = { ...context.specs };
            delete specs[event.id];
            return { specs };
          }),
        },
      },
    },
  },
});
