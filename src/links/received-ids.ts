/**
 * The memory of a receiving link: the ids of the last `capacity` (65 536) messages a durable consumer handed to the
 * local engine. A message whose id is among them is a duplicate — a redelivery after its acknowledgement was lost (a
 * NATS server killed or restarted, a connection dropped, the broker itself killed before its acks left), or a resend
 * stored twice — and is acknowledged and dropped.
 *
 * One memory per durable consumer, kept by the link manager across reconnects and transport re-creations (it was
 * rebuilt with each connection, which let every redelivery after a fault through), and written to the store
 * (sublevel `links`, keys `ids:<consumer>:<seq>`, one record per batch) so it also survives a broker restart:
 * `persist()` writes the ids remembered since the last call as one batch, and the transport sends the acknowledgements
 * of those messages only after it resolved. So after any fault at most the messages handled in the last moment before
 * it (stored by the engine, their ids not yet written) can arrive twice.
 */
import type { Sub } from '../store/store.js';

export interface ReceivedIds {
  has(id: string): boolean;
  remember(id: string): void;
  /** Resolves once the ids remembered so far are durable (the transport acknowledges their messages after it). */
  persist(): Promise<void>;
}

export const RECEIVED_IDS_CAPACITY = 65536;

/** The ids in memory only (a transport used without a link manager, tests). */
export class IdRing implements ReceivedIds {
  private readonly seen = new Set<string>();
  private readonly ring: string[] = [];
  private at = 0;

  constructor(private readonly capacity = RECEIVED_IDS_CAPACITY) {}

  get size(): number {
    return this.seen.size;
  }

  has(id: string): boolean {
    return this.seen.has(id);
  }

  /** Adds an id; answers false when it was there already. */
  add(id: string): boolean {
    if (this.seen.has(id)) return false;
    if (this.ring.length < this.capacity) this.ring.push(id);
    else {
      this.seen.delete(this.ring[this.at]!);
      this.ring[this.at] = id;
      this.at = (this.at + 1) % this.capacity;
    }
    this.seen.add(id);
    return true;
  }

  remember(id: string): void {
    this.add(id);
  }

  persist(): Promise<void> {
    return Promise.resolve();
  }
}

const SEQ_WIDTH = 12;

/** The ids of one durable consumer, in memory and in the store (see the header of this file). */
export class StoredReceivedIds implements ReceivedIds {
  private readonly ring: IdRing;
  private pending: string[] = [];
  /** The batches in the store, oldest first: their sequence number and size. */
  private readonly batches: Array<{ seq: number; count: number }> = [];
  private stored = 0;
  private nextSeq = 0;
  private writing: Promise<void> = Promise.resolve();

  private constructor(
    private readonly sub: Sub,
    private readonly consumer: string,
    private readonly capacity: number,
    private readonly onError: (err: Error) => void,
  ) {
    this.ring = new IdRing(capacity);
  }

  /** The memory of `consumer`, loaded from the store. */
  static async load(sub: Sub, consumer: string, onError: (err: Error) => void, capacity = RECEIVED_IDS_CAPACITY): Promise<StoredReceivedIds> {
    const m = new StoredReceivedIds(sub, consumer, capacity, onError);
    const prefix = m.prefix();
    for await (const [key, value] of sub.iterator({ gte: prefix, lt: prefix + '\uffff' })) {
      const seq = Number(key.slice(prefix.length));
      let ids: unknown;
      try {
        ids = JSON.parse(value.toString('utf8'));
      } catch {
        continue;
      }
      if (!Array.isArray(ids)) continue;
      for (const id of ids) if (typeof id === 'string') m.ring.add(id);
      m.batches.push({ seq, count: ids.length });
      m.stored += ids.length;
      m.nextSeq = seq + 1;
    }
    await m.trim();
    return m;
  }

  get size(): number {
    return this.ring.size;
  }

  private prefix(): string {
    return `ids:${this.consumer}:`;
  }

  has(id: string): boolean {
    return this.ring.has(id);
  }

  remember(id: string): void {
    if (this.ring.add(id)) this.pending.push(id);
  }

  persist(): Promise<void> {
    if (this.pending.length === 0) return this.writing;
    const ids = this.pending;
    this.pending = [];
    const seq = this.nextSeq++;
    // one write at a time, in order: a later batch never lands before an earlier one
    this.writing = this.writing.then(async () => {
      try {
        await this.sub.put(this.prefix() + String(seq).padStart(SEQ_WIDTH, '0'), Buffer.from(JSON.stringify(ids)));
        this.batches.push({ seq, count: ids.length });
        this.stored += ids.length;
        await this.trim();
      } catch (err) {
        this.onError(err as Error);
      }
    });
    return this.writing;
  }

  /** Drops the oldest batches while the rest still hold `capacity` ids. */
  private async trim(): Promise<void> {
    const drop: Array<{ type: 'del'; key: string }> = [];
    while (this.batches.length > 1 && this.stored - this.batches[0]!.count >= this.capacity) {
      const b = this.batches.shift()!;
      this.stored -= b.count;
      drop.push({ type: 'del', key: this.prefix() + String(b.seq).padStart(SEQ_WIDTH, '0') });
    }
    if (drop.length) await this.sub.batch(drop);
  }
}
