import type { Engine, Subscription } from '../engine/index.js';
import { durableRestSessionId, restSessionsOf, restSubscribeOptions, type DurableRestRecord, type DurableRestSubscription } from '../messaging/rest-sessions.service.js';
import type { Runtime } from '../runtime/runtime.js';
import type { SessionRecord } from '../security/sessions.js';
import { USER_DELETED, type UserDeletion } from '../security/types.js';

/**
 * REST messaging state per caller session: its subscriptions, by the name they were subscribed with. A session is
 * the login session once security is on (the auth plugin sets `request.sessionId`), otherwise an anonymous session
 * cookie (`maps_session`); the routes name it with `sessionIdOf(request)` (plugins/auth.ts). It ends on logout or after `RestApi.inactiveTimeout` ms without a request.
 *
 * A persistent login (`LoginRequest.persistent`) gets a durable session instead: engine session
 * `rest:durable:<uniqueId>:<sessionId>` (`sessionId` from the login, else the login session id), durable
 * subscriptions, hibernated (not closed) on logout and idle timeout, and taken back by the next persistent login of
 * the same user with the same `sessionId`; `RestSessionsService` keeps them (and restores them after a restart).
 */
export interface RestSubscription {
  /** Name as subscribed (`destinationName`), the key for consume/commit/abort/unsubscribe. */
  name: string;
  sub: Subscription;
  transactional: boolean;
  /** Selector text as subscribed (kept for a durable session). */
  selector?: string;
}

export class RestSession {
  readonly subs = new Map<string, RestSubscription>();
  lastUsed: number;
  /** Where consume-all starts next (round-robin across subscriptions). */
  next = 0;
  readonly engineSessionId: string;
  constructor(
    /** The caller session using it (a durable session moves to the latest login that resumes it). */
    public id: string,
    readonly engine: Engine,
    now: number,
    /** Set for the session of a persistent login. */
    readonly durable?: DurableRestRecord,
    /** `RestApi.maxEventsPerDestination`: events kept per destination for each subscription, oldest dropped (0: no cap). */
    readonly maxPerDestination = 0,
  ) {
    this.lastUsed = now;
    this.engineSessionId = durable ? durable.engineSessionId : `rest:${id}`;
  }

  /** The subscription list as kept for a durable session. */
  stored(): DurableRestSubscription[] {
    const out: DurableRestSubscription[] = [];
    for (const r of this.subs.values()) {
      if (r.sub.closed) continue;
      out.push({ name: r.name, filter: r.sub.filter, maxDepth: r.sub.maxDepth, transactional: r.transactional, ...(r.selector !== undefined ? { selector: r.selector } : {}) });
    }
    return out;
  }
}

export class RestSessions {
  private readonly sessions = new Map<string, RestSession>();
  /** Durable sessions in use, by engine session id. */
  private readonly durable = new Map<string, RestSession>();
  private timer?: NodeJS.Timeout;

  constructor(
    private readonly rt: Runtime,
    private readonly idleTimeout: number,
    private readonly now: () => number = Date.now,
  ) {
    this.timer = setInterval(() => this.sweep(), Math.min(10000, Math.max(1000, Math.floor(idleTimeout / 4))));
    this.timer.unref();
    rt.on(USER_DELETED, this.onUserDeleted);
  }

  private readonly onUserDeleted = (d: UserDeletion): void => {
    const n = this.endUser(d.uniqueId, d.loginSessions);
    if (n) d.ended.restSessions = n;
  };

  /**
   * A user was deleted: the messaging sessions of its logins and Basic credentials end, and its durable sessions are
   * discarded (subscriptions and held messages go). Returns how many sessions in use were ended.
   */
  endUser(uniqueId: string, loginSessions: string[]): number {
    const ids = new Set([...loginSessions.map((id) => `login:${id}`), `basic:${uniqueId}`]);
    const keeper = restSessionsOf(this.rt);
    let n = 0;
    for (const [id, s] of [...this.sessions]) {
      if (!ids.has(id) && s.durable?.uniqueId !== uniqueId) continue;
      this.sessions.delete(id);
      n++;
      if (s.durable) {
        if (this.durable.get(s.engineSessionId) === s) this.durable.delete(s.engineSessionId);
        if (keeper) keeper.discard(s.engineSessionId);
        else if (s.engine === this.rt.engine) s.engine.closeSession(s.engineSessionId);
      } else if (s.engine === this.rt.engine) s.engine.closeSession(s.engineSessionId);
    }
    for (const [key, s] of [...this.durable]) {
      if (s.durable?.uniqueId !== uniqueId) continue;
      this.durable.delete(key);
      keeper?.discard(key);
    }
    return n;
  }

