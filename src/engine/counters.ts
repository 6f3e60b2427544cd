/**
 * Plain numeric counters: per destination, per server, store timings, and a per-second rate helper.
 * Classes with fixed fields so V8 keeps one shape; incremented inline on the hot path.
 */

/** Monotonic per-destination counters (gauges such as stored/pending are computed from live state). */
export class DestinationCounters {
  published = 0;
  delivered = 0;
  expired = 0;
  noInterest = 0;
  retrieved = 0;
  /** Copies accepted by subscriptions / messages handed to queue consumers. */
  subscribed = 0;
  /** Copies dropped because a subscription was full (maxDepth). */
  dropped = 0;
}

/** Server totals, field names as MAPS ServerStatisticsDTO. */
export class ServerTotals {
  totalPublishedMessages = 0;
  totalDeliveredMessages = 0;
  totalSubscribedMessages = 0;
  totalNoInterestMessages = 0;
  totalRetrievedMessages = 0;
  totalExpiredMessages = 0;
  totalDroppedMessages = 0;
  /** QoS >= 1 publishes refused because a subscription they would reach was full (flow control). */
  totalRefusedMessages = 0;
}

/** Store timings in nanoseconds, attributed per operation (a batch's time is shared among its operations). */
export class StoreTimings {
  readNs = 0;
  reads = 0;
  writeNs = 0;
  writes = 0;
  deleteNs = 0;
  deletes = 0;

  get readTimeAveNs(): number {
    return this.reads === 0 ? 0 : Math.round(this.readNs / this.reads);
  }
  get writeTimeAveNs(): number {
    return this.writes === 0 ? 0 : Math.round(this.writeNs / this.writes);
  }
  get deleteTimeAveNs(): number {
    return this.deletes === 0 ? 0 : Math.round(this.deleteNs / this.deletes);
  }
}

/**
 * Per-second rates of a set of monotonic counters. `update(values, now)` recomputes the rates when at least
 * `minIntervalMs` has passed since the last sample, and otherwise returns the previous rates, so it can be
 * called on every stats request without skewing the result.
 */
export class RateMeter<K extends string> {
  private lastValues: Record<K, number>;
  private lastAt: number;
  private rates: Record<K, number>;

  constructor(
    private readonly keys: readonly K[],
    now: number,
    private readonly minIntervalMs = 1000,
    initial?: Record<K, number>,
  ) {
    this.lastAt = now;
    this.lastValues = {} as Record<K, number>;
    this.rates = {} as Record<K, number>;
    for (const k of keys) {
      this.lastValues[k] = initial?.[k] ?? 0;
      this.rates[k] = 0;
    }
  }

  update(values: Record<K, number>, now: number): Record<K, number> {
    const elapsed = now - this.lastAt;
    if (elapsed >= this.minIntervalMs) {
      const rates = {} as Record<K, number>;
      for (const k of this.keys) {
        rates[k] = ((values[k] - this.lastValues[k]) * 1000) / elapsed;
        this.lastValues[k] = values[k];
      }
      this.rates = rates;
      this.lastAt = now;
    }
    return this.rates;
  }
}
