import { waitFor, type AnyActorRef, type EventObject, type SnapshotFrom } from 'xstate';
import { ConflictError, NotFoundError, ServiceUnavailableError } from '../errors.js';
import type { CommandRecord } from './events.js';

/**
 * The one way REST commands an actor (every route that changes a lifecycle goes through here; the route-table test
 * in test/runtime/command.test.ts checks it):
 *
 * 1. the request asks for the state the actor is already in → `{ changed: false }` (the route answers 200
 *    `{"status":"No change"}`, as MAPS does);
 * 2. the machine cannot take the event in its current state (`snapshot.can(event)`) → 409 naming the state and the
 *    requests it accepts now;
 * 3. otherwise the event is sent and XState's `waitFor` waits for a settled state, at most `timeoutMs`; still not
 *    settled → 503 saying what the actor is still doing. No polling.
 *
 * Every outcome is announced on the runtime bus as `actor.command`.
 */
export interface CommandTarget<TActor extends AnyActorRef> {
  /** The actor, or undefined when it does not exist (→ 404 with `missing`). */
  ref: TActor | undefined;
  /** How a person calls it in an error: `Endpoint "MQTT Interface"`. */
  label: string;
  /** Its systemId, for the `actor.command` record. */
  systemId: string;
  /** The state as the API names it (MAPS names for endpoints: Started, Paused, ...). */
  stateName(snapshot: SnapshotFrom<TActor>): string;
  /** The requests (in the API's words) the current state accepts, for the 409 message. */
  accepts(snapshot: SnapshotFrom<TActor>): string[];
}

export interface CommandRequest<TActor extends AnyActorRef> {
  event: EventObject;
  /** The request in the API's words for error messages ("paused"); default: the event type. */
  what?: string;
  /** True when the actor already is where the request wants it. */
  already(snapshot: SnapshotFrom<TActor>): boolean;
  /** True once the actor has settled after the event (not starting, not stopping, ...). */
  settled(snapshot: SnapshotFrom<TActor>): boolean;
  /** The longest wait for a settled state (default 5000 ms). */
  timeoutMs?: number;
  /** Send but do not wait (the server's own restart, which answers before it tears the tree down). */
  noWait?: boolean;
  /** Delivers the event instead of `ref.send(event)` (the server route sends once its answer has gone out). */
  send?: () => void;
}

export interface CommandResult<TActor extends AnyActorRef> {
  changed: boolean;
  snapshot: SnapshotFrom<TActor>;
}

export type CommandReporter = (record: CommandRecord) => void;

/** Re-exported from src/errors.ts, where every error class lives. */
export { ServiceUnavailableError };

export async function command<TActor extends AnyActorRef>(
  report: CommandReporter,
  target: CommandTarget<TActor>,
  req: CommandRequest<TActor>,
): Promise<CommandResult<TActor>> {
  const { ref } = target;
  if (!ref) {
    report({ systemId: target.systemId, event: req.event.type, outcome: 'missing', state: '' });
    throw new NotFoundError(`${target.label} has no running actor`);
  }
  const before = ref.getSnapshot() as SnapshotFrom<TActor>;
  const state = target.stateName(before);
  if (req.already(before)) {
    report({ systemId: target.systemId, event: req.event.type, outcome: 'no-change', state });
    return { changed: false, snapshot: before };
  }
  const can = (before as { can?(e: EventObject): boolean }).can;
  if ((before as { status?: string }).status !== 'active' || !can?.call(before, req.event)) {
    report({ systemId: target.systemId, event: req.event.type, outcome: 'conflict', state });
    const accepts = target.accepts(before);
    const what = req.what !== undefined ? `be ${req.what}` : `take "${req.event.type}"`;
    throw new ConflictError(`${target.label} is ${state}; it cannot ${what} now (it accepts: ${accepts.length ? accepts.join(', ') : 'nothing in this state'})`);
  }
  if (req.send) req.send();
  else ref.send(req.event);
  report({ systemId: target.systemId, event: req.event.type, outcome: 'sent', state });
  if (req.noWait) return { changed: true, snapshot: ref.getSnapshot() as SnapshotFrom<TActor> };
  const timeout = req.timeoutMs ?? 5000;
  try {
    const after = (await waitFor(ref, (s) => req.settled(s as SnapshotFrom<TActor>), { timeout })) as SnapshotFrom<TActor>;
    return { changed: true, snapshot: after };
  } catch {
    const now = ref.getSnapshot() as SnapshotFrom<TActor>;
    report({ systemId: target.systemId, event: req.event.type, outcome: 'timeout', state: target.stateName(now) });
    throw new ServiceUnavailableError(`${target.label} took "${req.event.type}" but is still ${target.stateName(now)} after ${timeout} ms; ask again later`);
  }
}

/** Waits (bounded, without polling) until an actor that was just spawned or replaced has settled. */
export async function settle<TActor extends AnyActorRef>(ref: TActor | undefined, settled: (s: SnapshotFrom<TActor>) => boolean, timeoutMs = 5000): Promise<void> {
  if (!ref) return;
  try {
    await waitFor(ref, (s) => settled(s as SnapshotFrom<TActor>), { timeout: timeoutMs });
  } catch {
    /* the caller reports the state it finds */
  }
}