  /** `RestApi.maxEventsPerDestination` as configured now. */
  private get maxPerDestination(): number {
    return this.rt.config.RestApi.maxEventsPerDestination;
  }

  /**
   * The session (created on first use); a session from before an in-process restart starts afresh (a durable one is
   * taken back from what was kept). `login` is the caller's login session: a persistent one gets the durable session.
   */
  get(id: string, login?: Pick<SessionRecord, 'sessionId' | 'uniqueId' | 'username' | 'persistent' | 'engineSessionId'>): RestSession {
    const engine = this.rt.requireEngine(); // 503 while the server restarts, never a 500
    let s = this.sessions.get(id);
    if (!s || s.engine !== engine) {
      const keeper = login?.persistent ? restSessionsOf(this.rt) : undefined;
      s = keeper && login ? this.resume(id, engine, login) : new RestSession(id, engine, this.now(), undefined, this.maxPerDestination);
      this.sessions.set(id, s);
    }
    s.lastUsed = this.now();
    return s;
  }

  /** The durable session of a persistent login: the one in use (taken over), the kept one, or a new one. */
  private resume(id: string, engine: Engine, login: Pick<SessionRecord, 'sessionId' | 'uniqueId' | 'username' | 'engineSessionId'>): RestSession {
    const keeper = restSessionsOf(this.rt)!;
    const sessionId = login.engineSessionId ?? login.sessionId;
    const key = durableRestSessionId(login.uniqueId, sessionId);
    const live = this.durable.get(key);
    if (live && live.engine === engine) {
      // another login of the same user had it: the latest login takes it over
      if (this.sessions.get(live.id) === live) this.sessions.delete(live.id);
      live.id = id;
      return live;
    }
    const rec: DurableRestRecord = keeper.get(key) ?? { engineSessionId: key, sessionId, uniqueId: login.uniqueId, username: login.username, subscriptions: [] };
    const s = new RestSession(id, engine, this.now(), rec, this.maxPerDestination);
    for (const st of rec.subscriptions) {
      let sub = engine.subscription(key, st.filter);
      if (sub && !sub.closed) sub.attach({ kind: 'pull' });
      else {
        try {
          const authorize = this.rt.security.deliveryAuthorizer?.({ uniqueId: login.uniqueId });
          sub = engine.subscribe(restSubscribeOptions(key, st, { durable: true, retainMessage: false, authorize, maxPerDestination: this.maxPerDestination }));
        } catch {
          continue;
        }
      }
      s.subs.set(st.name, { name: st.name, sub, transactional: st.transactional, ...(st.selector !== undefined ? { selector: st.selector } : {}) });
    }
    rec.subscriptions = s.stored();
    keeper.attach(rec);
    this.durable.set(key, s);
    return s;
  }

  /** A durable session's subscriptions changed (subscribe, unsubscribe): keep the new list (resolves once stored). */
  changed(s: RestSession): Promise<void> {
    return s.durable ? (restSessionsOf(this.rt)?.update(s.engineSessionId, s.stored()) ?? Promise.resolve()) : Promise.resolve();
  }

  /**
   * Ends a session (logout, idle timeout): every subscription goes. A durable session is left instead: its
   * subscriptions hibernate and keep holding messages until the owner logs in again or the session expires.
   */
  close(id: string): void {
    const s = this.sessions.get(id);
    if (!s) return;
    this.sessions.delete(id);
    if (s.durable) {
      if (this.durable.get(s.engineSessionId) === s) this.durable.delete(s.engineSessionId);
      if (s.engine !== this.rt.engine) return; // restarted meanwhile: the keeper already left it
      for (const r of s.subs.values()) if (!r.sub.closed) r.sub.hibernate();
      restSessionsOf(this.rt)?.detach(s.engineSessionId);
      return;
    }
    if (s.engine === this.rt.engine) s.engine.closeSession(s.engineSessionId);
  }

  /** Clean start: a login of `uniqueId` naming `sessionId` without `persistent` ends that durable session for good. */
  discard(uniqueId: string, sessionId: string): void {
    const key = durableRestSessionId(uniqueId, sessionId);
    const live = this.durable.get(key);
    if (live) {
      this.durable.delete(key);
      if (this.sessions.get(live.id) === live) this.sessions.delete(live.id);
    }
    const keeper = restSessionsOf(this.rt);
    if (keeper) keeper.discard(key);
    else this.rt.engine?.closeSession(key);
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
    this.rt.off(USER_DELETED, this.onUserDeleted);
  }
}
