/**
 * Inbound limits on an MQTT bridge's connection: the remote broker is a peer, and a hostile or broken one must not
 * make this broker hold its memory or starve its event loop.
 *
 * mqtt.js (mqtt-packet's parser) collects a packet whole before it looks at it: a PUBLISH that announces 256 MB is
 * buffered to its end (measured: ~545 MB added), and its own `maximumPacketSize` check (MQTT 5 only) runs after
 * that. So the bridge's stream is wrapped in `MqttInboundGuard`, a Duplex between the socket (TCP, TLS or WebSocket
 * stream) and mqtt.js, which follows the fixed headers of what the peer sends:
 *
 * - **packet size**: a packet whose fixed header announces more than `maxPacketSize` bytes (the link's
 *   `maxMessageSize`, also sent as Maximum Packet Size in an MQTT 5 CONNECT, which a conforming server honours
 *   [MQTT-3.1.2-24]) is refused when its header arrives, before its body is buffered: the connection is closed with
 *   the reason (`onViolation`);
 * - **malformed** remaining lengths (more than 4 bytes) the same;
 * - **PINGRESP flood**: a server answers one PINGREQ per keep-alive; more than `maxPings` PINGRESPs within 10 s
 *   closes the connection;
 * - **flow control**: at most `TURN_BYTES` are handed to mqtt.js per event-loop turn (then the socket is paused until
 *   a `setImmediate`), and the socket stays paused while mqtt.js has not taken what it was given (it takes the next
 *   PUBLISH only once the link's handler stored the previous one): the peer meets TCP back-pressure.
 */
import { Duplex } from 'node:stream';

export interface MqttInboundLimits {
  /** Largest packet taken (fixed header included), bytes. */
  maxPacketSize: number;
  /** PINGRESPs the peer may send within 10 s (default 100). */
  maxPings?: number;
  /** Called once, with the reason, when the peer broke a limit; the stream is then destroyed. */
  onViolation?(reason: string): void;
}

export class MqttLimitError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'MqttLimitError';
  }
}

export const TURN_BYTES = 16 * 1024;
/** The largest piece handed to mqtt.js at once. */
const PIECE_BYTES = 4096;
export const DEFAULT_MAX_PINGS = 100;
const PING_WINDOW_MS = 10_000;
const PACKET_NAMES = ['reserved', 'CONNECT', 'CONNACK', 'PUBLISH', 'PUBACK', 'PUBREC', 'PUBREL', 'PUBCOMP', 'SUBSCRIBE', 'SUBACK', 'UNSUBSCRIBE', 'UNSUBACK', 'PINGREQ', 'PINGRESP', 'DISCONNECT', 'AUTH'];

/** Follows MQTT fixed headers; `scan()` answers the reason of the first limit broken, or undefined. */
export class MqttPacketScanner {
  private phase: 'type' | 'length' = 'type';
  private type = 0;
  private length = 0;
  private multiplier = 1;
  private lengthBytes = 0;
  private skip = 0;
  private pings = 0;
  private pingWindowStart = 0;
  packets = 0;

  constructor(
    private readonly limits: MqttInboundLimits,
    private readonly now: () => number = Date.now,
  ) {}

  scan(chunk: Uint8Array): string | undefined {
    let i = 0;
    const n = chunk.length;
    while (i < n) {
      if (this.skip > 0) {
        const k = Math.min(this.skip, n - i);
        this.skip -= k;
        i += k;
        continue;
      }
      const b = chunk[i++]!;
      if (this.phase === 'type') {
        this.type = b >> 4;
        this.phase = 'length';
        this.length = 0;
        this.multiplier = 1;
        this.lengthBytes = 0;
        continue;
      }
      this.length += (b & 0x7f) * this.multiplier;
      this.multiplier *= 128;
      this.lengthBytes++;
      if (b & 0x80) {
        if (this.lengthBytes >= 4) return 'the MQTT peer sent a malformed packet length';
        continue;
      }
      const total = 1 + this.lengthBytes + this.length;
      if (total > this.limits.maxPacketSize) {
        return `the MQTT peer sent a ${PACKET_NAMES[this.type]} packet of ${total} bytes (the limit is ${this.limits.maxPacketSize}, the link's maxMessageSize)`;
      }
      if (this.type === 13) {
        const now = this.now();
        if (now - this.pingWindowStart > PING_WINDOW_MS) {
          this.pingWindowStart = now;
          this.pings = 0;
        }
        const max = this.limits.maxPings ?? DEFAULT_MAX_PINGS;
        if (++this.pings > max) return `the MQTT peer sent more than ${max} PINGRESPs within ${PING_WINDOW_MS / 1000} s (a flood)`;
      }
      this.packets++;
      this.skip = this.length;
      this.phase = 'type';
    }
    return undefined;
  }
}

