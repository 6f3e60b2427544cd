import { messageSelector } from './message-selector.js';
import type { DurableChange, Engine, SubscribeOptions, Subscription } from '../engine/index.js';
import type { Sub } from '../store/store.js';
import { USER_DELETED, type UserDeletion } from '../security/types.js';
import type { Runtime, Service } from '../runtime/runtime.js';
import type { MessagingService } from './messaging.service.js';

/**
 * Persistent REST messaging sessions (`POST /api/v1/login` with `persistent: true`): their subscriptions are durable
 * engine subscriptions under the engine session `rest:durable:<user uniqueId>:<sessionId>`. When the login goes away
 * (logout, idle timeout, broker stop) they hibernate and keep holding messages (up to each subscription's maxDepth;
 * queue messages wait in their queue); a later persistent login of the same user with the same `sessionId` takes them
 * back. A detached session is discarded after `RestApi.persistentSessionExpiry` ms, or at once by a login of the same
 * user with the same `sessionId` and `persistent: false` (clean start).
 *
 * What is kept of a session (sublevel `restSessions`, key = engine session id) is its subscription list; the held
 * messages themselves are the engine's durable-subscription messages. At every boot the sessions are restored
 * hibernated, before any endpoint or route runs, so messages published after a restart are held for them too.
 */
export interface DurableRestSubscription {
  /** Name as subscribed (`destinationName`): the key for consume, commit, abort and unsubscribe. */
  name: string;
  /** Engine filter: `destinationName`, or `$share/<namedSubscription>/<destinationName>`. */
  filter: string;
  /** Selector text (`filter` of the subscribe request). */
  selector?: string;
  maxDepth: number;
  transactional: boolean;
}

export interface DurableRestRecord {
  engineSessionId: string;
  /** The `sessionId` a login names to resume the session. */
  sessionId: string;
  /** The owner: only a login of this user resumes or discards the session. */
  uniqueId: string;
  username: string;
  subscriptions: DurableRestSubscription[];
  /** When the session was left (logout, idle timeout, broker stop); undefined while a login uses it. */
  detachedAt?: number;
}

/** The engine session id of a persistent REST session: per user, so one user can never reach another's session. */
export function durableRestSessionId(uniqueId: string, sessionId: string): string {
  return `rest:durable:${uniqueId}:${sessionId}`;
}

/**
 * Engine subscribe options of a REST (pull) subscription; `authorize`: the owner's delivery check per topic;
 * `maxPerDestination`: `RestApi.maxEventsPerDestination` (MAPS: at most that many events kept per destination, the
 * oldest dropped).
 */
export function restSubscribeOptions(
  engineSessionId: string,
  s: DurableRestSubscription,
  opts: { durable: boolean; retainMessage: boolean; authorize?: SubscribeOptions['authorize']; maxPerDestination?: number },
): SubscribeOptions {
  return {
    ...(opts.authorize !== undefined ? { authorize: opts.authorize } : {}),
    sessionId: engineSessionId,
    filter: s.filter,
    selector: messageSelector(s.selector),
    maxDepth: s.maxDepth,
    maxPerDestination: opts.maxPerDestination ?? 0,
    transactional: s.transactional,
    qos: s.transactional ? 1 : 0,
    retainHandling: opts.retainMessage ? 0 : 2,
    durable: opts.durable,
    sink: { kind: 'pull' },
  };
}

declare module '../runtime/runtime.js' {
  interface RuntimeServices {
    restSessions: RestSessionsService;
  }
}

/** The persistent REST session keeper of a runtime (undefined when the service is not registered). */
export function restSessionsOf(rt: Runtime): RestSessionsService | undefined {
  return rt.service('restSessions');
}

/** What the REST sessions service is given (src/compose.ts); its start and stop order follows from it. */
export interface RestSessionsDeps {
  messaging: MessagingService;
}

export class RestSessionsService implements Service {
  readonly name = 'restSessions';
  readonly dependsOn: readonly string[];

  constructor(private readonly deps: RestSessionsDeps) {
    this.dependsOn = Object.keys(deps);
  }

  private readonly records = new Map<string, DurableRestRecord>();
  private rt!: Runtime;
  private store: Sub | undefined;
  private timer: NodeJS.Timeout | undefined;
  private writes: Promise<void> = Promise.resolve();

  get expiry(): number {
    return this.rt.config.RestApi.persistentSessionExpiry;
  }

  /** A user was deleted: every persistent REST session of that user is discarded (counted into the audit line). */
  private readonly onUserDeleted = (d: UserDeletion): void => {
    const n = this.discardUser(d.uniqueId);
    if (n) d.ended.persistentRestSessions = n;
  };

  /**
   * A durable subscription closed by someone else than its session (the queue it consumed from was deleted): the
   * kept list loses it, in use or detached, so a restart makes neither the subscription nor the queue again. The
   * session's own unsubscribe writes the same list after this; `discard` forgets the record before closing.
   */
  private readonly onSubscriptionChanged = (sub: Subscription, change: DurableChange): void => {
    if (change !== 'closed') return;
    const rec = this.records.get(sub.sessionId);
    if (rec === undefined) return;
    const kept = rec.subscriptions.filter((x) => x.filter !== sub.filter);
    if (kept.length === rec.subscriptions.length) return;
    rec.subscriptions = kept;
    void this.write(sub.sessionId, rec);
  };

