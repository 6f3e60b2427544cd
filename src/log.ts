import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { format } from 'node:util';
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

export interface Logs {
  log: Logger;
  audit: Logger;
  monitor: LogMonitor;
  /** Changes the level of `log` and every child logger made from it (config reload, SIGHUP). */
  setLevel(level: Level): void;
  close(): Promise<void>;
}

export interface LogOptions {
  dataDir: string;
  level: Level;
  entriesInMemory: number;
  historyDays: number;
  /** Size at which a log file is rotated before its day is over ('100M'; rotating-file-stream syntax). */
  maxSize?: string;
  /** Readable lines on stdout (default true). */
  stdout?: boolean;
}

function rotating(dir: string, name: string, days: number, size: string | undefined): RotatingFileStream {
  return createStream(name, { path: dir, interval: '1d', ...(size ? { size } : {}), compress: 'gzip', maxFiles: days });
}

/** A logger's bindings (its `name` and the child bindings), parsed once per logger, not per line. */
const bindingCache = new WeakMap<object, Record<string, unknown>>();
function bindingsOf(logger: Logger): Record<string, unknown> {
  let b = bindingCache.get(logger);
  if (!b) {
    b = logger.bindings();
    bindingCache.set(logger, b);
  }
  return b;
}

/**
 * pino appends a child's bindings to its parent's, so `log.child({ name: 'rest' })` under the root named 'server'
 * wrote `"name":"server","name":"rest"`: two `name` keys in one JSON line (most JSON readers keep the last, some
 * reject the line). Run for every child logger (pino's `onChild`, inherited by grandchildren): when the bindings
 * repeat a key, they are rewritten once with the child's value, at child creation, never per line.
 */
function dedupeBindings(child: Logger): void {
  const sym = pino.symbols.chindingsSym as unknown as symbol;
  const text = (child as unknown as Record<symbol, unknown>)[sym];
  if (typeof text !== 'string' || !text.includes('"name":')) return;
  const keys = [...text.matchAll(/[,{]"((?:[^"\\]|\\.)*)":/g)].map((m) => m[1]);
  if (new Set(keys).size === keys.length) return;
  try {
    const merged = JSON.parse(`{${text.slice(1)}}`) as Record<string, unknown>; // the last value of a key wins
    (child as unknown as Record<symbol, unknown>)[sym] = ',' + JSON.stringify(merged).slice(1, -1);
  } catch {
    /* not parseable: left as pino wrote it */
  }
}

/** The record pino is about to serialise, rebuilt from the call's arguments (no JSON parsing). */
function recordOf(logger: Logger, args: unknown[], level: number): Record<string, unknown> {
  const [first, ...rest] = args;
  let fields: Record<string, unknown> = {};
  let msg: unknown;
  if (first !== null && typeof first === 'object') {
    fields = first instanceof Error ? { err: first } : (first as Record<string, unknown>);
    msg = rest.length ? format(...(rest as [unknown, ...unknown[]])) : first instanceof Error ? first.message : undefined;
  } else msg = format(...(args as [unknown, ...unknown[]]));
  return { level, time: Date.now(), ...bindingsOf(logger), ...fields, msg };
}

/**
 * Two pino loggers writing JSON lines straight to rotating files (rotated daily and at `maxSize`, gzip, `historyDays`
 * rotated files kept):
 * - `log` → `{data}/log/messaging.log`;
 * - `audit` → `{data}/log/audit.log` at every level (debug too: successful logins), and `messaging.log` at the
 *   configured level (failed logins, lockouts and denials are WARN, so they are in both).
 * The in-memory monitor (`/api/v1/server/log`) and the readable stdout lines get the same records from pino's
 * `logMethod` hook, built from the call's arguments: nothing is serialised twice or parsed back.
 */
export function createLogs(opts: LogOptions): Logs {
  const dir = join(opts.dataDir, 'log');
  mkdirSync(dir, { recursive: true });
  const monitor = new LogMonitor(opts.entriesInMemory);
  const messagingFile = rotating(dir, 'messaging.log', opts.historyDays, opts.maxSize);
  const auditFile = rotating(dir, 'audit.log', opts.historyDays, opts.maxSize);
  const showStdout = opts.stdout ?? true;
  let log: Logger;
  // audit records reach messaging.log at the messaging level, which a reload may change: multistream tells this
  // gate each record's level (pino's metadata protocol), the gate compares it with log's current level
  const messagingGate = {
    [Symbol.for('pino.metadata')]: true,
    lastLevel: 0,
    write(data: string) {
      if (this.lastLevel >= log.levelVal) messagingFile.write(data);
    },
  };
  const show = (rec: Record<string, unknown>) => {
    monitor.add(rec);
    if (showStdout) process.stdout.write(formatRecord(rec) + '\n');
  };
  log = pino(
    {
      level: opts.level,
      base: undefined,
      name: 'server',
      onChild: dedupeBindings,
      hooks: {
        logMethod(args, method, level) {
          method.apply(this, args as Parameters<typeof method>);
          show(recordOf(this, args, level));
        },
      },
    },
    messagingFile,
  );
  const audit = pino(
    {
      level: 'debug',
      base: undefined,
      name: 'audit',
      onChild: dedupeBindings,
      hooks: {
        logMethod(args, method, level) {
          method.apply(this, args as Parameters<typeof method>);
          if (level >= log.levelVal) show(recordOf(this, args, level));
        },
      },
    },
    pino.multistream([
      { level: 'debug', stream: auditFile },
      { level: 'debug', stream: messagingGate },
    ]),
  );
  return {
    log,
    audit,
    monitor,
    setLevel(level: Level) {
      // a child made without its own level inherits it through its prototype (pino children are Object.create(parent))
      log.level = level;
    },
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
