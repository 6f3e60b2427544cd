import { randomUUID, randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { ClassicLevel } from 'classic-level';

/**
 * The kinds of record kept; one sublevel each (DESIGN.md, store). Retained messages are not a sublevel of their own:
 * the engine keeps them in `messages` under `r!` with the queued and held messages (src/engine/engine-store.ts).
 */
export const SUBLEVELS = ['instance', 'users', 'groups', 'acl', 'sessions', 'mqttSessions', 'restSessions', 'messages', 'schemas', 'config', 'secrets', 'lockouts'] as const;
export type SublevelName = (typeof SUBLEVELS)[number];

export interface InstanceRecord {
  serverName: string;
  uniqueId: string;
  createdAt: string;
}

/** Raised when another process holds the data directory. */
export class StoreLockedError extends Error {
  constructor(dir: string, options?: { cause?: unknown }) {
    super(`The data directory ${dir} is in use by another Switchyard process (LevelDB lock held); stop it or choose another SWITCHYARD_DATA_DIR`, options);
    this.name = 'StoreLockedError';
  }
}

/** The part of a sublevel the project uses. */
export interface Sub {
  get(key: string): Promise<Buffer | undefined>;
  put(key: string, value: Buffer): Promise<void>;
  del(key: string): Promise<void>;
  batch(ops: Array<{ type: 'put'; key: string; value: Buffer } | { type: 'del'; key: string }>): Promise<void>;
  iterator(options?: { gte?: string; lt?: string }): AsyncIterableIterator<[string, Buffer]>;
}

/**
 * classic-level under `{data}/store`. Values are Buffers; callers choose their own encodings. Indexes live in
 * memory in the components that own them; the store gives durability.
 */
export class Store {
  readonly db: ClassicLevel<string, Buffer>;
  readonly dir: string;
  private readonly subs = new Map<SublevelName, Sub>();
  private closed = false;

  private constructor(dir: string) {
    this.dir = dir;
    this.db = new ClassicLevel<string, Buffer>(dir, { valueEncoding: 'buffer', keyEncoding: 'utf8' });
  }

  static async open(dataDir: string): Promise<Store> {
    const dir = join(dataDir, 'store');
    mkdirSync(dir, { recursive: true });
    const store = new Store(dir);
    try {
      await store.db.open();
    } catch (err) {
      const cause = (err as { cause?: { code?: string } }).cause;
      if (cause?.code === 'LEVEL_LOCKED' || /lock/i.test(String((err as Error).message) + String((cause as Error | undefined)?.message))) {
        throw new StoreLockedError(dataDir, { cause: err });
      }
      throw err;
    }
    return store;
  }

  sublevel(name: SublevelName): Sub {
    let s = this.subs.get(name);
    if (!s) {
      s = this.db.sublevel<string, Buffer>(name, { valueEncoding: 'buffer', keyEncoding: 'utf8' }) as unknown as Sub;
      this.subs.set(name, s);
    }
    return s;
  }

  async getJson<T>(name: SublevelName, key: string): Promise<T | undefined> {
    const v = await this.sublevel(name).get(key);
    return v === undefined ? undefined : (JSON.parse(v.toString('utf8')) as T);
  }

  async putJson(name: SublevelName, key: string, value: unknown): Promise<void> {
    await this.sublevel(name).put(key, Buffer.from(JSON.stringify(value)));
  }

  async del(name: SublevelName, key: string): Promise<void> {
    await this.sublevel(name).del(key);
  }

  async *entriesJson<T>(name: SublevelName): AsyncGenerator<[string, T]> {
    for await (const [k, v] of this.sublevel(name).iterator()) yield [k, JSON.parse(v.toString('utf8')) as T];
  }

  /** The instance record, made on first boot and kept across restarts. */
  async instance(preferredName?: string): Promise<InstanceRecord> {
    const existing = await this.getJson<InstanceRecord>('instance', 'server');
    if (existing) return existing;
    const record: InstanceRecord = {
      serverName: preferredName ?? `switchyard-${randomBytes(4).toString('hex')}`,
      uniqueId: randomUUID(),
      createdAt: new Date().toISOString(),
    };
    await this.putJson('instance', 'server', record);
    return record;
  }

  /** A random secret made once and kept (e.g. the JWT signing key). */
  async secret(name: string, bytes = 48): Promise<Buffer> {
    const existing = await this.sublevel('secrets').get(name);
    if (existing) return existing;
    const value = randomBytes(bytes);
    await this.sublevel('secrets').put(name, value);
    return value;
  }

  get status(): 'open' | 'closed' | string {
    return this.db.status;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.db.close();
  }
}
