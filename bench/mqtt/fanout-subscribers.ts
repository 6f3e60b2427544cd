/**
 * Fan-out QoS 1's subscribers (bench/mqtt/run.ts), spread over worker threads so that reading, decoding and acknowledging 100
 * deliveries per message is not all on the load generator's one thread (which then set the pace for every broker: the
 * broker sat idle 47 % of a profile of fan-out QoS 1 with 100 subscribers on the main thread).
 *
 * Each worker holds its share of the subscribers on raw sockets and a lean loop per read: the socket reads into one
 * buffer it keeps (`onread`), PUBLISHes are framed in place and counted, their PUBACKs (QoS 1: every delivery is
 * acknowledged) are gathered into one write per read; nothing is allocated per message. Deliveries are counted per
 * worker in shared memory, which the main thread reads at the window's edges.
 *
 * The same file is the worker (when loaded as one) and the main thread's handle (`FanoutSubscribers.start`).
 */
import { connect as netConnect, type Socket } from 'node:net';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import mqttPacket from 'mqtt-packet';

interface Job {
  port: number;
  topic: string;
  qos: 0 | 1;
  clientIds: string[];
  counts: SharedArrayBuffer;
  slot: number;
}

/** Bytes read per socket read (the buffer each socket reads into, reused). */
const READ_BYTES = 64 * 1024;
/**
 * Largest packet a subscriber keeps across reads (a packet split between two reads). The fan-out packets are under 100
 * bytes; a larger one is a bench setup error and ends the worker.
 */
const MAX_PACKET = 64 * 1024;

/** The main thread's handle on the subscribers of one fan-out run. */
export class FanoutSubscribers {
  private constructor(
    private readonly workers: Worker[],
    private readonly counts: Uint32Array,
  ) {}

  /**
   * Connects `n` subscribers to `topic` at `qos`, spread over `threads` workers (client ids `${prefix}-0`...), and
   * resolves once every one has its SUBACK.
   */
  static async start(port: number, topic: string, qos: 0 | 1, n: number, threads: number, prefix: string): Promise<FanoutSubscribers> {
    const shared = new SharedArrayBuffer(4 * threads);
    const workers: Worker[] = [];
    const ready: Array<Promise<void>> = [];
    for (let t = 0; t < threads; t++) {
      const clientIds: string[] = [];
      for (let i = t; i < n; i += threads) clientIds.push(`${prefix}-${i}`);
      const job: Job = { port, topic, qos, clientIds, counts: shared, slot: t };
      const w = new Worker(new URL(import.meta.url), { workerData: job });
      workers.push(w);
      ready.push(
        new Promise<void>((res, rej) => {
          w.once('message', (m: unknown) => (m === 'ready' ? res() : rej(new Error(String(m)))));
          w.once('error', rej);
          w.once('exit', (code) => rej(new Error(`fan-out subscriber worker exited with ${code}`)));
        }),
      );
    }
    try {
      await Promise.all(ready);
    } catch (err) {
      await Promise.all(workers.map((w) => w.terminate()));
      throw err;
    }
    return new FanoutSubscribers(workers, new Uint32Array(shared));
  }

  /** Deliveries received so far by all subscribers (a uint32 per worker: 7 minutes at 10 M deliveries/s each). */
  received(): number {
    let sum = 0;
    for (let t = 0; t < this.counts.length; t++) sum += Atomics.load(this.counts, t);
    return sum;
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.terminate()));
  }
}

/** One subscriber's socket and framing state. */
class Subscriber {
  /** Bytes of a packet split between reads, waiting for the rest. */
  private carry = Buffer.allocUnsafe(MAX_PACKET + READ_BYTES);
  private carryLen = 0;
  /** PUBACKs of one read, written at its end: 4 bytes per PUBLISH of at least 7, so never more than the bytes read. */
  private acks = Buffer.allocUnsafe(MAX_PACKET + READ_BYTES);
  /** Called with each packet type other than PUBLISH (CONNACK, SUBACK during setup). */
  onControl: ((type: number) => void) | undefined;
  readonly socket: Socket;

