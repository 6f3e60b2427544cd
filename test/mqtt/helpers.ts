/** MQTT test helpers: endpoint ports from REST, raw MQTT packets over a loopback socket. */
import { readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { after, before } from 'node:test';
import mqttPacket from 'mqtt-packet';
import WebSocket from 'ws';
import { startServer, type TestServer } from '../helpers.js';

/** MQTT variable byte integer (remaining length, property lengths), as bytes. */
export function varInt(n: number): number[] {
  const out: number[] = [];
  do {
    let b = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) b |= 0x80;
    out.push(b);
  } while (n > 0);
  return out;
}

export interface InterfaceInfo {
  name: string;
  uniqueId: string;
  port: number;
  state: string;
}

/** The endpoints of an in-process server, as GET /api/v1/server/interfaces shows them. */
export async function interfaces(s: TestServer): Promise<InterfaceInfo[]> {
  await s.inject({ method: 'DELETE', url: '/api/v1/server/cache' });
  const r = await s.inject({ method: 'GET', url: '/api/v1/server/interfaces' });
  if (r.statusCode !== 200) throw new Error(`interfaces: ${r.statusCode} ${r.body}`);
  return r.json() as InterfaceInfo[];
}

export async function mqttPort(s: TestServer, name = 'MQTT Interface'): Promise<number> {
  const e = (await interfaces(s)).find((i) => i.name === name);
  if (!e) throw new Error(`no endpoint ${name}`);
  return e.port;
}

