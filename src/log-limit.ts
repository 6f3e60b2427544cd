import type { Logger } from 'pino';

/**
 * Rate-limited WARN lines for faults a peer can repeat at will (a malformed packet, a refused payload). Without it a
 * client reconnecting in a loop wrote 20 330 WARN lines in 10 minutes.
 *
 * Each key (a kind of fault and who caused it: a connection, an address) has a budget of `burst` lines that grows
 * back by one line per interval. A line over budget is not written but counted; when the interval ends, each key
 * that had lines suppressed writes one summary line instead (the last message, `suppressed: <count>`), which takes
 * that interval's line. So a key that keeps failing writes `burst` lines, then one line per interval with the count
 * of the others. Keys are forgotten once their budget is whole again; at most `maxKeys` are kept (beyond that, new
 * keys of a kind share the key `<kind>|*`). The timer runs only while there are keys and never keeps the process
 * alive.
 */
export interface LogLimitOptions {
  /** Length of an interval (ms; 10 000). */
  intervalMs?: number;
  /** Keys kept at most (1000). */
  maxKeys?: number;
}

interface Entry {
  tokens: number;
  burst: number;
  suppressed: number;
  log: Logger;
  fields: Record<string, unknown>;
  msg: string;
}

export class LogLimiter {
  readonly intervalMs: number;
  private readonly maxKeys: number;
  private readonly entries = new Map<string, Entry>();
  private timer: NodeJS.Timeout | undefined;

  constructor(opts: LogLimitOptions = {}) {
    this.intervalMs = opts.intervalMs ?? 10_000;
    this.maxKeys = opts.maxKeys ?? 1000;
  }

  /**
   * A WARN line through `log` for a fault of `kind` caused by `scope` (a connection id, an address), unless that key
   * has no line left in its budget (`burst` lines, one more per interval); then it is counted for the summary.
   * Returns whether it was written.
   */
  warn(log: Logger, kind: string, scope: string | number, fields: Record<string, unknown>, msg: string, burst = 1): boolean {
    let key = `${kind}|${scope}`;
    let e = this.entries.get(key);
    if (e === undefined && this.entries.size >= this.maxKeys) {
      key = `${kind}|*`;
      e = this.entries.get(key);
    }
    if (e === undefined) {
      e = { tokens: burst, burst, suppressed: 0, log, fields, msg };
      this.entries.set(key, e);
      if (this.timer === undefined) {
        this.timer = setInterval(() => this.endInterval(), this.intervalMs);
        this.timer.unref();
      }
    }
    if (e.tokens >= 1) {
      e.tokens--;
      log.warn(fields, msg);
      return true;
    }
    e.suppressed++;
    e.log = log;
    e.fields = fields;
    e.msg = msg;
    return false;
  }

  /** Lines suppressed and not yet summarised (all keys). */
  get suppressed(): number {
    let n = 0;
    for (const e of this.entries.values()) n += e.suppressed;
    return n;
  }

  /** An interval ends: a summary line for each key with lines suppressed; budgets grow back by one line. */
  endInterval(): void {
    const s = Math.round(this.intervalMs / 1000);
    for (const [key, e] of this.entries) {
      if (e.suppressed > 0) {
        e.log.warn({ ...e.fields, suppressed: e.suppressed }, `${e.msg} (and ${e.suppressed} more like it in the last ${s} s, not logged one by one)`);
        e.suppressed = 0;
        continue; // the summary was this interval's line
      }
      e.tokens = Math.min(e.burst, e.tokens + 1);
      if (e.tokens >= e.burst) this.entries.delete(key);
    }
    if (this.entries.size === 0 && this.timer !== undefined) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  /** Stop (shutdown): what was suppressed is reported now. */
  close(): void {
    this.endInterval();
    this.entries.clear();
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
  }
}
