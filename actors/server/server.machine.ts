import { and, assign, enqueueActions, fromPromise, setup } from 'xstate';
import { backoffDelay } from '../shared/backoff.js';
import { spawnSpec, type ChildSpec } from '../supervisor/supervisor.machine.js';

/**
 * The root actor. booting → running → stopping → stopped; a restart is stopping → booting, which rebuilds the
 * supervisor tree in-process (the supervisors are spawned on entering booting, so services can use them while they
 * boot, and stopped child-first when the server stops, before the services flush). I/O (opening the engine,
 * closing listeners, flushing the store) is supplied by the runtime as the `boot` and `shutdown` actors.
 *
 * Escalation (OTP: "when the budget is spent the supervisor fails and its parent decides"): a supervisor that spends
 * its restart budget sends `supervisor.failed` here. While the server's own budget (`escalation.intensity` subtree
 * restarts within `escalation.period`) lasts, it sends that supervisor `supervisor.reset` after a backoff
 * (doubling from `escalation.backoffInitial` up to `backoffMax`): the subtree starts again from its specs. When the
 * budget is spent the server goes `degraded`: everything else keeps serving, the failed subtree stays failed and is
 * named in `/health` and `/api/v1/server/status`, and `server.restart` (the operator's `PATCH /api/v1/server
 * {"state":"restart"}`) resets the failed subtrees in place. `reportEscalation` (supplied by the runtime) writes
 * the log and audit lines.
 */
export interface EscalationBudget {
  intensity: number;
  period: number;
  backoffInitial: number;
  backoffMax: number;
}

export interface ServerInput {
  /** The supervisors (and other top-level actors) spawned each time the server boots. */
  children: () => ChildSpec[];
  escalation?: EscalationBudget;
  now?: () => number;
}

export interface FailedSubtree {
  /** restarting: a `supervisor.reset` is scheduled; failed: given up (the server is degraded). */
  state: 'restarting' | 'failed';
  error: string;
  attempt: number;
  since: number;
  /** ms until the scheduled reset (restarting). */
  delayMs?: number;
}

export interface ServerContext {
  children: () => ChildSpec[];
  escalation: EscalationBudget;
  now: () => number;
  bootCount: number;
  restartRequested: boolean;
  error?: string;
  childIds: string[];
  /** Subtree restarts made within the period (epoch ms). */
  escalations: number[];
  /** Failed top-level subtrees by child id. */
  subtrees: Record<string, FailedSubtree>;
}

export type ServerEvent =
  | { type: 'server.restart' }
  | { type: 'server.shutdown' }
  | { type: 'supervisor.failed'; id: string; error: string }
  | { type: 'supervisor.recovered'; id: string }
  | { type: 'subtree.restart'; id: string };

/** What the runtime is told after the server decided about a failed subtree (read after the decision's assign). */
const REPORT = {
  type: 'reportEscalation',
  params: ({ context, event }: { context: ServerContext; event: ServerEvent }) => {
    const id = event.type === 'supervisor.failed' ? event.id : '';
    return { subtree: id, failed: context.subtrees[id] };
  },
} as const;

const DEFAULT_ESCALATION: EscalationBudget = { intensity: 3, period: 600000, backoffInitial: 5000, backoffMax: 60000 };

function delayFor(b: EscalationBudget, attempt: number): number {
  return backoffDelay(attempt, b.backoffInitial, b.backoffMax);
}

