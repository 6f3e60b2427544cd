import type { ActorTransition } from '../runtime/events.js';

/**
 * The REST response cache (MAPS RoleBasedCache): one cache, keyed by the lower-cased path plus a discriminator
 * (filter, name ...). An entry lives `lifetime` ms from when it was first stored; a sweep every `scanTime` ms drops
 * expired entries. Hits and misses are counted for `GET /api/v1/server/cache`.
 *
 * Views of actor state (an endpoint's `Started` / `Failed` ...) are never served stale: such an entry is stored with
 * `getState(key, kinds, ...)`, naming the actor kinds it shows, and is dropped the moment an actor of one of those
 * kinds changes state (the runtime's `actor.transition`, followed once `follow(rt)` was called). MAPS serves stale
 * state from its cache; a client that trusts it would send CONNECT into a line in backoff. At most `maxEntries`
 * entries are kept (a flood of distinct filters cannot grow it): past that the oldest goes.
 */
export interface CacheInfo {
  enabled: boolean;
  lifeTime: number;
  scanTime: number;
  cacheSize: number;
  cacheHits: number;
  cacheMisses: number;
}

/** What the cache needs of the runtime: its transition events. */
export interface TransitionSource {
  on(event: 'actor.transition', listener: (t: ActorTransition) => void): unknown;
  off(event: 'actor.transition', listener: (t: ActorTransition) => void): unknown;
}

interface Entry {
  value: unknown;
  expires: number;
  /** Actor kinds whose transitions drop this entry (a view of their state). */
  kinds?: readonly string[];
}

export const CACHE_MAX_ENTRIES = 1000;

export class ResponseCache {
  private readonly entries = new Map<string, Entry>();
  /** kind → keys of the state views that show it. */
  private readonly byKind = new Map<string, Set<string>>();
  /** kind → transitions seen: a view computed while its actors moved is not stored. */
  private readonly epochs = new Map<string, number>();
  private hits = 0;
  private misses = 0;
  private timer?: NodeJS.Timeout;
  private followed?: { source: TransitionSource; listener: (t: ActorTransition) => void };

  constructor(
    readonly enabled: boolean,
    readonly lifetime: number,
    readonly scanTime: number,
    private readonly now: () => number = Date.now,
    readonly maxEntries = CACHE_MAX_ENTRIES,
  ) {
    if (enabled && lifetime > 0) {
      this.timer = setInterval(() => this.sweep(), scanTime);
      this.timer.unref();
    }
  }

  static key(path: string, discriminator = ''): string {
    return `${path.replace(/^\/+/, '').toLowerCase()}|${discriminator.toLowerCase()}`;
  }

  /** Returns the cached value or computes, stores and returns it. Not for views of actor state: see `getState`. */
  async get<T>(key: string, produce: () => T | Promise<T>): Promise<T> {
    return this.lookup(key, undefined, produce);
  }

  /**
   * A view of the state of the actors of `kinds` (`endpoint`, `integration`, ...): cached like `get`, and dropped
   * when any of them changes state. Needs `follow(rt)`; without it such views are not cached at all.
   */
  async getState<T>(key: string, kinds: readonly string[], produce: () => T | Promise<T>): Promise<T> {
    if (!this.followed) return produce();
    return this.lookup(key, kinds, produce);
  }

  /** Listens to the runtime's actor transitions (once; `close()` stops listening). */
  follow(source: TransitionSource): void {
    if (this.followed) return;
    const listener = (t: ActorTransition) => this.onTransition(t.kind);
    source.on('actor.transition', listener);
    this.followed = { source, listener };
  }

  /** An actor of `kind` changed state: every view of that kind's state goes. */
  onTransition(kind: string): void {
    this.epochs.set(kind, (this.epochs.get(kind) ?? 0) + 1);
    const keys = this.byKind.get(kind);
    if (!keys) return;
    for (const k of [...keys]) this.drop(k);
  }

  private async lookup<T>(key: string, kinds: readonly string[] | undefined, produce: () => T | Promise<T>): Promise<T> {
    if (!this.enabled || this.lifetime <= 0) return produce();
    const hit = this.entries.get(key);
    if (hit && hit.expires > this.now()) {
      this.hits++;
      return hit.value as T;
    }
    this.misses++;
    const epoch = kinds && this.epochOf(kinds);
    const value = await produce();
    // an actor moved while the view was made: answer it, but do not keep it
    if (kinds && this.epochOf(kinds) !== epoch) return value;
    this.drop(key);
    this.entries.set(key, { value, expires: this.now() + this.lifetime, ...(kinds ? { kinds } : {}) });
    for (const kind of kinds ?? []) {
      let set = this.byKind.get(kind);
      if (!set) this.byKind.set(kind, (set = new Set()));
      set.add(key);
    }
    while (this.entries.size > this.maxEntries) this.drop(this.entries.keys().next().value!);
    return value;
  }

  private epochOf(kinds: readonly string[]): number {
    let n = 0;
    for (const k of kinds) n += this.epochs.get(k) ?? 0;
    return n;
  }

  private drop(key: string): void {
    const e = this.entries.get(key);
    if (!e) return;
    this.entries.delete(key);
    for (const kind of e.kinds ?? []) {
      const set = this.byKind.get(kind);
      set?.delete(key);
      if (set && set.size === 0) this.byKind.delete(kind);
    }
  }

  /** Drops every entry whose key starts with the given path (lower-cased, no leading slash). */
  evictPrefix(path: string): void {
    const p = path.replace(/^\/+/, '').toLowerCase();
    for (const k of [...this.entries.keys()]) if (k.startsWith(p)) this.drop(k);
  }

  sweep(): void {
    const now = this.now();
    for (const [k, v] of [...this.entries]) if (v.expires <= now) this.drop(k);
  }

  clear(): void {
    this.entries.clear();
    this.byKind.clear();
  }

  get size(): number {
    return this.entries.size;
  }

  info(): CacheInfo {
    if (!this.enabled) return { enabled: false, lifeTime: 0, scanTime: 0, cacheSize: 0, cacheHits: 0, cacheMisses: 0 };
    return { enabled: true, lifeTime: this.lifetime, scanTime: this.scanTime, cacheSize: this.entries.size, cacheHits: this.hits, cacheMisses: this.misses };
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    if (this.followed) this.followed.source.off('actor.transition', this.followed.listener);
    this.followed = undefined;
  }
}
