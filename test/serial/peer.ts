/** The far end of a serial line speaking MQTT: packets written with mqtt-packet, replies parsed as they come. */
import mqttPacket from 'mqtt-packet';
import type { SerialPort } from 'serialport';

export class SerialMqttPeer {
  readonly packets: Array<Record<string, any>> = [];
  private waiters: Array<() => void> = [];
  private parser = mqttPacket.parser({ protocolVersion: 4 });

  constructor(private readonly port: SerialPort) {
    this.parser.on('packet', (p: Record<string, any>) => {
      this.packets.push(p);
      for (const w of this.waiters.splice(0)) w();
    });
    this.parser.on('error', () => {
      /* a malformed reply fails the test through what it waits for */
    });
    port.on('data', (b: Buffer) => this.parser.parse(b));
  }

  send(packet: Record<string, unknown>): void {
    this.port.write(mqttPacket.generate(packet as unknown as mqttPacket.Packet, { protocolVersion: 4 }));
  }

  /** The next packet of this type (taken out of the list), within `ms`. */
  async next(cmd: string, ms = 10000): Promise<Record<string, any>> {
    const deadline = Date.now() + ms;
    for (;;) {
      const i = this.packets.findIndex((p) => p.cmd === cmd);
      if (i >= 0) return this.packets.splice(i, 1)[0]!;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no ${cmd} within ${ms} ms (got ${this.packets.map((p) => p.cmd).join(', ') || 'nothing'})`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  connect(clientId: string, username: string, password: string): void {
    this.send({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: 4, clean: true, clientId, keepalive: 60, username, password: Buffer.from(password) });
  }
}
