import type { Logger } from 'pino';

const WARN_EVENTS = new Set(['login.failed', 'lockout.locked', 'user.password_change_failed', 'access.denied']);

/**
 * Security events as one JSON line each in audit.log (`rt.logs.audit`). Denied access is rate-limited: at most
 * `deniedPerWindow` lines per window; the rest are counted and reported in one line when the next window opens.
 */
export class Audit {
  private windowStart = 0;
  private deniedInWindow = 0;
  private suppressed = 0;

  constructor(
    private readonly log: Logger,
    private readonly now: () => number,
    private readonly deniedPerWindow = 20,
    private readonly windowMs = 10000,
  ) {}

  /**
   * Failed logins, lockouts and refusals are WARN (in audit.log and messaging.log); a successful login is DEBUG (in
   * audit.log always, in messaging.log only at logLevel debug: one line per connection otherwise); the rest INFO.
   */
  event(event: string, fields: Record<string, unknown>, msg: string): void {
    const level = WARN_EVENTS.has(event) || event.endsWith('.blocked') || event.endsWith('.failed') ? 'warn' : event === 'login.succeeded' ? 'debug' : 'info';
    this.log[level]({ event, ...fields }, msg);
  }

  denied(fields: Record<string, unknown>, msg: string): void {
    const now = this.now();
    if (now - this.windowStart >= this.windowMs) {
      if (this.suppressed) this.log.warn({ event: 'access.denied.suppressed', count: this.suppressed }, `${this.suppressed} further denied accesses were not logged one by one`);
      this.windowStart = now;
      this.deniedInWindow = 0;
      this.suppressed = 0;
    }
    if (this.deniedInWindow >= this.deniedPerWindow) {
      this.suppressed++;
      return;
    }
    this.deniedInWindow++;
    this.log.warn({ event: 'access.denied', ...fields }, msg);
  }
}
