/**
 * Serial endpoints (`serial://`): one serial port, opened through `serialport` (loaded on first use), carrying one
 * protocol:
 *
 * - `mqtt`: the line is one byte stream, so it carries one MQTT connection at a time. The connection is created
 *   when the first byte arrives (an idle line is not a client that failed to send CONNECT); when it ends (DISCONNECT,
 *   keep-alive timeout, protocol error, administrator) the next bytes start a new one; when the line closes, the
 *   connection ends as a TCP connection whose socket closed does (will message, session kept if persistent).
 * - `NMEA-0183`: sentences from a GPS are checked (src/devices/nmea.ts) and published as JSON to
 *   `<topicPrefix>/<talker><type>`.
 *
 * The handle has the listener's shape (src/transport/listener.ts), so the endpoint actor runs a serial endpoint as
 * it runs a TCP one: paused = no new MQTT connection (bytes on an idle line are discarded) and no NMEA publication;
 * when the port disappears (USB unplugged, pty closed) the handle reports an error, the actor goes to `failed`,
 * backs off and reopens the device until it is back.
 *
 * Caps: at most `serialDevice.bufferSize` bytes queued toward the port before the MQTT connection waits for
 * `drain` (and its writeStallTimeout applies); an NMEA line longer than `maxLineLength` is dropped; at most
 * MAX_PENDING_PUBLISHES NMEA publications wait for the engine, beyond that sentences are dropped and counted.
 */
import type { SerialPort as SerialPortType } from 'serialport';
import type { EndPointServerConfig } from '../config/schema.js';
import { IngressResult, ingress, ingressContext } from '../engine/ingress.js';
import { decodeSentence, NmeaLineReader, NmeaStats, parseSentence, sentenceWanted } from '../devices/nmea.js';
import { MqttConnection, type Wire } from '../protocol/mqtt/connection.js';
import { CloseReason, Reason } from '../protocol/mqtt/reason.js';
import type { ListenerHandle, ListenerOptions } from './listener.js';
import { nmeaConfigOf, serialDeviceOf, serialDevicePath } from './serial-config.js';

export const MAX_PENDING_PUBLISHES = 1000;

export interface SerialHandle extends ListenerHandle {
  /** The device path opened (also `host`). */
  readonly device: string;
  /** 'mqtt' or 'NMEA-0183'. */
  readonly protocol: string;
  /** NMEA counters (NMEA-0183 endpoints). */
  readonly nmea?: NmeaStats;
}

export interface SerialOptions extends ListenerOptions {
  log?: { warn(obj: object, msg: string): void; info(obj: object, msg: string): void };
}

type SerialPortCtor = typeof SerialPortType;
let serialPortClass: Promise<SerialPortCtor> | undefined;
/** `serialport` loads a native binding: only when a serial endpoint opens. SerialPort.list() is never called. */
function loadSerialPort(): Promise<SerialPortCtor> {
  serialPortClass ??= import('serialport').then((m) => m.SerialPort);
  return serialPortClass;
}

const PARITY: Record<string, 'none' | 'even' | 'odd' | 'mark' | 'space'> = { n: 'none', e: 'even', o: 'odd', m: 'mark', s: 'space' };

/** The protocol a serial endpoint carries (one per line). Throws when it names none or both. */
export function serialProtocolOf(config: EndPointServerConfig): 'mqtt' | 'NMEA-0183' {
  const mqtt = config.protocolConfigs.some((p) => p.type === 'mqtt');
  const nmea = nmeaConfigOf(config) !== undefined;
  if (mqtt && nmea) throw new Error(`endpoint "${config.name}": a serial line carries one protocol, mqtt or NMEA-0183, not both`);
  if (!mqtt && !nmea) throw new Error(`endpoint "${config.name}": no supported protocol (mqtt or NMEA-0183) in protocolConfigs`);
  return mqtt ? 'mqtt' : 'NMEA-0183';
}

