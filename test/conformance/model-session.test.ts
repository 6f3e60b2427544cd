/**
 * Model-based tests (fast-check) of the MQTT session state machine against a simple reference model, over real
 * sockets to an in-process broker on a random port. Each run gets its own client ids and topic; fast-check generates a
 * sequence of commands, applies each to the model and to the broker, and checks the broker's answers against the model:
 *
 * - a publisher's QoS 1 PUBLISH (always packet identifier 1: reused as soon as its PUBACK came) and QoS 2 PUBLISH /
 *   PUBREL on identifiers 1..3, including a PUBLISH on an identifier whose PUBREL has not come yet (must be answered
 *   with PUBREC and not delivered twice, [MQTT-4.3.3-9] / 3.1.1 §4.3.3) and a PUBREL for an unknown identifier
 *   (PUBCOMP 0x92);
 * - the subscriber's session: SUBSCRIBE, DISCONNECT (session kept), DISCONNECT with Session Expiry Interval 0 or a
 *   short interval (session ends), reconnect with Clean Start 0 (session present only if it exists, queued messages
 *   delivered) or 1 (session discarded), and takeover by a second connection with the same client id (the first gets
 *   DISCONNECT 0x8E, [MQTT-3.1.4-3]).
 *
 * The model says which messages the subscriber must get (QoS 1 at least once, QoS 2 exactly once) and which it must
 * never get (published while it had no subscription, or queued in a session that was discarded or expired); each run
 * ends by reconnecting, subscribing and waiting for a sentinel message, then comparing. Both protocol versions: in
 * MQTT 3.1.1 there are no reason codes or expiry intervals, a clean session 1 session ends with its connection, and
 * a taken-over connection is closed without DISCONNECT. Bounded: NUM_RUNS runs per version (SWITCHYARD_MODEL_RUNS to
 * change), at most MAX_COMMANDS commands each; the seed is printed on failure by fast-check.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import fc from 'fast-check';
import mqttPacket from 'mqtt-packet';
import { startServer, type TestServer } from '../helpers.js';
import { mqttPort } from '../mqtt/helpers.js';

const NUM_RUNS = Number(process.env.SWITCHYARD_MODEL_RUNS ?? 25);
const MAX_COMMANDS = 40;
const WAIT_MS = 5000;
const EXPIRY = 300; // the subscriber's Session Expiry Interval, s: its session outlives every disconnect of a run

type Packet = Record<string, any>;

/** A bare MQTT connection (3.1.1 or 5): parsed packets in arrival order, waits on them, and an optional hook per packet. */
class Conn {
  readonly packets: Packet[] = [];
  closed = false;
  private waiters: Array<() => void> = [];
  onPacket: (p: Packet) => void = () => undefined;
  private constructor(
    readonly socket: Socket,
    readonly version: 4 | 5,
  ) {
    const parser = mqttPacket.parser({ protocolVersion: version });
    parser.on('packet', (p) => {
      this.packets.push(p as Packet);
      this.onPacket(p as Packet);
      this.wake();
    });
    parser.on('error', () => socket.destroy());
    socket.on('data', (b) => parser.parse(b));
    socket.on('close', () => {
      this.closed = true;
      this.wake();
    });
    socket.on('error', () => undefined);
  }
  static open(port: number, version: 4 | 5): Promise<Conn> {
    return new Promise((resolve, reject) => {
      const s = connect(port, '127.0.0.1', () => resolve(new Conn(s, version)));
      s.once('error', reject);
    });
  }
  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }
  send(p: Packet): void {
    this.socket.write(mqttPacket.generate(p as never, { protocolVersion: this.version }));
  }
  /** Waits for a packet matching `pred` (removed from the list). */
  async next(what: string, pred: (p: Packet) => boolean): Promise<Packet> {
    const end = Date.now() + WAIT_MS;
    for (;;) {
      const i = this.packets.findIndex(pred);
      if (i >= 0) return this.packets.splice(i, 1)[0]!;
      if (this.closed) throw new Error(`connection closed while waiting for ${what}; had ${JSON.stringify(this.packets.map((p) => [p.cmd, p.messageId, p.reasonCode]))}`);
      const left = end - Date.now();
      if (left <= 0) throw new Error(`no ${what} within ${WAIT_MS} ms`);
      await new Promise<void>((res) => {
        const t = setTimeout(res, left);
        this.waiters.push(() => {
          clearTimeout(t);
          res();
        });
      });
    }
  }
  async waitClosed(): Promise<void> {
    const end = Date.now() + WAIT_MS;
    while (!this.closed) {
      if (Date.now() > end) throw new Error('connection still open');
      await new Promise<void>((res) => this.waiters.push(res));
    }
  }
  destroy(): void {
    this.socket.destroy();
  }
}

