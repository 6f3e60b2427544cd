/**
 * Recovery: what the engine reads back from its store at boot (`Engine.recover()`), once, before any publish.
 *
 * Three key spaces are read in order (engine-store.ts names them):
 * - `q!<destination>!<priority><id>` queue messages → back into their queue (a queue destination is created);
 * - `r!<topic>` retained messages → the topic's retained slot (`$SYS/` ones, written by older versions, are
 *   deleted: those figures are regenerated at boot);
 * - `pd!<destination>` paused destinations → paused again (created with their type when missing), and
 *   `h!<destination>!<id>` QoS >= 1 messages a paused topic held → back into its hold, in publish order;
 * - `ps!<subscription key>` paused durable subscriptions → paused again when that subscription is made again;
 * - `d!<subscription key>!<id>` messages held for durable subscriptions → kept aside until that subscription
 *   is made again (the protocol layer restores its sessions after recovery).
 * Expired messages are deleted instead of loaded; undecodable records are counted as `corrupt` and left alone.
 * The engine then hands queues to their consumers and checks high-water marks (engine.ts, `recover()`).
 */
import type { ServerTotals } from './counters.js';
import { DestinationType, isDestinationType } from './destination.js';
import type { EngineStore } from './engine-store.js';
import {
  DURABLE_PREFIX,
  PAUSED_DESTINATION_PREFIX,
  PAUSED_HELD_PREFIX,
  PAUSED_SUBSCRIPTION_PREFIX,
  QUEUE_PREFIX,
  RETAINED_PREFIX,
  decodeHeld,
  parseDurableKey,
  parsePausedHeldKey,
  parseQueueKey,
} from './engine-store.js';
import type { GroupCommit } from './group-commit.js';
import type { Message } from './message.js';
import { decodeMessage } from './message.js';
import type { Destination } from './subscription.js';

export interface RecoveryResult {
  queued: number;
  retained: number;
  held: number;
  /** Destinations and durable subscriptions that were paused, and messages paused topics held. */
  paused: number;
  pausedHeld: number;
  expired: number;
  corrupt: number;
}

/** What recovery needs from the engine: its destinations, counters and the places recovered messages go. */
export interface RecoveryTarget {
  readonly commit: GroupCommit;
  readonly totals: ServerTotals;
  /** The destination of that name, if any. */
  existing(name: string): Destination | undefined;
  /** The destination of that name, created with `type` when missing. */
  destination(name: string, type: DestinationType): Destination;
  /** Make `msg` the topic's retained message. */
  retain(d: Destination, msg: Message): void;
  /** Keep a durable subscription's message until that subscription is made again. */
  held(storeKey: string, destination: string, msg: Message): void;
  /** That durable subscription was paused: pause it again when it is made again. */
  pausedSubscription(storeKey: string): void;
}

/** `$SYS/...` retained messages live in memory only (see engine.ts). */
export function isSysTopic(name: string): boolean {
  return name.startsWith('$SYS/');
}

/**
 * Read queue, retained and durable-subscription messages from the store into `target`. Returns the counts and
 * the highest message id seen (the id generator continues above it).
 */
export async function loadFromStore(store: EngineStore, now: number, target: RecoveryTarget): Promise<{ result: RecoveryResult; maxId: number }> {
  const result: RecoveryResult = { queued: 0, retained: 0, held: 0, paused: 0, pausedHeld: 0, expired: 0, corrupt: 0 };
  let maxId = 0;
  let last = process.hrtime.bigint();
  const readTime = (d: Destination): void => {
    const t = process.hrtime.bigint();
    d.timings.readNs += Number(t - last);
    d.timings.reads++;
    last = t;
  };
  const expired = (key: string, m: Message, d: Destination | undefined): boolean => {
    if (m.expiresAt === 0 || m.expiresAt > now) return false;
    result.expired++;
    if (d !== undefined) d.counters.expired++;
    target.totals.totalExpiredMessages++;
    target.commit.del(key);
    return true;
  };

  /** A record's message (its id raises maxId); undefined when its key or value does not parse (counted corrupt). */
  const decoded = (keyParsed: boolean, value: Parameters<typeof decodeMessage>[0]): Message | undefined => {
    if (!keyParsed) {
      result.corrupt++;
      return undefined;
    }
    let msg: Message;
    try {
      msg = decodeMessage(value);
    } catch {
      result.corrupt++;
      return undefined;
    }
    if (msg.id > maxId) maxId = msg.id;
    return msg;
  };

  for await (const [key, value] of store.iterate(QUEUE_PREFIX)) {
    const parsed = parseQueueKey(key);
    const msg = decoded(parsed !== null, value);
    if (msg === undefined) continue;
    const d = target.destination(parsed!.destination, DestinationType.Queue);
    if (!d.isQueue || !d.persistent) {
      result.corrupt++;
      continue;
    }
    readTime(d);
    if (expired(key, msg, d)) continue;
    d.queue!.push(msg);
    result.queued++;
  }

  for await (const [key, value] of store.iterate(RETAINED_PREFIX)) {
    const topic = key.slice(RETAINED_PREFIX.length);
    if (isSysTopic(topic)) {
      target.commit.del(key); // written by an older version; $SYS figures are regenerated, never recovered
      continue;
    }
    const msg = decoded(true, value);
    if (msg === undefined) continue;
    const d = target.destination(topic, DestinationType.Topic);
    if (d.isQueue) {
      result.corrupt++;
      continue;
    }
    readTime(d);
    if (expired(key, msg, d)) continue;
    target.retain(d, msg);
    result.retained++;
  }

  for await (const [key, value] of store.iterate(PAUSED_DESTINATION_PREFIX)) {
    const name = key.slice(PAUSED_DESTINATION_PREFIX.length);
    const type = value.toString('utf8');
    if (name === '' || !isDestinationType(type)) {
      result.corrupt++;
      continue;
    }
    const d = target.destination(name, type as DestinationType);
    if (!d.persistent) {
      result.corrupt++;
      continue;
    }
    d.paused = true;
    result.paused++;
  }

  for await (const [key, value] of store.iterate(PAUSED_HELD_PREFIX)) {
    const parsed = parsePausedHeldKey(key);
    const msg = decoded(parsed !== null, value);
    if (msg === undefined) continue;
    const d = target.existing(parsed!.destination);
    if (d === undefined || d.isQueue || !d.paused) {
      // resumed or deleted without this delete reaching the store: the hold ended, the record goes
      target.commit.del(key);
      continue;
    }
    readTime(d);
    if (expired(key, msg, d)) continue;
    d.held.push(msg); // keys sort by message id: publish order
    result.pausedHeld++;
  }

  for await (const [key] of store.iterate(PAUSED_SUBSCRIPTION_PREFIX)) {
    target.pausedSubscription(key.slice(PAUSED_SUBSCRIPTION_PREFIX.length));
    result.paused++;
  }

  for await (const [key, value] of store.iterate(DURABLE_PREFIX)) {
    const parsed = parseDurableKey(key);
    let held: { destination: string; msg: Message };
    try {
      if (parsed === null) throw new Error('bad key');
      held = decodeHeld(value);
    } catch {
      result.corrupt++;
      continue;
    }
    if (held.msg.id > maxId) maxId = held.msg.id;
    if (expired(key, held.msg, target.existing(held.destination))) continue;
    target.held(parsed.storeKey, held.destination, held.msg);
    result.held++;
  }
  return { result, maxId };
}
