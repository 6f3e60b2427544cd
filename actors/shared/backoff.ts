/**
 * The one backoff of every actor kind that retries (endpoint, discovery, integration, LoRa radio, device, supervisor,
 * server, lockout) and the one `failed → backoff → <retry>` fragment the I/O machines share.
 */

/**
 * The wait before attempt n+1 after n failures: `initial · 2^(n-1)`, capped at `max`, less up to `jitter` (0..1) of
 * it at random. n ≤ 1 waits `initial`; the exponent stops at 30 so a long outage cannot overflow.
 */
export function backoffDelay(attempts: number, initial: number, max: number, jitter = 0, random: () => number = Math.random): number {
  const base = Math.min(max, initial * 2 ** Math.max(0, Math.min(30, attempts - 1)));
  return jitter > 0 ? Math.max(0, Math.round(base * (1 - jitter * random()))) : base;
}

/**
 * The retry states of a machine whose I/O can fail: `failed` (entered on the failure, left at once) and `backoff`
 * (waits the machine's `backoff` delay, then goes to `retry`); both tagged `degraded`, both leave for `stopped` on
 * the stop event, and `backoff` retries at once on the start event. Spread into the machine's `states`.
 */
export function failedBackoff<TStop extends string, TStart extends string, TRetry extends string>(o: { stop: TStop; start: TStart; retry: TRetry }) {
  return {
    failed: {
      tags: ['degraded'],
      after: { 0: 'backoff' },
      on: { [o.stop]: 'stopped' } as Record<TStop, 'stopped'>,
    },
    backoff: {
      tags: ['degraded'],
      after: { backoff: o.retry },
      on: { [o.stop]: 'stopped', [o.start]: o.retry } as Record<TStop, 'stopped'> & Record<TStart, TRetry>,
    },
  };
}