/**
 * The subscriber: its connection (if any) and the client side of its session, which outlives connections: every
 * message it received (by payload), and the QoS 2 packet identifiers it answered with PUBREC and awaits PUBREL for
 * (a PUBLISH on one of them is the same message again, not counted twice: the client's half of exactly once).
 */
class Subscriber {
  conn: Conn | undefined;
  readonly received = new Map<string, number>();
  private readonly q2 = new Set<number>();
  private arrivals: Array<() => void> = [];
  constructor(
    readonly port: number,
    readonly clientId: string,
    readonly version: 4 | 5,
  ) {}

  async connect(cleanStart: boolean): Promise<{ conn: Conn; connack: Packet }> {
    const conn = await Conn.open(this.port, this.version);
    conn.onPacket = (p) => this.handle(conn, p);
    const v5 = this.version === 5;
    conn.send({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: this.version, clean: cleanStart, clientId: this.clientId, keepalive: 0, ...(v5 ? { properties: { sessionExpiryInterval: EXPIRY } } : {}) });
    const connack = await conn.next('CONNACK', (p) => p.cmd === 'connack');
    // Clean Start 1 discards the client's session state too [MQTT-3.1.2-4], and so does a CONNACK without a session
    // present: the broker starts a new session, whose packet identifiers begin again (a QoS 2 identifier still held
    // here from the old session, its PUBREL lost with it, would make the client drop a new message as a duplicate)
    if (cleanStart || connack.sessionPresent !== true) this.q2.clear();
    return { conn, connack };
  }

  private handle(conn: Conn, p: Packet): void {
    if (p.cmd === 'publish') {
      const payload = (p.payload as Buffer).toString();
      if (p.qos === 1) conn.send({ cmd: 'puback', messageId: p.messageId });
      if (p.qos === 2) {
        conn.send({ cmd: 'pubrec', messageId: p.messageId });
        if (this.q2.has(p.messageId)) return; // the same QoS 2 message again, before its PUBREL
        this.q2.add(p.messageId);
      }
      this.received.set(payload, (this.received.get(payload) ?? 0) + 1);
      const w = this.arrivals;
      this.arrivals = [];
      for (const f of w) f();
    } else if (p.cmd === 'pubrel') {
      this.q2.delete(p.messageId);
      conn.send({ cmd: 'pubcomp', messageId: p.messageId });
    }
  }

  /** Waits until each payload has been received at least once. */
  async await(payloads: Iterable<string>): Promise<void> {
    const want = [...payloads];
    const end = Date.now() + WAIT_MS;
    for (;;) {
      const missing = want.filter((m) => !this.received.has(m));
      if (missing.length === 0) return;
      const left = end - Date.now();
      if (left <= 0) throw new Error(`subscriber ${this.clientId} never got ${JSON.stringify(missing)}; got ${JSON.stringify([...this.received])}`);
      await new Promise<void>((res) => {
        const t = setTimeout(res, left);
        this.arrivals.push(() => {
          clearTimeout(t);
          res();
        });
      });
    }
  }
}

/** The reference model. */
interface Model {
  /** The subscriber's session exists on the broker. */
  session: boolean;
  /** Its session holds the subscription. */
  subscribed: boolean;
  online: boolean;
  /**
   * MQTT 3.1.1: the subscriber's connection has clean session 1, so its session ends with the connection (3.1.1
   * §3.1.2.4); in MQTT 5 the Session Expiry Interval decides that (EXPIRY unless a DISCONNECT changes it).
   */
  cleanConn: boolean;
  /** Messages the subscriber must get, with their QoS (1: at least once, 2: exactly once). */
  expected: Map<string, 1 | 2>;
  /** Messages it must never get. */
  forbidden: Set<string>;
  /** The publisher's QoS 2 packet identifiers the broker has answered with PUBREC and not yet seen PUBREL for. */
  inbound2: Map<number, string>;
  /**
   * QoS 2 messages whose PUBREL had not come when the subscriber's state changed: a broker may route a QoS 2 message
   * when its PUBLISH arrives or when its PUBREL does (5 §4.3.3), so either outcome is right; at most once.
   */
  either: Set<string>;
  /**
   * Identifiers released (PUBCOMP sent) and not used since: a PUBREL on one again is recovery (PUBCOMP 0, the broker
   * keeps them until the id is reused, handlers/pubrel.ts); on any other identifier it is unknown (PUBCOMP 0x92).
   */
  released2: Set<number>;
  /**
   * A disconnect with a 1 s Session Expiry Interval waited out in this run: at most one, in one run of five (each
   * costs 2.5 s; the other runs end sessions with Session Expiry Interval 0 on DISCONNECT, which is immediate).
   */
  waitedExpiry: boolean;
  next: number;
}