export const serverMachine = setup({
  types: {
    context: {} as ServerContext,
    events: {} as ServerEvent,
    input: {} as ServerInput,
  },
  actors: {
    boot: fromPromise<void, { bootCount: number }>(async () => {}),
    shutdown: fromPromise<void, { restart: boolean }>(async () => {}),
  },
  guards: {
    restartRequested: ({ context }) => context.restartRequested,
    hasBudget: ({ context }) => {
      const since = context.now() - context.escalation.period;
      return context.escalations.filter((t) => t > since).length < context.escalation.intensity;
    },
    gaveUpOnSubtree: ({ context }) => Object.values(context.subtrees).some((f) => f.state === 'failed'),
    knownChild: ({ context, event }) => 'id' in event && context.childIds.includes(event.id),
  },
  actions: {
    spawnChildren: enqueueActions(({ context, enqueue }) => {
      const specs = context.children();
      for (const spec of specs) spawnSpec(enqueue, spec);
      enqueue.assign({ childIds: specs.map((s) => s.id), subtrees: {}, escalations: [] });
    }),
    stopChildren: enqueueActions(({ context, enqueue }) => {
      for (const id of Object.keys(context.subtrees)) enqueue.cancel(`subtree:${id}`);
      for (const id of [...context.childIds].reverse()) enqueue.stopChild(id);
      enqueue.assign({ childIds: [], subtrees: {} });
    }),
    scheduleSubtreeRestart: enqueueActions(({ context, event, enqueue }) => {
      if (event.type !== 'supervisor.failed') return;
      const now = context.now();
      const attempt = (context.subtrees[event.id]?.attempt ?? 0) + 1;
      const delay = delayFor(context.escalation, context.escalations.filter((t) => t > now - context.escalation.period).length + 1);
      enqueue.assign({
        escalations: [...context.escalations.filter((t) => t > now - context.escalation.period), now],
        subtrees: { ...context.subtrees, [event.id]: { state: 'restarting', error: event.error, attempt, since: now, delayMs: delay } },
      });
      enqueue.raise({ type: 'subtree.restart', id: event.id }, { delay, id: `subtree:${event.id}` });
    }),
    giveUpSubtree: enqueueActions(({ context, event, enqueue }) => {
      if (event.type !== 'supervisor.failed') return;
      const attempt = context.subtrees[event.id]?.attempt ?? 0;
      enqueue.assign({ subtrees: { ...context.subtrees, [event.id]: { state: 'failed', error: event.error, attempt, since: context.now() } } });
    }),
    resetSubtree: enqueueActions(({ context, event, enqueue }) => {
      if (event.type !== 'subtree.restart') return;
      if (!context.childIds.includes(event.id)) return;
      enqueue.sendTo(event.id, { type: 'supervisor.reset' });
    }),
    forgetSubtree: assign(({ context, event }) => {
      if (event.type !== 'supervisor.recovered' || context.subtrees[event.id]?.state !== 'restarting') return {};
      const { [event.id]: _gone, ...rest } = context.subtrees;
      return { subtrees: rest };
    }),
    /** The operator's restart while degraded: every failed subtree is reset now and the budget starts afresh. */
    resetFailedSubtrees: enqueueActions(({ context, enqueue }) => {
      for (const id of Object.keys(context.subtrees)) {
        enqueue.cancel(`subtree:${id}`);
        if (context.childIds.includes(id)) enqueue.sendTo(id, { type: 'supervisor.reset' });
      }
      enqueue.assign({ subtrees: {}, escalations: [] });
    }),
    /** Supplied by the runtime: log and audit what the server does about a failed subtree. */
    reportEscalation: (_args, _params: { subtree: string; failed?: FailedSubtree }) => {},
  },
}).createMachine({
  id: 'server',
  context: ({ input }) => ({
    children: input.children,
    escalation: input.escalation ?? DEFAULT_ESCALATION,
    now: input.now ?? Date.now,
    bootCount: 0,
    restartRequested: false,
    childIds: [],
    escalations: [],
    subtrees: {},
  }),
  initial: 'booting',
  on: {
    'subtree.restart': { actions: 'resetSubtree' },
    'supervisor.recovered': { actions: 'forgetSubtree' },
  },
  states: {
    booting: {
      // The supervisors exist while services boot, so a service can spawn actors under them during boot.
      entry: 'spawnChildren',
      invoke: {
        src: 'boot',
        input: ({ context }) => ({ bootCount: context.bootCount }),
        onDone: [
          // a subtree the server gave up on while booting: it boots into degraded
          { guard: 'gaveUpOnSubtree', target: 'degraded', actions: assign(({ context }) => ({ bootCount: context.bootCount + 1, error: undefined })) },
          { target: 'running', actions: assign(({ context }) => ({ bootCount: context.bootCount + 1, error: undefined })) },
        ],
        onError: { target: 'failed', actions: assign(({ event }) => ({ error: String((event.error as Error)?.message ?? event.error) })) },
      },
      on: {
        'supervisor.failed': [{ guard: and(['knownChild', 'hasBudget']), actions: ['scheduleSubtreeRestart', REPORT] }, { guard: 'knownChild', actions: ['giveUpSubtree', REPORT] }],
      },
    },
    running: {
      on: {
        'server.restart': { target: 'stopping', actions: ['stopChildren', assign({ restartRequested: true })] },
        'server.shutdown': { target: 'stopping', actions: ['stopChildren', assign({ restartRequested: false })] },
        'supervisor.failed': [
          { guard: and(['knownChild', 'hasBudget']), actions: ['scheduleSubtreeRestart', REPORT] },
          { guard: 'knownChild', target: 'degraded', actions: ['giveUpSubtree', REPORT] },
        ],
      },
    },
    degraded: {
      tags: ['degraded'],
      on: {
        'server.restart': { target: 'running', actions: 'resetFailedSubtrees' },
        'server.shutdown': { target: 'stopping', actions: ['stopChildren', assign({ restartRequested: false })] },
        'supervisor.failed': { guard: 'knownChild', actions: ['giveUpSubtree', REPORT] },
      },
    },
    stopping: {
      invoke: {
        src: 'shutdown',
        input: ({ context }) => ({ restart: context.restartRequested }),
        onDone: [{ guard: 'restartRequested', target: 'booting' }, { target: 'stopped' }],
        onError: { target: 'stopped', actions: assign(({ event }) => ({ error: String((event.error as Error)?.message ?? event.error) })) },
      },
    },
    failed: {
      tags: ['failed'],
      entry: 'stopChildren',
      on: { 'server.shutdown': 'stopped', 'server.restart': 'booting' },
    },
    stopped: { type: 'final' },
  },
});
