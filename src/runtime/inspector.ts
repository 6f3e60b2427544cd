import type { AnyActorRef, InspectionEvent, Observer } from 'xstate';
import type { ActorTransition } from './events.js';
import { parseSystemId } from './registry.js';
import type { VirtualActorKind } from './virtual-actors.js';

/**
 * Actor inspection (the design card: "inspect actor state via REST"). The runtime creates the root actor with
 * `inspect: inspector.observer`, so every snapshot of every actor in the system passes here. For each registered
 * actor (one with a `systemId`) the inspector keeps its current state string and, once it has changed state at
 * least once, its last `HISTORY` transitions (time, from, to, event type). The record lives in a WeakMap keyed by
 * the actor object, so it goes with the actor: a removed destination leaves nothing behind, and an actor that
 * never changes state after it started costs one small object. Every transition is also handed to `onTransition`
 * (the runtime's `actor.transition` event, which the SSE stream of `/api/v1/server/actors/sse` reads).
 */
export const HISTORY = 50;

interface ActorRecord {
  state: string;
  since: number;
  history?: ActorTransition[];
}

export function stateString(value: unknown): string {
  if (typeof value === 'string') return value;
  if (value && typeof value === 'object') {
    return Object.entries(value as Record<string, unknown>)
      .map(([k, v]) => (v && (typeof v === 'string' || typeof v === 'object') ? `${k}.${stateString(v)}` : k))
      .join(',');
  }
  return String(value ?? '');
}

interface SnapshotLike {
  value?: unknown;
  status: string;
  context?: Record<string, unknown>;
  children?: Record<string, AnyActorRef | undefined>;
  tags?: Set<string>;
  can?(event: { type: string }): boolean;
  _nodes?: Array<{ ownEvents?: string[] }>;
}

export function snapshotOf(ref: AnyActorRef): SnapshotLike {
  return ref.getSnapshot() as SnapshotLike;
}

/** The state string of an actor: its machine state, or its status for non-machine actors. */
export function actorState(ref: AnyActorRef): string {
  const s = snapshotOf(ref);
  if (s.status !== 'active') return s.status === 'done' && s.value !== undefined ? stateString(s.value) : s.status;
  return s.value !== undefined ? stateString(s.value) : s.status;
}

export class ActorInspector {
  private readonly records = new WeakMap<AnyActorRef, ActorRecord>();

  constructor(
    private readonly now: () => number,
    private readonly onTransition: (t: ActorTransition) => void,
  ) {}

  readonly observer: Observer<InspectionEvent> = {
    next: (ev) => {
      if (ev.type !== '@xstate.snapshot') return;
      const ref = ev.actorRef as AnyActorRef & { systemId?: string };
      const systemId = ref.systemId;
      if (systemId === undefined) return;
      const snap = ev.snapshot as SnapshotLike;
      const to = snap.value !== undefined ? stateString(snap.value) : snap.status;
      const rec = this.records.get(ref);
      const at = this.now();
      const eventType = (ev.event as { type?: string } | undefined)?.type ?? 'unknown';
      if (rec === undefined) {
        this.records.set(ref, { state: to, since: at });
        this.onTransition({ systemId, kind: parseSystemId(systemId).kind, from: '', to, event: eventType, at });
        return;
      }
      if (rec.state === to) return;
      const t: ActorTransition = { systemId, kind: parseSystemId(systemId).kind, from: rec.state, to, event: eventType, at };
      if (rec.history === undefined) rec.history = [{ systemId, kind: t.kind, from: '', to: rec.state, event: 'xstate.init', at: rec.since }];
      rec.history.push(t);
      if (rec.history.length > HISTORY) rec.history.splice(0, rec.history.length - HISTORY);
      rec.state = to;
      rec.since = at;
      this.onTransition(t);
    },
  };

  /** The last transitions of an actor, oldest first (at most HISTORY). */
  history(ref: AnyActorRef): ActorTransition[] {
    const rec = this.records.get(ref);
    if (!rec) return [];
    if (rec.history) return rec.history.map((t) => ({ ...t }));
    const systemId = (ref as { systemId?: string }).systemId ?? ref.id;
    return [{ systemId, kind: parseSystemId(systemId).kind, from: '', to: rec.state, event: 'xstate.init', at: rec.since }];
  }
}

// ----------------------------------------------------------------------------------------------------------------
// Read views of the registered actors (pure functions of live state)

export interface ActorRow {
  systemId: string;
  kind: string;
  name: string;
  state: string;
  status: string;
  parent: string | null;
  /** Registered children (through shard supervisors), at most CHILDREN_SHOWN; `childCount` has them all. */
  children: string[];
  childCount: number;
}

