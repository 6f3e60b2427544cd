/**
 * Driver for Microchip RN2483 (433/868 MHz) and RN2903 (915 MHz) LoRa modules in radio mode, over their documented
 * UART command set (RN2483/RN2903 LoRa Technology Module Command Reference, DS40001784 / DS40001811): ASCII commands
 * and answers, one per line, terminated by CR LF, 57600 bps 8N1 by default.
 *
 *   sys get ver                          → "RN2483 1.0.5 Oct 31 2018 15:06:52"
 *   mac pause                            → ms the LoRaWAN stack stays paused (radio commands need it paused)
 *   radio set mod|freq|pwr|sf|bw|cr|sync|crc|wdt <value>   → ok | invalid_param
 *   radio rx 0                           → ok, later "radio_rx  <hex>" (a packet) or radio_err (CRC error / watchdog)
 *   radio rxstop                         → ok (firmware 1.0.5 and later: leaves continuous reception)
 *   radio tx <hex>                       → ok, later radio_tx_ok or radio_err
 *   radio get snr                        → SNR of the last packet, dB, -128..127
 *   radio get rssi                       → RSSI of the last packet, dBm (firmware 1.0.5 and later)
 *
 * The radio listens in continuous reception (`radio rx 0` with the watchdog off, `radio set wdt 0`). To transmit it
 * leaves reception with `radio rxstop`, sends, and listens again. After each packet it reads `radio get snr` and
 * `radio get rssi` before listening again, so both belong to that packet. Firmware older than 1.0.5 has neither
 * `radio rxstop` nor `radio get rssi`: there the driver listens in windows of `legacyRxWindow` ms (the watchdog ends
 * each with radio_err), transmits between windows, and reports no RSSI.
 *
 * A modem that closes (USB unplugged), stops answering a command within `commandTimeout`, or fails its periodic
 * `sys get ver` health check (asked with the radio idle, between `radio rxstop` and `radio rx 0`) is lost: `onLost` fires once and the port is closed. Lines are capped at 1 100
 * characters (a 255-byte packet is 520); a longer run without CR LF is discarded.
 */
import type { SerialPort as SerialPortType } from 'serialport';
import type { ModemLike } from '../../../actors/lora/lora.machine.js';

export interface RadioSettings {
  frequencyHz: number;
  power: number;
  spreadingFactor: number;
  bandwidth: 125 | 250 | 500;
  codingRate: '4/5' | '4/6' | '4/7' | '4/8';
  syncWord: number;
}

export interface Rn2483Options {
  path: string;
  baudRate: number;
  dataBits: 5 | 6 | 7 | 8;
  stopBits: 1 | 1.5 | 2;
  parity: 'none' | 'even' | 'odd' | 'mark' | 'space';
  flowControl: 'none' | 'rtscts' | 'xonxoff';
  commandTimeout: number;
  /** ms between health checks (`sys get ver`); 0 = none. */
  healthCheckInterval: number;
  settings: RadioSettings;
  /** Reception window on firmware without `radio rxstop`. Default 1000 ms. */
  legacyRxWindow?: number;
}

export interface ReceivedPacket {
  data: Buffer;
  /** dBm, undefined when the firmware cannot say. */
  rssi?: number;
  snr?: number;
}

const MAX_LINE = 1100;

export class ModemError extends Error {}

/** LoRa time on air (Semtech SX127x datasheet formula), ms, explicit header, CRC on, 8-symbol preamble. */
export function airTimeMs(bytes: number, s: Pick<RadioSettings, 'spreadingFactor' | 'bandwidth' | 'codingRate'>): number {
  const sf = s.spreadingFactor;
  const tSym = 2 ** sf / s.bandwidth; // ms (bandwidth in kHz)
  const de = sf >= 11 && s.bandwidth === 125 ? 1 : 0;
  const cr = Number(s.codingRate.split('/')[1]) - 4;
  const payloadSymbols = 8 + Math.max(Math.ceil((8 * bytes - 4 * sf + 28 + 16) / (4 * (sf - 2 * de))) * (cr + 4), 0);
  return (8 + 4.25 + payloadSymbols) * tSym;
}

