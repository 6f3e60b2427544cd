/**
 * One configured LoRa radio: its counters, the nodes heard on it, and the downlink queues. No actor and no serial
 * code here: the service (lora.service.ts) connects it to the modem driver and to the messaging engine.
 *
 * Memory bounds (docs/devices.md, "LoRa radios"):
 * - nodes: at most `maxNodes` (≤ 255, node ids are one byte); a new node when the table is full evicts the node
 *   heard least recently (its counters go; a later packet starts it again as new);
 * - downlinks: at most `downlinkQueueSize` messages per destination node id (≤ 256 ids); a message for a full queue
 *   evicts that queue's oldest message (counted in `downlinksDropped`). Queues are kept while the radio is offline
 *   and drained when it is back, at most `transmissionRate` packets per minute.
 */
import { BROADCAST, decodeFrame, encodeFrame, Flags, MAX_PAYLOAD, packetGap, type Frame } from './framing.js';
import type { LoRaSerialDevice } from './config.js';
import { topicFor, topicsOf } from './config.js';
import type { ReceivedPacket } from './rn2483.js';

export interface NodeRecord {
  nodeId: number;
  lastRSSI: number;
  lastSNR: number;
  receivedPackets: number;
  missedPackets: number;
  duplicatePackets: number;
  lastPacketId: number;
  lastReadTime: number;
  lastWriteTime: number;
  sentPackets: number;
}

export interface Uplink {
  topic: string;
  node: NodeRecord;
  frame: Frame;
  rssi?: number;
  snr?: number;
}

export interface Transmitter {
  transmit(data: Buffer): Promise<void>;
}

export class LoRaRadio {
  readonly topics: { uplink: string; downlink: string };
  bytesSent = 0;
  bytesReceived = 0;
  packetsSent = 0;
  packetsReceived = 0;
  /** Packets addressed to another node (not published). */
  foreignPackets = 0;
  /** Packets too short for the header (not published). */
  malformedPackets = 0;
  downlinksDropped = 0;
  downlinksTooLarge = 0;
  transmitErrors = 0;
  nodesEvicted = 0;
  lastRead = 0;
  lastWrite = 0;
  /** What the modem said it is (`sys get ver`), once opened. */
  module = '';
  /** Least recently heard first (a node is moved to the end when heard). */
  readonly nodes = new Map<number, NodeRecord>();
  private readonly downlinks = new Map<number, Buffer[]>();
  /** ACK packets waiting for the air (at most 16; the oldest is dropped: its sender has retried by then). */
  private readonly acks: Buffer[] = [];
  acksSent = 0;
  private readonly txIds = new Map<number, number>();
  private transmitter: Transmitter | undefined;
  private sending = false;
  private nextTxAt = 0;
  private timer: NodeJS.Timeout | undefined;
  private rr = 0;

  constructor(
    readonly config: LoRaSerialDevice,
    private readonly publish: (u: Uplink) => void,
    private readonly now: () => number = Date.now,
  ) {
    this.topics = topicsOf(config);
  }

  get name(): string {
    return this.config.name;
  }

  /** Messages waiting for the air toward a node. */
  queued(nodeId: number): number {
    return this.downlinks.get(nodeId)?.length ?? 0;
  }

  // ------------------------------------------------------------------------------------------------------------
  // Uplink

