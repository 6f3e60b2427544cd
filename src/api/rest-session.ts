import type { FastifyRequest } from 'fastify';
import type { Engine, Subscription } from '../engine/index.js';
import type { Runtime } from '../runtime/runtime.js';
import { sessionIdOf } from './plugins/auth.js';

/**
 * REST messaging state per caller session: its subscriptions, by the name they were subscribed with. A session is
 * the login session once security is on (the auth plugin sets `request.sessionId`), otherwise an anonymous session
 * cookie (`maps_session`). It ends on logout or after `RestApi.inactiveTimeout` ms without a request.
 */
export interface RestSubscription {
  /** Name as subscribed (`destinationName`), the key for consume/commit/abort/unsubscribe. */
  name: string;
  sub: Subscription;
  transactional: boolean;
}

export class RestSession {
  readonly subs = new Map<string, RestSubscription>();
  lastUsed: number;
  /** Where consume-all starts next (round-robin across subscriptions). */
  next = 0;
  constructor(
    readonly id: string,
    readonly engine: Engine,
    now: number,
  ) {
    this.lastUsed = now;
  }
  get engineSessionId(): string {
    return `rest:${this.id}`;
  }
}

export class RestSessions {
  private readonly sessions = new Map<string, RestSession>();
  private timer?: NodeJS.Timeout;

  constructor(
    private readonly rt: Runtime,
    private readonly idleTimeout: number,
    private readonly now: () => number = Date.now,
  ) {
    this.timer = setInterval(() => this.sweep(), Math.min(10000, Math.max(1000, Math.floor(idleTimeout / 4))));
    this.timer.unref();
  }

  /** The caller's session id: the login session, or the anonymous `maps_session` cookie (set when missing). */
  static idOf(request: FastifyRequest): string {
    return sessionIdOf(request);
  }

  /** The session (created on first use); a session from before an in-process restart starts afresh. */
  get(id: string): RestSession {
    const engine = this.rt.engine;
    if (!engine) throw new Error('messaging engine is not running');
    let s = this.sessions.get(id);
    if (!s || s.engine !== engine) {
      s = new RestSession(id, engine, this.now());
      this.sessions.set(id, s);
    }
    s.lastUsed = this.now();
    return s;
  }

  /** Ends a session: every subscription goes (logout, idle timeout). */
  close(id: string): void {
    const s = this.sessions.get(id);
    if (!s) return;
    this.sessions.delete(id);
    if (s.engine === this.rt.engine) s.engine.closeSession(s.engineSessionId);
  }

  sweep(): void {
    const limit = this.now() - this.idleTimeout;
    for (const [id, s] of this.sessions) if (s.lastUsed < limit) this.close(id);
  }

  get size(): number {
    return this.sessions.size;
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }
}