/** "RN2483 1.0.4 Oct 12 2017 14:59:25" → true when the firmware is 1.0.5 or later. */
export function hasRxStop(version: string): boolean {
  const m = /^RN\d+\S*\s+(\d+)\.(\d+)\.(\d+)/.exec(version);
  if (!m) return true;
  const [a, b, c] = [Number(m[1]), Number(m[2]), Number(m[3])];
  return a > 1 || (a === 1 && (b > 0 || c >= 5));
}

interface Waiter {
  skip?: (line: string) => boolean;
  resolve(line: string): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout;
}

interface TxJob {
  hex: string;
  bytes: number;
  resolve(): void;
  reject(err: Error): void;
}

export class Rn2483 implements ModemLike {
  version = '';
  /** Firmware 1.0.5+: `radio rxstop` and `radio get rssi`. */
  modern = true;
  /** `radio get rssi` answered a number (not invalid_param). */
  private rssiSupported = true;
  private pending = '';
  private discarding = false;
  private waiter: Waiter | undefined;
  private txWaiter: { resolve(ok: boolean | undefined): void } | undefined;
  private rxActive = false;
  /** Set when reception ends (radio_rx / radio_err), so an ok read together with a packet is not taken as listening. */
  private rxEnded = false;
  private received: Buffer[] = [];
  private txQueue: TxJob[] = [];
  private pumping = false;
  private lostReason: string | undefined;
  private lostListeners: Array<(reason: string) => void> = [];
  private packetListener: ((p: ReceivedPacket) => void) | undefined;
  private health: NodeJS.Timeout | undefined;
  private healthDue = false;
  /** Lines the modem sent that answered nothing (counted, not kept). */
  unexpectedLines = 0;

  private constructor(
    private readonly port: SerialPortType,
    private readonly opts: Rn2483Options,
  ) {}

  /** Opens the port and configures the modem; rejects (port closed) when the modem does not answer as documented. */
  static async open(opts: Rn2483Options): Promise<Rn2483> {
    const { SerialPort } = await import('serialport');
    const path = opts.path.startsWith('/') ? opts.path : `/dev/${opts.path}`;
    const port = new SerialPort({
      path,
      baudRate: opts.baudRate,
      dataBits: opts.dataBits,
      stopBits: opts.stopBits,
      parity: opts.parity,
      rtscts: opts.flowControl === 'rtscts',
      xon: opts.flowControl === 'xonxoff',
      xoff: opts.flowControl === 'xonxoff',
      autoOpen: false,
    });
    await new Promise<void>((resolve, reject) => port.open((err) => (err ? reject(new ModemError(`cannot open ${path}: ${err.message}`)) : resolve())));
    const modem = new Rn2483(port, opts);
    port.on('data', (chunk: Buffer) => modem.onData(chunk));
    port.on('close', () => modem.lose(`serial port ${path} closed`));
    port.on('error', (err: Error) => modem.lose(`serial port ${path}: ${err.message}`));
    try {
      await modem.configure();
    } catch (err) {
      modem.lostListeners = [];
      modem.lose((err as Error).message);
      throw err;
    }
    modem.startHealthChecks();
    modem.pump();
    return modem;
  }

  get lost(): boolean {
    return this.lostReason !== undefined;
  }

  onPacket(cb: (p: ReceivedPacket) => void): void {
    this.packetListener = cb;
  }

  onLost(cb: (reason: string) => void): void {
    if (this.lostReason !== undefined) cb(this.lostReason);
    else this.lostListeners.push(cb);
  }

  /** Sends one packet (at most 255 bytes); resolves on radio_tx_ok. */
  transmit(data: Buffer): Promise<void> {
    if (this.lostReason !== undefined) return Promise.reject(new ModemError(`modem lost: ${this.lostReason}`));
    if (data.length === 0 || data.length > 255) return Promise.reject(new RangeError('a LoRa packet has 1 to 255 bytes'));
    return new Promise<void>((resolve, reject) => {
      this.txQueue.push({ hex: data.toString('hex').toUpperCase(), bytes: data.length, resolve, reject });
      this.pump();
    });
  }

  async close(): Promise<void> {
    this.lose('closed');
    if (this.port.isOpen) await new Promise<void>((resolve) => this.port.close(() => resolve()));
  }

  // ------------------------------------------------------------------------------------------------------------