  /** A packet the modem received. */
  received(p: ReceivedPacket): void {
    const now = this.now();
    this.packetsReceived++;
    this.bytesReceived += p.data.length;
    this.lastRead = now;
    const frame = decodeFrame(p.data);
    if (!frame) {
      this.malformedPackets++;
      return;
    }
    if ((frame.to !== this.config.address && frame.to !== BROADCAST) || frame.from === BROADCAST || frame.from === this.config.address) {
      this.foreignPackets++;
      return;
    }
    if (frame.flags & Flags.Ack) return; // acknowledgements carry nothing to publish
    if (this.config.acknowledge && frame.to === this.config.address) this.acknowledge(frame);
    let node = this.nodes.get(frame.from);
    const isNew = node === undefined;
    if (node === undefined) {
      if (this.nodes.size >= this.config.maxNodes) {
        const oldest = this.nodes.keys().next().value as number;
        this.nodes.delete(oldest);
        this.nodesEvicted++;
      }
      node = { nodeId: frame.from, lastRSSI: 0, lastSNR: 0, receivedPackets: 0, missedPackets: 0, duplicatePackets: 0, lastPacketId: -1, lastReadTime: 0, lastWriteTime: 0, sentPackets: 0 };
    } else {
      this.nodes.delete(frame.from); // re-inserted below: most recently heard last
    }
    this.nodes.set(frame.from, node);
    const gap = packetGap(isNew ? undefined : node.lastPacketId, frame.id);
    node.lastReadTime = now;
    if (p.rssi !== undefined) node.lastRSSI = p.rssi;
    if (p.snr !== undefined) node.lastSNR = p.snr;
    if (gap.duplicate) {
      node.duplicatePackets++;
      return; // a retransmission whose first copy was published
    }
    node.receivedPackets++;
    node.missedPackets += gap.missed;
    node.lastPacketId = frame.id;
    this.publish({ topic: topicFor(this.topics.uplink, frame.from), node, frame, ...(p.rssi !== undefined ? { rssi: p.rssi } : {}), ...(p.snr !== undefined ? { snr: p.snr } : {}) });
  }

  // ------------------------------------------------------------------------------------------------------------
  // Downlink

  /** A message published on node N's downlink topic. */
  enqueue(nodeId: number, payload: Buffer): void {
    if (payload.length > MAX_PAYLOAD) {
      this.downlinksTooLarge++;
      return;
    }
    let q = this.downlinks.get(nodeId);
    if (!q) this.downlinks.set(nodeId, (q = []));
    q.push(Buffer.from(payload));
    if (q.length > this.config.downlinkQueueSize) {
      q.shift();
      this.downlinksDropped++;
    }
    this.kick();
  }

  /** RadioHead's reliable datagram ACK: same id, ACK flag, one byte '!'. Duplicates are acknowledged too (the first ACK may be lost). */
  private acknowledge(frame: Frame): void {
    this.acks.push(encodeFrame({ to: frame.from, from: this.config.address, id: frame.id, flags: Flags.Ack, payload: Buffer.from('!') }));
    if (this.acks.length > 16) this.acks.shift();
    this.kick();
  }

  /** The modem to transmit through (undefined while offline: downlinks wait). */
  attach(t: Transmitter | undefined): void {
    this.transmitter = t;
    if (!t) this.acks.length = 0; // an ACK is only worth sending at once
    this.kick();
  }

  stop(): void {
    this.transmitter = undefined;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  private kick(): void {
    if (!this.transmitter || this.sending) return;
    const ack = this.acks.shift();
    if (ack) {
      this.send(ack, ack[0]!, true);
      return;
    }
    if (this.timer) return;
    const wait = this.nextTxAt - this.now();
    if (wait > 0) {
      this.timer = setTimeout(() => {
        this.timer = undefined;
        this.kick();
      }, wait);
      this.timer.unref();
      return;
    }
    const ids = [...this.downlinks.keys()];
    if (ids.length === 0) return;
    const nodeId = ids[this.rr++ % ids.length]!; // round robin over the nodes with something queued
    const q = this.downlinks.get(nodeId)!;
    const payload = q.shift()!;
    if (q.length === 0) this.downlinks.delete(nodeId);
    const id = this.txIds.get(nodeId) ?? 0;
    this.txIds.set(nodeId, (id + 1) & 0xff);
    const packet = encodeFrame({ to: nodeId, from: this.config.address, id, flags: 0, payload });
    const rate = this.config.transmissionRate;
    this.nextTxAt = this.now() + (rate > 0 ? Math.ceil(60000 / rate) : 0);
    this.send(packet, nodeId, false);
  }

  private send(packet: Buffer, nodeId: number, isAck: boolean): void {
    const t = this.transmitter!;
    this.sending = true;
    t.transmit(packet).then(
      () => {
        const now = this.now();
        this.packetsSent++;
        this.bytesSent += packet.length;
        this.lastWrite = now;
        if (isAck) this.acksSent++;
        const node = this.nodes.get(nodeId);
        if (node) {
          node.lastWriteTime = now;
          node.sentPackets++;
        }
      },
      () => {
        this.transmitErrors++;
      },
    ).finally(() => {
      this.sending = false;
      this.kick();
    });
  }
}
