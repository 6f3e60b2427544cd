/**
 * The memory of a receiving link: the ids of the last `capacity` (65 536) messages a durable consumer handed to the
 * local engine. A message whose id is among them is a duplicate — a redelivery after its acknowledgement was lost (a
 * NATS server killed or restarted, a connection dropped, the broker itself killed before its acks left), or a resend
 * stored twice — and is acknowledged and dropped.
 *
 * One memory per durable consumer, kept by the link manager across reconnects and transport re-creations (it was
 * rebuilt with each connection, which let every redelivery after a fault through), and written to the store so it
 * also survives a broker restart. The record of an id goes into the engine's group commit in the same synchronous step
 * as the publish of its message (`record()`, an engine state record `link-ids!<consumer>!<slot>`, the slots a ring of
 * `capacity`): the message and its id are written in one LevelDB batch, or neither is. So a broker killed at any
 * moment has stored exactly the ids of the messages it stored, and the redeliveries JetStream makes after the restart
 * (their acks never left) are dropped. The link manager records the ids of stored messages only: a message that went
 * to connected clients only is remembered in memory (nothing of it is kept to deliver twice after a restart).
 */

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

/** What the memory needs of the engine: its state records, written through its group commit (src/engine). */
export interface StateRecords {
  putState(key: string, value: Buffer): Promise<void>;
  stateEntries(prefix?: string): AsyncGenerator<[string, Buffer]>;
}

/** Wider than any MQTT session state key's packet id (5 digits), so protocol code never takes these for its own. */
const SLOT_WIDTH = 6;

/** The ids of one durable consumer, in memory and in the engine's store (see the header of this file). */
export class StoredReceivedIds implements ReceivedIds {
  private readonly ring: IdRing;
  private nextSeq = 0;
  private readonly prefix: string;

  private constructor(
    private readonly engine: StateRecords,
    consumer: string,
    private readonly capacity: number,
  ) {
    this.ring = new IdRing(capacity);
    this.prefix = `link-ids!${consumer}!`;
  }

  /** The memory of `consumer`, loaded from the engine's store. */
  static async load(engine: StateRecords, consumer: string, capacity = RECEIVED_IDS_CAPACITY): Promise<StoredReceivedIds> {
    const m = new StoredReceivedIds(engine, consumer, capacity);
    const found: Array<[number, string]> = [];
    for await (const [, value] of engine.stateEntries(m.prefix)) {
      const text = value.toString('utf8');
      const nl = text.indexOf('\n');
      const seq = Number(text.slice(0, nl));
      if (nl > 0 && Number.isSafeInteger(seq)) found.push([seq, text.slice(nl + 1)]);
    }
    found.sort((a, b) => a[0] - b[0]);
    for (const [, id] of found) m.ring.add(id);
    m.nextSeq = found.length > 0 ? found[found.length - 1]![0] + 1 : 0;
    return m;
  }

  get size(): number {
    return this.ring.size;
  }

  has(id: string): boolean {
    return this.ring.has(id);
  }

  /**
   * Queues the record of `id` into the engine's batch being gathered now. Call it in the same synchronous step as the
   * engine publish of its message (and only for a publish the engine took), so both land in one batch.
   */
  record(id: string): void {
    const seq = this.nextSeq++;
    const slot = String(seq % this.capacity).padStart(SLOT_WIDTH, '0');
    // the publish's own promise is that batch's: a failure fails the publish, so the message is redelivered
    this.engine.putState(this.prefix + slot, Buffer.from(`${seq}\n${id}`)).catch(() => undefined);
  }

  /** The message of `id` was handed over (its record is in the store with it): remembered in memory. */
  remember(id: string): void {
    this.ring.add(id);
  }

  persist(): Promise<void> {
    return Promise.resolve();
  }
}