/** Open the endpoint's serial port. Rejects when the device is absent or cannot be opened (the actor retries). */
export async function bindSerialEndpoint(opts: SerialOptions): Promise<SerialHandle> {
  const { config, endpoint } = opts;
  const device = serialDevicePath(config);
  if (!device) throw new Error(`endpoint "${config.name}": serial:// needs a device (endPointConfig.serialDevice.port, or a URL such as serial:///dev/ttyUSB0)`);
  const protocol = serialProtocolOf(config);
  const line = serialDeviceOf(config);
  const SerialPort = await loadSerialPort();
  const flow = String(line.flowControl).toLowerCase();
  const port = new SerialPort({
    path: device,
    baudRate: line.baudRate,
    dataBits: line.dataBits,
    stopBits: line.stopBits,
    parity: PARITY[line.parity[0]!] ?? 'none',
    rtscts: flow === 'rtscts' || flow === '1',
    xon: flow === 'xonxoff' || flow === '2',
    xoff: flow === 'xonxoff' || flow === '2',
    highWaterMark: line.bufferSize,
    autoOpen: false,
  });
  // errors after open (a write to a vanished device…) are counted; the 'close' that follows is what fails the endpoint
  port.on('error', () => {
    endpoint.stats.errors++;
  });
  await new Promise<void>((resolve, reject) => port.open((err) => (err ? reject(new Error(`serial port ${device}: ${err.message}`)) : resolve())));

  let paused = false;
  let closing: Promise<void> | undefined;
  let failure: Error | undefined;
  const errorHandlers: Array<(err: Error) => void> = [];
  const fail = (err: Error) => {
    if (closing || failure) return;
    failure = err;
    opts.log?.warn({ endpoint: config.name, device, err: err.message }, 'serial port lost; the endpoint retries with backoff');
    for (const cb of errorHandlers) cb(err);
  };

  // --- MQTT: one connection at a time on the line
  let conn: MqttConnection | undefined;
  const newConnection = (): MqttConnection => {
    let detached = false;
    const detach = () => {
      if (detached) return;
      detached = true;
      if (conn === c) conn = undefined;
      if (port.isPaused()) port.resume(); // the next connection reads again
      queueMicrotask(() => c.onClose());
    };
    const wire: Wire = {
      write: (b) => (detached || !port.isOpen ? true : port.write(b)),
      end: detach,
      destroy: detach,
      pause: () => {
        if (!detached) port.pause();
      },
      resume: () => {
        if (!detached) port.resume();
      },
      remoteAddress: device,
      remotePort: 0,
      transport: 'serial',
    };
    const c = new MqttConnection(opts.broker, endpoint, wire);
    return c;
  };

  // --- NMEA-0183: sentences → JSON publications
  const nmea = nmeaConfigOf(config);
  const stats = nmea ? new NmeaStats() : undefined;
  let pending = 0;
  const reader =
    nmea && stats
      ? new NmeaLineReader(
          nmea.maxLineLength,
          (text) => {
            const r = parseSentence(text);
            if (!r.ok) {
              if (r.reason === 'checksum') stats.badChecksum++;
              else stats.malformed++;
              endpoint.stats.errors++;
              return;
            }
            stats.sentences++;
            if (paused) return;
            if (!sentenceWanted(r.sentence, nmea.sentences)) {
              stats.filtered++;
              return;
            }
            const engine = opts.broker.host.engine();
            if (engine === undefined || engine.isClosed) return;
            if (pending >= MAX_PENDING_PUBLISHES) {
              stats.dropped++;
              return;
            }
            const payload = JSON.stringify(decodeSentence(r.sentence));
            // the one ingress path (src/engine/ingress.ts): the line is configured, so no ACL; $SYS, the payload
            // schema and flow control apply as to any publisher; a refusal is a dropped sentence
            const cx = ingressContext(engine, undefined, undefined, `${nmea.topicPrefix}/${r.sentence.id}`, { payload, contentType: 'application/json', qos: nmea.qos, retain: nmea.retain }, undefined);
            if (ingress(cx) !== IngressResult.Accepted) {
              stats.dropped++;
              return;
            }
            pending++;
            cx.written!
              .then(
                () => {
                  stats.published++;
                  endpoint.stats.messagesIn++;
                },
                () => {
                  stats.dropped++;
                },
              )
              .finally(() => pending--);
          },
          () => {
            stats.overlong++;
            endpoint.stats.errors++;
          },
        )
      : undefined;

  port.on('data', (b: Buffer) => {
    if (reader) {
      endpoint.stats.bytesIn += b.length;
      reader.push(b);
      return;
    }
    if (conn === undefined) {
      if (paused) return; // paused: no new connection; the bytes of an idle line are discarded
      conn = newConnection();
    }
    conn.onData(b);
  });
  port.on('drain', () => conn?.onDrain());
  port.on('close', (err?: Error & { disconnected?: boolean }) => {
    const c = conn;
    conn = undefined;
    c?.onClose();
    fail(new Error(`serial port ${device} closed${err?.message ? `: ${err.message}` : ''}`));
  });

  return {
    transport: 'serial',
    host: device,
    port: 0,
    device,
    protocol,
    nmea: stats,
    get paused() {
      return paused;
    },
    pause() {
      paused = true;
    },
    resume() {
      paused = false;
    },
    onError(cb) {
      errorHandlers.push(cb);
      if (failure) {
        const f = failure;
        queueMicrotask(() => cb(f)); // the line broke before the actor listened
      }
    },
    close() {
      if (closing) return closing;
      closing = (async () => {
        conn?.close(CloseReason.EndpointStopped, Reason.ServerShuttingDown, 'the endpoint is stopping');
        // what is queued toward the port (a DISCONNECT) gets half a second to leave
        if (port.isOpen && port.writableLength > 0) {
          await new Promise<void>((resolve) => {
            const t = setTimeout(resolve, 500);
            t.unref();
            port.once('drain', () => {
              clearTimeout(t);
              resolve();
            });
          });
        }
        if (port.isOpen) await new Promise<void>((resolve) => port.close(() => resolve()));
      })();
      return closing;
    },
  };
}
