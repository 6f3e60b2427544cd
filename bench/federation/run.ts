/**
 * bench/federation: publish on broker A -> subscriber on broker B, end to end, in one run for
 *   (a) two Switchyard brokers federated through one nats-server (-js, JetStream for QoS 1), by configuration,
 *   (b) two Mosquitto brokers joined by a Mosquitto bridge on A (`topic b0/# out 0`, `topic b1/# out 1`),
 *   (c) the same traffic through NATS alone with nats.js (core publish / subscribe for QoS 0; JetStream publish with
 *       PubAck, pipelined as the link does it, and a durable consumer with explicit acks for QoS 1): the ceiling.
 * Per system and QoS: throughput (messages/s received on B while 4 publishers on A keep 200 QoS 1 messages in
 * flight each, or keep their socket buffers full at QoS 0) and latency p50/p99 at a fixed 2 000 msg/s. The MQTT
 * clients are the raw-socket load generator of bench/mqtt. Not a test: the numbers vary with the machine.
 * `BENCH_SECONDS` (default 3) is the length of each measured window; `BENCH_FEDERATION_ONLY=switchyard,mosquitto,nats`
 * runs some of the systems only; `BENCH_FEDERATION_SCENARIOS=lat0,lat1,qos0,qos1` some of the scenarios only (latency
 * at QoS 0 / 1, throughput at QoS 0 / 1); `BENCH_FEDERATION_LAT_ROUNDS=n` (default 1) measures each latency scenario n
 * times on the same processes, prints every round, and reports the round with the median p99. For the systems whose
 * processes it started (Switchyard: A, nats-server, B), the CPU each spent per message over the latency window is
 * printed too (utime + stime from /proc/<pid>/stat): a figure that a busy machine moves far less than a p99.
 * Each latency scenario is first run once unmeasured on every system (`BENCH_FEDERATION_WARM=0` skips it): see below.
 * `BENCH_FEDERATION_NATS_AS_LINK=hdr,msgid,stream,consumer,ackbatch,split` makes NATS alone copy some of the link's
 * choices (see linkLike); with `GODEBUG=gctrace=1` in the environment each latency round also prints nats-server's GC
 * cycles and heap.
 * `npm run bench` runs it; `tsx bench/federation/run.ts` alone too.
 *
 * The Switchyard links push `b0/#` / `b1/#` on A and pull them on B (one direction, as the Mosquitto bridge), QoS 0
 * and QoS 1 link configs respectively, with the default globalConfig (`BENCH_LINK_GLOBAL` replaces it). Both Node
 * brokers run as npm start runs them, as in bench/mqtt: its Node flags, malloc environment and bundle
 * (bench/start-flags.ts; `BENCH_NODE_FLAGS` replaces the flags).
 * Mosquitto runs without persistence (as in bench/mqtt); Switchyard acknowledges a QoS 1 publish once JetStream has
 * the message, or once it is in the sending broker's persistent outbox (LevelDB) when JetStream's acknowledgement
 * takes longer than `outboxWriteBehind` (100 ms), and removes it from the outbox only after that acknowledgement.
 */