  private async configure(): Promise<void> {
    const s = this.opts.settings;
    // The first answer may be preceded by noise or an earlier answer: skip lines until the version line.
    this.version = await this.command('sys get ver', { skip: (l) => !/^RN\d/.test(l) });
    this.modern = hasRxStop(this.version);
    const paused = await this.command('mac pause');
    if (!/^\d+$/.test(paused)) throw new ModemError(`modem refused "mac pause": ${paused}`);
    await this.expectOk('radio set mod lora');
    await this.expectOk(`radio set freq ${s.frequencyHz}`);
    await this.expectOk(`radio set pwr ${s.power}`);
    await this.expectOk(`radio set sf sf${s.spreadingFactor}`);
    await this.expectOk(`radio set bw ${s.bandwidth}`);
    await this.expectOk(`radio set cr ${s.codingRate}`);
    await this.expectOk(`radio set sync ${s.syncWord.toString(16).padStart(2, '0')}`);
    await this.expectOk('radio set crc on');
    await this.expectOk(`radio set wdt ${this.modern ? 0 : (this.opts.legacyRxWindow ?? 1000)}`);
  }

  private async expectOk(cmd: string): Promise<void> {
    const answer = await this.command(cmd);
    if (answer !== 'ok') throw new ModemError(`modem refused "${cmd}": ${answer}`);
  }

  /** Writes one command and waits for its answer line (lines `skip` accepts are ignored). */
  private command(cmd: string, o: { skip?: (line: string) => boolean; timeout?: number } = {}): Promise<string> {
    if (this.lostReason !== undefined) return Promise.reject(new ModemError(`modem lost: ${this.lostReason}`));
    if (this.waiter) return Promise.reject(new Error('one command at a time'));
    return new Promise<string>((resolve, reject) => {
      const timeout = o.timeout ?? this.opts.commandTimeout;
      const timer = setTimeout(() => {
        this.waiter = undefined;
        reject(new ModemError(`modem did not answer "${cmd.slice(0, 40)}" within ${timeout} ms`));
      }, timeout);
      this.waiter = {
        ...(o.skip ? { skip: o.skip } : {}),
        resolve: (l) => {
          clearTimeout(timer);
          this.waiter = undefined;
          resolve(l);
        },
        reject: (e) => {
          clearTimeout(timer);
          this.waiter = undefined;
          reject(e);
        },
        timer,
      };
      this.port.write(`${cmd}\r\n`, (err) => {
        if (err) this.waiter?.reject(new ModemError(`cannot write to the modem: ${err.message}`));
      });
    });
  }

  private onData(chunk: Buffer): void {
    this.pending += chunk.toString('latin1');
    let i: number;
    while ((i = this.pending.indexOf('\n')) >= 0) {
      const raw = this.pending.slice(0, i).replace(/\r$/, '');
      this.pending = this.pending.slice(i + 1);
      if (this.discarding) {
        this.discarding = false;
        continue;
      }
      const line = raw.trim();
      if (line) this.onLine(line);
    }
    if (this.pending.length > MAX_LINE) {
      this.pending = '';
      this.discarding = true;
    }
  }

  private onLine(line: string): void {
    if (line.startsWith('radio_rx')) {
      this.rxActive = false;
      this.rxEnded = true;
      const hex = line.slice('radio_rx'.length).trim();
      if (/^([0-9A-Fa-f]{2})+$/.test(hex) && this.received.length < 16) this.received.push(Buffer.from(hex, 'hex'));
      this.pump();
      return;
    }
    if (this.txWaiter && (line === 'radio_tx_ok' || line === 'radio_err')) {
      this.txWaiter.resolve(line === 'radio_tx_ok');
      return;
    }
    if (line === 'radio_err' && this.rxActive) {
      // reception ended without a packet (CRC error, or the watchdog on old firmware): listen again
      this.rxActive = false;
      this.rxEnded = true;
      this.pump();
      return;
    }
    if (this.waiter && !this.waiter.skip?.(line)) {
      this.waiter.resolve(line);
      return;
    }
    this.unexpectedLines++;
  }

