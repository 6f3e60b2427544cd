import type { ActorRefFrom, AnyActorLogic, AnyActorRef, AnyStateMachine, EventFromLogic, SnapshotFrom } from 'xstate';
import { serverMachine } from '../../actors/server/server.machine.js';
import { supervisorMachine, type ChildSpec } from '../../actors/supervisor/supervisor.machine.js';
import { ServiceUnavailableError, ValidationError } from '../errors.js';
import { command, settle, type CommandReporter, type CommandResult, type CommandTarget } from './command.js';
import { acceptedEvents } from './inspector.js';
import { systemIdOf } from './registry.js';
import type { Runtime, SupervisorName } from './runtime.js';

/**
 * One declaration per actor kind (endpoint, integration, discovery, device, lora, lockout, ...): the machine, the
 * supervisor it runs under, how the API names its states and which REST words command it. Everything a kind used to
 * write for itself comes from it:
 *
 * - `spawn(rt, name, { logic, input })`: the child spec under the kind's supervisor, systemId `<kind>:<name>`;
 * - `lookup(rt, name)`: the live actor, typed as the kind's machine;
 * - `command(rt, name, requested)`: a REST word (`started`, `paused`, ...) through the one command helper
 *   (src/runtime/command.ts): unknown word 400, no actor 404, the state it is in 200 "No change", a word its state
 *   cannot take 409 naming what it accepts, not settled in time 503; the server not running 503 as well;
 * - `tell(report, ref, name, event)`: an internal command (a lockout reset, a device found by a scan) through the same
 *   helper, reported on the bus, without waiting;
 * - `routes`: the REST routes that command the kind, for the route-table guard test (test/runtime/command.test.ts);
 * - the kind's machine in `actorKinds()`, which the diagrams and `allMachines` are checked against.
 *
 * A new kind is five lines (docs/runtime.md, "Add an actor kind"):
 *
 *   export const widgetKind = defineActorKind({
 *     kind: 'widget', machine: widgetMachine, supervisor: 'devices', noun: 'Widget',
 *     stateName: (snap) => widgetStateName(snap.value),
 *     requests: { started: { event: { type: 'widget.start' }, target: 'Started' }, stopped: { event: { type: 'widget.stop' }, target: 'Stopped' } },
 *   });
 *   declare module '../runtime/registry.js' { interface ActorKinds { widget: typeof widgetMachine } }
 */
export interface ActorKindSpec<TMachine extends AnyStateMachine, TState extends string = string> {
  /** The systemId prefix: actors are `<kind>:<name>` (a singleton is `<kind>`, name ''). */
  kind: string;
  machine: TMachine;
  /** The supervisor its actors run under; absent for the root (`server`) and supervisors themselves. */
  supervisor?: SupervisorName;
  /** How an error names one: `Endpoint` → `Endpoint "MQTT Interface"`. */
  noun: string;
  /** The label of the singleton (name ''), e.g. `The discovery manager`. */
  singletonLabel?: string;
  /** The state as the API names it; a snapshot that is no longer active is passed too. */
  stateName(snapshot: SnapshotFrom<TMachine>): TState;
  /** REST words → the event they send and the state they lead to (asking for the state it is in is "No change"). */
  requests?: Record<string, { event: EventFromLogic<TMachine>; target?: TState }>;
  /** True once an actor has settled after a command (default: at once). */
  settled?(state: TState): boolean;
  /** The longest wait for a settled state (default 5000 ms). */
  timeoutMs?: number;
  /** The REST routes (`PATCH /api/v1/server/interface/{endpoint}`) whose requests command this kind. */
  routes?: readonly string[];
}

export interface ActorKindHandle<TMachine extends AnyStateMachine, TState extends string = string> {
  readonly spec: ActorKindSpec<TMachine, TState>;
  readonly kind: string;
  readonly machine: TMachine;
  systemId(name: string): string;
  label(name: string): string;
  /** Starts (or replaces) the actor under the kind's supervisor. */
  spawn(rt: Runtime, name: string, child: { logic: AnyActorLogic; input: unknown }): void;
  lookup(rt: Runtime, name: string): ActorRefFrom<TMachine> | undefined;
  /** The API state of the live actor, or `absent` when there is none. */
  state(rt: Runtime, name: string, absent: TState): TState;
  /** Waits (bounded, no polling) until the actor has settled. */
  settle(rt: Runtime, name: string, timeoutMs?: number): Promise<void>;
  /** A REST word through the command helper (400/404/409/503, 200 "No change"). */
  command(rt: Runtime, name: string, requested: string): Promise<{ changed: boolean; state: TState }>;
  /** The words the kind takes (for messages: "expected started, stopped, paused or resumed"). */
  words(): string[];
  /** A REST word trimmed and lower-cased; 400 when the kind does not take it. */
  parse(requested: string): string;
  /** The command target of one actor (for callers that hold the ref themselves). */
  target(ref: ActorRefFrom<TMachine> | undefined, name: string): CommandTarget<ActorRefFrom<TMachine>>;
  /** An internal command through the helper, sent now without waiting; a state that cannot take it rejects with 409. */
  tell(report: CommandReporter, ref: ActorRefFrom<TMachine> | undefined, name: string, event: EventFromLogic<TMachine>): Promise<CommandResult<ActorRefFrom<TMachine>>>;
}

