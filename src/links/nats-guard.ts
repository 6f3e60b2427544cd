/**
 * Inbound limits on a NATS connection made by this broker (integration links, NATS discovery): a NATS server is a
 * peer, and a hostile or broken one must not make the broker hold gigabytes or starve its event loop.
 *
 * nats.js buffers whatever the server sends: a control line (INFO, MSG arguments, -ERR) grows without bound until
 * its CR LF, a MSG of up to 64 MiB is collected before it is dispatched, and the socket is never paused. Measured
 * against a hostile "server" (test/links/hostile-peers.test.ts): gigabytes held, the link `Establishing` with no error.
 * So the broker's NATS connections use `GuardedNodeTransport` (nats.js's own Node transport with these checks in its
 * read path; it is installed as nats.js's transport factory by `connectGuarded`):
 *
 * - **message size**: a MSG / HMSG larger than the limit (the link's `maxMessageSize`, lowered to the server's own
 *   `max_payload` from its INFO: a server that honours its own limit never sends more) is refused before any of its
 *   payload is buffered: the connection is closed with the reason (`onViolation`, and the connection's close error);
 * - **control lines** longer than `maxControlLine` (64 KiB; nats-server's own is 4 KiB, its INFO a few KiB) the same;
 * - **PING flood**: a server sends a PING every couple of minutes; more than `maxPings` within 10 s closes it;
 * - **flow control**: what the socket delivers is handed to nats.js's parser in bounded turns (`TURN_BYTES`, then a
 *   `setImmediate`, so timers, other sockets and REST get their turn), the socket is paused while more than
 *   `HIGH_WATER` bytes wait, and while the receiver says it is `busy()` (too many messages in its handlers) reading
 *   waits: the peer meets TCP back-pressure instead of filling the broker's memory.
 *
 * The checks scan control lines only (payloads are skipped by their announced size), so the cost per message is a
 * few comparisons.
 */
import { NodeTransport, nodeResolveHost } from '@nats-io/transport-node/lib/node_transport.js';
import {
  DataBuffer,
  deferred,
  extractProtocolMessage,
  INFO,
  NatsConnectionImpl,
  setTransportFactory,
  type ConnectionOptions,
  type NatsConnection,
  type ServerInfo,
} from '@nats-io/transport-node/lib/nats-base-client.js';

export interface NatsInboundLimits {
  /** Largest MSG / HMSG (headers and payload) taken, bytes; the server's `max_payload` lowers it. */
  maxMessageSize: number;
  /** Longest control line, bytes (default 64 KiB). */
  maxControlLine?: number;
  /** PINGs the server may send within 10 s (default 100). */
  maxPings?: number;
  /** Called once, with the reason, when the server broke a limit; the connection is then closed. */
  onViolation?(reason: string): void;
  /** While it answers true, nothing more is read from the server (the receiver has enough in hand). */
  busy?(): boolean;
  /** Resolves once `busy()` may answer false (a handler finished); reading resumes then, without polling. */
  notBusy?(): Promise<void>;
}

/** The close error of a connection whose server broke an inbound limit. */
export class NatsLimitError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NatsLimitError';
  }
}

export const DEFAULT_MAX_CONTROL_LINE = 64 * 1024;
export const DEFAULT_MAX_PINGS = 100;
const PING_WINDOW_MS = 10_000;
/**
 * Bytes handed to the parser before the read loop yields to the event loop (frames are cut to this size): about a
 * thousand small messages, each handled at once by the link, so a turn stays around ten milliseconds.
 */
export const TURN_BYTES = 16 * 1024;
/** Bytes waiting for the parser above which the socket is paused (and resumed below LOW_WATER). */
export const HIGH_WATER = 1024 * 1024;
const LOW_WATER = 256 * 1024;
/** The option key under which connectGuarded hands the limits to the transport (nats.js keeps unknown options). */
const LIMITS_KEY = 'switchyardInboundLimits';

const CR = 0x0d;
const NL = 0x0a;

