/**
 * The REST response cache (MAPS RoleBasedCache): one cache, keyed by the lower-cased path plus a discriminator
 * (filter, name ...). An entry lives `lifetime` ms from when it was first stored; a sweep every `scanTime` ms drops
 * expired entries. Hits and misses are counted for `GET /api/v1/server/cache`.
 */
export interface CacheInfo {
  enabled: boolean;
  lifeTime: number;
  scanTime: number;
  cacheSize: number;
  cacheHits: number;
  cacheMisses: number;
}

export class ResponseCache {
  private readonly entries = new Map<string, { value: unknown; expires: number }>();
  private hits = 0;
  private misses = 0;
  private timer?: NodeJS.Timeout;

  constructor(
    readonly enabled: boolean,
    readonly lifetime: number,
    readonly scanTime: number,
    private readonly now: () => number = Date.now,
  ) {
    if (enabled && lifetime > 0) {
      this.timer = setInterval(() => this.sweep(), scanTime);
      this.timer.unref();
    }
  }

  static key(path: string, discriminator = ''): string {
    return `${path.replace(/^\/+/, '').toLowerCase()}|${discriminator.toLowerCase()}`;
  }

  /** Returns the cached value or computes, stores and returns it. */
  async get<T>(key: string, produce: () => T | Promise<T>): Promise<T> {
    if (!this.enabled || this.lifetime <= 0) return produce();
    const hit = this.entries.get(key);
    if (hit && hit.expires > this.now()) {
      this.hits++;
      return hit.value as T;
    }
    this.misses++;
    const value = await produce();
    this.entries.set(key, { value, expires: this.now() + this.lifetime });
    return value;
  }

  /** Drops every entry whose key starts with the given path (lower-cased, no leading slash). */
  evictPrefix(path: string): void {
    const p = path.replace(/^\/+/, '').toLowerCase();
    for (const k of this.entries.keys()) if (k.startsWith(p)) this.entries.delete(k);
  }

  sweep(): void {
    const now = this.now();
    for (const [k, v] of this.entries) if (v.expires <= now) this.entries.delete(k);
  }

  clear(): void {
    this.entries.clear();
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
  }
}
