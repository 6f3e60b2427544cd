import type { AnyStateMachine } from 'xstate';

/**
 * A machine definition as data, for drawing it (GET /api/v1/server/machines/{kind}, the console's statecharts):
 * the state tree (nested and parallel states, initial states, tags, entry/exit actions, invoked actors) and every
 * transition with its source, targets, event, guard and actions. Read from the machine object itself (its root
 * state node), as docs/machines/*.md are (src/runtime/diagrams.ts), so a changed machine changes both.
 *
 * Paths are the state keys from the root joined by '.', as in an actor's state string (`listening.paused`); the
 * root's path is ''.
 */
export interface MachineStateDef {
  key: string;
  path: string;
  type: 'atomic' | 'compound' | 'parallel' | 'final' | 'history';
  /** the key of the initial child of a compound state */
  initial: string | null;
  tags: string[];
  entry: string[];
  exit: string[];
  /** the actors invoked while in this state (their source names) */
  invoke: string[];
  states: MachineStateDef[];
}

export interface MachineTransitionDef {
  source: string;
  /** none: handled in the state without leaving it */
  targets: string[];
  /** for people: `endpoint.pause`, `after backoff`, `done: bindListener`, `always` */
  event: string;
  /** the event type the machine matches ('' for an eventless `always` transition) */
  eventType: string;
  guard: string | null;
  actions: string[];
}

export interface MachineDefinition {
  kind: string;
  root: MachineStateDef;
  transitions: MachineTransitionDef[];
}

interface NodeLike {
  key: string;
  path: string[];
  type: MachineStateDef['type'];
  states: Record<string, NodeLike>;
  initial?: { target: NodeLike[] };
  transitions: Map<string, Array<{ target?: NodeLike[]; guard?: unknown; actions?: unknown[] }>>;
  always?: Array<{ target?: NodeLike[]; guard?: unknown; actions?: unknown[] }>;
  tags: string[];
  entry?: unknown[];
  exit?: unknown[];
  invoke?: Array<{ src?: unknown; id?: string }>;
}

/** An action's name as the diagrams and the machine API show it. */
export function actionName(a: unknown): string {
  if (typeof a === 'string') return a;
  if (a && (typeof a === 'object' || typeof a === 'function')) {
    const t = (a as { type?: unknown }).type;
    if (typeof t === 'string') return t.replace(/^xstate\./, '');
    const n = (a as { name?: string }).name;
    if (typeof a === 'function' && n) return n;
  }
  return 'action';
}

/** The invoked actor's name: its `src` when it is a name, else its id. */
function invokeName(i: { src?: unknown; id?: string }): string {
  return typeof i.src === 'string' ? i.src : (i.id ?? 'actor').replace(/^\d+\./, '');
}

/** As docs/machines/*.md label events: delays, invoked actors' completion and failure by name. */
export function eventLabel(eventType: string): string {
  if (eventType === '') return 'always';
  let m = /^xstate\.after\.(.+?)\./.exec(eventType);
  if (m) return `after ${m[1]}`;
  m = /^xstate\.done\.actor\.(.+)$/.exec(eventType);
  if (m) return `done: ${m[1].replace(/^\d+\./, '').replace(/^.*\.(\w+)$/, '$1')}`;
  m = /^xstate\.error\.actor\.(.+)$/.exec(eventType);
  if (m) return `error: ${m[1].replace(/^\d+\./, '').replace(/^.*\.(\w+)$/, '$1')}`;
  return eventType;
}

export function guardLabel(guard: unknown): string {
  if (!guard) return '';
  if (typeof guard === 'string') return guard;
  if (typeof guard === 'object' && 'type' in guard) {
    const g = guard as { type: string; guards?: unknown[]; params?: { guards?: unknown[] } };
    if (g.type === 'xstate.and' || g.type === 'xstate.or') return (g.guards ?? g.params?.guards ?? []).map(guardLabel).join(g.type === 'xstate.and' ? ' and ' : ' or ');
    return g.type;
  }
  if (typeof guard === 'function') {
    const fn = guard as { guards?: unknown[]; name?: string };
    if (Array.isArray(fn.guards)) return fn.guards.map(guardLabel).join(' and ');
    return fn.name && fn.name !== 'guard' ? fn.name : 'condition';
  }
  return 'condition';
}

const pathOf = (n: NodeLike) => n.path.join('.');

function stateDef(n: NodeLike, transitions: MachineTransitionDef[]): MachineStateDef {
  const source = pathOf(n);
  const add = (eventType: string, d: { target?: NodeLike[]; guard?: unknown; actions?: unknown[] }) =>
    transitions.push({
      source,
      targets: (d.target ?? []).map(pathOf),
      event: eventLabel(eventType),
      eventType,
      guard: d.guard ? guardLabel(d.guard) : null,
      actions: (d.actions ?? []).map(actionName),
    });
  for (const d of n.always ?? []) add('', d);
  for (const [eventType, defs] of n.transitions ?? []) for (const d of defs) add(eventType, d);
  return {
    key: n.key,
    path: source,
    type: n.type,
    initial: n.type === 'compound' && n.initial?.target[0] ? n.initial.target[0].key : null,
    tags: [...(n.tags ?? [])],
    entry: (n.entry ?? []).map(actionName),
    exit: (n.exit ?? []).map(actionName),
    invoke: (n.invoke ?? []).map(invokeName),
    states: Object.values(n.states ?? {}).map((c) => stateDef(c, transitions)),
  };
}

export function machineDefinition(machine: AnyStateMachine): MachineDefinition {
  const transitions: MachineTransitionDef[] = [];
  const root = stateDef(machine.root as unknown as NodeLike, transitions);
  return { kind: machine.id, root, transitions };
}
