import { I2cBusUnavailableError, type I2cBus, type I2cBusOpener } from './bus.js';

/**
 * One configured bus: opened on first use (and again after a failed open, at the next use), with a lock so that a
 * driver's multi-step transaction (write a command, wait, read the result) and a scan never interleave on the wire.
 * The lock queue holds at most one waiter per device plus the scans waiting; it is bounded by the device cap.
 */
export class BusHandle {
  private bus?: I2cBus;
  private opening?: Promise<I2cBus>;
  private tail: Promise<unknown> = Promise.resolve();
  /** Why the last open failed (shown in logs and the scan answer), cleared by a successful open. */
  lastError?: string;

  constructor(
    readonly number: number,
    private readonly opener: () => I2cBusOpener,
  ) {}

  get path(): string {
    return `/dev/i2c-${this.number}`;
  }

  /** The open bus; opens it when needed (throws I2cBusUnavailableError). */
  async open(): Promise<I2cBus> {
    if (this.bus) return this.bus;
    this.opening ??= this.opener()(this.number).then(
      (b) => {
        this.bus = b;
        this.lastError = undefined;
        this.opening = undefined;
        return b;
      },
      (err: unknown) => {
        this.opening = undefined;
        this.lastError = (err as Error).message;
        throw err instanceof I2cBusUnavailableError ? err : new I2cBusUnavailableError(this.number, (err as Error).message, { cause: err });
      },
    );
    return this.opening;
  }

  /** Runs `fn` with the bus, alone on it. */
  exclusive<T>(fn: (bus: I2cBus) => Promise<T>): Promise<T> {
    const run = this.tail.then(async () => fn(await this.open()));
    this.tail = run.catch(() => undefined);
    return run;
  }

  async close(): Promise<void> {
    const b = this.bus;
    this.bus = undefined;
    await this.tail;
    await b?.close().catch(() => undefined);
  }
}
