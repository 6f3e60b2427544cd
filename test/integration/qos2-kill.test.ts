import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, writeFileSync } from 'node:fs';
import { createServer, connect as netConnect, type Socket } from 'node:net';
import { join } from 'node:path';
import mqttPacket from 'mqtt-packet';
import { CONFIG_DIR, removeDir, spawnBroker, tempDir, type BrokerProcess } from '../helpers.js';

/**
 * Exactly-once across SIGKILL. The broker runs as a child process on one data directory and is killed (SIGKILL) at
 * random acknowledgements, then started again:
 *
 * 1. Raw-protocol publishers with persistent sessions (QoS 2 over MQTT 5, QoS 1 over 3.1.1) keep 50 exchanges in
 *    flight and reuse the lowest free packet id. The broker is killed at random PUBRECs / PUBCOMPs the QoS 2
 *    publisher receives, at least KILLS_PUBLISH times; each publisher resumes as the standard says (PUBREL where
 *    it had PUBREC, PUBLISH with DUP and the same id where it had not).
 * 2. A persistent subscriber, offline during step 1, consumes what was queued for it (QoS 2 and QoS 1) as a
 *    raw-protocol MQTT 5 receiver (Receive Maximum 50, exactly-once per 5 §4.3.3), while the broker is killed at
 *    random PUBRELs / PUBCOMPs at least KILLS_CONSUME times.
 *
 * Asserted: every QoS 2 message the broker acknowledged reaches the subscriber's application exactly once, every
 * QoS 1 message at least once, and no PUBCOMP 0x92 answers a PUBREL for an id the broker had acknowledged.
 * SWITCHYARD_KILL_ROUNDS (default 10) sets the number of kills while publishing (half of it, at least 5, while
 * consuming); the message counts grow with it.
 */
const ROUNDS = Math.max(10, Number(process.env.SWITCHYARD_KILL_ROUNDS ?? 10) || 10);
const KILLS_PUBLISH = ROUNDS;
const KILLS_CONSUME = Math.max(5, Math.floor(ROUNDS / 2));
const WINDOW = 50;
const MIN_QOS2 = 150 * ROUNDS;
const QOS1_COUNT = 60 * ROUNDS;

const dirs: string[] = [];
let broker: KillableBroker | undefined;
after(async () => {
  await broker?.stop();
  dirs.forEach(removeDir);
});

function rnd(min: number, max: number): number {
  return min + Math.floor(Math.random() * (max - min + 1));
}

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((res) => s.listen(0, '127.0.0.1', res));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((res) => s.close(() => res()));
  return port;
}

/** The broker child process, killed with SIGKILL and started again on the same data dir and MQTT port. */
class KillableBroker {
  proc!: BrokerProcess;
  kills = 0;
  /** Output of the processes killed so far. */
  readonly output: string[] = [];
  /** Resolves when the broker (re)started. */
  up: Promise<void> = Promise.resolve();
  private restarting = false;
  constructor(private readonly env: Record<string, string>) {}

  async start(): Promise<void> {
    this.proc = await spawnBroker(this.env);
  }

  /** SIGKILL now (once per restart), then start again. */
  kill(): void {
    if (this.restarting) return;
    this.restarting = true;
    this.kills++;
    const old = this.proc;
    old.proc.kill('SIGKILL');
    this.up = (async () => {
      await old.exited;
      this.output.push(old.stdout() + old.stderr());
      // not waiting for REST: the clients retry until the MQTT endpoint listens
      this.proc = await spawnBroker(this.env, { waitReady: false });
      this.restarting = false;
    })();
  }

  async stop(): Promise<void> {
    await this.up.catch(() => {});
    await this.proc?.stop('SIGKILL');
  }
}

type Packet = Record<string, any>;

/**
 * One raw MQTT client that survives broker restarts: after its connection drops it reconnects (clean session off)
 * once the broker is back, and `onConnect(sessionPresent)` resumes its exchanges.
 */
class Peer {
  socket: Socket | undefined;
  connected = false;
  sessionLost = 0;
  reconnects = 0;
  /** A session was made before: a CONNACK without one means it was lost. */
  hadSession = false;
  stopped = false;
  private parser: ReturnType<typeof mqttPacket.parser> | undefined;
  constructor(
    readonly port: number,
    readonly version: 4 | 5,
    readonly clientId: string,
    readonly onPacket: (p: Packet) => void,
    readonly onConnect: (sessionPresent: boolean) => void,
    readonly connectProps: Record<string, unknown> = {},
  ) {}

