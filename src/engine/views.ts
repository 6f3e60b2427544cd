/**
 * Read views of the engine: the DTOs the REST API, $SYS topics and the runtime's views build from engine state.
 * Pure functions over a destination (or the engine's counters); none is on the publish path, and none changes
 * state. The Engine's read methods (`destinations()`, `destinationDto()`, `subscriptionStates()`, `browse()`,
 * `stats()`) are one-line calls into this file.
 */
import type { EngineTotals } from '../runtime/runtime.js';
import type { RateMeter, ServerTotals } from './counters.js';
import type { DestinationType } from './destination.js';
import type { Message } from './message.js';
import type { Destination, Route, Subscription, SubscriptionStateDTO } from './subscription.js';
import type { TopicTrie } from './topic-trie.js';

/** MAPS DestinationDTO. */
export interface DestinationDTO {
  name: string;
  type: DestinationType;
  storedMessages: number;
  delayedMessages: number;
  pendingMessages: number;
  schemaId: string;
  noInterestMessages: number;
  publishedMessages: number;
  retrievedMessages: number;
  expiredMessages: number;
  deliveredMessages: number;
  readTimeAveNs: number;
  writeTimeAveNs: number;
  deleteTimeAveNs: number;
}

/**
 * Server totals (MAPS ServerStatisticsDTO names) and per-second rates: the totals the kernel declares for its views
 * (`EngineTotals`, src/runtime/runtime.ts), and more.
 */
export interface EngineStats extends EngineTotals {
  expiredPerSecond: number;
  destinations: number;
  subscriptions: number;
  storeBatches: number;
  storeOperations: number;
}

/** The totals that have a per-second rate in `EngineStats`. */
export const RATE_KEYS = [
  'totalPublishedMessages',
  'totalSubscribedMessages',
  'totalNoInterestMessages',
  'totalDeliveredMessages',
  'totalRetrievedMessages',
  'totalExpiredMessages',
] as const;
export type RateKey = (typeof RATE_KEYS)[number];

/** A destination's MAPS DestinationDTO. */
export function destinationDto(d: Destination): DestinationDTO {
  const q = d.queue;
  const c = d.counters;
  return {
    name: d.name,
    type: d.type,
    storedMessages: q !== undefined ? q.size + d.outstanding : d.retained !== undefined ? 1 : 0,
    delayedMessages: q !== undefined ? (d.paused ? q.size : 0) : d.held.length,
    pendingMessages: q !== undefined ? (d.paused ? 0 : q.size) : d.pendingCopies,
    schemaId: d.schemaId,
    noInterestMessages: c.noInterest,
    publishedMessages: c.published,
    retrievedMessages: c.retrieved,
    expiredMessages: c.expired,
    deliveredMessages: c.delivered,
    readTimeAveNs: d.timings.readTimeAveNs,
    writeTimeAveNs: d.timings.writeTimeAveNs,
    deleteTimeAveNs: d.timings.deleteTimeAveNs,
  };
}

/** SubscriptionStateDTO of every subscription receiving from the destination (queue consumers or matching filters). */
export function subscriptionStatesOf(d: Destination, trie: TopicTrie<Route>, bytes = false): SubscriptionStateDTO[] {
  const out: SubscriptionStateDTO[] = [];
  const view = (s: Subscription) => (bytes ? s.queueState() : s.state());
  if (d.isQueue) {
    for (const c of d.consumers) out.push(view(c));
    return out;
  }
  for (const r of trie.match(d.levels, [])) {
    if (r.isGroup) for (const m of r.members) out.push(view(m));
    else out.push(view(r));
  }
  return out;
}

/** Messages waiting in a queue, in delivery order (or the retained message of a topic), without consuming them. */
export function browseDestination(d: Destination, limit: number): Message[] {
  const out: Message[] = [];
  if (d.queue !== undefined) {
    for (const m of d.queue) {
      if (out.length >= limit) break;
      out.push(m);
    }
  } else if (d.retained !== undefined && limit > 0) out.push(d.retained);
  return out;
}

/** The engine's totals and rates (rates are re-sampled at most once per RateMeter interval). */
export function engineStats(
  t: ServerTotals,
  rates: RateMeter<RateKey>,
  now: number,
  sizes: { destinations: number; subscriptions: number; storeBatches: number; storeOperations: number },
): EngineStats {
  const r = rates.update(t, now);
  return {
    totalPublishedMessages: t.totalPublishedMessages,
    totalDeliveredMessages: t.totalDeliveredMessages,
    totalSubscribedMessages: t.totalSubscribedMessages,
    totalNoInterestMessages: t.totalNoInterestMessages,
    totalRetrievedMessages: t.totalRetrievedMessages,
    totalExpiredMessages: t.totalExpiredMessages,
    totalDroppedMessages: t.totalDroppedMessages,
    totalRefusedMessages: t.totalRefusedMessages,
    publishedPerSecond: r.totalPublishedMessages,
    subscribedPerSecond: r.totalSubscribedMessages,
    noInterestPerSecond: r.totalNoInterestMessages,
    deliveredPerSecond: r.totalDeliveredMessages,
    retrievedPerSecond: r.totalRetrievedMessages,
    expiredPerSecond: r.totalExpiredMessages,
    destinations: sizes.destinations,
    subscriptions: sizes.subscriptions,
    storeBatches: sizes.storeBatches,
    storeOperations: sizes.storeOperations,
  };
}