interface Real {
  version: 4 | 5;
  sub: Subscriber;
  pub: Conn;
  topic: string;
  log: string[];
}

/** The subscriber's session changes: unreleased QoS 2 messages may or may not reach it (see `Model.either`). */
const unsettle = (m: Model): void => {
  for (const payload of m.inbound2.values()) {
    m.expected.delete(payload);
    m.forbidden.delete(payload);
    m.either.add(payload);
  }
};

const routeTo = (m: Model, payload: string, qos: 1 | 2): void => {
  if (m.session && m.subscribed) m.expected.set(payload, qos);
  else m.forbidden.add(payload);
};

/** What must have arrived while the subscriber is online and subscribed has arrived (before its state changes). */
async function drain(m: Model, r: Real): Promise<void> {
  if (m.online && m.subscribed) await r.sub.await(m.expected.keys());
}

class Publish1 implements fc.AsyncCommand<Model, Real> {
  check = (): boolean => true;
  async run(m: Model, r: Real): Promise<void> {
    const payload = `m${m.next++}`;
    r.pub.send({ cmd: 'publish', topic: r.topic, payload, qos: 1, messageId: 1, retain: false, dup: false });
    const ack = await r.pub.next('PUBACK 1', (p) => p.cmd === 'puback' && p.messageId === 1);
    assert.ok((ack.reasonCode ?? 0) < 0x80, `PUBACK reason 0x${(ack.reasonCode ?? 0).toString(16)}`);
    routeTo(m, payload, 1);
  }
  toString = (): string => 'publish QoS 1 (id 1)';
}

class Publish2 implements fc.AsyncCommand<Model, Real> {
  constructor(readonly id: number) {}
  check = (): boolean => true;
  async run(m: Model, r: Real): Promise<void> {
    const payload = `m${m.next++}`;
    const again = m.inbound2.has(this.id);
    r.pub.send({ cmd: 'publish', topic: r.topic, payload, qos: 2, messageId: this.id, retain: false, dup: again });
    const rec = await r.pub.next(`PUBREC ${this.id}`, (p) => p.cmd === 'pubrec' && p.messageId === this.id);
    assert.ok((rec.reasonCode ?? 0) < 0x80, `PUBREC reason 0x${(rec.reasonCode ?? 0).toString(16)}`);
    // the identifier is not released yet: the same message as far as the broker is concerned, not delivered again
    if (again) m.forbidden.add(payload);
    else {
      m.inbound2.set(this.id, payload);
      m.released2.delete(this.id);
      routeTo(m, payload, 2);
    }
  }
  toString = (): string => `publish QoS 2 (id ${this.id})`;
}

class Release implements fc.AsyncCommand<Model, Real> {
  constructor(readonly id: number) {}
  check = (): boolean => true;
  async run(m: Model, r: Real): Promise<void> {
    r.pub.send({ cmd: 'pubrel', messageId: this.id });
    const comp = await r.pub.next(`PUBCOMP ${this.id}`, (p) => p.cmd === 'pubcomp' && p.messageId === this.id);
    // 5 §3.7.2.1: 0x92 Packet Identifier not found for a PUBREL the receiver has no state for (3.1.1: PUBCOMP, no code)
    if (r.version === 5) assert.equal(comp.reasonCode ?? 0, m.inbound2.has(this.id) || m.released2.has(this.id) ? 0 : 0x92, `PUBCOMP ${this.id} reason`);
    if (m.inbound2.delete(this.id)) m.released2.add(this.id);
  }
  toString = (): string => `PUBREL ${this.id}`;
}

class Subscribe implements fc.AsyncCommand<Model, Real> {
  check = (m: Readonly<Model>): boolean => m.online && !m.subscribed;
  async run(m: Model, r: Real): Promise<void> {
    unsettle(m);
    const conn = r.sub.conn!;
    conn.send({ cmd: 'subscribe', messageId: 7, subscriptions: [{ topic: r.topic, qos: 2 }] });
    const ack = await conn.next('SUBACK', (p) => p.cmd === 'suback');
    assert.deepEqual(ack.granted, [2]);
    m.subscribed = true;
  }
  toString = (): string => 'subscribe';
}

