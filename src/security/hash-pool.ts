import { availableParallelism } from 'node:os';
import { BrokerError } from '../errors.js';
import { WorkerSlot } from '../worker-slot.js';

/**
 * Password hashing off the store's path (docs/security.md, "Password hashing"). `crypto.scrypt` runs on libuv's
 * thread pool, which LevelDB (classic-level) uses for every read and write: a burst of logins used to fill the pool
 * with ~50 ms hashes and hold the store back for everyone (a QoS 1 PUBACK waited 31 s). Here every hash runs in a
 * small pool of worker threads of its own (`scryptSync` on the worker), in front of which a bounded queue waits:
 *
 * - at most `workers` hashes run at once (default: one per core but one, at least one);
 * - at most `queueLimit` wait; beyond that a login is refused at once with ServerBusyError (REST 503, MQTT CONNACK
 *   0x89 Server busy / 3.1.1 return code 3) instead of waiting for a turn that may be minutes away;
 * - waiting checks are queued per source (the client address) and taken round-robin, one source at a time, and one
 *   source may hold at most a quarter of the queue: a burst from one address neither fills the queue nor delays
 *   another client by more than about one hash per busy source;
 * - a job whose caller went away (the socket closed, the request was aborted: its AbortSignal fired) is dropped
 *   from the queue and never hashed.
 *
 * On Linux the worker threads run at nice 10 (their own thread only), so the event loop and the store's threads
 * come first when the cores are busy.
 *
 * Each worker is a WorkerSlot (src/worker-slot.ts): started on first use, unref'd (it never keeps the process alive),
 * replaced when it dies (its job fails with an Error, the next job gets a new worker), and ended when a hash runs
 * longer than HASH_TIMEOUT_MS (that login fails; nothing waits behind a stuck thread).
 */

/** A hash running longer ends its worker (scrypt with the stored parameters takes about 50 ms). */
const HASH_TIMEOUT_MS = 30_000;

/** A login refused because the hashing queue is full: 503 with Retry-After, MQTT 0x89 (3.1.1: 3). */
export class ServerBusyError extends BrokerError {
  constructor(
    message: string,
    readonly retryAfterSeconds = 1,
  ) {
    super(message, 503);
  }
}

/** A job dropped because its caller went away (the answer, 503, reaches nobody). */
export class HashAbortedError extends BrokerError {
  constructor() {
    super('the caller went away before the password was checked', 503);
  }
}

export interface ScryptJob {
  password: Buffer;
  salt: Buffer;
  keylen: number;
  N: number;
  r: number;
  p: number;
  maxmem: number;
}

export interface HashPoolOptions {
  /** Hashes run at once (worker threads). */
  workers: number;
  /** Jobs waiting beyond the running ones. */
  queueLimit: number;
  /** Jobs one source may have waiting (default: a quarter of queueLimit, at least 1). */
  perSourceLimit?: number;
}

export interface HashPoolStats {
  workers: number;
  running: number;
  queued: number;
  /** Hashes done since start. */
  hashed: number;
  /** Jobs refused because the queue was full. */
  refused: number;
  /** Jobs dropped because their caller went away. */
  dropped: number;
}

const WORKER_SOURCE = `
const { parentPort } = require('node:worker_threads');
const { scryptSync } = require('node:crypto');
// Linux: this thread (not the process) runs at a lower priority (nice 10), so under a burst of logins the event loop
// and the store's threads get the CPU first; elsewhere nothing changes.
try {
  const tid = Number(require('node:fs').readlinkSync('/proc/thread-self').split('/').pop());
  if (tid > 0) require('node:os').setPriority(tid, 10);
} catch {}
parentPort.on('message', (m) => {
  try {
    const key = scryptSync(Buffer.from(m.password), Buffer.from(m.salt), m.keylen, { N: m.N, r: m.r, p: m.p, maxmem: m.maxmem });
    parentPort.postMessage({ id: m.id, key });
  } catch (err) {
    parentPort.postMessage({ id: m.id, error: String(err && err.message || err) });
  }
});
`;

interface Pending {
  id: number;
  source: string;
  job: ScryptJob;
  resolve: (key: Buffer) => void;
  reject: (err: Error) => void;
  signal?: AbortSignal;
  onAbort?: () => void;
}

interface Slot {
  worker: WorkerSlot;
  current?: Pending;
}

/** The default number of hashing workers: one per core but one (the event loop's), at least one. */
export function defaultHashWorkers(): number {
  return Math.max(1, Math.min(4, availableParallelism() - 1));
}

export class HashPool {
  private readonly slots: Slot[] = [];
  /** Waiting jobs per source, in round-robin order (a source served goes to the end). */
  private readonly queues = new Map<string, Pending[]>();
  private waiting = 0;
  private nextId = 0;
  private closed = false;
  private readonly counters = { hashed: 0, refused: 0, dropped: 0 };

