/**
 * Retained messages: one per topic, set by a retained publish, removed by an empty one, sent to a new subscription
 * per its `retainHandling` [MQTT-3.3.1-9..11] (shared subscriptions get none, MQTT 5 §4.8.2).
 *
 * Owns the index of topics that hold a retained message (matched against a new subscription's filter) and their
 * expiry; the message itself sits on its destination record, its store record is written through write-behind.ts.
 */
import { NONE, type EngineCore } from './engine-core.js';
import type { Delivery } from './delivery.js';
import type { Message } from './message.js';
import type { Destination, Subscription } from './subscription.js';
import { TopicTree } from './topic-trie.js';
import type { WriteBehind } from './write-behind.js';

export class Retained {
  private readonly index = new TopicTree<Destination>();

  constructor(
    private readonly core: EngineCore,
    private readonly writes: WriteBehind,
    private readonly delivery: Delivery,
  ) {}

  /** A retained publish: replaces the topic's retained message, or removes it when the payload is empty. Outcome bits. */
  set(dest: Destination, msg: Message): number {
    if (msg.payload.length === 0) {
      // an empty retained message removes the topic's retained message (3.1.1 [MQTT-3.3.1-10], 5 [MQTT-3.3.1-6])
      return dest.retained !== undefined ? this.drop(dest) : NONE;
    }
    if (dest.retained === undefined) this.index.set(dest.name, dest);
    dest.retained = msg;
    return this.writes.persistRetained(dest, msg);
  }

  /** A retained message found in the store at start-up (already stored). */
  restore(dest: Destination, msg: Message): void {
    if (dest.retained === undefined) this.index.set(dest.name, dest);
    dest.retained = msg;
  }

  /** Remove the topic's retained message (and its record). Outcome bits. */
  drop(dest: Destination): number {
    dest.retained = undefined;
    this.index.delete(dest.name);
    return this.writes.unpersistRetained(dest);
  }

  /** Drop the retained message when it has expired; true when it did (counted). */
  expireIfDue(dest: Destination, now: number): boolean {
    const msg = dest.retained;
    if (msg === undefined || msg.expiresAt === 0 || msg.expiresAt > now) return false;
    this.drop(dest);
    dest.counters.expired++;
    this.core.totals.totalExpiredMessages++;
    return true;
  }

  /** Offer the retained messages matching the subscription's filter (not those of paused topics) to it. */
  sendTo(sub: Subscription): void {
    if (this.index.size === 0) return;
    const found = this.index.match(sub.topicFilter, []);
    const now = this.core.now();
    for (const dest of found) {
      if (dest.retained === undefined || dest.paused || this.expireIfDue(dest, now)) continue;
      this.delivery.offer(sub, dest, dest.retained, true); // retained flag stays set on these [MQTT-3.3.1-8]
    }
  }
}