/** Byte `k` of the line `l[from, to)`, 0 past its end. */
function byteAt(l: Uint8Array, from: number, to: number, k: number): number {
  return from + k < to ? l[from + k]! : 0;
}

function upper(b: number): number {
  return b >= 0x61 && b <= 0x7a ? b - 0x20 : b;
}

/**
 * Follows the NATS protocol a server sends, control lines only: the size of each MSG / HMSG, the length of each line,
 * the PINGs. `scan()` answers the reason of the first limit broken, or undefined.
 */
export class InboundScanner {
  /** Payload bytes (of the message being received) still to skip. */
  private skip = 0;
  /** The start of a control line split across chunks. */
  private partial: Buffer[] = [];
  private partialLength = 0;
  private pings = 0;
  private pingWindowStart = 0;
  /** The server's max_payload (from its INFO), 0 = unknown. */
  serverMaxPayload = 0;
  messages = 0;

  constructor(
    private readonly limits: NatsInboundLimits,
    private readonly now: () => number = Date.now,
  ) {}

  get messageLimit(): { bytes: number; what: string } {
    const own = this.limits.maxMessageSize;
    if (this.serverMaxPayload > 0 && this.serverMaxPayload < own) return { bytes: this.serverMaxPayload, what: "the server's max_payload" };
    return { bytes: own, what: 'the link\'s maxMessageSize' };
  }

  scan(chunk: Uint8Array): string | undefined {
    const maxLine = this.limits.maxControlLine ?? DEFAULT_MAX_CONTROL_LINE;
    let i = 0;
    const n = chunk.length;
    while (i < n) {
      if (this.skip > 0) {
        const k = Math.min(this.skip, n - i);
        this.skip -= k;
        i += k;
        continue;
      }
      const nl = chunk.indexOf(NL, i);
      if (nl < 0) {
        this.partialLength += n - i;
        if (this.partialLength > maxLine) return `the NATS server sent a protocol line longer than ${maxLine} bytes`;
        this.partial.push(Buffer.from(chunk.buffer, chunk.byteOffset + i, n - i));
        return undefined;
      }
      let why: string | undefined;
      if (this.partialLength > 0) {
        if (this.partialLength + (nl - i) > maxLine) return `the NATS server sent a protocol line longer than ${maxLine} bytes`;
        this.partial.push(Buffer.from(chunk.buffer, chunk.byteOffset + i, nl - i));
        const line = Buffer.concat(this.partial);
        this.partial = [];
        this.partialLength = 0;
        why = this.line(line, 0, line.length);
      } else {
        if (nl - i > maxLine) return `the NATS server sent a protocol line longer than ${maxLine} bytes`;
        // read in place (no view object per line: one per message at low rates, when each read holds one)
        why = this.line(chunk, i, nl);
      }
      i = nl + 1;
      if (why) return why;
    }
    return undefined;
  }

  /** The control line `l[from, to)` (without its LF). */
  private line(l: Uint8Array, from: number, to: number): string | undefined {
    const b0 = upper(byteAt(l, from, to, 0));
    // MSG <subject> <sid> [reply] <size> / HMSG <subject> <sid> [reply] <hdr size> <total size>
    if ((b0 === 0x4d && upper(byteAt(l, from, to, 1)) === 0x53 && upper(byteAt(l, from, to, 2)) === 0x47) || (b0 === 0x48 && upper(byteAt(l, from, to, 1)) === 0x4d && upper(byteAt(l, from, to, 2)) === 0x53)) {
      let end = to;
      while (end > from && (l[end - 1] === CR || l[end - 1] === 0x20 || l[end - 1] === 0x09)) end--;
      let start = end;
      while (start > from && l[start - 1]! >= 0x30 && l[start - 1]! <= 0x39) start--;
      if (start === end || end - start > 15) return undefined; // not a size: nats.js refuses the line itself
      let size = 0;
      for (let k = start; k < end; k++) size = size * 10 + (l[k]! - 0x30);
      const limit = this.messageLimit;
      if (size > limit.bytes) return `the NATS server sent a message of ${size} bytes (the limit is ${limit.bytes}, ${limit.what})`;
      this.messages++;
      this.skip = size; // its CR LF follows and reads as an empty line
      return undefined;
    }
    // PING
    if (b0 === 0x50 && upper(byteAt(l, from, to, 1)) === 0x49) {
      const now = this.now();
      if (now - this.pingWindowStart > PING_WINDOW_MS) {
        this.pingWindowStart = now;
        this.pings = 0;
      }
      const max = this.limits.maxPings ?? DEFAULT_MAX_PINGS;
      if (++this.pings > max) return `the NATS server sent more than ${max} PINGs within ${PING_WINDOW_MS / 1000} s (a flood)`;
    }
    return undefined;
  }
}