/** The stream mqtt.js reads and writes, between it and the socket (see the header of this file). */
export class MqttInboundGuard extends Duplex {
  private readonly scanner: MqttPacketScanner;
  private violated = false;
  /** Waiting for the next turn (bounded turns). */
  private turnPause = false;
  /** mqtt.js has not taken what it was given. */
  private backPressure = false;
  private turn = 0;
  /** Received and checked, not yet handed to mqtt.js (at most one socket read). */
  private stash: Buffer | undefined;
  private ended = false;

  constructor(
    private readonly inner: Duplex,
    private readonly limits: MqttInboundLimits,
  ) {
    super({ allowHalfOpen: false });
    this.scanner = new MqttPacketScanner(limits);
    inner.on('data', (chunk: Buffer) => this.onData(chunk));
    inner.on('end', () => {
      this.ended = true;
      this.drain();
    });
    inner.on('error', (err: Error) => this.destroy(err));
    inner.on('close', () => {
      if (!this.destroyed) this.destroy();
    });
    // mqtt.js's TLS and WebSocket builders report the connection through these; pass them on
    for (const ev of ['connect', 'secureConnect']) inner.on(ev, (...args: unknown[]) => this.emit(ev, ...args));
  }

  private onData(chunk: Buffer): void {
    if (this.violated) return;
    const why = this.scanner.scan(chunk);
    if (why) {
      this.violated = true;
      this.stash = undefined;
      try {
        this.limits.onViolation?.(why);
      } catch {
        /* the listener's problem */
      }
      this.destroy(new MqttLimitError(why));
      return;
    }
    this.stash = this.stash ? Buffer.concat([this.stash, chunk]) : chunk;
    this.drain();
  }

  /**
   * Hands mqtt.js at most TURN_BYTES per event-loop turn, in pieces of PIECE_BYTES (mqtt.js parses what it is given
   * whole before it handles the first packet, and handles the rest in one cascade of callbacks): the socket stays
   * paused while anything waits.
   */
  private drain(): void {
    while (this.stash && !this.backPressure && !this.turnPause && !this.destroyed) {
      const stash = this.stash;
      const n = Math.min(stash.length, TURN_BYTES - this.turn, PIECE_BYTES);
      this.stash = n < stash.length ? stash.subarray(n) : undefined;
      this.turn += n;
      if (!this.push(n < stash.length ? stash.subarray(0, n) : stash)) this.backPressure = true;
      if (this.turn >= TURN_BYTES) {
        this.turn = 0;
        this.turnPause = true;
        setImmediate(() => {
          this.turnPause = false;
          this.drain();
        });
      }
    }
    if (this.destroyed) return;
    if (!this.stash && this.ended) {
      this.push(null);
      return;
    }
    if (this.stash || this.backPressure || this.turnPause) this.inner.pause();
    else this.inner.resume();
  }

  override _read(): void {
    this.backPressure = false;
    this.drain();
  }

  override _write(chunk: Buffer, encoding: BufferEncoding, cb: (err?: Error | null) => void): void {
    if (this.inner.write(chunk, encoding)) cb();
    else this.inner.once('drain', () => cb());
  }

  override _final(cb: (err?: Error | null) => void): void {
    this.inner.end();
    cb();
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.stash = undefined;
    this.inner.destroy();
    cb(err);
  }
}
