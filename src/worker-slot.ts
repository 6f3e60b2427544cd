import { Worker, type ResourceLimits, type Transferable } from 'node:worker_threads';

/**
 * One worker thread that runs one job at a time: the lifecycle the password hash pool (src/security/hash-pool.ts)
 * and the model loader (src/models/loader.ts) share.
 *
 * - The worker is code given as a string (`eval`), so it runs the same from the sources (tsx), the compiled tree and
 *   the bundle. It answers each `{ id, ...message }` with a message carrying the same `id`.
 * - It is started on the first job and unref'd (it never keeps the process alive); with `idleMs` it is ended once it
 *   has had no job for that long (a V8 isolate costs 15-40 MiB) and started again by the next one.
 * - A worker that dies (an error, an exit, out of its heap cap) fails its job with an Error; the next job gets a new
 *   worker.
 * - A job still running after `timeoutMs` ends its worker (nothing else can stop code running on a thread) and fails
 *   with WorkerTimeoutError: a stuck job never holds the slot, and everything queued behind it, for good.
 */
export interface WorkerSlotOptions {
  /** The worker's code (CommonJS, `require` available). */
  source: string;
  /** The thread's name (shown by diagnostics). */
  name: string;
  resourceLimits?: ResourceLimits;
  /** A job running longer ends its worker and fails. */
  timeoutMs: number;
  /** End the worker after this long without a job (default: keep it). */
  idleMs?: number;
}

/** A job that ran longer than its slot's `timeoutMs`: its worker was ended. */
export class WorkerTimeoutError extends Error {
  constructor(name: string, ms: number) {
    super(`the ${name} worker took longer than ${ms} ms and was stopped`);
  }
}

/** How long a new worker's thread may take to start, on top of the job's own timeoutMs. */
const START_MS = 30_000;

interface Running {
  id: number;
  resolve: (m: Record<string, unknown>) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout | undefined;
}

export class WorkerSlot {
  private worker: Worker | undefined;
  /** Workers whose thread is up ('online'). */
  private readonly online = new WeakSet<Worker>();
  private running: Running | undefined;
  private idleTimer: NodeJS.Timeout | undefined;
  private nextId = 1;
  private closed = false;

  constructor(private readonly opts: WorkerSlotOptions) {}

  /** Whether a job is running. */
  get busy(): boolean {
    return this.running !== undefined;
  }

  /** Whether a worker thread exists (started, not yet ended). */
  get started(): boolean {
    return this.worker !== undefined;
  }

  /**
   * Runs one job: posts `{ id, ...message }` and resolves with the worker's answer of that id. One at a time: the
   * caller queues (a call while busy rejects).
   */
  run(message: Record<string, unknown>, transfer?: readonly Transferable[]): Promise<Record<string, unknown>> {
    if (this.closed) return Promise.reject(new Error(`the ${this.opts.name} worker is stopped`));
    if (this.running) return Promise.reject(new Error(`the ${this.opts.name} worker is busy`));
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    const w = this.workerFor();
    return new Promise((resolve, reject) => {
      const id = this.nextId++;
      const expire = (ms: number) => () => {
        if (this.running?.id !== id) return;
        this.running = undefined;
        reject(new WorkerTimeoutError(this.opts.name, ms));
        this.end(w);
      };
      const running: Running = { id, resolve, reject, timer: undefined };
      const arm = (ms: number): void => {
        clearTimeout(running.timer);
        running.timer = setTimeout(expire(ms), ms);
        running.timer.unref();
      };
      if (this.online.has(w)) arm(this.opts.timeoutMs);
      else {
        // the job's time starts when its thread is up: starting a V8 isolate takes tens of ms, and on a loaded machine
        // hundreds (measured in CI: a 300 ms test job failed on a new worker's start-up); a thread that does not come
        // up within START_MS fails the job the same way
        arm(START_MS + this.opts.timeoutMs);
        w.once('online', () => {
          if (this.running === running) arm(this.opts.timeoutMs);
        });
      }
      this.running = running;
      w.postMessage({ id, ...message }, transfer);
    });
  }

  /** Ends the worker; a running job fails. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    this.fail(new Error(`the ${this.opts.name} worker is stopped`));
    const w = this.worker;
    this.worker = undefined;
    if (w) await w.terminate().catch(() => undefined);
  }

  private workerFor(): Worker {
    if (this.worker) return this.worker;
    const w = new Worker(this.opts.source, { eval: true, execArgv: [], env: {}, name: this.opts.name, ...(this.opts.resourceLimits ? { resourceLimits: this.opts.resourceLimits } : {}) });
    w.unref();
    w.once('online', () => this.online.add(w));
    w.on('message', (m: Record<string, unknown>) => {
      const r = this.running;
      if (this.worker !== w || r === undefined || r.id !== m.id) return;
      this.running = undefined;
      clearTimeout(r.timer);
      r.resolve(m);
      this.armIdle();
    });
    const dead = (err: Error) => {
      if (this.worker !== w) return;
      this.worker = undefined;
      this.fail(err);
    };
    w.on('error', dead);
    w.on('exit', (code) => dead(new Error(`the ${this.opts.name} worker stopped (exit code ${code})`)));
    this.worker = w;
    return w;
  }

  private fail(err: Error): void {
    const r = this.running;
    this.running = undefined;
    if (r) {
      clearTimeout(r.timer);
      r.reject(err);
    }
  }

  private end(w: Worker): void {
    if (this.worker === w) this.worker = undefined;
    void w.terminate().catch(() => undefined);
  }

  private armIdle(): void {
    if (this.opts.idleMs === undefined || this.idleTimer || this.closed) return;
    this.idleTimer = setTimeout(() => {
      this.idleTimer = undefined;
      const w = this.worker;
      if (w && !this.running) {
        this.worker = undefined;
        void w.terminate().catch(() => undefined);
      }
    }, this.opts.idleMs);
    this.idleTimer.unref();
  }
}
