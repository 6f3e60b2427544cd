/**
 * Open SSE streams by user, so that deleting a user also ends the streams it has open (docs/security.md, "Deleting a
 * user"). Each stream listens on the runtime's event bus for USER_DELETED of its own user: the bus is the registry
 * (no per-runtime map), and the listener goes when the stream closes.
 */
import type { Runtime } from '../runtime/runtime.js';
import { USER_DELETED, type UserDeletion } from '../security/types.js';

/** Registers a stream of the user `uniqueId` (none: nothing to do); returns the call that unregisters it. */
export function trackUserStream(rt: Runtime, uniqueId: string | undefined, close: () => void): () => void {
  if (uniqueId === undefined) return () => {};
  const onDeleted = (d: UserDeletion): void => {
    if (d.uniqueId !== uniqueId) return;
    rt.off(USER_DELETED, onDeleted);
    d.ended.sseStreams = (d.ended.sseStreams ?? 0) + 1;
    close();
  };
  rt.on(USER_DELETED, onDeleted);
  return () => {
    rt.off(USER_DELETED, onDeleted);
  };
}