  send(p: Packet): void {
    if (!this.connected || this.socket === undefined) return;
    this.socket.write(mqttPacket.generate(p as never, { protocolVersion: this.version } as never));
  }

  /** Connect (retrying while the broker starts); resolves at CONNACK. */
  async open(clean = false): Promise<void> {
    for (;;) {
      await broker!.up;
      try {
        await this.tryOpen(clean);
        return;
      } catch {
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  }

  private tryOpen(clean: boolean): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const socket = netConnect(this.port, '127.0.0.1');
      socket.setNoDelay(true);
      const parser = mqttPacket.parser({ protocolVersion: this.version } as never);
      let acked = false;
      parser.on('packet', (p: Packet) => {
        if (!acked) {
          if (p.cmd !== 'connack' || (p.reasonCode ?? p.returnCode ?? 0) !== 0) {
            socket.destroy();
            reject(new Error(`CONNACK refused: ${JSON.stringify(p)}`));
            return;
          }
          acked = true;
          this.connected = true;
          this.socket = socket;
          this.parser = parser;
          if (!clean && !p.sessionPresent && this.hadSession) this.sessionLost++;
          this.hadSession = true;
          resolve();
          this.onConnect(p.sessionPresent === true);
          return;
        }
        this.onPacket(p);
      });
      parser.on('error', () => socket.destroy());
      socket.on('data', (b) => parser.parse(b));
      socket.on('error', () => {});
      socket.on('connect', () => {
        const props = this.version === 5 ? { properties: { sessionExpiryInterval: 86400, ...this.connectProps } } : {};
        socket.write(
          mqttPacket.generate({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: this.version, clean, clientId: this.clientId, keepalive: 0, ...props } as never, {
            protocolVersion: this.version,
          } as never),
        );
      });
      socket.on('close', () => {
        if (!acked) {
          reject(new Error('closed before CONNACK'));
          return;
        }
        if (this.socket !== socket) return;
        this.connected = false;
        this.socket = undefined;
        if (!this.stopped) {
          this.reconnects++;
          void this.open(false);
        }
      });
    });
  }

  close(): void {
    this.stopped = true;
    const s = this.socket;
    this.socket = undefined;
    this.connected = false;
    s?.destroy();
  }
}

/** Kills the broker after a random number of counted acknowledgements, until `limit` kills. */
class KillSwitch {
  private countdown: number;
  constructor(
    private readonly limit: number,
    private readonly min: number,
    private readonly max: number,
  ) {
    this.countdown = rnd(min, max);
  }
  tick(): void {
    if (broker!.kills >= this.limit) return;
    if (--this.countdown > 0) return;
    this.countdown = rnd(this.min, this.max);
    broker!.kill();
  }
}

/** A publisher with `WINDOW` exchanges in flight, lowest free packet id, resuming per MQTT-4.4.0-1. */
class Publisher {
  readonly inflight = new Map<number, { seq: number; stage: 1 | 2 }>();
  /** seq → acknowledged by the broker (PUBREC 0 / PUBACK 0). */
  readonly accepted = new Set<number>();
  readonly completed = new Set<number>();
  nextSeq = 0;
  resentPublish = 0;
  resentPubrel = 0;
  pubcomp92ForAccepted = 0;
  refused = 0;
  unexpected: string[] = [];
  peer: Peer;

  constructor(
    port: number,
    version: 4 | 5,
    clientId: string,
    readonly qos: 1 | 2,
    readonly topic: string,
    public target: number,
    private readonly killer: KillSwitch | undefined,
  ) {
    this.peer = new Peer(port, version, clientId, (p) => this.onPacket(p), (present) => this.resume(present));
  }

  private publish(pid: number, seq: number, dup: boolean): void {
    this.peer.send({ cmd: 'publish', topic: this.topic, payload: Buffer.from(`${this.qos}:${seq}`), qos: this.qos, messageId: pid, dup, retain: false });
  }