import { START_ENV, START_FLAGS, switchyardArgs } from '../start-flags.js';
import { fork, spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { randomUUID } from 'node:crypto';
import { join, resolve } from 'node:path';
import { connect as natsConnect, createInbox, nanos, type MsgHdrs, type NatsConnection } from '@nats-io/transport-node';
import { AckPolicy, DeliverPolicy, DiscardPolicy, jetstream, jetstreamManager, RetentionPolicy, StorageType, type JetStreamManager, type JsMsg } from '@nats-io/jetstream';
import { LoadClient, publishPacket } from '../mqtt/loadgen.js';
import { startNats, type NatsServer } from '../../test/federation/nats-server.js';
import { freePort, stopProc, waitLine } from '../procs.js';

const ROOT = resolve(import.meta.dirname, '..', '..');
const DURATION = Number(process.env.BENCH_SECONDS ?? 3) * 1000;
const WARMUP = 1000;
const PAIRS = 4;
const WINDOW = 200;
const LAT_RATE = 2000;
const SCENARIOS = process.env.BENCH_FEDERATION_SCENARIOS?.split(',') ?? ['lat0', 'lat1', 'qos0', 'qos1'];
const LAT_ROUNDS = Math.max(1, Number(process.env.BENCH_FEDERATION_LAT_ROUNDS ?? 1) || 1);
const NODE_FLAGS = START_FLAGS; // npm start's (bench/start-flags.ts)

export type Qos = 0 | 1;

/** One federated pair of brokers (or NATS alone) as the bench drives it. */
export interface System {
  name: string;
  /** Start `n` subscribers on B for topics `<ns>/pair/<i>`; `onMsg(i, payload)` per message. */
  subscribe(qos: Qos, topic: (i: number) => string, n: number, onMsg: (payload: Buffer) => void): Promise<() => void>;
  /** A publisher on A. */
  publisher(qos: Qos): Promise<Publisher>;
  stop(): Promise<void>;
  /** The processes the system started (label, pid), when it knows them: their CPU per message is reported. */
  procs?: Array<{ label: string; pid: number }>;
  /** The nats-server it started, when it did: with GODEBUG=gctrace=1 its GC cycles per latency round are printed. */
  nats?: NatsServer;
}

export interface Publisher {
  /** Keep publishing to `topic` as fast as the system takes it (QoS 1: WINDOW in flight). */
  flood(topic: string, payload: Buffer): void;
  /** Publish one message now. */
  one(topic: string, payload: Buffer): void;
  close(): void;
}

export async function until(pred: () => Promise<boolean> | boolean, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await pred()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out: ${what}`);
}

// ----------------------------------------------------------------------------------------------------------------
// MQTT brokers (Switchyard, Mosquitto): the raw-socket clients of bench/mqtt

export function mqttSystem(name: string, portA: number, portB: number, stop: () => Promise<void>): System {
  return {
    name,
    async subscribe(qos, topic, n, onMsg) {
      const subs: LoadClient[] = [];
      for (let i = 0; i < n; i++) {
        const s = await LoadClient.connect(portB, `fsub${qos}-${i}-${Date.now()}`);
        s.onPublish = onMsg;
        await s.subscribe(topic(i), qos);
        subs.push(s);
      }
      return () => subs.forEach((s) => s.close());
    },
    async publisher(qos) {
      const p = await LoadClient.connect(portA, `fpub${qos}-${Math.random().toString(36).slice(2)}`);
      let pid = 0;
      const nextPid = () => (pid = pid === 65535 ? 1 : pid + 1);
      return {
        flood(topic, payload) {
          if (qos === 0) {
            const batch = Buffer.concat(Array(50).fill(publishPacket(topic, payload, 0)));
            const pump = (): void => {
              if (p.stopped) return;
              while (p.socket.writableLength < 128 * 1024) p.socket.write(batch);
              p.socket.once('drain', pump);
            };
            pump();
            return;
          }
          let inflight = 0;
          const send = (k: number): void => {
            const bufs: Buffer[] = [];
            for (let j = 0; j < k; j++) bufs.push(publishPacket(topic, payload, 1, nextPid()));
            inflight += k;
            p.socket.write(Buffer.concat(bufs));
          };
          p.onAck(() => {
            inflight--;
            if (inflight < WINDOW / 2 && !p.stopped) send(WINDOW - inflight);
          });
          send(WINDOW);
        },
        one(topic, payload) {
          p.socket.write(publishPacket(topic, payload, qos, nextPid()));
        },
        close: () => p.close(),
      };
    },
    stop,
  };
}

/**
 * A Switchyard broker process on a fresh config and data directory under `tmp`: the repository's config/*.yaml
 * except those named in `files`, then `files` (name -> YAML text; undefined: the file is left out) with authentication
 * off; MQTT on a free port, REST on port 0; resolved once it prints SWITCHYARD_READY. bench/cluster starts its brokers with it too.
 */
export async function spawnSwitchyard(tmp: string, tag: string, files: Record<string, string | undefined>): Promise<{ port: number; rest: number; pid: number; stop: () => Promise<void> }> {
  const configDir = join(tmp, `${tag}-config`);
  const dataDir = join(tmp, `${tag}-data`);
  mkdirSync(configDir, { recursive: true });
  const own = { 'AuthManager.yaml': 'AuthManager:\n  authenticationEnabled: false\n', ...files };
  for (const f of readdirSync(join(ROOT, 'config'))) {
    if (f.endsWith('.yaml') && !(f in own)) copyFileSync(join(ROOT, 'config', f), join(configDir, f));
  }
  for (const [f, text] of Object.entries(own)) if (text !== undefined) writeFileSync(join(configDir, f), text);
  const port = await freePort();
  const proc = spawn(process.execPath, [...NODE_FLAGS, ...switchyardArgs()], {
    cwd: ROOT,
    env: {
      ...process.env,
      ...START_ENV,
      SWITCHYARD_CONFIG_DIR: configDir,
      SWITCHYARD_DATA_DIR: dataDir,
      SWITCHYARD_REST_PORT: '0',
      SWITCHYARD_REST_HOST: '127.0.0.1',
      SWITCHYARD_MQTT_PORT: String(port),
      SWITCHYARD_MQTT_WS_PORT: '0',
      SWITCHYARD_MQTT_HOST: '127.0.0.1',
      SWITCHYARD_LOG_LEVEL: 'warn',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const m = await waitLine(proc, /SWITCHYARD_READY rest=(\d+)/, `switchyard ${tag}`);
  return { port, rest: Number(m[1]), pid: proc.pid!, stop: stopProc(proc) };
}

export async function startSwitchyard(tmp: string, tag: string, natsUrl: string, direction: 'push' | 'pull'): Promise<{ port: number; rest: number; pid: number; stop: () => Promise<void> }> {
  const lc = (ns: string, qos: Qos) =>
    direction === 'push'
      ? `        - { direction: push, localNamespace: '${ns}/#', remoteNamespace: '${ns}/', qualityOfService: ${qos} }`
      : `        - { direction: pull, localNamespace: '${ns}/', remoteNamespace: '${ns}/#', qualityOfService: ${qos} }`;
  const links = [
    'NetworkConnectionManager:',
    '  data:',
    '    - name: fed',
    `      url: ${natsUrl}`,
    '      linkConfigs:',
    lc('b0', 0),
    lc('b1', 1),
    // BENCH_LINK_GLOBAL: a flow-style globalConfig, e.g. "{ inFlight: 1024, outboxWriteBehind: 0 }"
    ...(process.env.BENCH_LINK_GLOBAL ? [`  globalConfig: ${process.env.BENCH_LINK_GLOBAL}`] : []),
    '',
  ].join('\n');
  const broker = await spawnSwitchyard(tmp, tag, { 'NetworkConnectionManager.yaml': links });
  await until(
    async () => {
      const r = await fetch(`http://127.0.0.1:${broker.rest}/api/v1/server/integration/fed/status`).catch(() => undefined);
      return r?.ok === true && ((await r.json()) as { state: string }).state === 'Established';
    },
    20000,
    `switchyard ${tag} link established`,
  );
  return broker;
}

