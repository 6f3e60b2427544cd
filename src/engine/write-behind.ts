/**
 * Write-behind: every store write the message path makes, handed to the group commit (src/engine/group-commit.ts),
 * and the write-behind window of durable subscriptions that set `writeBehindMs`.
 *
 * Owns the message keys of the store (queue messages `q!`, retained `r!`, a paused topic's hold `h!`, copies held for
 * durable subscriptions `d!`), the write-behind entries and their timer. Each write returns an Outcome bit
 * (engine-core.ts): STORED when it joined the batch being gathered now, DEFERRED when it made a write-behind entry;
 * `publish` turns those into its promise with `batch()` and `settledOf(msg)`. Nothing here decides whether a message
 * is delivered: the callers (fan-out, queue dispatch, retained, flow control) do.
 */
import { DEFERRED, NONE, RESOLVED, STORED, noop, type EngineCore } from './engine-core.js';
import { encodeHeld, padId, pausedHeldKey, queueKey, retainedKey } from './engine-store.js';
import type { Message } from './message.js';
import { encodeMessage } from './message.js';
import { isSysTopic } from './recovery.js';
import type { Destination, Subscription, UnwrittenEntry } from './subscription.js';

/*
 * `$SYS/...` topics (isSysTopic, recovery.ts) carry server statistics that the server regenerates at boot
 * (src/messaging/sys-topics.ts), so their retained messages live in memory only: writing them to the store would
 * only add a write every interval and bring back stale figures after a restart.
 */

export class WriteBehind {
  /**
   * Write-behind entries in the order they were made, which is due order while every subscription uses the same
   * window (the links all use `outboxWriteBehind`); settled ones are skipped when reached; `unwrittenAt` is the head.
   */
  private unwrittenQueue: UnwrittenEntry[] = [];
  private unwrittenAt = 0;
  private unwrittenTimer: NodeJS.Timeout | undefined = undefined;
  // one-entry cache so a message held for many durable subscriptions is encoded once
  private heldMsg: Message | undefined = undefined;
  private heldDest: Destination | undefined = undefined;
  private heldValue: Buffer | undefined = undefined;

  constructor(private readonly core: EngineCore) {}

  /**
   * The promise of the group-commit batch being gathered now: the one every STORED write of the current synchronous
   * step joined (a batch is only cut on a microtask, so a step's writes share it).
   */
  batch(): Promise<void> {
    return this.core.commit?.gathering ?? RESOLVED;
  }

  /**
   * The settlement of the newest write-behind copy made for `msg` (a publish that returned DEFERRED made at least
   * one). Found by message id, since a copy may be the retain-cleared or subscription-id view of the message; from
   * the end, since a sink publishing again inside the fan-out can make entries for other messages after it.
   */
  settledOf(msg: Message): Promise<void> {
    const q = this.unwrittenQueue;
    const id = msg.id;
    for (let i = q.length - 1; i >= this.unwrittenAt; i--) if (q[i]!.msg.id === id) return q[i]!.settled;
    return RESOLVED;
  }

  // -- queues, retained messages, a paused topic's hold

  persistQueued(dest: Destination, msg: Message): number {
    const commit = this.core.commit;
    if (commit === undefined || !dest.persistent) return NONE;
    commit.put(queueKey(dest.name, msg), encodeMessage(msg), dest.timings);
    return STORED;
  }

  /** A queue message is gone (consumed, expired, purged, its queue deleted). */
  unpersistQueued(dest: Destination, msg: Message): number {
    const commit = this.core.commit;
    if (commit === undefined || !dest.persistent) return NONE;
    commit.del(queueKey(dest.name, msg), dest.timings);
    return STORED;
  }

  persistRetained(dest: Destination, msg: Message): number {
    const commit = this.core.commit;
    if (commit === undefined || !dest.persistent || isSysTopic(dest.name)) return NONE;
    commit.put(retainedKey(dest.name), encodeMessage(msg), dest.timings);
    return STORED;
  }

  unpersistRetained(dest: Destination): number {
    const commit = this.core.commit;
    if (commit === undefined || !dest.persistent || isSysTopic(dest.name)) return NONE;
    commit.del(retainedKey(dest.name), dest.timings);
    return STORED;
  }

  /** A paused topic holds a QoS >= 1 message: written (`h!`) so the hold survives a restart. */
  persistPausedHeld(dest: Destination, msg: Message): number {
    const commit = this.core.commit;
    if (msg.qos === 0 || commit === undefined || !dest.persistent) return NONE;
    commit.put(pausedHeldKey(dest.name, msg), encodeMessage(msg), dest.timings);
    return STORED;
  }