  pump(): void {
    while (this.peer.connected && this.inflight.size < WINDOW && this.nextSeq < this.target) {
      let pid = 1;
      while (this.inflight.has(pid)) pid++; // the lowest free packet id
      const seq = this.nextSeq++;
      this.inflight.set(pid, { seq, stage: 1 });
      this.publish(pid, seq, false);
    }
  }

  private resume(sessionPresent: boolean): void {
    if (!sessionPresent && this.peer.hadSession && this.peer.reconnects > 0) this.unexpected.push(`${this.peer.clientId}: session not present after a reconnect (kill ${broker!.kills}, ${this.inflight.size} in flight)`);
    // in the order they were first sent [MQTT-4.4.0-1]: PUBREL where PUBREC came, PUBLISH with DUP otherwise
    const list = [...this.inflight.entries()].sort((a, b) => a[1].seq - b[1].seq);
    for (const [pid, e] of list) {
      if (e.stage === 2) {
        this.resentPubrel++;
        this.peer.send({ cmd: 'pubrel', messageId: pid });
      } else {
        this.resentPublish++;
        this.publish(pid, e.seq, true);
      }
    }
    this.pump();
  }

  private onPacket(p: Packet): void {
    const pid = p.messageId as number;
    const e = this.inflight.get(pid);
    const rc = (p.reasonCode ?? 0) as number;
    if (p.cmd === 'puback' && this.qos === 1) {
      if (e === undefined) return; // a second PUBACK for a resent PUBLISH
      if (rc >= 0x80) this.refused++;
      else this.accepted.add(e.seq);
      this.inflight.delete(pid);
      this.completed.add(e.seq);
      this.pump();
    } else if (p.cmd === 'pubrec' && this.qos === 2) {
      this.killer?.tick();
      if (e === undefined) {
        this.unexpected.push(`PUBREC for unknown id ${pid}`);
        return;
      }
      if (rc >= 0x80) {
        this.refused++;
        this.inflight.delete(pid);
        this.pump();
        return;
      }
      this.accepted.add(e.seq);
      e.stage = 2;
      this.peer.send({ cmd: 'pubrel', messageId: pid });
    } else if (p.cmd === 'pubcomp' && this.qos === 2) {
      this.killer?.tick();
      if (e === undefined || e.stage !== 2) {
        this.unexpected.push(`PUBCOMP for id ${pid} not at the PUBREL stage`);
        return;
      }
      if (rc === 0x92 && this.accepted.has(e.seq)) this.pubcomp92ForAccepted++;
      this.inflight.delete(pid);
      this.completed.add(e.seq);
      this.pump();
    } else if (p.cmd === 'disconnect') {
      this.unexpected.push(`DISCONNECT 0x${Number(p.reasonCode).toString(16)}`);
    }
  }

  async run(): Promise<void> {
    await this.peer.open(false);
    this.pump();
  }
}

/** A persistent MQTT 5 receiver: onward delivery once per message, exactly-once per 5 §4.3.3 (method B). */
class Subscriber {
  /** QoS 2 packet ids PUBREC'd and not yet released. */
  readonly pendingRel = new Set<number>();
  readonly delivered = { 1: new Map<number, number>(), 2: new Map<number, number>() };
  /** seq → packet id it first came with (QoS 2). */
  readonly firstPid = new Map<number, number>();
  subacked = false;
  dupPublishes = 0;
  dupWithoutFlag = 0;
  dupOtherId = 0;
  unexpected: string[] = [];
  peer: Peer;
  constructor(
    port: number,
    private readonly killer: KillSwitch | undefined,
  ) {
    this.peer = new Peer(port, 5, 'kill-sub', (p) => this.onPacket(p), () => {}, { receiveMaximum: WINDOW });
  }

  private deliver(qos: 1 | 2, seq: number): void {
    const m = this.delivered[qos];
    m.set(seq, (m.get(seq) ?? 0) + 1);
  }