  async start(rt: Runtime): Promise<void> {
    this.rt = rt;
    rt.on(USER_DELETED, this.onUserDeleted);
    rt.on('subscription.changed', this.onSubscriptionChanged);
    this.store = rt.store.sublevel('restSessions');
    this.records.clear();
    const engine = this.deps.messaging.requireEngine();
    const now = rt.now();
    let restored = 0;
    for await (const [key, value] of this.store.iterator()) {
      let rec: DurableRestRecord;
      try {
        rec = JSON.parse(value.toString('utf8')) as DurableRestRecord;
        if (rec.engineSessionId !== key || !Array.isArray(rec.subscriptions)) throw new Error('bad record');
      } catch {
        rt.log.warn({ key }, 'unreadable persistent REST session record dropped');
        await this.store.del(key);
        continue;
      }
      if (rec.detachedAt === undefined) {
        rec.detachedAt = now; // in use when the broker went down without a clean stop
        this.write(key, rec);
      }
      if (rec.detachedAt + this.expiry <= now) {
        engine.closeSession(key); // forgets the messages recovered for it
        await this.store.del(key);
        continue;
      }
      for (const s of rec.subscriptions) {
        try {
          const authorize = rt.security.deliveryAuthorizer?.({ uniqueId: rec.uniqueId });
          const maxPerDestination = rt.config.RestApi.maxEventsPerDestination;
          engine.subscribe(restSubscribeOptions(key, s, { durable: true, retainMessage: false, authorize, maxPerDestination })).hibernate();
        } catch (err) {
          rt.log.warn({ err, session: key, filter: s.filter }, 'could not restore a persistent REST subscription');
        }
      }
      this.records.set(key, rec);
      restored++;
    }
    if (restored) rt.log.info({ sessions: restored }, 'persistent REST sessions restored');
    const every = Math.min(60000, Math.max(1000, Math.floor(this.expiry / 4)));
    this.timer = setInterval(() => this.sweep(), every);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.rt.off(USER_DELETED, this.onUserDeleted);
    this.rt.off('subscription.changed', this.onSubscriptionChanged);
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    // Sessions in use are left now: their expiry counts from the stop; the next boot restores them hibernated.
    const now = this.rt.now();
    for (const rec of this.records.values()) {
      if (rec.detachedAt === undefined) {
        rec.detachedAt = now;
        this.write(rec.engineSessionId, rec);
      }
    }
    await this.writes;
  }

  get(engineSessionId: string): DurableRestRecord | undefined {
    return this.records.get(engineSessionId);
  }

  /** A login uses the session (new or resumed): write it with its current subscriptions. */
  attach(rec: DurableRestRecord): void {
    rec.detachedAt = undefined;
    this.records.set(rec.engineSessionId, rec);
    this.write(rec.engineSessionId, rec);
  }

  /** The subscription list changed (subscribe, unsubscribe). */
  update(engineSessionId: string, subscriptions: DurableRestSubscription[]): Promise<void> {
    const rec = this.records.get(engineSessionId);
    if (!rec) return Promise.resolve();
    rec.subscriptions = subscriptions;
    return this.write(engineSessionId, rec);
  }

  /** The login left the session (its subscriptions were hibernated): the expiry countdown starts. */
  detach(engineSessionId: string): void {
    const rec = this.records.get(engineSessionId);
    if (!rec) return;
    rec.detachedAt = this.rt.now();
    this.write(engineSessionId, rec);
  }

  /** Ends the session for good: its subscriptions and held messages go. */
  discard(engineSessionId: string, engine: Engine | undefined = this.deps.messaging.engine): void {
    const kept = this.records.delete(engineSessionId); // first: the closes below need not rewrite its list
    if (engine !== undefined && !engine.isClosed) engine.closeSession(engineSessionId);
    if (kept) this.write(engineSessionId, undefined);
  }

  /** Discards every session of a user (the user was deleted), in use or detached. Returns how many went. */
  discardUser(uniqueId: string): number {
    let n = 0;
    for (const rec of [...this.records.values()]) {
      if (rec.uniqueId !== uniqueId) continue;
      this.discard(rec.engineSessionId);
      n++;
    }
    return n;
  }

  /** Discards detached sessions older than `RestApi.persistentSessionExpiry`. Returns how many went. */
  sweep(now: number = this.rt.now()): number {
    let n = 0;
    for (const rec of [...this.records.values()]) {
      if (rec.detachedAt !== undefined && rec.detachedAt + this.expiry <= now) {
        this.discard(rec.engineSessionId);
        n++;
      }
    }
    return n;
  }

  /** Sessions kept (in use or detached). */
  get size(): number {
    return this.records.size;
  }

  /** Waits for the writes queued so far. */
  flush(): Promise<void> {
    return this.writes;
  }

  /** Queues a write in order; resolves once it is in the store (or was logged as failed). */
  private write(key: string, rec: DurableRestRecord | undefined): Promise<void> {
    const store = this.store;
    if (!store) return Promise.resolve();
    const value = rec ? Buffer.from(JSON.stringify(rec)) : undefined;
    this.writes = this.writes
      .then(() => (value ? store.put(key, value) : store.del(key)))
      .catch((err: unknown) => this.rt.log.error({ err, session: key }, 'persistent REST session could not be written to the store'));
    return this.writes;
  }
}

export function restSessionsService(deps: RestSessionsDeps): RestSessionsService {
  return new RestSessionsService(deps);
}