async function switchyardSystem(tmp: string): Promise<System & { nats: NatsServer }> {
  const nats = await startNats();
  // B first: its pull consumers exist before A publishes
  const b = await startSwitchyard(tmp, 'sy-b', nats.url, 'pull');
  const a = await startSwitchyard(tmp, 'sy-a', nats.url, 'push');
  // BENCH_DEBUG: the links' outbox and counters every second
  const debug = process.env.BENCH_DEBUG
    ? setInterval(() => {
        void Promise.all([a.rest, b.rest].map((p) => fetch(`http://127.0.0.1:${p}/api/v1/server/integration/fed/status`).then((r) => r.json())))
          .then(([sa, sb]: Array<Record<string, unknown>>) =>
            process.stderr.write(`\n[A sent ${sa!.messagesSent} outbox ${sa!.outbox}] [B received ${sb!.messagesReceived}]`),
          )
          .catch(() => undefined);
      }, 1000)
    : undefined;
  const sys = mqttSystem('Switchyard x2 over NATS', a.port, b.port, async () => {
    clearInterval(debug);
    await a.stop();
    await b.stop();
    await nats.dispose();
  });
  const natsPid = nats.pid();
  return { ...sys, nats, procs: [{ label: 'A', pid: a.pid }, ...(natsPid ? [{ label: 'nats-server', pid: natsPid }] : []), { label: 'B', pid: b.pid }] };
}