  private onPacket(p: Packet): void {
    if (p.cmd === 'publish') {
      const [q, s] = String(p.payload).split(':');
      const seq = Number(s);
      const pid = p.messageId as number;
      if (p.qos === 2) {
        if (this.pendingRel.has(pid)) {
          // the same exchange again: acknowledged, not delivered again [MQTT-4.3.3-9]
          this.dupPublishes++;
          if (!p.dup) this.dupWithoutFlag++;
        } else {
          if (this.firstPid.has(seq)) {
            this.dupPublishes++;
            if (!p.dup) this.dupWithoutFlag++;
            if (this.firstPid.get(seq) !== pid) this.dupOtherId++;
          } else this.firstPid.set(seq, pid);
          this.pendingRel.add(pid);
          this.deliver(2, seq);
        }
        this.peer.send({ cmd: 'pubrec', messageId: pid });
      } else if (p.qos === 1) {
        this.deliver(Number(q) === 1 ? 1 : 2, seq);
        this.peer.send({ cmd: 'puback', messageId: pid });
      } else this.unexpected.push('QoS 0 delivery');
    } else if (p.cmd === 'pubrel') {
      this.killer?.tick();
      this.pendingRel.delete(p.messageId as number);
      this.peer.send({ cmd: 'pubcomp', messageId: p.messageId });
    } else if (p.cmd === 'disconnect') {
      this.unexpected.push(`DISCONNECT 0x${Number(p.reasonCode).toString(16)}`);
    } else if (p.cmd === 'suback') this.subacked = true;
    else this.unexpected.push(`unexpected ${p.cmd}`);
  }
}

