import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { SerialPort } from 'serialport';

/**
 * A simulated Microchip RN2483 in radio mode on the far end of a pseudo-terminal: it answers the documented UART
 * commands (sys get ver, mac pause, radio set ..., radio rx, radio rxstop, radio tx, radio get snr / rssi) with the
 * documented answers, line by line with CR LF, and plays the air: `inject` hands a packet from a simulated node to
 * the radio while it listens (`radio_rx  <hex>`), `transmissions` records every `radio tx`.
 */
export class Rn2483Sim {
  readonly commands: string[] = [];
  readonly transmissions: Buffer[] = [];
  readonly settings = new Map<string, string>();
  version = 'RN2483 1.0.5 Oct 31 2018 15:06:52';
  /** While true the modem answers nothing (a hung module). */
  frozen = false;
  private rx = false;
  private rxTimer: NodeJS.Timeout | undefined;
  private pending = '';
  private air: Array<{ data: Buffer; rssi: number; snr: number; delivered: () => void }> = [];
  private last = { rssi: -120, snr: 0 };

  private constructor(private readonly port: SerialPort) {
    port.on('data', (b: Buffer) => this.onData(b));
    port.on('error', () => {});
  }

  static async open(path: string): Promise<Rn2483Sim> {
    const port = new SerialPort({ path, baudRate: 57600, autoOpen: false });
    await new Promise<void>((resolve, reject) => port.open((e) => (e ? reject(e) : resolve())));
    return new Rn2483Sim(port);
  }

  get listening(): boolean {
    return this.rx;
  }

  /** A packet from a node; resolves once the radio was told (it waits until the radio listens). */
  inject(data: Buffer, rssi = -60, snr = 9): Promise<void> {
    return new Promise((delivered) => {
      this.air.push({ data, rssi, snr, delivered });
      this.deliver();
    });
  }

  /** Firmware before 1.0.5: no `radio rxstop`, no `radio get rssi`. */
  get legacy(): boolean {
    return /^RN\d+ 1\.0\.[0-4] /.test(this.version);
  }

  async close(): Promise<void> {
    clearTimeout(this.rxTimer);
    if (this.port.isOpen) await new Promise<void>((r) => this.port.close(() => r()));
  }

  private write(line: string): void {
    if (this.port.isOpen) this.port.write(`${line}\r\n`);
  }

  private deliver(): void {
    if (!this.rx || this.frozen) return;
    const p = this.air.shift();
    if (!p) return;
    this.rx = false;
    clearTimeout(this.rxTimer);
    this.last = { rssi: p.rssi, snr: p.snr };
    this.write(`radio_rx  ${p.data.toString('hex').toUpperCase()}`); // two spaces, as the module prints it
    p.delivered();
  }

  private onData(b: Buffer): void {
    this.pending += b.toString('latin1');
    let i: number;
    while ((i = this.pending.indexOf('\r\n')) >= 0) {
      const line = this.pending.slice(0, i);
      this.pending = this.pending.slice(i + 2);
      if (!this.frozen) this.answer(line);
    }
  }

  private answer(line: string): void {
    this.commands.push(line);
    const w = line.split(' ');
    const ok = () => this.write('ok');
    const bad = () => this.write('invalid_param');
    if (line === 'sys get ver') return this.write(this.version);
    if (line === 'mac pause') return this.write('4294967245');
    if (w[0] === 'radio' && w[1] === 'set' && w.length === 4) {
      const [, , key, v] = w as [string, string, string, string];
      const valid: Record<string, (v: string) => boolean> = {
        mod: (x) => x === 'lora' || x === 'fsk',
        freq: (x) => /^\d+$/.test(x) && ((+x >= 433050000 && +x <= 434790000) || (+x >= 863000000 && +x <= 870000000)),
        pwr: (x) => /^-?\d+$/.test(x) && +x >= -3 && +x <= 15,
        sf: (x) => /^sf(7|8|9|10|11|12)$/.test(x),
        bw: (x) => ['125', '250', '500'].includes(x),
        cr: (x) => ['4/5', '4/6', '4/7', '4/8'].includes(x),
        sync: (x) => /^[0-9A-Fa-f]{1,2}$/.test(x),
        crc: (x) => x === 'on' || x === 'off',
        wdt: (x) => /^\d+$/.test(x),
      };
      if (!valid[key]?.(v)) return bad();
      this.settings.set(key, v);
      return ok();
    }
    if (line === 'radio get snr') return this.write(String(this.last.snr));
    if (line === 'radio get rssi') return this.legacy ? bad() : this.write(String(this.last.rssi));
    if (line === 'radio rx 0') {
      if (this.rx) return this.write('busy');
      this.rx = true;
      ok();
      const wdt = Number(this.settings.get('wdt') ?? '15000');
      if (wdt > 0) {
        // the watchdog ends reception: radio_err
        this.rxTimer = setTimeout(() => {
          if (!this.rx) return;
          this.rx = false;
          this.write('radio_err');
        }, wdt);
      }
      setImmediate(() => this.deliver());
      return;
    }
    if (line === 'radio rxstop') {
      if (this.legacy) return bad();
      this.rx = false;
      clearTimeout(this.rxTimer);
      return ok();
    }
    if (w[0] === 'radio' && w[1] === 'tx' && w.length === 3) {
      const hex = w[2]!;
      if (!/^([0-9A-Fa-f]{2}){1,255}$/.test(hex)) return bad();
      if (this.rx) return this.write('busy'); // the transceiver is receiving
      ok();
      this.transmissions.push(Buffer.from(hex, 'hex'));
      setTimeout(() => this.write('radio_tx_ok'), 5);
      return;
    }
    bad();
  }
}

/** `socat` joining two pseudo-terminals, linked as <dir>/radio (the broker's end) and <dir>/sim (the modem's end). */
export class PtyPair {
  proc: ChildProcess | undefined;
  constructor(readonly dir: string) {}
  get radio(): string {
    return join(this.dir, 'radio');
  }
  get sim(): string {
    return join(this.dir, 'sim');
  }

  async start(): Promise<void> {
    this.proc = spawn('socat', [`pty,raw,echo=0,link=${this.radio}`, `pty,raw,echo=0,link=${this.sim}`], { stdio: 'ignore' });
    const t0 = Date.now();
    while (!(existsSync(this.radio) && existsSync(this.sim))) {
      if (Date.now() - t0 > 10000) throw new Error('socat did not create the pty pair');
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  /** Stops socat by its pid (both ends vanish) and waits for it to exit. */
  async stop(): Promise<void> {
    const p = this.proc;
    this.proc = undefined;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    await new Promise<void>((resolve) => {
      p.once('exit', () => resolve());
      process.kill(p.pid!, 'SIGTERM');
    });
  }
}
