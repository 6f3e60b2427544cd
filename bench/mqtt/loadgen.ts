/**
 * A lean MQTT 3.1.1 load generator on raw sockets (so the generator, not a client library, sets the pace):
 * pre-encoded PUBLISH batches written under TCP backpressure, PUBACKs gathered per read.
 */
import { connect as netConnect, type Socket } from 'node:net';
import mqttPacket from 'mqtt-packet';
import { Framer } from '../../src/protocol/mqtt/codec.js';

export class LoadClient {
  received = 0;
  acked = 0;
  onPublish: ((payload: Buffer, frame: Buffer) => void) | undefined;
  private waiters = new Map<number, () => void>();
  private readonly framer: Framer;
  private pubacks: Buffer[] = [];
  stopped = false;

  private constructor(readonly socket: Socket) {
    this.framer = new Framer(this, 1 << 28);
    socket.on('data', (b: Buffer) => {
      this.framer.push(b);
      if (this.pubacks.length) {
        this.socket.write(this.pubacks.length === 1 ? this.pubacks[0]! : Buffer.concat(this.pubacks));
        this.pubacks = [];
      }
    });
    socket.on('error', () => {});
  }

  frame(type: number, flags: number, frame: Buffer, body: number): void {
    if (type === 3) {
      this.received++;
      const qos = (flags >> 1) & 3;
      const tlen = frame.readUInt16BE(body);
      let off = body + 2 + tlen;
      if (qos > 0) {
        const pid = frame.readUInt16BE(off);
        off += 2;
        this.pubacks.push(Buffer.from([0x40, 0x02, pid >> 8, pid & 0xff]));
      }
      this.onPublish?.(frame.subarray(off), frame);
      return;
    }
    if (type === 4) {
      this.acked++;
      this.waiters.get(-4)?.();
      return;
    }
    const w = this.waiters.get(type);
    if (w) {
      this.waiters.delete(type);
      w();
    }
  }

  private wait(type: number): Promise<void> {
    return new Promise((res, rej) => {
      const t = setTimeout(() => rej(new Error(`no packet type ${type}`)), 30000);
      this.waiters.set(type, () => {
        clearTimeout(t);
        res();
      });
    });
  }

  static async connect(port: number, clientId: string): Promise<LoadClient> {
    const socket = netConnect(port, '127.0.0.1');
    socket.setNoDelay(true);
    await new Promise<void>((res, rej) => {
      socket.once('connect', () => res());
      socket.once('error', rej);
    });
    const c = new LoadClient(socket);
    const acked = c.wait(2);
    socket.write(mqttPacket.generate({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: 4, clean: true, clientId, keepalive: 0 } as never));
    await acked;
    return c;
  }

  async subscribe(topic: string, qos: 0 | 1): Promise<void> {
    const done = this.wait(9);
    this.socket.write(mqttPacket.generate({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic, qos }] } as never));
    await done;
  }

  /** Run `fn` whenever a PUBACK arrives. */
  onAck(fn: () => void): void {
    this.waiters.set(-4, fn);
  }

  close(): void {
    this.stopped = true;
    this.socket.destroy();
  }
}

export function publishPacket(topic: string, payload: Buffer, qos: 0 | 1, pid = 1): Buffer {
  return mqttPacket.generate({ cmd: 'publish', topic, payload, qos, messageId: pid, retain: false, dup: false } as never);
}