/** REST GET/PATCH/PUT against a child-process broker. */
export async function rest(port: number, auth: Record<string, string>, method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const headers: Record<string, string> = { ...auth };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const r = await fetch(`http://127.0.0.1:${port}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  let json: any = text;
  try {
    json = JSON.parse(text);
  } catch {
    /* text */
  }
  return { status: r.status, json };
}

/** A raw MQTT client: send packets or bytes, read parsed packets, see the close. */
export class RawClient {
  readonly packets: Array<Record<string, any>> = [];
  closed = false;
  readonly closedPromise: Promise<void>;
  private waiters: Array<() => void> = [];
  private readonly parser;
  private constructor(
    readonly socket: Socket,
    readonly version: number,
  ) {
    this.parser = mqttPacket.parser({ protocolVersion: version } as never);
    this.parser.on('packet', (p) => {
      this.packets.push(p as never);
      this.wake();
    });
    this.parser.on('error', () => {});
    socket.on('data', (b) => this.parser.parse(b));
    this.closedPromise = new Promise((res) =>
      socket.on('close', () => {
        this.closed = true;
        this.wake();
        res();
      }),
    );
    socket.on('error', () => {});
  }

  static async open(port: number, version = 4): Promise<RawClient> {
    const socket = connect(port, '127.0.0.1');
    await new Promise<void>((res, rej) => {
      socket.once('connect', () => res());
      socket.once('error', rej);
    });
    return new RawClient(socket, version);
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    w.forEach((f) => f());
  }

  send(packet: Record<string, unknown>): void {
    this.socket.write(mqttPacket.generate(packet as never, { protocolVersion: this.version } as never));
  }

  write(bytes: Buffer): void {
    this.socket.write(bytes);
  }

  /** The next packet of a type (removed from the list), or throws after `ms`. */
  async next(cmd: string, ms = 5000): Promise<Record<string, any>> {
    const end = Date.now() + ms;
    for (;;) {
      const i = this.packets.findIndex((p) => p.cmd === cmd);
      if (i >= 0) return this.packets.splice(i, 1)[0]!;
      if (this.closed) throw new Error(`connection closed while waiting for ${cmd}; got ${JSON.stringify(this.packets.map((p) => p.cmd))}`);
      const left = end - Date.now();
      if (left <= 0) throw new Error(`no ${cmd} within ${ms} ms`);
      await new Promise<void>((res) => {
        const t = setTimeout(res, left);
        this.waiters.push(() => {
          clearTimeout(t);
          res();
        });
      });
    }
  }

  async connect(props: Record<string, unknown> = {}): Promise<Record<string, any>> {
    this.send({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: this.version, clean: true, clientId: '', keepalive: 0, ...props });
    return this.next('connack');
  }

  /** Resolves when the server closed the connection (throws after `ms`). */
  async waitClosed(ms = 5000): Promise<void> {
    await Promise.race([this.closedPromise, new Promise((_, rej) => setTimeout(() => rej(new Error(`still open after ${ms} ms`)), ms))]);
  }

  destroy(): void {
    this.socket.destroy();
  }
}

/**
 * A broker without authentication for the enclosing describe, started in a before hook; `open` connects a raw client
 * to its MQTT endpoint. An after hook destroys every client opened and closes the broker.
 */
export function rawBroker(): { open(version: number): Promise<RawClient> } {
  let s: TestServer | undefined;
  let port = 0;
  const raws: RawClient[] = [];
  before(async () => {
    s = await startServer({ auth: false });
    port = await mqttPort(s);
  });
  after(async () => {
    for (const r of raws) r.destroy();
    await s?.close();
  });
  return {
    async open(version) {
      const r = await RawClient.open(port, version);
      raws.push(r);
      return r;
    },
  };
}

/** A process's resident set (VmRSS from /proc), in MB. */
export function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : 0;
}

/** Resolves on 'drain', 'close' or after `ms`, and removes its listeners. */
export function writable(s: Socket, ms: number): Promise<void> {
  return new Promise((res) => {
    const done = () => {
      clearTimeout(t);
      s.off('drain', done);
      s.off('close', done);
      res();
    };
    const t = setTimeout(done, ms);
    s.once('drain', done);
    s.once('close', done);
  });
}

export function closedWithin(s: Socket, ms: number): Promise<number | undefined> {
  const t0 = Date.now();
  if (s.destroyed) return Promise.resolve(0);
  return new Promise((res) => {
    const t = setTimeout(() => res(undefined), ms);
    s.once('close', () => {
      clearTimeout(t);
      res(Date.now() - t0);
    });
  });
}

/** What a broker's V8 holds after a full GC, in MB: its heap, and the memory of ArrayBuffers (message payloads). */
export interface HeldMemory {
  heap: number;
  arrayBuffers: number;
}

/**
 * A broker's inspector (the broker runs with `NODE_OPTIONS=--inspect=127.0.0.1:0`; its URL is on stderr): a full
 * GC, then the heap size or the process's memory use. Deterministic where RSS is not (RSS also holds garbage V8 has
 * not collected yet and what the allocator keeps).
 */
export async function inspector(stderr: () => string): Promise<{ heapAfterGc(): Promise<number>; heldAfterGc(): Promise<HeldMemory>; close(): void }> {
  const url = /ws:\/\/\S+/.exec(stderr())?.[0];
  if (!url) throw new Error(`no inspector URL in the broker's stderr: ${stderr()}`);
  const ws = new WebSocket(url);
  await new Promise<void>((res, rej) => {
    ws.once('open', () => res());
    ws.once('error', rej);
  });
  let seq = 0;
  const pending = new Map<number, (r: any) => void>();
  ws.on('message', (d) => {
    const m = JSON.parse(String(d)) as { id?: number; result?: unknown };
    if (m.id !== undefined) pending.get(m.id)?.(m.result);
  });
  const call = (method: string, params?: Record<string, unknown>) =>
    new Promise<any>((res) => {
      const id = ++seq;
      pending.set(id, (r) => {
        pending.delete(id);
        res(r);
      });
      ws.send(JSON.stringify({ id, method, ...(params ? { params } : {}) }));
    });
  return {
    async heapAfterGc() {
      await call('HeapProfiler.collectGarbage');
      const u = (await call('Runtime.getHeapUsage')) as { usedSize: number };
      return u.usedSize / 1048576;
    },
    async heldAfterGc() {
      await call('HeapProfiler.collectGarbage');
      const r = (await call('Runtime.evaluate', { expression: 'JSON.stringify(process.memoryUsage())', returnByValue: true })) as { result: { value: string } };
      const u = JSON.parse(r.result.value) as { heapUsed: number; arrayBuffers: number };
      return { heap: u.heapUsed / 1048576, arrayBuffers: u.arrayBuffers / 1048576 };
    },
    close: () => ws.close(),
  };
}