async function mosquittoSystem(tmp: string): Promise<System> {
  const portA = await freePort();
  const portB = await freePort();
  const base = (port: number) => `listener ${port} 127.0.0.1\nallow_anonymous true\npersistence false\nmax_queued_messages 10000\nset_tcp_nodelay true\n`;
  writeFileSync(join(tmp, 'mosq-b.conf'), base(portB));
  writeFileSync(
    join(tmp, 'mosq-a.conf'),
    base(portA) + `connection ab\naddress 127.0.0.1:${portB}\ncleansession true\ntopic b0/# out 0\ntopic b1/# out 1\n`,
  );
  const procB = spawn('mosquitto', ['-c', join(tmp, 'mosq-b.conf')], { stdio: ['ignore', 'ignore', 'ignore'] });
  await until(async () => LoadClient.connect(portB, 'probe-b').then((c) => (c.close(), true)).catch(() => false), 10000, 'mosquitto B');
  const procA = spawn('mosquitto', ['-c', join(tmp, 'mosq-a.conf')], { stdio: ['ignore', 'ignore', 'ignore'] });
  await until(async () => LoadClient.connect(portA, 'probe-a').then((c) => (c.close(), true)).catch(() => false), 10000, 'mosquitto A');
  const sys = mqttSystem('Mosquitto x2 + bridge', portA, portB, async () => {
    await stopProc(procA)();
    await stopProc(procB)();
  });
  // the bridge is up when a message published on A reaches B
  let got = 0;
  const unsub = await sys.subscribe(1, () => 'b1/probe', 1, () => got++);
  const pub = await sys.publisher(1);
  await until(() => (pub.one('b1/probe', Buffer.from('x')), got > 0), 10000, 'mosquitto bridge');
  pub.close();
  unsub();
  return sys;
}

// ----------------------------------------------------------------------------------------------------------------
// NATS alone (nats.js): the ceiling

async function natsSystem(): Promise<System> {
  const nats = await startNats();
  const conns: NatsConnection[] = [];
  const conn = async () => {
    const nc = await natsConnect({ servers: nats.url });
    conns.push(nc);
    return nc;
  };
  const jsm = await jetstreamManager(await conn());
  const asLink = linkLike();
  const stream = asLink.has('stream') ? 'SY_b1' : 'NB';
  await jsm.streams.add(
    asLink.has('stream')
      ? // the stream the link creates (nats-transport.ts ensureStream)
        { name: stream, subjects: ['b1', 'b1.>'], storage: StorageType.File, retention: RetentionPolicy.Limits, discard: DiscardPolicy.Old, max_age: nanos(86_400_000), max_bytes: 1024 ** 3, duplicate_window: nanos(120_000), num_replicas: 1 }
      : { name: stream, subjects: ['b1.>'], storage: StorageType.File },
  );
  const sys = natsJsSystem(asLink.size > 0 ? `NATS alone (as link: ${[...asLink].join('+')})` : 'NATS alone (nats.js)', stream, jsm, conn, conn, async () => {
    for (const nc of conns) await nc.close().catch(() => undefined);
    await nats.dispose();
  });
  sys.nats = nats;
  const pid = nats.pid();
  if (pid !== undefined) sys.procs = [{ label: 'nats-server', pid }];
  return sys;
}

/**
 * BENCH_FEDERATION_NATS_AS_LINK: which of the link's choices the NATS-alone system copies (comma-separated), to find
 * what the link's traffic makes nats-server do that plain JetStream traffic does not (docs/federation.md):
 * `hdr` the link's header block (Sy-Origin, Sy-Hops, Sy-Qos), `msgid` plus a Nats-Msg-Id as the link's (de-duplicated
 * by the stream), `stream` the stream config the link creates, `consumer` the consumer config it creates (ack_wait,
 * max_ack_pending, max_deliver), `ackbatch` the acks of an event-loop turn sent together after a setImmediate,
 * `split` the consumer in a process of its own (nats-sub-child.ts), as the receiving broker is.
 */
function linkLike(): Set<string> {
  return new Set((process.env.BENCH_FEDERATION_NATS_AS_LINK ?? '').split(',').filter((x) => x !== ''));
}

/**
 * NATS driven by nats.js as a System (bench/cluster drives its NATS cluster with it too): core publish / subscribe at
 * QoS 0; at QoS 1 a JetStream publish settled by its PubAck into `stream` (which takes `b1.>`) and, per subscriber,
 * a durable consumer of it with explicit acks. Publishers connect with `pubConn`, subscribers with `subConn`.
 */
