import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino, type Logger, type Level } from 'pino';
import { createStream, type RotatingFileStream } from 'rotating-file-stream';

/** MAPS log entry (`LogEntry`): logback level ints and a one-line message. */
export interface LogEntry {
  logNumber: number;
  level: number;
  message: string;
}

const LOGBACK_LEVEL: Record<number, number> = { 10: 5000, 20: 10000, 30: 20000, 40: 30000, 50: 40000, 60: 40000 };
const LEVEL_NAME: Record<number, string> = { 10: 'TRACE', 20: 'DEBUG', 30: 'INFO', 40: 'WARN', 50: 'ERROR', 60: 'FATAL' };
const SKIP = new Set(['level', 'time', 'pid', 'hostname', 'msg', 'name', 'v']);

function pad(n: number, w = 2): string {
  return String(n).padStart(w, '0');
}
export function formatTimestamp(ms: number): string {
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** `[yyyy-MM-dd HH:mm:ss] LEVEL message (logger) key=value ...` from one pino JSON record. */
export function formatRecord(rec: Record<string, unknown>): string {
  const extras: string[] = [];
  for (const [k, v] of Object.entries(rec)) {
    if (SKIP.has(k) || v === undefined) continue;
    if (k === 'err' && v && typeof v === 'object') {
      extras.push(`err=${JSON.stringify((v as { message?: string }).message ?? v)}`);
      continue;
    }
    extras.push(`${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`);
  }
  const logger = typeof rec.name === 'string' ? ` (${rec.name})` : '';
  return `[${formatTimestamp(Number(rec.time))}] ${LEVEL_NAME[Number(rec.level)] ?? 'INFO'} ${String(rec.msg ?? '')}${logger}${extras.length ? ' ' + extras.join(' ') : ''}`;
}

type Listener = (entry: LogEntry) => void;

/** The last N entries, in memory, for `/api/v1/server/log`, and live listeners for its SSE stream. */
export class LogMonitor {
  private readonly ring: LogEntry[] = [];
  private next = 1;
  private readonly listeners = new Set<Listener>();
  constructor(private capacity: number) {}

  setCapacity(n: number): void {
    this.capacity = n;
    while (this.ring.length > n) this.ring.shift();
  }
  add(rec: Record<string, unknown>): void {
    const entry: LogEntry = { logNumber: this.next++, level: LOGBACK_LEVEL[Number(rec.level)] ?? 20000, message: formatRecord(rec) };
    this.ring.push(entry);
    if (this.ring.length > this.capacity) this.ring.shift();
    for (const l of this.listeners) {
      try {
        l(entry);
      } catch {
        /* a listener's failure is its own */
      }
    }
  }
  entries(): LogEntry[] {
    return this.ring.slice();
  }
  subscribe(listener: Listener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}

class LineStream extends Writable {
  constructor(private readonly onRecord: (rec: Record<string, unknown>, line: string) => void) {
    super({ decodeStrings: false });
  }
  override _write(chunk: string | Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    const text = typeof chunk === 'string' ? chunk : chunk.toString('utf8');
    for (const line of text.split('\n')) {
      if (!line) continue;
      try {
        this.onRecord(JSON.parse(line) as Record<string, unknown>, line);
      } catch {
        /* not JSON: ignore */
      }
    }
    cb();
  }
}

export interface Logs {
  log: Logger;
  audit: Logger;
  monitor: LogMonitor;
  close(): Promise<void>;
}

export interface LogOptions {
  dataDir: string;
  level: Level;
  entriesInMemory: number;
  historyDays: number;
  /** Readable lines on stdout (default true). */
  stdout?: boolean;
}

function rotating(dir: string, name: string, days: number): RotatingFileStream {
  return createStream(name, { path: dir, interval: '1d', compress: 'gzip', maxFiles: days });
}

/**
 * One pino root. Records go to `{data}/log/messaging.log` (JSON lines, rotated daily, gzip, N days kept), to the
 * in-memory monitor, and as readable lines to stdout. The audit logger writes `{data}/log/audit.log` as well.
 */
export function createLogs(opts: LogOptions): Logs {
  const dir = join(opts.dataDir, 'log');
  mkdirSync(dir, { recursive: true });
  const monitor = new LogMonitor(opts.entriesInMemory);
  const messagingFile = rotating(dir, 'messaging.log', opts.historyDays);
  const auditFile = rotating(dir, 'audit.log', opts.historyDays);
  const showStdout = opts.stdout ?? true;
  const fanout = new LineStream((rec, line) => {
    monitor.add(rec);
    messagingFile.write(line + '\n');
    if (showStdout) process.stdout.write(formatRecord(rec) + '\n');
  });
  const log = pino({ level: opts.level, base: undefined, name: 'server' }, fanout);
  const auditOut = new LineStream((rec, line) => {
    auditFile.write(line + '\n');
    fanout.write(line + '\n');
  });
  const audit = pino({ level: 'info', base: undefined, name: 'audit' }, auditOut);
  return {
    log,
    audit,
    monitor,
    async close() {
      await Promise.all(
        [messagingFile, auditFile].map(
          (s) =>
            new Promise<void>((resolve) => {
              s.end(() => resolve());
            }),
        ),
      );
    },
  };
}
