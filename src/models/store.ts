/**
 * The ML model store: one file per model under `{dataDirectory}/models/`, written atomically (a temp file in the
 * same directory, fsync, rename, fsync of the directory), so a crash or a SIGKILL during an upload leaves either the
 * old model or the new one, never a torn file; temp files left by a crash are removed when the store opens.
 *
 * Names are one path segment of letters, digits, '.', '_' and '-' (at most 128, not starting with '.', no '..'),
 * checked before any file system call: `../../etc/passwd` or `%2e%2e%2f` never reach the disk.
 */
import { randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream, mkdirSync, readdirSync, unlinkSync, type ReadStream } from 'node:fs';
import { open, readFile, readdir, rename, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { BrokerError, ConflictError, NotFoundError, ValidationError } from '../errors.js';

const NAME_RE = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$/;
const TEMP_PREFIX = '.upload-';

/** 406 as MAPS answers when ML is not available (`MessageDaemon.modelStore.enabled: false`). */
export class ModelsDisabledError extends BrokerError {
  constructor() {
    super('Failure, ML not supported', 406);
  }
}

export class ModelNotFoundError extends NotFoundError {
  constructor() {
    super('Model not found');
  }
}

/** Checks a model name; throws a 400 naming the rule. */
export function checkModelName(name: string | undefined): string {
  if (name === undefined || name.trim() === '') throw new ValidationError('Model name must not be blank');
  if (!NAME_RE.test(name) || name.includes('..')) {
    throw new ValidationError("Invalid model name: one path segment of letters, digits, '.', '_' and '-', at most 128 characters, not starting with '.' and without '..'");
  }
  return name;
}

export interface ModelStoreOptions {
  dir: string;
  maxModelSize: number;
  maxModels: number;
}

/** A reservation of one of the `maxModels` places for a name; `release()` gives it back (idempotent). */
export interface ModelSlot {
  readonly name: string;
  release(): void;
}

/** Checks a model file before it replaces the stored one (throws a BrokerError to refuse it). */
export type ModelCheck = (tmpFile: string) => Promise<void>;

export class ModelStore {
  readonly dir: string;
  readonly maxModelSize: number;
  readonly maxModels: number;
  /** Called after a model is written or deleted (selector functions drop their cached copy). */
  onChange?: (name: string) => void;
  /** The names in the directory (kept by this process: the count `maxModels` is checked against, synchronously). */
  private readonly files: Set<string>;
  /** Names being written or trained and not in `files` yet, with the number of reservations of each. */
  private readonly pending = new Map<string, number>();

  constructor(opts: ModelStoreOptions) {
    this.dir = opts.dir;
    this.maxModelSize = opts.maxModelSize;
    this.maxModels = opts.maxModels;
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    // temp files of uploads a crash interrupted: the old model (if any) is intact, the partial one is discarded
    for (const f of readdirSync(this.dir)) if (f.startsWith(TEMP_PREFIX)) unlinkSync(join(this.dir, f));
    this.files = new Set(readdirSync(this.dir).filter((f) => NAME_RE.test(f) && !f.includes('..')));
  }

  private path(name: string): string {
    return join(this.dir, checkModelName(name));
  }

  /** The file path of a model (name checked). */
  fileOf(name: string): string {
    return this.path(name);
  }

  /** True when the store holds the model (from the index: no file system call). */
  has(name: string): boolean {
    return this.files.has(name);
  }

  /** Models held plus new names reserved (uploads under way, models being trained online). */
  get count(): number {
    let n = this.files.size;
    for (const k of this.pending.keys()) if (!this.files.has(k)) n++;
    return n;
  }

  /**
   * Reserves a place for `name`, synchronously (before any await, so concurrent uploads and trainings cannot
   * overshoot `maxModels`): a name already held or already reserved takes no new place. 409 when full.
   */
  reserve(name: string): ModelSlot {
    checkModelName(name);
    if (!this.files.has(name) && !this.pending.has(name) && this.count >= this.maxModels) {
      throw new ConflictError(`The model store holds its maximum of ${this.maxModels} models (MessageDaemon.modelStore.maxModels, models being uploaded or trained included); delete some first`);
    }
    this.pending.set(name, (this.pending.get(name) ?? 0) + 1);
    let done = false;
    return {
      name,
      release: () => {
        if (done) return;
        done = true;
        const n = (this.pending.get(name) ?? 1) - 1;
        if (n <= 0) this.pending.delete(name);
        else this.pending.set(name, n);
      },
    };
  }

  async list(): Promise<string[]> {
    return (await readdir(this.dir)).filter((f) => NAME_RE.test(f) && !f.includes('..')).sort();
  }

  /** Size in bytes, or undefined when absent. */
  async size(name: string): Promise<number | undefined> {
    try {
      const st = await stat(this.path(name));
      return st.isFile() ? st.size : undefined;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw err;
    }
  }

  async exists(name: string): Promise<boolean> {
    return (await this.size(name)) !== undefined;
  }

  /** A read stream of the model and its size; ModelNotFoundError when absent. */
  async open(name: string): Promise<{ stream: ReadStream; size: number }> {
    const size = await this.size(name);
    if (size === undefined) throw new ModelNotFoundError();
    return { stream: createReadStream(this.path(name)), size };
  }

  async read(name: string): Promise<Buffer | undefined> {
    try {
      return await readFile(this.path(name));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw err;
    }
  }

  /**
   * Writes a model from a stream (an upload), atomically, replacing any model of that name. `truncated()` tells
   * whether the source stopped at the size limit (the upload is then refused, 413); `check` may refuse the complete
   * file before it replaces the old one. The place is reserved before anything is awaited (409 when full), and
   * on any failure the temp file is removed and the place given back. Returns the bytes written.
   */
  async write(name: string, source: Readable, truncated?: () => boolean, check?: ModelCheck): Promise<number> {
    const final = this.path(name);
    let slot: ModelSlot;
    try {
      slot = this.reserve(name);
    } catch (err) {
      source.resume();
      throw err;
    }
    const tmp = join(this.dir, `${TEMP_PREFIX}${randomBytes(8).toString('hex')}`);
    let bytes = 0;
    source.on('data', (c: Buffer) => (bytes += c.length));
    try {
      await pipeline(source, createWriteStream(tmp, { flags: 'wx', mode: 0o600 }));
      if (truncated?.()) throw new BrokerError(`The model is larger than the limit of ${this.maxModelSize} bytes (MessageDaemon.modelStore.maxModelSize)`, 413);
      await check?.(tmp);
      await this.commit(tmp, final, name);
    } catch (err) {
      await unlink(tmp).catch(() => {});
      throw err;
    } finally {
      slot.release();
    }
    this.onChange?.(name);
    return bytes;
  }

  /**
   * Writes a model from bytes (a model trained by a selector function), atomically; `notify` false: no onChange.
   * Takes its own place (409 when full; a trainer holds one already, so it never is) and refuses more than
   * maxModelSize bytes (413).
   */
  async writeBuffer(name: string, data: Buffer, notify = true): Promise<void> {
    const final = this.path(name);
    if (data.length > this.maxModelSize) throw new BrokerError(`The model is larger than the limit of ${this.maxModelSize} bytes (MessageDaemon.modelStore.maxModelSize)`, 413);
    const slot = this.reserve(name);
    const tmp = join(this.dir, `${TEMP_PREFIX}${randomBytes(8).toString('hex')}`);
    try {
      const fh = await open(tmp, 'wx', 0o600);
      try {
        await fh.writeFile(data);
      } finally {
        await fh.close();
      }
      await this.commit(tmp, final, name);
    } catch (err) {
      await unlink(tmp).catch(() => {});
      throw err;
    } finally {
      slot.release();
    }
    if (notify) this.onChange?.(name);
  }

  private async commit(tmp: string, final: string, name: string): Promise<void> {
    const fh = await open(tmp, 'r+');
    try {
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(tmp, final);
    this.files.add(name); // in the index as soon as it is in the directory
    const dh = await open(this.dir, 'r');
    try {
      await dh.sync();
    } catch {
      /* some file systems cannot fsync a directory */
    } finally {
      await dh.close();
    }
  }

  async delete(name: string): Promise<void> {
    try {
      await unlink(this.path(name));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
        this.files.delete(name);
        throw new ModelNotFoundError();
      }
      throw err;
    }
    this.files.delete(name);
    this.onChange?.(name);
  }
}