/** nats.js's Node transport with the inbound limits in its read path (see the header of this file). */
export class GuardedNodeTransport extends NodeTransport {
  private scanner?: InboundScanner;
  private limits: NatsInboundLimits = { maxMessageSize: 64 * 1024 * 1024 };
  private queued = 0;
  private paused = false;
  private violated = false;

  /**
   * Bytes received from the server and not yet handed to the parser: how far reading is behind the server. A receiver
   * that may drop (QoS 0) uses it to drop while behind, so the socket is not paused for messages it may lose anyway.
   */
  get unread(): number {
    return this.queued;
  }

  override async connect(hp: { hostname: string; port: number; tlsName: string }, options: Parameters<NodeTransport['connect']>[1]): Promise<void> {
    const given = (options as Record<string, unknown>)[LIMITS_KEY] as NatsInboundLimits | undefined;
    if (given) this.limits = given;
    this.scanner = new InboundScanner(this.limits);
    return super.connect(hp, options);
  }

  private violate(reason: string): void {
    if (this.violated) return;
    this.violated = true;
    try {
      this.limits.onViolation?.(reason);
    } catch {
      /* the listener's problem */
    }
    this.socket?.destroy(new NatsLimitError(reason));
  }

  /** nats.js's peekInfo, bounded: an INFO line longer than the control-line limit is refused. */
  override peekInfo(): Promise<ServerInfo> {
    const d = deferred<ServerInfo>();
    const maxLine = this.limits.maxControlLine ?? DEFAULT_MAX_CONTROL_LINE;
    let peekError: Error | undefined;
    let size = 0;
    const socket = this.socket;
    socket.on('data', (frame: Buffer) => {
      this.yields.push(frame);
      size += frame.length;
      if (frame.indexOf(NL) < 0) {
        if (size > maxLine) {
          socket.removeAllListeners();
          const reason = `the NATS server sent an INFO line longer than ${maxLine} bytes`;
          this.violated = true;
          this.limits.onViolation?.(reason);
          d.reject(new NatsLimitError(reason));
          socket.destroy();
        }
        return;
      }
      socket.removeAllListeners();
      try {
        const pm = extractProtocolMessage(DataBuffer.concat(...this.yields));
        const m = INFO.exec(pm);
        if (!m) throw new Error('unexpected response from server');
        const info = JSON.parse(m[1]!) as ServerInfo;
        const scanner = this.scanner!;
        if (typeof info.max_payload === 'number' && info.max_payload > 0) scanner.serverMaxPayload = info.max_payload;
        // what came with the INFO is scanned like everything after it
        for (const y of this.yields) {
          const why = scanner.scan(y);
          if (why) {
            this.violated = true;
            this.limits.onViolation?.(why);
            throw new NatsLimitError(why);
          }
        }
        for (const y of this.yields) this.queued += y.length;
        d.resolve(info);
      } catch (err) {
        d.reject(err as Error);
      }
    });
    socket.on('error', (err: Error) => {
      peekError = err;
    });
    socket.on('close', () => {
      socket.removeAllListeners();
      d.reject(peekError);
    });
    return d;
  }