export function natsJsSystem(
  name: string,
  stream: string,
  jsm: JetStreamManager,
  pubConn: () => Promise<NatsConnection>,
  subConn: () => Promise<NatsConnection>,
  stop: () => Promise<void>,
): System {
  let consumerSeq = 0;
  const asLink = linkLike();
  return {
    name,
    async subscribe(qos, topic, n, onMsg) {
      const stops: Array<() => void> = [];
      for (let i = 0; i < n; i++) {
        const subject = topic(i).replaceAll('/', '.');
        const nc = await subConn();
        if (qos === 0) {
          const sub = nc.subscribe(subject, { callback: (_e, m) => onMsg(Buffer.from(m.data.buffer, m.data.byteOffset, m.data.byteLength)) });
          await nc.flush();
          stops.push(() => sub.unsubscribe());
        } else {
          const durable = `bench${consumerSeq++}`;
          await jsm.consumers.add(
            stream,
            asLink.has('consumer')
              ? // the consumer the link creates (nats-transport.ts receiveJetStream, maxInflight 256)
                { durable_name: durable, ack_policy: AckPolicy.Explicit, deliver_policy: DeliverPolicy.New, filter_subject: subject, ack_wait: nanos(10_000), max_ack_pending: 1024, max_deliver: -1 }
              : { durable_name: durable, ack_policy: AckPolicy.Explicit, deliver_policy: DeliverPolicy.New, filter_subject: subject, max_ack_pending: 4096 },
          );
          if (asLink.has('split')) {
            // the consumer in a process of its own, as B is (nats-sub-child.ts): the payload's timestamp is replaced by
            // one that gives the child's measured latency in this process's clock
            const child = fork(join(import.meta.dirname, 'nats-sub-child.ts'), [nc.getServer().includes('://') ? nc.getServer() : `nats://${nc.getServer()}`, stream, durable, subject, String(performance.timeOrigin)], {
              execArgv: ['--import', 'tsx'],
              stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
            });
            await new Promise<void>((ok, fail) => {
              child.once('message', () => ok());
              child.once('exit', (code) => fail(new Error(`nats-sub-child exited with ${code}`)));
            });
            const fake = Buffer.alloc(64);
            child.on('message', (lats: number[]) => {
              for (const lat of lats) {
                fake.writeDoubleLE(performance.now() - lat, 0);
                onMsg(fake);
              }
            });
            stops.push(() => child.disconnect());
            continue;
          }
          const c = await jetstream(nc).consumers.get(stream, durable);
          if (asLink.has('ackbatch')) {
            // the link's acks: those of one event-loop turn together, after a setImmediate
            let acks: JsMsg[] = [];
            const flush = () => {
              const list = acks;
              acks = [];
              for (const m of list) m.ack();
            };
            const msgs = await c.consume({
              max_messages: 512,
              callback: (m) => {
                onMsg(Buffer.from(m.data.buffer, m.data.byteOffset, m.data.byteLength));
                if (acks.push(m) === 1) setImmediate(flush);
              },
            });
            stops.push(() => msgs.stop());
            continue;
          }
          const msgs = await c.consume({ max_messages: 512 });
          void (async () => {
            for await (const m of msgs) {
              onMsg(Buffer.from(m.data.buffer, m.data.byteOffset, m.data.byteLength));
              m.ack();
            }
          })();
          stops.push(() => msgs.stop());
        }
      }
      return () => stops.forEach((s) => s());
    },
    async publisher(qos) {
      const nc = await pubConn();
      // a JetStream publish as the link makes it (src/links/nats-transport.ts jsPublish): a core publish with a reply
      // subject under one inbox subscription, settled by the PubAck; nats.js js.publish() costs ~4x the CPU
      const inbox = createInbox();
      let seq = 0;
      const pending = new Map<string, { ok(): void; fail(e: Error): void }>();
      nc.subscribe(`${inbox}.*`, {
        callback: (_e, m) => {
          const p = pending.get(m.subject);
          if (!p) return;
          pending.delete(m.subject);
          const ack = m.data.length > 0 && !m.headers?.hasError ? (JSON.parse(new TextDecoder().decode(m.data)) as { stream?: string }) : {};
          if (ack.stream) p.ok();
          else p.fail(new Error('not stored'));
        },
      });
      // BENCH_FEDERATION_NATS_AS_LINK hdr / msgid: the link's header block (nats-transport.ts encodeHeaders), its
      // Nats-Msg-Id `<server id>:<link>:<channel>:<engine id>`
      const idPrefix = `${randomUUID()}:fed:1:`;
      const headerBlock = (): MsgHdrs | undefined => {
        if (!asLink.has('hdr') && !asLink.has('msgid')) return undefined;
        let text = 'NATS/1.0\r\n';
        if (asLink.has('hdr')) text += `Sy-Priority: 4\r\nSy-Origin: ${idPrefix.slice(0, 36)}\r\nSy-Hops: 1\r\nSy-Qos: 1\r\n`;
        if (asLink.has('msgid')) text += `Nats-Msg-Id: ${idPrefix}${Date.now().toString(36)}${(seq).toString(36).padStart(6, '0')}\r\n`;
        const bytes = Buffer.from(text + '\r\n');
        return { encode: () => bytes } as unknown as MsgHdrs;
      };
      const pubAck = (subject: string, payload: Buffer) =>
        new Promise<void>((ok, fail) => {
          const headers = headerBlock();
          const reply = `${inbox}.${(seq++).toString(36)}`;
          pending.set(reply, { ok, fail });
          nc.publish(subject, payload, headers ? { reply, headers } : { reply });
        });
      let stopped = false;
      return {
        flood(topic, payload) {
          const subject = topic.replaceAll('/', '.');
          if (qos === 0) {
            const tick = (): void => {
              if (stopped) return;
              for (let k = 0; k < 500; k++) nc.publish(subject, payload);
              // let the socket drain: nats.js buffers in user space
              void nc.flush().then(tick, () => undefined);
            };
            tick();
            return;
          }
          let inflight = 0;
          const send = (): void => {
            while (!stopped && inflight < WINDOW) {
              inflight++;
              pubAck(subject, payload).then(
                () => {
                  inflight--;
                  send();
                },
                () => inflight--,
              );
            }
          };
          send();
        },
        one(topic, payload) {
          const subject = topic.replaceAll('/', '.');
          if (qos === 0) nc.publish(subject, payload);
          else void pubAck(subject, payload).catch(() => undefined);
        },
        close: () => {
          stopped = true;
        },
      };
    },
    stop,
  };
}