type AnyKind = ActorKindHandle<AnyStateMachine, string>;

const KINDS = new Map<string, AnyKind>();

/** Every kind declared so far (the composition root imports them all), by kind name. */
export function actorKinds(): ReadonlyMap<string, AnyKind> {
  return KINDS;
}

function list(words: string[]): string {
  return words.length <= 1 ? words.join('') : `${words.slice(0, -1).join(', ')} or ${words[words.length - 1]}`;
}

export function defineActorKind<TMachine extends AnyStateMachine, TState extends string>(spec: ActorKindSpec<TMachine, TState>): ActorKindHandle<TMachine, TState> {
  type Ref = ActorRefFrom<TMachine>;
  type Snap = SnapshotFrom<TMachine>;
  const requests = spec.requests ?? {};
  const wordOf = new Map<string, string>(Object.entries(requests).map(([w, r]) => [(r.event as { type: string }).type, w]));
  const settledSnap = (snap: Snap) => (spec.settled ? spec.settled(spec.stateName(snap)) : true);
  const label = (name: string) => (name === '' ? (spec.singletonLabel ?? spec.noun) : `${spec.noun} "${name}"`);

  const handle: ActorKindHandle<TMachine, TState> = {
    spec,
    kind: spec.kind,
    machine: spec.machine,
    systemId: (name) => systemIdOf(spec.kind, name),
    label,
    spawn(rt, name, child) {
      if (!spec.supervisor) throw new Error(`actor kind "${spec.kind}" has no supervisor to spawn under`);
      const systemId = systemIdOf(spec.kind, name);
      const c: ChildSpec = { id: systemId, logic: child.logic, input: child.input };
      // a singleton's id is its bare kind; the supervisor registers it under that systemId
      if (name === '') c.systemId = systemId;
      rt.startChild(spec.supervisor, c);
    },
    lookup(rt, name) {
      return rt.actorById(systemIdOf(spec.kind, name)) as Ref | undefined;
    },
    state(rt, name, absent) {
      const ref = handle.lookup(rt, name) as AnyActorRef | undefined;
      return ref ? spec.stateName(ref.getSnapshot() as Snap) : absent;
    },
    async settle(rt, name, timeoutMs = spec.timeoutMs ?? 5000) {
      await settle(handle.lookup(rt, name), settledSnap, timeoutMs);
    },
    words: () => Object.keys(requests),
    parse(requested) {
      const word = requested.trim().toLowerCase();
      if (!Object.hasOwn(requests, word)) throw new ValidationError(`Unknown action "${requested}"; expected ${list(Object.keys(requests))}`);
      return word;
    },
    target(ref, name) {
      return {
        ref,
        label: label(name),
        systemId: systemIdOf(spec.kind, name),
        stateName: (snap) => spec.stateName(snap as Snap),
        accepts: (snap) => {
          const out = ref ? acceptedEvents(ref).map((e) => wordOf.get(e)).filter((w): w is string => w !== undefined) : [];
          // asking for the state it is in is "No change": name those words too
          const st = spec.stateName(snap as Snap);
          for (const [w, r] of Object.entries(requests)) if (r.target === st && !out.includes(w)) out.push(w);
          return out;
        },
      };
    },
    async command(rt, name, requested) {
      const word = handle.parse(requested);
      const req = requests[word]!;
      if (rt.state !== 'running' && rt.state !== 'degraded') throw new ServiceUnavailableError(`The server is ${rt.state}; ask again when it is running`);
      const ref = handle.lookup(rt, name);
      const result = await command((r) => rt.emit('actor.command', r), handle.target(ref, name), {
        event: req.event as { type: string },
        what: word,
        already: (snap) => req.target !== undefined && spec.stateName(snap as Snap) === req.target,
        settled: (snap) => settledSnap(snap as Snap),
        ...(spec.timeoutMs !== undefined ? { timeoutMs: spec.timeoutMs } : {}),
      });
      const now = handle.lookup(rt, name) as AnyActorRef | undefined;
      return { changed: result.changed, state: spec.stateName((now?.getSnapshot() ?? result.snapshot) as Snap) };
    },
    tell(report, ref, name, event) {
      return command(report, handle.target(ref, name), { event: event as { type: string }, already: () => false, settled: () => true, noWait: true });
    },
  };
  if (KINDS.has(spec.kind)) throw new Error(`actor kind "${spec.kind}" is declared twice`);
  KINDS.set(spec.kind, handle as unknown as AnyKind);
  return handle;
}

/** The root (`server`): PATCH /api/v1/server restarts or shuts it down through the command helper. */
export const serverKind = defineActorKind({
  kind: 'server',
  machine: serverMachine,
  noun: 'Server',
  singletonLabel: 'The server',
  stateName: (snap) => String(snap.value),
  routes: ['PATCH /api/v1/server'],
});

/** Supervisors (`supervisor:<name>`): started by the root with every boot; nothing commands them over REST. */
export const supervisorKind = defineActorKind({
  kind: 'supervisor',
  machine: supervisorMachine,
  noun: 'Supervisor',
  stateName: (snap) => String(snap.value),
});