  /** Runs the radio: reports packets, transmits, health-checks, listens again. One operation at a time. */
  private pump(): void {
    if (this.pumping || this.lostReason !== undefined) return;
    this.pumping = true;
    void (async () => {
      try {
        for (;;) {
          if (this.lostReason !== undefined) return;
          const packet = this.received.shift();
          if (packet) {
            await this.report(packet);
            continue;
          }
          if ((this.healthDue || this.txQueue.length > 0) && this.rxActive) {
            // health checks and transmissions happen with the radio idle
            if (!this.modern) return; // the window ends with radio_err, which pumps again
            const answer = await this.command('radio rxstop'); // a packet that raced it is reported on the next round
            if (answer !== 'ok') throw new ModemError(`modem refused "radio rxstop": ${answer}`);
            this.rxActive = false;
            continue;
          }
          if (this.healthDue) {
            this.healthDue = false;
            const v = await this.command('sys get ver');
            if (!/^RN\d/.test(v)) throw new ModemError(`health check: the modem answered "${v.slice(0, 60)}" to sys get ver`);
            continue;
          }
          if (this.txQueue.length > 0) {
            await this.sendOne(this.txQueue.shift()!);
            continue;
          }
          if (!this.rxActive) {
            this.rxEnded = false;
            const answer = await this.command('radio rx 0');
            if (answer === 'busy') {
              await new Promise((r) => setTimeout(r, 50));
              continue;
            }
            if (answer !== 'ok') throw new ModemError(`modem refused "radio rx 0": ${answer}`);
            // a packet can follow the ok in the same read, before this line runs: then reception is over already
            this.rxActive = !this.rxEnded;
            continue;
          }
          return;
        }
      } catch (err) {
        this.lose((err as Error).message);
      } finally {
        this.pumping = false;
      }
    })();
  }

  private async report(data: Buffer): Promise<void> {
    const snr = Number.parseInt(await this.command('radio get snr'), 10);
    let rssi: number | undefined;
    if (this.modern && this.rssiSupported) {
      const answer = await this.command('radio get rssi');
      if (/^-?\d+$/.test(answer)) rssi = Number(answer);
      else if (answer === 'invalid_param') this.rssiSupported = false; // a firmware without it: do not ask again
    }
    try {
      this.packetListener?.({ data, ...(rssi !== undefined ? { rssi } : {}), ...(Number.isFinite(snr) ? { snr } : {}) });
    } catch {
      // the listener's own failure is not the modem's
    }
  }

  private async sendOne(job: TxJob): Promise<void> {
    // The result line can arrive in the same read as the ok: wait for it before sending the command.
    let settle!: (v: boolean | undefined) => void;
    const result = new Promise<boolean | undefined>((resolve) => (settle = resolve));
    let timer: NodeJS.Timeout | undefined;
    this.txWaiter = {
      resolve: (v) => {
        if (timer) clearTimeout(timer);
        this.txWaiter = undefined;
        settle(v);
      },
    };
    let answer: string;
    try {
      answer = await this.command(`radio tx ${job.hex}`);
    } catch (err) {
      this.txWaiter = undefined;
      job.reject(err as Error);
      throw err;
    }
    if (answer !== 'ok') {
      this.txWaiter = undefined;
      job.reject(new ModemError(`modem refused "radio tx": ${answer}`)); // busy or invalid_param: this packet is dropped
      return;
    }
    const limit = Math.ceil(airTimeMs(job.bytes, this.opts.settings)) + this.opts.commandTimeout;
    if (this.txWaiter) timer = setTimeout(() => this.txWaiter?.resolve(undefined), limit);
    const ok = await result;
    if (ok === undefined) {
      job.reject(new ModemError('no radio_tx_ok'));
      throw new ModemError(`modem did not finish "radio tx" within ${limit} ms`);
    }
    if (ok) job.resolve();
    else job.reject(new ModemError('radio_err: transmission failed'));
  }

  private startHealthChecks(): void {
    if (this.opts.healthCheckInterval <= 0) return;
    this.health = setInterval(() => {
      this.healthDue = true;
      this.pump();
    }, this.opts.healthCheckInterval);
    this.health.unref();
  }

  private lose(reason: string): void {
    if (this.lostReason !== undefined) return;
    this.lostReason = reason;
    if (this.health) clearInterval(this.health);
    this.waiter?.reject(new ModemError(`modem lost: ${reason}`));
    this.txWaiter?.resolve(false);
    for (const job of this.txQueue.splice(0)) job.reject(new ModemError(`modem lost: ${reason}`));
    this.received = [];
    if (this.port.isOpen) this.port.close(() => {});
    const listeners = this.lostListeners.splice(0);
    for (const cb of listeners) cb(reason);
  }
}