// ----------------------------------------------------------------------------------------------------------------
// Scenarios

const ns = (qos: Qos) => (qos === 0 ? 'b0' : 'b1');

/**
 * Messages/s received while PAIRS publishers flood PAIRS subscribers, over DURATION after WARMUP. `window`, if given,
 * is called as the measured window opens and returns what is called with the messages received as it closes
 * (bench/cluster measures each process's CPU over it).
 */
export async function throughput(sys: System, qos: Qos, window?: () => (received: number) => void): Promise<number> {
  let received = 0;
  const topic = (i: number) => `${ns(qos)}/tp/${i}`;
  const unsub = await sys.subscribe(qos, topic, PAIRS, () => received++);
  const pubs: Publisher[] = [];
  const payload = Buffer.alloc(64, 'x');
  for (let i = 0; i < PAIRS; i++) {
    const p = await sys.publisher(qos);
    p.flood(topic(i), payload);
    pubs.push(p);
  }
  await new Promise((r) => setTimeout(r, WARMUP));
  const c0 = received;
  const close = window?.();
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, DURATION));
  const n = received - c0;
  close?.(n);
  const rate = n / ((performance.now() - t0) / 1000);
  pubs.forEach((p) => p.close());
  unsub();
  return rate;
}

/** CPU seconds (user + system) a process has used so far, from /proc/<pid>/stat (fields 14 and 15); NaN when gone. */
function cpuSecondsOf(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return NaN;
  }
}

export interface Latency {
  p50: number;
  p99: number;
  n: number;
  /**
   * nats-server's GC cycles over the recording window (GODEBUG=gctrace=1 in the bench's environment), the wall-clock
   * ms of their mark phases in all, and the heap of the last cycle so far (MB: at its start -> at its end -> live).
   */
  natsGc?: { cycles: number; markMs: number; heap: string };
  /** µs of CPU per message over the recording window, per process of `sys.procs` (label -> µs). */
  cpu?: Record<string, number>;
}

/**
 * The GC cycles the system's nats-server reported so far (GODEBUG=gctrace=1 lines), when it runs with the trace:
 * the wall-clock ms of each one's concurrent mark phase (`a+<mark>+c ms clock`) and its heap (`x->y->z MB`).
 */