class Disconnect implements fc.AsyncCommand<Model, Real> {
  /** Session Expiry Interval in the DISCONNECT: undefined keeps the CONNECT's, 0 ends the session now. */
  constructor(readonly expiry: undefined | 0 | 1) {}
  check = (m: Readonly<Model>): boolean => m.online && (this.expiry !== 1 || !m.waitedExpiry);
  async run(m: Model, r: Real): Promise<void> {
    if (this.expiry === 1) m.waitedExpiry = true;
    unsettle(m);
    await drain(m, r);
    const conn = r.sub.conn!;
    conn.send({ cmd: 'disconnect', ...(r.version === 5 ? { reasonCode: 0 } : {}), ...(this.expiry !== undefined ? { properties: { sessionExpiryInterval: this.expiry } } : {}) });
    await conn.waitClosed();
    r.sub.conn = undefined;
    m.online = false;
    if (r.version === 4 && m.cleanConn) {
      m.session = false;
      m.subscribed = false;
    }
    if (this.expiry !== undefined) {
      // a short interval: wait it out, with margin for a loaded machine (the broker expires sessions on a timer)
      if (this.expiry > 0) await new Promise((res) => setTimeout(res, this.expiry! * 1000 + 1500));
      m.session = false;
      m.subscribed = false;
    }
  }
  toString = (): string => (this.expiry === undefined ? 'disconnect' : `disconnect, session expiry ${this.expiry} s`);
}

class Reconnect implements fc.AsyncCommand<Model, Real> {
  constructor(readonly cleanStart: boolean) {}
  check = (m: Readonly<Model>): boolean => !m.online;
  async run(m: Model, r: Real): Promise<void> {
    unsettle(m);
    const { conn, connack } = await r.sub.connect(this.cleanStart);
    r.sub.conn = conn;
    assert.equal(connack.reasonCode ?? connack.returnCode, 0);
    assert.equal(connack.sessionPresent, !this.cleanStart && m.session, 'CONNACK session present [MQTT-3.2.2-2, MQTT-3.2.2-3]');
    m.cleanConn = this.cleanStart;
    if (this.cleanStart || !m.session) {
      // what the old session held is gone with it
      for (const p of m.expected.keys()) if (!r.sub.received.has(p)) m.forbidden.add(p);
      for (const p of m.forbidden) m.expected.delete(p);
      m.subscribed = false;
    }
    m.session = true;
    m.online = true;
  }
  toString = (): string => `reconnect, Clean Start ${this.cleanStart ? 1 : 0}`;
}

class Takeover implements fc.AsyncCommand<Model, Real> {
  // 3.1.1: only a clean session 0 connection is taken over here (whether a clean session 1 session is "present" to a
  // clean session 0 takeover is read differently by brokers)
  check = (m: Readonly<Model>): boolean => m.online && !m.cleanConn;
  async run(m: Model, r: Real): Promise<void> {
    const old = r.sub.conn!;
    const { conn, connack } = await r.sub.connect(false);
    r.sub.conn = conn;
    assert.equal(connack.reasonCode ?? connack.returnCode, 0);
    assert.equal(connack.sessionPresent, true, 'takeover resumes the session');
    if (r.version === 5) {
      const d = await old.next('DISCONNECT on the old connection', (p) => p.cmd === 'disconnect');
      assert.equal(d.reasonCode, 0x8e, 'Session taken over');
    }
    await old.waitClosed(); // [MQTT-3.1.4-2] (3.1.1: closed without a DISCONNECT, which a 3.1.1 server never sends)
    if (r.version === 4) assert.equal(old.packets.filter((p) => p.cmd === 'disconnect').length, 0);
  }
  toString = (): string => 'takeover';
}

