/**
 * The normative-statement suite's harness: the brokers under test (Switchyard in-process, Debian's Mosquitto as a
 * child process), a small context of raw-packet helpers each statement test gets, and `runCases`, which registers
 * one node:test test per case and broker. A case is data (./cases/*.ts): the statement id, the protocol version, what
 * it checks, and the deviations a broker is known to have. scripts/conformance-table.ts reads the same data to write
 * docs/conformance.md, so the table cannot drift from the tests.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServer, type TestServer } from '../helpers.js';
import { RawClient, mqttPort, varInt } from '../mqtt/helpers.js';
import { BROKERS, type BrokerName, type Case } from './cases/types.js';

export { BROKERS, type BrokerName, type Case } from './cases/types.js';

// ---------------------------------------------------------------------------------------------------------------
// brokers

interface RunningBroker {
  name: BrokerName;
  port: number;
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((res) => srv.listen(0, '127.0.0.1', () => res()));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((res) => srv.close(() => res()));
  return port;
}

async function portOpen(port: number): Promise<boolean> {
  try {
    const r = await RawClient.open(port);
    r.destroy();
    return true;
  } catch {
    return false;
  }
}

async function startSwitchyard(): Promise<RunningBroker> {
  // anonymous access: the statements are about the protocol, not about authentication
  const s: TestServer = await startServer({ auth: false });
  return { name: 'switchyard', port: await mqttPort(s), stop: () => s.close() };
}

/** /usr/sbin/mosquitto on a free port of 127.0.0.1 with a config file of our own; stopped by pid. */
async function startMosquitto(): Promise<RunningBroker> {
  const dir = mkdtempSync(join(tmpdir(), 'conformance-mosquitto-'));
  const conf = join(dir, 'mosquitto.conf');
  for (let attempt = 0; ; attempt++) {
    const port = await freePort();
    writeFileSync(conf, [`listener ${port} 127.0.0.1`, 'allow_anonymous true', 'persistence false', 'log_dest stderr', 'log_type error', ''].join('\n'));
    const proc: ChildProcess = spawn('/usr/sbin/mosquitto', ['-c', conf], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    proc.stderr!.on('data', (d) => (err += d));
    const exited = new Promise<void>((res) => proc.once('exit', () => res()));
    const end = Date.now() + 10000;
    while (!(await portOpen(port)) && proc.exitCode === null && Date.now() < end) await sleep(20);
    if (proc.exitCode === null && (await portOpen(port))) {
      return {
        name: 'mosquitto',
        port,
        async stop() {
          if (proc.exitCode === null && proc.signalCode === null) process.kill(proc.pid!, 'SIGTERM');
          await exited;
          rmSync(dir, { recursive: true, force: true });
        },
      };
    }
    if (proc.exitCode === null) process.kill(proc.pid!, 'SIGKILL');
    await exited;
    if (attempt >= 2) throw new Error(`mosquitto did not start: ${err}`);
  }
}

/** The brokers this run tests: both, or those named in CONFORMANCE_BROKERS (comma-separated), e.g. to time one. */
export function selectedBrokers(): BrokerName[] {
  const env = process.env.CONFORMANCE_BROKERS;
  if (!env) return [...BROKERS];
  const names = env.split(',').map((s) => s.trim());
  for (const n of names) if (!(BROKERS as readonly string[]).includes(n)) throw new Error(`CONFORMANCE_BROKERS: unknown broker ${n}`);
  return names as BrokerName[];
}

// ---------------------------------------------------------------------------------------------------------------
// raw bytes

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
export const bytes = (...b: number[]) => Buffer.from(b);
export const u16 = (n: number) => Buffer.from([n >> 8, n & 0xff]);
/** A packet from its first byte and body: the remaining length is computed. */
export function packet(first: number, ...body: Buffer[]): Buffer {
  const b = Buffer.concat(body);
  return Buffer.concat([Buffer.from([first, ...varInt(b.length)]), b]);
}
/** A length-prefixed string from raw bytes (which may be ill-formed UTF-8). */
export function str(s: Buffer | string): Buffer {
  const b = typeof s === 'string' ? Buffer.from(s) : s;
  return Buffer.concat([u16(b.length), b]);
}
/** Properties (v5) with their length prefix. */
export function props(...p: Buffer[]): Buffer {
  const b = Buffer.concat(p);
  return Buffer.concat([Buffer.from(varInt(b.length)), b]);
}
/**
 * CONNECT from parts: protocol `level` (4 or 5; the name is MQTT unless `name` says otherwise), connect `flags`, keep
 * alive 0, v5 `properties`, then the payload: the client id and whatever `rest` holds (will, user name, password).
 */
export function connectBytes(o: { level: number; flags: number; clientId?: Buffer | string; props?: Buffer; rest?: Buffer; name?: string; keepalive?: number }): Buffer {
  const head = Buffer.concat([str(o.name ?? 'MQTT'), bytes(o.level, o.flags), u16(o.keepalive ?? 0)]);
  const p = o.level === 5 ? (o.props ?? bytes(0)) : Buffer.alloc(0);
  return packet(0x10, head, p, o.clientId === undefined ? Buffer.alloc(0) : str(o.clientId), o.rest ?? Buffer.alloc(0));
}

// ---------------------------------------------------------------------------------------------------------------
// the context a statement test gets

export type V = 4 | 5;
export type Packet = Record<string, any>;

/** A raw client that also keeps every byte it received (for checks below the parser: flags, lengths). */
export interface Client extends RawClient {
  received: Buffer[];
}

export class Ctx {
  private seq = 0;
  private readonly clients: RawClient[] = [];
  constructor(
    readonly broker: BrokerName,
    readonly port: number,
    /** unique per test: client ids and topics start with it, so tests never see each other's traffic */
    readonly tag: string,
  ) {}

  /** A unique name (client id or topic level). */
  id(what = 'c'): string {
    return `${this.tag}-${what}${++this.seq}`;
  }
  /** A unique topic. */
  topic(what = 't'): string {
    return `cf/${this.tag}/${what}${++this.seq}`;
  }

  async open(v: V): Promise<Client> {
    const r = (await RawClient.open(this.port, v)) as Client;
    r.received = [];
    r.socket.on('data', (b) => r.received.push(b));
    this.clients.push(r);
    return r;
  }

  /** Opened and connected (CONNACK success asserted); `o` goes into the CONNECT. */
  async connect(v: V, o: Record<string, unknown> = {}): Promise<[Client, Packet]> {
    const r = await this.open(v);
    const ack = await r.connect({ clientId: this.id(), ...o });
    assert.equal(ack.reasonCode ?? ack.returnCode, 0, `CONNACK ${JSON.stringify(ack)}`);
    return [r, ack];
  }

  /** SUBSCRIBE one filter; resolves with the granted codes. */
  async sub(r: RawClient, topic: string, qos = 0, o: Record<string, unknown> = {}, properties?: Record<string, unknown>): Promise<number[]> {
    const messageId = 1 + (this.seq++ % 60000);
    r.send({ cmd: 'subscribe', messageId, subscriptions: [{ topic, qos, ...o }], ...(properties ? { properties } : {}) });
    const ack = await r.next('suback');
    assert.equal(ack.messageId, messageId);
    return ack.granted as number[];
  }

  /** PUBLISH and complete its flow (PUBACK, or PUBREC → PUBREL → PUBCOMP); resolves with the ack. */
  async pub(r: RawClient, topic: string, payload: string | Buffer, qos = 0, o: Record<string, unknown> = {}): Promise<Packet | undefined> {
    const messageId = qos > 0 ? 1 + (this.seq++ % 60000) : undefined;
    r.send({ cmd: 'publish', topic, payload: Buffer.from(payload), qos, retain: false, dup: false, ...(messageId ? { messageId } : {}), ...o });
    if (qos === 1) return r.next('puback');
    if (qos === 2) {
      const rec = await r.next('pubrec');
      r.send({ cmd: 'pubrel', messageId: rec.messageId });
      await r.next('pubcomp');
      return rec;
    }
    // QoS 0 has no answer: a PINGREQ round trip shows the broker has read it
    r.send({ cmd: 'pingreq' });
    await r.next('pingresp');
    return undefined;
  }

  /** The next PUBLISH; QoS 1/2 ones are acknowledged unless `ack` is false. */
  async msg(r: RawClient, ms = 3000, ack = true): Promise<Packet> {
    const p = await r.next('publish', ms);
    if (ack && p.qos === 1) r.send({ cmd: 'puback', messageId: p.messageId });
    if (ack && p.qos === 2) {
      r.send({ cmd: 'pubrec', messageId: p.messageId });
      await r.next('pubrel');
      r.send({ cmd: 'pubcomp', messageId: p.messageId });
    }
    return p;
  }

  /** No packet of `cmd` arrives within `ms` (a PINGREQ round trip first, so what was in flight has arrived). */
  async none(r: RawClient, cmd: string, ms = 300): Promise<void> {
    if (!r.closed) {
      r.send({ cmd: 'pingreq' });
      await r.next('pingresp').catch(() => undefined);
    }
    await sleep(ms);
    const got = r.packets.filter((p) => p.cmd === cmd);
    assert.equal(got.length, 0, `unexpected ${cmd}: ${JSON.stringify(got.map((p) => ({ ...p, payload: p.payload?.toString() })))}`);
  }

  /** Closed without a successful CONNACK (a refusing CONNACK is allowed). */
  async refused(r: RawClient): Promise<void> {
    await r.waitClosed();
    const ok = r.packets.filter((p) => p.cmd === 'connack' && (p.reasonCode ?? p.returnCode) === 0);
    assert.equal(ok.length, 0, 'no successful CONNACK');
  }

  /**
   * The server closed the connection for a malformed packet or protocol error; a v5 DISCONNECT before the close, if
   * any, has a reason code of 0x80 or more (`reason` when the statement names one). No packet of `none` came.
   */
  async closed(r: RawClient, reason?: number, none: string[] = []): Promise<void> {
    await r.waitClosed();
    for (const d of r.packets.filter((p) => p.cmd === 'disconnect')) {
      if (reason !== undefined) assert.equal(d.reasonCode, reason, `DISCONNECT reason 0x${(d.reasonCode ?? 0).toString(16)}`);
      else assert.ok((d.reasonCode ?? 0) >= 0x80, `DISCONNECT reason 0x${(d.reasonCode ?? 0).toString(16)}`);
    }
    for (const cmd of none) assert.equal(r.packets.filter((p) => p.cmd === cmd).length, 0, `no ${cmd} before the close`);
  }

  /** A subscriber on `topic` (QoS `qos`), connected with `o`. */
  async subscriber(v: V, topic: string, qos = 1, o: Record<string, unknown> = {}, subOpts: Record<string, unknown> = {}): Promise<Client> {
    const [r] = await this.connect(v, o);
    const g = await this.sub(r, topic, qos, subOpts);
    assert.ok(g[0]! < 0x80, `subscribed: ${g}`);
    return r;
  }

  dispose(): void {
    for (const r of this.clients) r.destroy();
  }
}

// ---------------------------------------------------------------------------------------------------------------
// registering the tests

/** The test name of a case: statement id, protocol version, what it checks. */
export function testName(c: Case): string {
  return `${c.id} (${c.v === 4 ? '3.1.1' : '5.0'}): ${c.title}`;
}

/**
 * One describe per broker, one test per case. Where the broker has a documented deviation from the statement, the
 * test asserts the deviation: its `observe` function if it has one (the broker's actual behaviour), otherwise that the
 * conformance check fails on that broker, so a broker that starts to conform fails the test until the deviation is
 * taken off the list.
 */
export function runCases(group: string, cases: Case[]): void {
  for (const name of selectedBrokers()) {
    // the tests of a broker run side by side (each uses client ids and topics of its own): most of their time is
    // waiting (keep alive, expiry, will delay, the quiet period that shows a packet did not come)
    describe(`conformance ${name} - ${group}`, { concurrency: 8 }, () => {
      let broker: RunningBroker;
      before(async () => {
        broker = name === 'switchyard' ? await startSwitchyard() : await startMosquitto();
      });
      after(async () => {
        await broker?.stop();
      });
      let n = 0;
      for (const c of cases) {
        const tag = `${group.replace(/[^a-z0-9]/gi, '').slice(0, 6).toLowerCase()}${c.v}${++n}${name[0]}`;
        test(testName(c), async () => {
          const t = new Ctx(name, broker.port, tag);
          try {
            const dev = c.deviation?.[name];
            if (dev === undefined) await c.run(t);
            else if (dev.observe) await dev.observe(t);
            else await assert.rejects(c.run(t), `${name} is listed as deviating from ${c.id} (${dev.why}), but the test passed: take the deviation off the list`);
          } finally {
            t.dispose();
          }
        });
      }
    });
  }
}
