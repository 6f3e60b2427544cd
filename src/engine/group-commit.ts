/**
 * Group commit: every store write made while a batch is being written goes into the next single
 * `store.batch(ops)`. Writers get the promise of the batch their operation is in (one promise per batch, not per
 * operation). The first write into an idle committer is flushed on a microtask, so everything queued by the same
 * synchronous burst lands in one batch.
 *
 * A failed batch calls `onFailure(err)` once and rejects its promise. The promise is marked handled, so writers
 * that do not await it (deletes after an acknowledgement) never cause an unhandled rejection.
 */
import type { StoreTimings } from './counters.js';
import type { EngineStore, StoreOp } from './engine-store.js';

function noop(): void {}

class Batch {
  readonly ops: StoreOp[] = [];
  readonly timings: Array<StoreTimings | undefined> = [];
  readonly promise: Promise<void>;
  resolve!: () => void;
  reject!: (err: unknown) => void;

  constructor() {
    this.promise = new Promise<void>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    this.promise.catch(noop);
  }
}

export class GroupCommit {
  private pending: Batch | undefined;
  private writing: Batch | undefined;
  private scheduled = false;
  /** Number of `store.batch` calls made. */
  batches = 0;
  /** Number of operations written successfully. */
  opsWritten = 0;
  failures = 0;

  constructor(
    private readonly store: EngineStore,
    private readonly onFailure: (err: unknown) => void,
  ) {}

  put(key: string, value: Buffer, timings?: StoreTimings): Promise<void> {
    return this.add({ type: 'put', key, value }, timings);
  }

  del(key: string, timings?: StoreTimings): Promise<void> {
    return this.add({ type: 'del', key }, timings);
  }

  /**
   * The promise of the batch being gathered now (undefined when none is): every write made in the same synchronous
   * step joins this one batch, so a step that wrote can take it instead of keeping each write's promise.
   */
  get gathering(): Promise<void> | undefined {
    return this.pending?.promise;
  }

  /** Nothing queued and nothing being written. */
  get idle(): boolean {
    return this.pending === undefined && this.writing === undefined;
  }

  /** Resolves once every operation queued so far has been written (or has failed). */
  async flush(): Promise<void> {
    while (this.pending !== undefined || this.writing !== undefined) {
      const batch = this.pending ?? this.writing!;
      await batch.promise.catch(noop);
    }
  }

  private add(op: StoreOp, timings: StoreTimings | undefined): Promise<void> {
    let batch = this.pending;
    if (batch === undefined) {
      batch = this.pending = new Batch();
      if (this.writing === undefined && !this.scheduled) {
        this.scheduled = true;
        queueMicrotask(this.kick);
      }
    }
    batch.ops.push(op);
    batch.timings.push(timings);
    return batch.promise;
  }

  private readonly kick = (): void => {
    this.scheduled = false;
    if (this.writing !== undefined) return;
    const batch = this.pending;
    if (batch === undefined) return;
    this.pending = undefined;
    this.writing = batch;
    this.batches++;
    const started = process.hrtime.bigint();
    let write: Promise<void>;
    try {
      write = this.store.batch(batch.ops);
    } catch (err) {
      write = Promise.reject(err);
    }
    write.then(
      () => {
        this.opsWritten += batch.ops.length;
        const perOp = Number(process.hrtime.bigint() - started) / batch.ops.length;
        for (let i = 0; i < batch.ops.length; i++) {
          const t = batch.timings[i];
          if (t === undefined) continue;
          if (batch.ops[i]!.type === 'put') {
            t.writeNs += perOp;
            t.writes++;
          } else {
            t.deleteNs += perOp;
            t.deletes++;
          }
        }
        this.done(batch);
        batch.resolve();
      },
      (err: unknown) => {
        this.failures++;
        this.done(batch);
        try {
          this.onFailure(err);
        } finally {
          batch.reject(err);
        }
      },
    );
  };

  private done(batch: Batch): void {
    if (this.writing === batch) this.writing = undefined;
    if (this.pending !== undefined) this.kick();
  }
}