describe('model - MQTT session state machine', () => {
  let s: TestServer;
  let port = 0;
  const open = new Set<Conn>();
  before(async () => {
    s = await startServer({ overrides: { AuthManager: { authenticationEnabled: false, authorisationEnabled: false } } });
    port = await mqttPort(s);
  });
  after(async () => {
    for (const c of open) c.destroy();
    await s.close();
  });

  for (const version of [5, 4] as const) {
    const name = version === 5 ? 'MQTT 5' : 'MQTT 3.1.1';
    const expiry = version === 5 ? ', expiry' : ', clean session';
    test(`model - ${name}: QoS 1/2 exchanges, packet identifier reuse, takeover${expiry} agree with the reference model (${NUM_RUNS} runs, up to ${MAX_COMMANDS} commands each)`, async () => {
      let run = 0;
      let commandsRun = 0;
      const byKind = new Map<string, number>();
      const commands = [
        fc.constant(new Publish1()),
        fc.integer({ min: 1, max: 3 }).map((id) => new Publish2(id)),
        fc.integer({ min: 1, max: 3 }).map((id) => new Release(id)),
        fc.constant(new Subscribe()),
        ...(version === 5 ? [fc.constantFrom<undefined | 0>(undefined, undefined, 0).map((e) => new Disconnect(e)), fc.constant(new Disconnect(1))] : [fc.constant(new Disconnect(undefined))]),
        fc.boolean().map((clean) => new Reconnect(clean)),
        fc.constant(new Takeover()),
      ];
      await fc.assert(
        fc.asyncProperty(fc.commands(commands, { maxCommands: MAX_COMMANDS, size: 'large' }), async (cmds) => {
          const id = `model${version}-${process.pid}-${run++}`;
          const sub = new Subscriber(port, `${id}-sub`, version);
          const pub = await Conn.open(port, version);
          open.add(pub);
          pub.send({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: version, clean: true, clientId: `${id}-pub`, keepalive: 0 });
          await pub.next('CONNACK', (p) => p.cmd === 'connack');
          // the run starts with the subscriber online and subscribed, in a new session
          const first = await sub.connect(true);
          sub.conn = first.conn;
          const m: Model = { session: true, subscribed: false, online: true, cleanConn: true, expected: new Map(), forbidden: new Set(), inbound2: new Map(), either: new Set(), released2: new Set(), waitedExpiry: run % 5 !== 1, next: 0 };
          const r: Real = { version, sub, pub, topic: `model/${id}`, log: [] };
          await new Subscribe().run(m, r);
          const wrapped = [...cmds].map((c) => ({
            check: (mm: Readonly<Model>) => c.check(mm),
            run: async (mm: Model, rr: Real) => {
              commandsRun++;
              const kind = c.toString().replace(/ \(id \d\)| \d$/, '');
              byKind.set(kind, (byKind.get(kind) ?? 0) + 1);
              await c.run(mm, rr);
            },
            toString: () => c.toString(),
          }));
          try {
            await fc.asyncModelRun(() => ({ model: m, real: r }), wrapped);
            // release what the publisher left unreleased, then get the subscriber online and subscribed, and wait for a
            // sentinel published after everything else: whatever was wrongly kept has arrived by then
            for (const pid of [...m.inbound2.keys()]) await new Release(pid).run(m, r);
            if (!m.online) await new Reconnect(false).run(m, r);
            if (!m.subscribed) await new Subscribe().run(m, r);
            await new Publish1().run(m, r);
            const sentinel = `m${m.next - 1}`;
            await sub.await([...m.expected.keys(), sentinel]);
            for (const [payload, qos] of m.expected) {
              const n = sub.received.get(payload) ?? 0;
              if (qos === 2) assert.equal(n, 1, `QoS 2 message ${payload} received ${n} times (exactly once) [MQTT-4.3.3]`);
              else assert.ok(n >= 1, `QoS 1 message ${payload} received`);
            }
            for (const payload of m.either) assert.ok((sub.received.get(payload) ?? 0) <= 1, `QoS 2 message ${payload} received more than once`);
            const wrong = [...m.forbidden].filter((p) => sub.received.has(p));
            assert.deepEqual(wrong, [], 'messages the model says must never arrive');
          } finally {
            // end the subscriber's session (clean session / Clean Start 1, expiry 0 on DISCONNECT) so runs leave nothing
            sub.conn?.destroy();
            const { conn } = await sub.connect(true);
            conn.send({ cmd: 'disconnect', ...(version === 5 ? { reasonCode: 0, properties: { sessionExpiryInterval: 0 } } : {}) });
            await conn.waitClosed().catch(() => conn.destroy());
            pub.destroy();
            open.delete(pub);
          }
        }),
        { numRuns: NUM_RUNS },
      );
      console.log(`# model ${name}: ${run} runs (numRuns ${NUM_RUNS}), ${commandsRun} commands run: ${[...byKind].map(([k, n]) => `${k} ${n}`).join(', ')}`);
      assert.equal(run >= NUM_RUNS, true);
    });
  }
});