  constructor(private readonly opts: HashPoolOptions) {}

  get stats(): HashPoolStats {
    return { workers: this.opts.workers, running: this.slots.filter((s) => s.current).length, queued: this.waiting, ...this.counters };
  }

  /**
   * Runs scrypt on a worker. Rejects with ServerBusyError at once when `queueLimit` jobs already wait, with
   * HashAbortedError when `signal` fires before the job started (a started hash finishes; its result is dropped).
   */
  scrypt(job: ScryptJob, signal?: AbortSignal, source = ''): Promise<Buffer> {
    if (signal?.aborted) {
      this.counters.dropped++;
      return Promise.reject(new HashAbortedError());
    }
    if (this.closed) return Promise.reject(new ServerBusyError('The server is stopping; password checks are not taken'));
    const idle = this.idleSlot();
    if (!idle) {
      const mine = this.queues.get(source)?.length ?? 0;
      const perSource = this.opts.perSourceLimit ?? Math.max(1, Math.floor(this.opts.queueLimit / 4));
      if (this.waiting >= this.opts.queueLimit || mine >= perSource) {
        this.counters.refused++;
        return Promise.reject(new ServerBusyError(`Server busy: ${this.waiting} password checks are waiting; try again shortly`));
      }
    }
    return new Promise<Buffer>((resolve, reject) => {
      const p: Pending = { id: this.nextId++, source, job, resolve, reject, signal };
      if (signal) {
        p.onAbort = () => {
          const q = this.queues.get(p.source);
          const i = q ? q.indexOf(p) : -1;
          if (!q || i < 0) return; // running: it finishes, the caller ignores the result
          q.splice(i, 1);
          if (q.length === 0) this.queues.delete(p.source);
          this.waiting--;
          this.counters.dropped++;
          reject(new HashAbortedError());
        };
        signal.addEventListener('abort', p.onAbort, { once: true });
      }
      if (idle) this.start(idle, p);
      else this.enqueue(p);
    });
  }

  /** Stops the workers; waiting jobs are refused. */
  async close(): Promise<void> {
    this.closed = true;
    for (const q of this.queues.values()) for (const p of q) this.settle(p, new ServerBusyError('The server is stopping; password checks are not taken'));
    this.queues.clear();
    this.waiting = 0;
    const slots = this.slots.splice(0);
    for (const s of slots) if (s.current) this.settle(s.current, new ServerBusyError('The server is stopping; password checks are not taken'));
    for (const s of slots) s.current = undefined;
    await Promise.all(slots.map((s) => s.worker.close()));
  }

  private idleSlot(): Slot | undefined {
    if (this.closed) return undefined;
    const free = this.slots.find((s) => !s.current);
    if (free) return free;
    if (this.slots.length < this.opts.workers) return this.spawn();
    return undefined;
  }

  private spawn(): Slot {
    const slot: Slot = { worker: new WorkerSlot({ source: WORKER_SOURCE, name: 'password-hash', timeoutMs: HASH_TIMEOUT_MS }) };
    this.slots.push(slot);
    return slot;
  }

  private start(slot: Slot, p: Pending): void {
    slot.current = p;
    const { job } = p;
    slot.worker.run({ password: job.password, salt: job.salt, keylen: job.keylen, N: job.N, r: job.r, p: job.p, maxmem: job.maxmem }).then(
      (m) => {
        if (slot.current !== p) return; // closed meanwhile: settled already
        slot.current = undefined;
        this.counters.hashed++;
        const key = m.key as Uint8Array | undefined;
        if (typeof m.error === 'string' || key === undefined) this.settle(p, new Error(typeof m.error === 'string' ? m.error : 'no key'));
        else this.settle(p, undefined, Buffer.from(key.buffer, key.byteOffset, key.byteLength));
        this.next(slot);
      },
      (err: Error) => {
        // the worker died or timed out: this job fails, the waiting ones go on (the slot starts a new worker)
        if (slot.current !== p) return;
        slot.current = undefined;
        this.settle(p, err);
        if (!this.closed) this.next(slot);
      },
    );
  }

  private enqueue(p: Pending): void {
    const q = this.queues.get(p.source);
    if (q) q.push(p);
    else this.queues.set(p.source, [p]);
    this.waiting++;
  }

  /** The next job, round-robin over the sources (a source served goes to the back), or the slot stays idle. */
  private next(slot: Slot): void {
    const first = this.queues.entries().next();
    if (first.done) return;
    const [source, q] = first.value;
    const p = q.shift()!;
    this.queues.delete(source);
    if (q.length > 0) this.queues.set(source, q);
    this.waiting--;
    this.start(slot, p);
  }

  private settle(p: Pending, err: Error | undefined, key?: Buffer): void {
    if (p.signal && p.onAbort) p.signal.removeEventListener('abort', p.onAbort);
    if (err) p.reject(err);
    else p.resolve(key!);
  }
}
