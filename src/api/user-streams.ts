/**
 * Open SSE streams by user, so that deleting a user also ends the streams it has open (docs/security.md, "Deleting a
 * user"): the other things a user had open end through their own USER_DELETED listeners.
 */
import type { Runtime } from '../runtime/runtime.js';
import { USER_DELETED, type UserDeletion } from '../security/types.js';

const registries = new WeakMap<Runtime, Map<string, Set<() => void>>>();

function registryOf(rt: Runtime): Map<string, Set<() => void>> {
  let reg = registries.get(rt);
  if (reg === undefined) {
    const streams = (reg = new Map<string, Set<() => void>>());
    registries.set(rt, streams);
    rt.on(USER_DELETED, (d: UserDeletion) => {
      const set = streams.get(d.uniqueId);
      if (set === undefined) return;
      streams.delete(d.uniqueId);
      d.ended.sseStreams = (d.ended.sseStreams ?? 0) + set.size;
      for (const close of set) close();
    });
  }
  return reg;
}

/** Registers a stream of the user `uniqueId` (none: nothing to do); returns the call that unregisters it. */
export function trackUserStream(rt: Runtime, uniqueId: string | undefined, close: () => void): () => void {
  if (uniqueId === undefined) return () => {};
  const reg = registryOf(rt);
  let set = reg.get(uniqueId);
  if (set === undefined) reg.set(uniqueId, (set = new Set()));
  set.add(close);
  return () => {
    const s = reg.get(uniqueId);
    if (s === undefined) return;
    s.delete(close);
    if (s.size === 0) reg.delete(uniqueId);
  };
}
