/**
 * Outbound state a broker's connections share, owned by the broker instance (no module-level state):
 * - `WriteBatch`: connections with bytes to write, flushed once per tick (one socket write per connection per tick),
 *   one concatenation shared by connections that write the same buffers;
 * - `EncodeCache`: the last message fanned out, encoded once per (protocol class, QoS, retain) with packet id 0, so
 *   a message delivered to many subscribers is encoded a handful of times, not once per subscriber.
 */
import type { Message } from '../../engine/index.js';

export interface Flushable {
  flush(): void;
}

export class WriteBatch {
  private readonly dirty: Flushable[] = [];
  private scheduled = false;
  /** The parts and bytes `join` concatenated last in this flush (released when the flush ends). */
  private lastParts: Buffer[] | undefined = undefined;
  private lastJoined: Buffer | undefined = undefined;
  private readonly flushAll = (): void => {
    this.scheduled = false;
    const d = this.dirty;
    for (let i = 0; i < d.length; i++) d[i]!.flush();
    d.length = 0;
    this.lastParts = undefined;
    this.lastJoined = undefined;
  };

  /**
   * The bytes of `parts` (`total` long) as one buffer for one socket write. Subscribers of one fan-out get the same
   * encoded PUBLISH buffers in the same order (EncodeCache), so the previous connection's concatenation is reused
   * when its parts are the same buffer objects: 100 subscribers of a topic cost one copy of a turn's messages, not
   * 100 (Buffer.concat and its allocation were 16 % of the broker's CPU in fan-out 1→100). The joined buffer is only
   * read by the sockets, never written, like the shared PUBLISH bytes it is made of. The caller gives up `parts`.
   */
  join(parts: Buffer[], total: number): Buffer {
    const last = this.lastParts;
    const n = parts.length;
    if (last !== undefined && last.length === n && this.lastJoined!.length === total) {
      let same = true;
      for (let i = 0; i < n; i++) {
        if (last[i] !== parts[i]) {
          same = false;
          break;
        }
      }
      if (same) return this.lastJoined!;
    }
    const joined = Buffer.concat(parts, total);
    // only inside a flush: a connection flushed on its own (close) must not keep a buffer alive until the next one
    if (this.scheduled || this.dirty.length > 0) {
      this.lastParts = parts;
      this.lastJoined = joined;
    }
    return joined;
  }

  /** `c` has bytes to write: flush it with the others at the end of this tick. */
  add(c: Flushable): void {
    this.dirty.push(c);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.flushAll);
    }
  }
}

/**
 * PUBLISH bytes of one message, packet id at `pidOffset` (QoS > 0): the first delivery's (it sends these bytes), the
 * others copy them and write their own id there.
 */
export interface EncodedPublish {
  bytes: Buffer;
  pidOffset: number;
}

export class EncodeCache {
  msg: Message | undefined = undefined;
  topic = '';
  /** Slot `(v5 ? 6 : 0) + qos * 2 + (retain ? 1 : 0)`. */
  readonly slots: Array<EncodedPublish | undefined> = new Array<EncodedPublish | undefined>(12);

  /**
   * An inbound QoS 0 PUBLISH being published (set by the PUBLISH handler around `engine.publish`): its bytes are
   * already what a subscriber of the same protocol class gets (QoS 0, no DUP, no retain flag, no properties), so
   * the message with this payload starts with them in slot `seedSlot` instead of being encoded again.
   */
  private seedPayload: Buffer | undefined = undefined;
  private seedFrame: Buffer | undefined = undefined;
  private seedTopic = '';
  private seedSlot = 0;

  seed(topic: string, payload: Buffer, frame: Buffer, v5: boolean): void {
    this.seedTopic = topic;
    this.seedPayload = payload;
    this.seedFrame = frame;
    this.seedSlot = v5 ? 6 : 0;
  }

  unseed(): void {
    this.seedPayload = undefined;
    this.seedFrame = undefined;
  }

  /** The seeded slot's entry, reused message after message (a delivery reads `bytes` at once and keeps no entry). */
  private readonly seeded: EncodedPublish = { bytes: Buffer.alloc(0), pidOffset: 0 };

  /** The slots for this message and topic (emptied when they were another message's). */
  for(msg: Message, topic: string): Array<EncodedPublish | undefined> {
    if (this.msg !== msg || this.topic !== topic) {
      this.msg = msg;
      this.topic = topic;
      const slots = this.slots;
      // most messages fill one slot: clearing twelve with a loop costs less than Array.prototype.fill per message
      for (let i = 0; i < 12; i++) if (slots[i] !== undefined) slots[i] = undefined;
      // the payload is the inbound packet's own view; what else goes into those bytes is checked too (a message
      // made from another packet with the same payload object must encode to the same bytes to use them)
      if (msg.payload === this.seedPayload && topic === this.seedTopic && plain(msg)) {
        this.seeded.bytes = this.seedFrame!;
        slots[this.seedSlot] = this.seeded;
      }
    }
    return this.slots;
  }
}

/** QoS 0, not retained, nothing that becomes a v5 property: the PUBLISH is topic and payload only. */
function plain(msg: Message): boolean {
  return (
    msg.qos === 0 &&
    !msg.retain &&
    msg.expiresAt === 0 &&
    msg.payloadFormat === undefined &&
    msg.contentType === undefined &&
    msg.responseTopic === undefined &&
    msg.correlationData === undefined &&
    msg.userProperties === undefined &&
    msg.subscriptionIds === undefined
  );
}