export const CHILDREN_SHOWN = 50;

function systemIdOfRef(ref: AnyActorRef): string | undefined {
  return (ref as { systemId?: string }).systemId;
}

/** The registered children of an actor, looking through unregistered ones (shard supervisors). */
export function* registeredChildren(ref: AnyActorRef): Generator<AnyActorRef> {
  for (const child of Object.values(snapshotOf(ref).children ?? {})) {
    if (!child) continue;
    if (systemIdOfRef(child) !== undefined) yield child;
    else yield* registeredChildren(child);
  }
}

/** Where the views find the virtual kinds (the runtime): by the name of the supervisor their instances run under. */
export interface VirtualDirectory {
  virtualKindOf(supervisor: string): VirtualActorKind | undefined;
}

/** The virtual kind whose supervisor `ref` is, if any. */
export function virtualKindOfRef(ref: AnyActorRef, dir: VirtualDirectory | undefined): VirtualActorKind | undefined {
  const id = systemIdOfRef(ref);
  return dir !== undefined && id !== undefined && id.startsWith('supervisor:') ? dir.virtualKindOf(id.slice('supervisor:'.length)) : undefined;
}

/** Registered children of `ref` that are not instances of its virtual kind (those are listed from the engine). */
function* ownChildren(ref: AnyActorRef, virtual: VirtualActorKind | undefined): Generator<AnyActorRef> {
  for (const c of registeredChildren(ref)) if (virtual === undefined || parseSystemId(systemIdOfRef(c)!).kind !== virtual.kind) yield c;
}

function rowOf(ref: AnyActorRef, parent: string | null, dir?: VirtualDirectory): ActorRow {
  const systemId = systemIdOfRef(ref)!;
  const { kind, name } = parseSystemId(systemId);
  const virtual = virtualKindOfRef(ref, dir);
  const children: string[] = [];
  let childCount = 0;
  if (virtual !== undefined) {
    for (const n of virtual.names()) {
      if (children.length >= CHILDREN_SHOWN) break;
      children.push(`${virtual.kind}:${n}`);
    }
    childCount = virtual.count();
  }
  for (const c of ownChildren(ref, virtual)) {
    if (children.length < CHILDREN_SHOWN) children.push(systemIdOfRef(c)!);
    childCount++;
  }
  return { systemId, kind, name, state: actorState(ref), status: snapshotOf(ref).status, parent, children, childCount };
}

/** The state string of a virtual actor: its live instance's, or the one its engine record gives. */
export function virtualState(v: VirtualActorKind, name: string): string {
  const ref = v.live(name);
  if (ref !== undefined) return actorState(ref);
  const view = v.view(name);
  return view === undefined ? '' : stateString(view.value);
}

/** The row of a virtual actor: its live instance's, or one built from its engine record (status `passive`). */
function virtualRow(v: VirtualActorKind, name: string, parent: string, dir?: VirtualDirectory): ActorRow {
  const ref = v.live(name);
  if (ref !== undefined) return rowOf(ref, parent, dir);
  const view = v.view(name);
  return { systemId: `${v.kind}:${name}`, kind: v.kind, name, state: view === undefined ? '' : stateString(view.value), status: 'passive', parent, children: [], childCount: 0 };
}

/**
 * Every registered actor under (and including) `root`, depth first, with its registered parent. Instances of a
 * virtual kind are not walked: the node of their supervisor carries `virtual`, and the views list them from it.
 */
export function* walkActors(root: AnyActorRef, dir?: VirtualDirectory): Generator<{ ref: AnyActorRef; parent: string | null; virtual?: VirtualActorKind }> {
  const stack: Array<{ ref: AnyActorRef; parent: string | null }> = [{ ref: root, parent: null }];
  while (stack.length) {
    const item = stack.pop()!;
    const virtual = virtualKindOfRef(item.ref, dir);
    yield virtual === undefined ? item : { ...item, virtual };
    const kids = [...ownChildren(item.ref, virtual)];
    const me = systemIdOfRef(item.ref) ?? null;
    for (let i = kids.length - 1; i >= 0; i--) stack.push({ ref: kids[i]!, parent: me });
  }
}

export interface ActorQuery {
  kind?: string;
  state?: string;
  prefix?: string;
  limit: number;
  offset: number;
}

function stateMatches(st: string, want: string): boolean {
  return st === want || st.split(',').includes(want) || st.startsWith(`${want}.`);
}