  unpersistPausedHeld(dest: Destination, msg: Message): number {
    const commit = this.core.commit;
    if (msg.qos === 0 || commit === undefined || !dest.persistent) return NONE;
    commit.del(pausedHeldKey(dest.name, msg), dest.timings);
    return STORED;
  }

  // -- copies held for durable subscriptions

  /**
   * A durable subscription took a copy: written now, or through the write-behind window when the subscription has
   * one and `attached` (its sink is attached, so the copy is about to go; a hibernating one writes it now).
   */
  persistCopy(sub: Subscription, dest: Destination, msg: Message, attached: boolean): number {
    if (attached && sub.writeBehindMs !== 0 && this.core.commit !== undefined && dest.persistent) return this.defer(sub, dest, msg);
    return this.persistHeld(sub, dest, msg);
  }

  private persistHeld(sub: Subscription, dest: Destination, msg: Message): number {
    const commit = this.core.commit;
    if (commit === undefined || !dest.persistent) return NONE;
    if (this.heldMsg !== msg || this.heldDest !== dest) {
      this.heldMsg = msg;
      this.heldDest = dest;
      this.heldValue = encodeHeld(dest.name, msg);
    }
    commit.put(sub.storePrefix + padId(msg.id), this.heldValue!, dest.timings);
    return STORED;
  }

  /** A durable subscription is done with a copy: its record is deleted, or its write-behind entry settled unwritten. */
  unpersistHeld(sub: Subscription, dest: Destination, msg: Message): void {
    const commit = this.core.commit;
    if (commit === undefined || !dest.persistent || !sub.durable) return;
    const unwritten = sub.unwritten;
    if (unwritten !== undefined) {
      const e = unwritten.get(msg.id);
      if (e !== undefined) {
        // done with before it was written: nothing to write or delete
        unwritten.delete(msg.id);
        e.done = true;
        e.resolve();
        return;
      }
    }
    commit.del(sub.storePrefix + padId(msg.id), dest.timings);
  }

  /**
   * Write-behind: the copy just handed to (or queued for) `sub`'s attached sink is written only if it is still
   * unsettled `writeBehindMs` from now; the publish resolves when it is settled (acknowledged, dropped or written).
   * Entries are bounded by the subscription's depth (`maxDepth`) and by what arrives within `writeBehindMs`.
   */
  private defer(sub: Subscription, dest: Destination, msg: Message): number {
    let resolve!: () => void;
    let reject!: (err: unknown) => void;
    const settled = new Promise<void>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    settled.catch(noop); // like the batch promises: rejects only for the callers that await it
    const e: UnwrittenEntry = { sub, dest, msg, due: Date.now() + sub.writeBehindMs, done: false, settled, resolve, reject };
    (sub.unwritten ??= new Map()).set(msg.id, e);
    this.unwrittenQueue.push(e);
    if (this.unwrittenTimer === undefined) this.unwrittenTimer = setTimeout(this.writeDue, sub.writeBehindMs);
    return DEFERRED;
  }

  /** Writes the write-behind entries that are due (all of them when `all`), then waits for the next one. */
  private readonly writeDue = (all = false): void => {
    this.unwrittenTimer = undefined;
    const q = this.unwrittenQueue;
    const now = Date.now();
    let wrote = NONE;
    const batch: UnwrittenEntry[] = [];
    while (this.unwrittenAt < q.length) {
      const e = q[this.unwrittenAt]!;
      if (!e.done && !all && e.due > now) break;
      this.unwrittenAt++;
      if (e.done) continue;
      e.done = true;
      e.sub.unwritten?.delete(e.msg.id);
      wrote |= this.persistHeld(e.sub, e.dest, e.msg);
      batch.push(e);
    }
    if (this.unwrittenAt === q.length) {
      this.unwrittenQueue = [];
      this.unwrittenAt = 0;
    } else if (this.unwrittenAt > 1024 && this.unwrittenAt > q.length / 2) {
      this.unwrittenQueue = q.slice(this.unwrittenAt);
      this.unwrittenAt = 0;
    }
    if (batch.length > 0) {
      // every put above is in the batch being gathered now: its promise covers all
      const done = wrote !== NONE ? this.batch() : RESOLVED;
      done.then(
        () => batch.forEach((e) => e.resolve()),
        (err: unknown) => batch.forEach((e) => e.reject(err)),
      );
    }
    const next = this.unwrittenQueue[this.unwrittenAt];
    if (next !== undefined && !all) this.unwrittenTimer = setTimeout(this.writeDue, Math.max(1, next.due - Date.now()));
  };

  /** Shutdown: the write-behind copies still unsettled go to the store now. */
  close(): void {
    if (this.unwrittenTimer !== undefined) clearTimeout(this.unwrittenTimer);
    this.writeDue(true);
  }
}