function gcCycles(sys: System): Array<{ markMs: number; heap: string }> | undefined {
  if (!sys.nats || !/gctrace=1/.test(process.env.GODEBUG ?? '')) return undefined;
  return [...sys.nats.output().matchAll(/^gc \d+ @\S+ \S+ [\d.]+\+([\d.]+)\+[\d.]+ ms clock.* (\d+->\d+->\d+) MB/gm)].map((m) => ({ markMs: Number(m[1]), heap: m[2]! }));
}

export async function latency(sys: System, qos: Qos): Promise<Latency> {
  const samples: number[] = [];
  let recording = false;
  const topic = `${ns(qos)}/lat/${Date.now()}`;
  const unsub = await sys.subscribe(qos, () => topic, 1, (payload) => {
    if (recording) samples.push(performance.now() - payload.readDoubleLE(0));
  });
  const pub = await sys.publisher(qos);
  const payload = Buffer.alloc(64);
  const start = performance.now();
  let sent = 0;
  const timer = setInterval(() => {
    const due = Math.floor(((performance.now() - start) / 1000) * LAT_RATE);
    while (sent < due) {
      payload.writeDoubleLE(performance.now(), 0);
      pub.one(topic, payload);
      sent++;
    }
  }, 1);
  await new Promise((r) => setTimeout(r, WARMUP));
  recording = true;
  const procs = sys.procs ?? [];
  const gc0 = gcCycles(sys);
  const cpu0 = procs.map((p) => cpuSecondsOf(p.pid));
  const sent0 = sent;
  await new Promise((r) => setTimeout(r, DURATION));
  recording = false;
  const cpu1 = procs.map((p) => cpuSecondsOf(p.pid));
  const gc1 = gcCycles(sys);
  const sentInWindow = sent - sent0;
  clearInterval(timer);
  await new Promise((r) => setTimeout(r, 200));
  pub.close();
  unsub();
  samples.sort((a, b) => a - b);
  const q = (p: number) => samples[Math.min(samples.length - 1, Math.floor(p * samples.length))] ?? NaN;
  const result: Latency = { p50: q(0.5), p99: q(0.99), n: samples.length };
  if (gc0 !== undefined && gc1 !== undefined) {
    const cycles = gc1.slice(gc0.length);
    result.natsGc = { cycles: cycles.length, markMs: cycles.reduce((t, c) => t + c.markMs, 0), heap: gc1[gc1.length - 1]?.heap ?? '?' };
  }
  if (procs.length > 0) result.cpu = Object.fromEntries(procs.map((p, i) => [p.label, ((cpu1[i]! - cpu0[i]!) * 1e6) / sentInWindow]));
  return result;
}

/** `latency` LAT_ROUNDS times on the same system; each round printed, the round with the median p99 returned. */
async function latencyRounds(sys: System, qos: Qos): Promise<Latency> {
  const rounds: Latency[] = [];
  for (let i = 0; i < LAT_ROUNDS; i++) {
    if (i > 0) await new Promise((r) => setTimeout(r, 500));
    rounds.push(await latency(sys, qos));
  }
  if (LAT_ROUNDS > 1 || rounds[0]!.cpu || rounds[0]!.natsGc !== undefined) {
    const ms = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : 'n/a');
    for (const r of rounds) {
      const cpu = r.cpu ? ` | CPU µs/msg ${Object.entries(r.cpu).map(([k, v]) => `${k} ${Number.isFinite(v) ? v.toFixed(0) : 'n/a'}`).join(', ')}` : '';
      const gc = r.natsGc ? ` | nats-server GCs ${r.natsGc.cycles}, marking ${r.natsGc.markMs.toFixed(1)} ms, heap ${r.natsGc.heap} MB` : '';
      process.stdout.write(`\n  ${sys.name} QoS ${qos} latency round: p50 ${ms(r.p50)} p99 ${ms(r.p99)} ms (n ${r.n})${cpu}${gc}`);
    }
    process.stdout.write('\n ');
  }
  return [...rounds].sort((x, y) => x.p99 - y.p99)[Math.floor((rounds.length - 1) / 2)]!;
}

export interface FederationRow {
  tput: Record<Qos, number>;
  lat: Record<Qos, Latency>;
}
type Row = FederationRow;