/**
 * A page of registered actors matching the filters (state: exact state string, or a prefix ending in '.'). Virtual
 * actors are listed from the engine's tables after their supervisor: without a state or narrowing prefix filter
 * they are counted (O(1)) and only the page is built; with one, each is checked from its engine record, none is
 * activated.
 */
export function actorPage(root: AnyActorRef, q: ActorQuery, dir?: VirtualDirectory): { total: number; offset: number; limit: number; items: ActorRow[] } {
  const items: ActorRow[] = [];
  let total = 0;
  const consider = (systemId: string, kind: string, state: () => string, row: () => ActorRow) => {
    if (q.prefix !== undefined && !systemId.startsWith(q.prefix)) return;
    if (q.kind !== undefined && kind !== q.kind) return;
    if (q.state !== undefined && !stateMatches(state(), q.state)) return;
    if (total >= q.offset && items.length < q.limit) items.push(row());
    total++;
  };
  for (const { ref, parent, virtual } of walkActors(root, dir)) {
    const systemId = systemIdOfRef(ref)!;
    consider(systemId, parseSystemId(systemId).kind, () => actorState(ref), () => rowOf(ref, parent, dir));
    if (virtual === undefined) continue;
    if (q.kind !== undefined && q.kind !== virtual.kind) continue;
    const prefixAll = q.prefix === undefined || `${virtual.kind}:`.startsWith(q.prefix);
    if (!prefixAll && !q.prefix!.startsWith(`${virtual.kind}:`)) continue; // no actor of this kind can match
    if (q.state === undefined && prefixAll) {
      const n = virtual.count();
      const from = Math.max(0, q.offset - total);
      if (from < n && items.length < q.limit) {
        for (const name of virtual.slice(from, q.limit - items.length)) items.push(virtualRow(virtual, name, systemId, dir));
      }
      total += n;
      continue;
    }
    for (const name of virtual.names()) {
      consider(`${virtual.kind}:${name}`, virtual.kind, () => virtualState(virtual, name), () => virtualRow(virtual, name, systemId, dir));
    }
  }
  return { total, offset: q.offset, limit: q.limit, items };
}

const SECRET_KEY = /pass|secret|token|credential|salt|hash|cert|private|key$/i;

/** A safe view of a context: small scalars and short scalar arrays, no functions, nothing whose name looks secret. */
export function safeContext(ctx: Record<string, unknown> | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(ctx ?? {})) {
    if (SECRET_KEY.test(k)) continue;
    if (v === null || ['string', 'number', 'boolean'].includes(typeof v)) {
      out[k] = typeof v === 'string' && v.length > 200 ? v.slice(0, 200) + '…' : v;
    } else if (Array.isArray(v) && v.length <= 20 && v.every((x) => ['string', 'number', 'boolean'].includes(typeof x))) out[k] = v;
    else if (v instanceof Map && k !== 'specs') out[k] = `${v.size} entries`;
  }
  return out;
}

/** The events the actor's machine accepts in its current state (from its state nodes; `can()` where it answers). */
export function acceptedEvents(ref: AnyActorRef): string[] {
  const s = snapshotOf(ref);
  if (s.status !== 'active' || !s._nodes) return [];
  const names = new Set<string>();
  for (const node of s._nodes) for (const e of node.ownEvents ?? []) if (!e.startsWith('xstate.') && !e.includes('*')) names.add(e);
  return [...names].filter((type) => {
    try {
      return s.can?.({ type }) ?? true;
    } catch {
      return true; // a guard that needs the event's fields: the state takes the event
    }
  });
}

export interface ActorDetail extends ActorRow {
  machine: string;
  tags: string[];
  accepts: string[];
  context: Record<string, unknown>;
  transitions: ActorTransition[];
}

export function actorDetail(ref: AnyActorRef, parent: string | null, inspector: ActorInspector, dir?: VirtualDirectory): ActorDetail {
  const s = snapshotOf(ref);
  const logic = (ref as unknown as { logic?: { id?: string; config?: { id?: string } } }).logic;
  return {
    ...rowOf(ref, parent, dir),
    machine: logic?.id ?? logic?.config?.id ?? 'actor',
    tags: s.tags ? [...s.tags] : [],
    accepts: acceptedEvents(ref),
    context: safeContext(s.context),
    transitions: inspector.history(ref),
  };
}

/** The registered parent of a registered actor (looking through shards), or null for the root. */
export function parentOf(ref: AnyActorRef): string | null {
  let p = (ref as unknown as { _parent?: AnyActorRef })._parent;
  while (p && systemIdOfRef(p) === undefined) p = (p as unknown as { _parent?: AnyActorRef })._parent;
  return p ? systemIdOfRef(p)! : null;
}