  constructor(
    port: number,
    private readonly counts: Uint32Array,
    private readonly slot: number,
  ) {
    this.socket = netConnect({
      port,
      host: '127.0.0.1',
      noDelay: true,
      onread: { buffer: Buffer.allocUnsafe(READ_BYTES), callback: (n, buf) => this.read(buf as Buffer, n) },
    });
    this.socket.on('error', () => {});
  }

  private read(buf: Buffer, n: number): boolean {
    let src = buf;
    let len = n;
    if (this.carryLen > 0) {
      buf.copy(this.carry, this.carryLen, 0, n);
      src = this.carry;
      len = this.carryLen + n;
    }
    let off = 0;
    let acks = 0;
    let publishes = 0;
    while (len - off >= 2) {
      // remaining length: variable byte integer of at most 4 bytes
      let remaining = 0;
      let mul = 1;
      let i = off + 1;
      let complete = false;
      for (let k = 0; k < 4 && i < len; k++, i++) {
        const b = src[i]!;
        remaining += (b & 0x7f) * mul;
        mul *= 128;
        if ((b & 0x80) === 0) {
          complete = true;
          i++;
          break;
        }
      }
      if (!complete || i + remaining > len) break;
      const first = src[off]!;
      const type = first >> 4;
      if (type === 3) {
        publishes++;
        if ((first & 0x06) !== 0) {
          // QoS 1: the packet id follows the topic
          const at = i + 2 + ((src[i]! << 8) | src[i + 1]!);
          const o = acks * 4;
          this.acks[o] = 0x40;
          this.acks[o + 1] = 0x02;
          this.acks[o + 2] = src[at]!;
          this.acks[o + 3] = src[at + 1]!;
          acks++;
        }
      } else {
        this.onControl?.(type);
      }
      off = i + remaining;
    }
    const rest = len - off;
    if (rest > MAX_PACKET) throw new Error(`fan-out subscriber: a packet over ${MAX_PACKET} bytes`);
    if (rest > 0) src.copy(this.carry, 0, off, len); // when src is carry itself this moves its tail to the front (copy allows overlap)
    this.carryLen = rest;
    if (publishes > 0) Atomics.add(this.counts, this.slot, publishes);
    // one write per read; a copy, since `acks` is reused before the socket has sent it
    if (acks > 0) this.socket.write(Buffer.from(this.acks.subarray(0, acks * 4)));
    return true;
  }

  /** Resolves when the next control packet of `type` arrives. */
  next(type: number): Promise<void> {
    return new Promise((res, rej) => {
      const t = setTimeout(() => rej(new Error(`fan-out subscriber: no packet type ${type}`)), 30000);
      this.onControl = (got) => {
        if (got !== type) return;
        clearTimeout(t);
        this.onControl = undefined;
        res();
      };
    });
  }
}

async function runWorker(job: Job): Promise<void> {
  const counts = new Uint32Array(job.counts);
  for (const clientId of job.clientIds) {
    const s = new Subscriber(job.port, counts, job.slot);
    await new Promise<void>((res, rej) => {
      s.socket.once('connect', () => res());
      s.socket.once('error', rej);
    });
    const connack = s.next(2);
    s.socket.write(mqttPacket.generate({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: 4, clean: true, clientId, keepalive: 0 } as never));
    await connack;
    const suback = s.next(9);
    s.socket.write(mqttPacket.generate({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: job.topic, qos: job.qos }] } as never));
    await suback;
  }
  parentPort!.postMessage('ready');
}

if (!isMainThread && parentPort) {
  runWorker(workerData as Job).catch((err: unknown) => {
    parentPort!.postMessage(`fan-out subscriber worker failed: ${err instanceof Error ? err.message : String(err)}`);
  });
}