  override setupHandlers(): void {
    let connError: Error | undefined;
    const socket = this.socket;
    socket.on('data', (frame: Buffer) => {
      if (this.violated) return;
      const why = this.scanner!.scan(frame);
      if (why) return this.violate(why);
      this.yields.push(frame);
      this.queued += frame.length;
      if (!this.paused && this.queued > HIGH_WATER) {
        this.paused = true;
        socket.pause();
      }
      this.signal.resolve();
    });
    socket.on('error', (err: Error) => {
      connError = err;
    });
    socket.on('end', () => {
      if (socket.destroyed) return;
      socket.write(new Uint8Array(0), () => socket.end());
    });
    socket.on('close', () => {
      // the private _closed of NodeTransport, as its own handler calls it
      void (this as unknown as { _closed(err?: Error, internal?: boolean): Promise<void> })._closed(connError, false);
    });
  }

  /** Resolves when `p` does, or once the transport is closed (`done`, looked at every second meanwhile). */
  private untilOrDone(p: Promise<void>): Promise<void> {
    return new Promise<void>((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const tick = () => {
        if (this.done) resolve();
        else timer = setTimeout(tick, 1000);
      };
      timer = setTimeout(tick, 1000);
      void p.then(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  /** nats.js's read loop, in bounded turns (see the header of this file). */
  override async *iterate(): AsyncIterableIterator<Uint8Array> {
    let turn = 0;
    while (true) {
      if (this.yields.length === 0) {
        await this.signal;
        turn = 0;
      }
      const yields = this.yields;
      this.yields = [];
      for (let i = 0; i < yields.length && !this.done; i++) {
        const frame = yields[i]!;
        for (let at = 0; at < frame.length && !this.done; ) {
          const piece = frame.length - at <= TURN_BYTES - turn ? (at === 0 ? frame : frame.subarray(at)) : frame.subarray(at, at + TURN_BYTES - turn);
          at += piece.length;
          this.queued -= piece.length;
          yield piece;
          turn += piece.length;
          if (turn >= TURN_BYTES) {
            turn = 0;
            await new Promise<void>((r) => setImmediate(r));
          }
          while (this.limits.busy?.() && !this.done) {
            if (!this.paused) {
              this.paused = true;
              this.socket?.pause();
            }
            // woken when a handler finishes (notBusy), else looked at again in 5 ms
            const room = this.limits.notBusy?.();
            await (room === undefined ? new Promise<void>((r) => setTimeout(r, 5)) : this.untilOrDone(room));
            turn = 0;
          }
        }
      }
      // `queued` counts what is received and not yet handed to the parser (this.yields included)
      if (this.paused && this.queued < LOW_WATER && !this.done) {
        this.paused = false;
        this.socket?.resume();
      }
      if (this.done) break;
      if (this.yields.length === 0) this.signal = deferred<void>();
    }
  }
}

/** The `unread` bytes of a connection made by connectGuarded (0 for any other connection). */
export function unreadBytes(nc: NatsConnection): number {
  const transport = (nc as unknown as { protocol?: { transport?: unknown } }).protocol?.transport;
  return transport instanceof GuardedNodeTransport ? transport.unread : 0;
}

/**
 * `connect()` of @nats-io/transport-node with the inbound limits: nats.js's transport factory is global, so it is set
 * to the guarded transport right before each connection (another caller of transport-node's connect() in the same
 * process resets it; a connection that got the plain transport that way is closed and made again).
 */
export async function connectGuarded(opts: ConnectionOptions, limits: NatsInboundLimits): Promise<NatsConnection> {
  for (let attempt = 0; ; attempt++) {
    setTransportFactory({ factory: () => new GuardedNodeTransport(), dnsResolveFn: nodeResolveHost });
    const nc = await NatsConnectionImpl.connect({ ...opts, [LIMITS_KEY]: limits } as ConnectionOptions);
    const transport = (nc as unknown as { protocol?: { transport?: unknown } }).protocol?.transport;
    if (transport instanceof GuardedNodeTransport) return nc;
    await nc.close().catch(() => undefined);
    if (attempt >= 3) throw new Error('could not open a NATS connection with inbound limits (another transport factory is in use)');
  }
}