async function until(pred: () => boolean, what: string, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > end) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('qos 2 across SIGKILL', () => {
  test('kill - QoS 2 exactly once and QoS 1 at least once while the broker is SIGKILLed at random acknowledgements', { timeout: Math.max(600_000, ROUNDS * 60_000) }, async (t) => {
    const data = tempDir();
    const cfg = tempDir('switchyard-cfg-');
    dirs.push(data, cfg);
    cpSync(CONFIG_DIR, cfg, { recursive: true });
    writeFileSync(join(cfg, 'AuthManager.yaml'), 'AuthManager:\n  authenticationEnabled: false\n  authorisationEnabled: false\n');
    const port = await freePort();
    broker = new KillableBroker({ SWITCHYARD_DATA_DIR: data, SWITCHYARD_CONFIG_DIR: cfg, SWITCHYARD_MQTT_PORT: String(port) });
    await broker.start();

    // the subscriber's persistent session and subscriptions, then offline
    const sub = new Subscriber(port, undefined);
    await sub.peer.open(true);
    sub.peer.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: 'kill/q2', qos: 2 }, { topic: 'kill/q1', qos: 1 }] });
    await until(() => sub.subacked, 'SUBACK', 10_000);
    sub.peer.close();
    await new Promise((r) => setTimeout(r, 300)); // the session record is written

    // step 1: publishers, kills at random PUBRECs / PUBCOMPs of the QoS 2 publisher
    const pubKiller = new KillSwitch(KILLS_PUBLISH, 60, 260);
    const pub2 = new Publisher(port, 5, 'kill-pub2', 2, 'kill/q2', MIN_QOS2, pubKiller);
    const pub1 = new Publisher(port, 4, 'kill-pub1', 1, 'kill/q1', QOS1_COUNT, undefined);
    // the sessions start before any kill (their records are written shortly after CONNECT); 3.1.1 clean session 0
    await pub2.peer.open(true);
    pub2.peer.close();
    await pub1.peer.open(false);
    pub1.peer.close();
    await new Promise((r) => setTimeout(r, 300));
    pub2.peer.stopped = pub1.peer.stopped = false;
    await Promise.all([pub2.run(), pub1.run()]);
    // publish until both are done and the broker was killed often enough (more QoS 2 messages while it was not)
    const started = Date.now();
    for (;;) {
      const idle2 = pub2.inflight.size === 0 && pub2.nextSeq >= pub2.target;
      const idle1 = pub1.inflight.size === 0 && pub1.nextSeq >= pub1.target;
      if (idle2 && idle1 && broker.kills >= KILLS_PUBLISH) break;
      if (pub2.nextSeq >= pub2.target && broker.kills < KILLS_PUBLISH) {
        pub2.target += 200;
        pub2.pump();
      }
      if (Date.now() - started > Math.max(400_000, ROUNDS * 40_000)) {
        throw new Error(`publishing did not finish: ${JSON.stringify({ q2: [pub2.completed.size, pub2.target, pub2.inflight.size], q1: [pub1.completed.size, pub1.target], kills: broker.kills })}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    const killsPublishing = broker.kills;
    pub2.peer.close();
    pub1.peer.close();

    // step 2: the subscriber consumes, kills at random PUBRELs
    const expected2 = pub2.accepted.size;
    const expected1 = pub1.accepted.size;
    const subKiller = new KillSwitch(killsPublishing + KILLS_CONSUME, Math.max(20, Math.floor(expected2 / (KILLS_CONSUME * 3))), Math.max(40, Math.floor(expected2 / (KILLS_CONSUME + 1))));
    const consumer = new Subscriber(port, subKiller);
    consumer.peer.stopped = false;
    await consumer.peer.open(false);
    const all = () => consumer.delivered[2].size >= expected2 && consumer.delivered[1].size >= expected1 && consumer.pendingRel.size === 0;
    await until(all, `consumed (${consumer.delivered[2].size}/${expected2} QoS 2, ${consumer.delivered[1].size}/${expected1} QoS 1)`, Math.max(300_000, ROUNDS * 30_000));
    // a little longer: anything delivered twice after the last one would show now
    await new Promise((r) => setTimeout(r, 1000));
    consumer.peer.close();
    const killsConsuming = broker.kills - killsPublishing;

    const lost2 = [...pub2.accepted].filter((s) => !consumer.delivered[2].has(s));
    const twice2 = [...consumer.delivered[2].values()].filter((n) => n > 1).length;
    const lost1 = [...pub1.accepted].filter((s) => !consumer.delivered[1].has(s));
    const twice1 = [...consumer.delivered[1].values()].filter((n) => n > 1).length;
    const unknown2 = [...consumer.delivered[2].keys()].filter((s) => !pub2.accepted.has(s)).length;
    const counts = {
      kills: { publishing: killsPublishing, consuming: killsConsuming },
      qos2: {
        acknowledged: expected2,
        delivered: consumer.delivered[2].size,
        lost: lost2.length,
        duplicates: twice2,
        notAcknowledgedButDelivered: unknown2,
        publisherResentPublishWithDup: pub2.resentPublish,
        publisherResentPubrel: pub2.resentPubrel,
        pubcomp0x92ForAcknowledged: pub2.pubcomp92ForAccepted,
        subscriberSawResend: consumer.dupPublishes,
        resendWithoutDup: consumer.dupWithoutFlag,
        resendWithOtherId: consumer.dupOtherId,
      },
      qos1: { acknowledged: expected1, delivered: consumer.delivered[1].size, lost: lost1.length, duplicates: twice1 },
      sessionsLost: pub2.peer.sessionLost + pub1.peer.sessionLost + consumer.peer.sessionLost,
      unexpected: [...pub2.unexpected, ...pub1.unexpected, ...consumer.unexpected].slice(0, 10),
    };
    console.log(`qos2-kill counts ${JSON.stringify(counts)}`);
    if (counts.unexpected.length > 0 || counts.sessionsLost > 0) {
      const lines = [...broker.output, broker.proc.stdout()].join('\n').split('\n').filter((l) => /kill-(pub|sub)|WARN|ERROR/.test(l));
      console.log(lines.slice(-40).join('\n'));
    }
    t.diagnostic(`qos2-kill counts ${JSON.stringify(counts)}`);

    assert.ok(killsPublishing >= KILLS_PUBLISH, `killed ${killsPublishing} times while publishing`);
    assert.ok(killsConsuming >= KILLS_CONSUME, `killed ${killsConsuming} times while consuming`);
    assert.equal(pub2.refused + pub1.refused, 0, 'no publish refused');
    assert.equal(counts.sessionsLost, 0, 'every persistent session survived every kill');
    assert.equal(lost2.length, 0, `QoS 2 lost: ${lost2.slice(0, 20).join(',')}`);
    assert.equal(twice2, 0, 'QoS 2 delivered twice to the application');
    assert.equal(unknown2, 0, 'every QoS 2 message delivered was acknowledged to its publisher');
    assert.equal(pub2.pubcomp92ForAccepted, 0, 'PUBCOMP 0x92 for an acknowledged id');
    assert.equal(lost1.length, 0, `QoS 1 lost: ${lost1.slice(0, 20).join(',')}`);
    assert.equal(consumer.dupWithoutFlag, 0, 'every resend carries DUP');
    assert.equal(consumer.dupOtherId, 0, 'every resend carries its original packet id');
    assert.deepEqual(counts.unexpected, []);
  });
});