/** Runs the comparison, prints its table and returns the figures per system (by its printed name). */
export async function runFederationBench(): Promise<Array<[string, FederationRow]>> {
  const tmp = mkdtempSync(join(tmpdir(), 'switchyard-fedbench-'));
  const results: Array<[string, Row]> = [];
  const starters: Array<[string, () => Promise<System>]> = [
    ['switchyard', () => switchyardSystem(tmp)],
    ...(process.env.BENCH_FEDERATION_ONLY?.includes('single')
      ? ([['single', async () => {
          const nats = await startNats();
          const b = await startSwitchyard(tmp, 'sy-single', nats.url, 'pull');
          return mqttSystem('Switchyard x1 (no link)', b.port, b.port, async () => { await b.stop(); await nats.dispose(); });
        }]] as Array<[string, () => Promise<System>]>)
      : []),
    ['mosquitto', () => mosquittoSystem(tmp)],
    ['nats', () => natsSystem()],
  ];
  try {
    const only = process.env.BENCH_FEDERATION_ONLY?.split(',');
    for (const [label, start] of starters) {
      if (only && !only.includes(label)) continue;
      process.stdout.write(`bench/federation: ${label} ...`);
      const sys = await start();
      try {
        const row: Row = { tput: { 0: NaN, 1: NaN }, lat: { 0: { p50: NaN, p99: NaN, n: 0 }, 1: { p50: NaN, p99: NaN, n: 0 } } };
        // latency first (no backlog from a flood yet), then throughput. Each latency scenario is run once unmeasured
        // first (BENCH_FEDERATION_WARM=0: not): a fresh Node broker spends its first ~10 s of this traffic having V8
        // optimize the message path (TurboFan compiles of stream, engine and link functions, deopts and recompiles:
        // --trace-opt), which about doubled the p99 of a round measured then; the table is of brokers past that
        if (process.env.BENCH_FEDERATION_WARM !== '0' && SCENARIOS.some((x) => x.startsWith('lat'))) {
          for (const qos of [0, 1] as const) {
            process.stdout.write(` warm${qos}`);
            await latency(sys, qos);
            await new Promise((r) => setTimeout(r, 500));
          }
        }
        for (const qos of [0, 1] as const) {
          if (!SCENARIOS.includes(`lat${qos}`)) continue;
          process.stdout.write(` lat${qos}`);
          row.lat[qos] = await latencyRounds(sys, qos);
          await new Promise((r) => setTimeout(r, 500));
        }
        for (const qos of [0, 1] as const) {
          if (!SCENARIOS.includes(`qos${qos}`)) continue;
          process.stdout.write(` qos${qos}`);
          row.tput[qos] = await throughput(sys, qos);
          await new Promise((r) => setTimeout(r, 3000)); // let a backlog drain before the next scenario
        }
        results.push([sys.name, row]);
      } finally {
        await sys.stop();
      }
      process.stdout.write(' done\n');
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  const f = (x: number) => (Number.isFinite(x) ? Math.round(x).toLocaleString('en-US') : 'n/a');
  const ms = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : 'n/a');
  const head = ['system (publish on A -> subscriber on B)', 'QoS 0 msg/s', 'QoS 0 p50/p99 ms', 'QoS 1 msg/s', 'QoS 1 p50/p99 ms'];
  const rows = results.map(([name, r]) => [name, f(r.tput[0]), `${ms(r.lat[0].p50)} / ${ms(r.lat[0].p99)}`, f(r.tput[1]), `${ms(r.lat[1].p50)} / ${ms(r.lat[1].p99)}`]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(' | ');
  process.stdout.write(`\nbench/federation: ${PAIRS} publisher->subscriber pairs, 64-byte payloads, ${DURATION / 1000} s windows; latency at ${LAT_RATE} msg/s\n`);
  process.stdout.write(`${line(head)}\n${widths.map((w) => '-'.repeat(w)).join('-|-')}\n`);
  for (const r of rows) process.stdout.write(`${line(r)}\n`);
  const sy = results.find(([n]) => n.startsWith('Switchyard'))?.[1];
  const mq = results.find(([n]) => n.startsWith('Mosquitto'))?.[1];
  if (sy && mq) {
    process.stdout.write(
      `Switchyard / Mosquitto bridge at QoS 1: throughput ${(sy.tput[1] / mq.tput[1]).toFixed(2)}x (target >= 1.0x), p99 ${(sy.lat[1].p99 / mq.lat[1].p99).toFixed(2)}x (target <= 1.5x)\n`,
    );
  }
  return results;
}

if (import.meta.url === `file://${process.argv[1]}`) await runFederationBench();
