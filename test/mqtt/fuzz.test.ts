import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import mqttPacket from 'mqtt-packet';
import { removeDir, spawnBroker, tempDir, type BrokerProcess } from '../helpers.js';
import { inspector, rest, rssMb, varInt } from './helpers.js';

/**
 * MQTT fuzzer against a broker process: every input goes on its own connection, either as the first bytes or after a
 * valid CONNECT (3.1.1 or 5), followed by a PINGREQ. Strategies: random bytes, bit flips of valid packets,
 * truncation, huge remaining lengths, bad UTF-8, bad property ids, splices of valid packets.
 * Asserts 0 crashes (the process stays up), 0 internal errors (no ERROR or "MQTT connection failed" log line, no
 * stack trace, no DISCONNECT/CONNACK 0x80), every connection closed afterwards, and memory back near its start.
 * SWITCHYARD_FUZZ_INPUTS sets the number of inputs (default 30 000, stopped after SWITCHYARD_FUZZ_SECONDS, default 40 s,
 * so a loaded CI machine stays within its budget; with SWITCHYARD_FUZZ_INPUTS set there is no time limit unless
 * SWITCHYARD_FUZZ_SECONDS is set too: millions for a long run), SWITCHYARD_FUZZ_SEED the seed (printed either way).
 */
const INPUTS = Number(process.env.SWITCHYARD_FUZZ_INPUTS ?? 30_000);
const SECONDS = Number(process.env.SWITCHYARD_FUZZ_SECONDS ?? (process.env.SWITCHYARD_FUZZ_INPUTS ? Infinity : 40));
/** A sanity floor (not a speed test): fewer inputs than this means the fuzzer itself is broken. */
const MIN_INPUTS = Math.min(INPUTS, 500);
const SEED = Number(process.env.SWITCHYARD_FUZZ_SEED ?? Math.floor(Math.random() * 2 ** 31));
const CONCURRENCY = 96;
/** How long an input that neither closes the connection nor answers the PINGREQ is given (partial packets). */
const WAIT_MS = 500;
/** The broker's V8 heap after a full GC may exceed its start by at most this much after the run. */
const HEAP_SLACK_MB = 16;

/** mulberry32: small, fast, seeded. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

type Gen = (v: 4 | 5) => Buffer;
const gen = (p: Record<string, unknown>, v: 4 | 5) => mqttPacket.generate(p as never, { protocolVersion: v } as never);
const PROPS5 = { userProperties: { a: 'b' }, contentType: 'text/plain', responseTopic: 'r/t', correlationData: Buffer.from('c'), payloadFormatIndicator: true, messageExpiryInterval: 30 };
/** Valid packets a client may send (after CONNECT). */
const CORPUS: Gen[] = [
  (v) => gen({ cmd: 'publish', topic: 'fz/a', payload: Buffer.from('hello'), qos: 0, retain: false, dup: false, ...(v === 5 ? { properties: PROPS5 } : {}) }, v),
  (v) => gen({ cmd: 'publish', topic: 'fz/b', payload: Buffer.alloc(40, 1), qos: 1, messageId: 11, retain: false, dup: false, ...(v === 5 ? { properties: { topicAlias: 1 } } : {}) }, v),
  (v) => gen({ cmd: 'publish', topic: 'fz/c', payload: Buffer.from('x'), qos: 2, messageId: 12, retain: true, dup: false }, v),
  (v) => gen({ cmd: 'subscribe', messageId: 13, subscriptions: [{ topic: 'fz/#', qos: 2, ...(v === 5 ? { nl: true, rap: true, rh: 1 } : {}) }], ...(v === 5 ? { properties: { subscriptionIdentifier: 5, userProperties: { k: 'v' } } } : {}) }, v),
  (v) => gen({ cmd: 'unsubscribe', messageId: 14, unsubscriptions: ['fz/#', 'fz/+/x'] }, v),
  (v) => gen({ cmd: 'puback', messageId: 15, ...(v === 5 ? { reasonCode: 0x10, properties: { reasonString: 'r' } } : {}) }, v),
  (v) => gen({ cmd: 'pubrec', messageId: 16 }, v),
  (v) => gen({ cmd: 'pubrel', messageId: 12, ...(v === 5 ? { reasonCode: 0 } : {}) }, v),
  (v) => gen({ cmd: 'pubcomp', messageId: 17 }, v),
  (v) => gen({ cmd: 'pingreq' }, v),
  (v) => gen({ cmd: 'disconnect', ...(v === 5 ? { reasonCode: 0, properties: { sessionExpiryInterval: 0 } } : {}) }, v),
  (v) => (v === 5 ? gen({ cmd: 'auth', reasonCode: 0x18, properties: { authenticationMethod: 'SCRAM-SHA-256', authenticationData: Buffer.from('n,,n=a,r=b') } }, 5) : gen({ cmd: 'pingreq' }, 4)),
];
const connectPacket = (v: 4 | 5, id: string, extra: Record<string, unknown> = {}) =>
  gen({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: v, clean: true, clientId: id, keepalive: 30, ...(v === 5 ? { properties: { receiveMaximum: 100, topicAliasMaximum: 5, requestProblemInformation: true } } : {}), ...extra }, v);
const CONNECTS: Gen[] = [
  (v) => connectPacket(v, 'fz-c'),
  (v) => connectPacket(v, 'fz-w', { will: { topic: 'fz/will', payload: Buffer.from('w'), qos: 1, retain: false, ...(v === 5 ? { properties: { willDelayInterval: 0 } } : {}) } }),
  (v) => connectPacket(v, '', { clean: true, keepalive: 0 }),
];

const varint = (n: number): Buffer => Buffer.from(varInt(n));

/** Fixed header length of a valid packet (1 + varint bytes). */
function headerLength(b: Buffer): number {
  let i = 1;
  while (i < b.length && b[i]! & 0x80) i++;
  return i + 1;
}

const BAD_UTF8 = [Buffer.from([0xc0, 0x80]), Buffer.from([0xff]), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from([0x00]), Buffer.from([0xf4, 0x90, 0x80, 0x80]), Buffer.from([0xe2, 0x82])];

interface Input {
  strategy: string;
  version: 4 | 5;
  /** Bytes sent before the input (a valid CONNECT) or none (the input is the first packet). */
  prefix: Buffer;
  bytes: Buffer;
}

function makeInput(rnd: () => number): Input {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const int = (n: number) => Math.floor(rnd() * n);
  const version: 4 | 5 = rnd() < 0.5 ? 4 : 5;
  const connected = rnd() < 0.8;
  const prefix = connected ? pick(CONNECTS)(version) : Buffer.alloc(0);
  const valid = (): Buffer => (connected ? pick(CORPUS)(version) : rnd() < 0.7 ? pick(CONNECTS)(version) : pick(CORPUS)(version));
  const strategy = pick(['random', 'bitflip', 'truncate', 'hugelength', 'badutf8', 'badprops', 'splice'] as const);
  let bytes: Buffer;
  switch (strategy) {
    case 'random': {
      bytes = Buffer.alloc(1 + int(200));
      for (let i = 0; i < bytes.length; i++) bytes[i] = int(256);
      // often a plausible first byte, so the body gets parsed
      if (rnd() < 0.7) bytes[0] = (1 + int(15)) << 4 | (rnd() < 0.5 ? 0 : int(16));
      if (rnd() < 0.7 && bytes.length > 1) bytes[1] = Math.min(127, bytes.length - 2);
      break;
    }
    case 'bitflip': {
      bytes = Buffer.from(valid());
      for (let k = 1 + int(4); k > 0; k--) {
        const i = int(bytes.length);
        bytes[i] = bytes[i]! ^ (1 << int(8));
      }
      break;
    }
    case 'truncate': {
      const b = valid();
      const h = headerLength(b);
      const cut = int(b.length - h + 1);
      // half the time the remaining length says what is left (a complete packet with a short body)
      bytes = rnd() < 0.5 ? b.subarray(0, h + cut) : Buffer.concat([b.subarray(0, 1), varint(cut), b.subarray(h, h + cut)]);
      break;
    }
    case 'hugelength': {
      const b = valid();
      const lengths = [268435455, 268435456, 2 ** 21, 10 * 1048576 + 1, 0xffff, int(2 ** 28)];
      const len = pick(lengths);
      // a 5-byte varint (malformed) once in a while
      const vi = rnd() < 0.2 ? Buffer.from([0xff, 0xff, 0xff, 0xff, 0x7f]) : varint(Math.min(len, 268435455));
      bytes = Buffer.concat([b.subarray(0, 1), vi, b.subarray(headerLength(b), headerLength(b) + int(64))]);
      break;
    }
    case 'badutf8': {
      // a string field replaced by one holding bad UTF-8 (length prefix kept right, or not)
      const bad = pick(BAD_UTF8);
      const topic = Buffer.concat([Buffer.from('fz/'), bad]);
      const kind = int(4);
      let body: Buffer;
      let first: number;
      if (kind === 0 || !connected) {
        // CONNECT with a bad client id (or bad user name)
        const id = Buffer.concat([Buffer.from('id'), bad]);
        const vh = Buffer.concat([Buffer.from([0, 4]), Buffer.from('MQTT'), Buffer.from([version, 0x02, 0, 30]), version === 5 ? Buffer.from([0]) : Buffer.alloc(0)]);
        body = Buffer.concat([vh, Buffer.from([id.length >> 8, id.length & 0xff]), id]);
        first = 0x10;
      } else if (kind === 1) {
        body = Buffer.concat([Buffer.from([0, topic.length]), topic, version === 5 ? Buffer.from([0]) : Buffer.alloc(0), Buffer.from('p')]);
        first = 0x30;
      } else if (kind === 2) {
        body = Buffer.concat([Buffer.from([0, 21]), version === 5 ? Buffer.from([0]) : Buffer.alloc(0), Buffer.from([0, topic.length]), topic, Buffer.from([1])]);
        first = 0x82;
      } else {
        // v5 user property / reason string with bad UTF-8 in a PUBLISH
        const up = Buffer.concat([Buffer.from([0x26, 0, bad.length]), bad, Buffer.from([0, 1, 0x41])]);
        body = Buffer.concat([Buffer.from([0, 4]), Buffer.from('fz/u'), varint(up.length), up, Buffer.from('p')]);
        first = 0x30;
      }
      bytes = Buffer.concat([Buffer.from([first]), varint(body.length), body]);
      if (rnd() < 0.2) bytes = bytes.subarray(0, bytes.length - 1 - int(3));
      break;
    }
    case 'badprops': {
      // a v5 packet whose property section holds unknown ids, ids of the wrong packet type, wrong lengths, repeats
      const ids = [0x00, 0x04, 0x05, 0x7f, 0xff, 0x01, 0x02, 0x03, 0x08, 0x09, 0x0b, 0x11, 0x15, 0x16, 0x17, 0x19, 0x1f, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x80];
      const props: number[] = [];
      for (let k = 1 + int(4); k > 0; k--) {
        props.push(pick(ids));
        for (let j = int(6); j > 0; j--) props.push(int(256));
      }
      const p = Buffer.from(props);
      const plen = rnd() < 0.8 ? varint(p.length) : varint(p.length + int(20) - 10 < 0 ? 0 : p.length + int(20) - 10);
      const kind = int(6);
      let body: Buffer;
      let first: number;
      if (kind === 0 || !connected) {
        body = Buffer.concat([Buffer.from([0, 4]), Buffer.from('MQTT'), Buffer.from([5, 0x02, 0, 30]), plen, p, Buffer.from([0, 2]), Buffer.from('id')]);
        first = 0x10;
      } else if (kind === 1) {
        body = Buffer.concat([Buffer.from([0, 4]), Buffer.from('fz/p'), plen, p, Buffer.from('x')]);
        first = 0x30;
      } else if (kind === 2) {
        body = Buffer.concat([Buffer.from([0, 4]), Buffer.from('fz/p'), Buffer.from([0, 9]), plen, p, Buffer.from('x')]);
        first = 0x32;
      } else if (kind === 3) {
        body = Buffer.concat([Buffer.from([0, 9, 0]), plen, p]);
        first = pick([0x40, 0x50, 0x62, 0x70]);
      } else if (kind === 4) {
        body = Buffer.concat([Buffer.from([0, 9]), plen, p, Buffer.from([0, 4]), Buffer.from('fz/s'), Buffer.from([1])]);
        first = 0x82;
      } else {
        body = Buffer.concat([Buffer.from([0]), plen, p]);
        first = pick([0xe0, 0xf0]);
      }
      bytes = Buffer.concat([Buffer.from([first]), varint(body.length), body]);
      return { strategy, version: 5, prefix: connected ? pick(CONNECTS)(5) : Buffer.alloc(0), bytes };
    }
    case 'splice': {
      const a = valid();
      const b = valid();
      const cut1 = int(a.length + 1);
      const cut2 = int(b.length + 1);
      bytes = Buffer.concat([a.subarray(0, cut1), b.subarray(cut2), rnd() < 0.5 ? valid() : Buffer.alloc(0)]);
      if (bytes.length === 0) bytes = Buffer.from([0xc0, 0x00]);
      break;
    }
  }
  return { strategy, version, prefix, bytes };
}

interface Outcome {
  internal: boolean;
  answered: 'closed' | 'pingresp' | 'timeout';
}

/**
 * Bytes the broker still waits for after `bytes` (the last packet's remaining length not yet received), or -1 when
 * the framing is broken (the broker closes the connection by itself).
 */
function outstanding(bytes: Buffer): number {
  let off = 0;
  while (off < bytes.length) {
    let len = 0;
    let mul = 1;
    let i = off + 1;
    for (;;) {
      if (i >= bytes.length) return 1; // inside the remaining length: one more byte ends it (a 0x00)
      const b = bytes[i++]!;
      len += (b & 0x7f) * mul;
      if ((b & 0x80) === 0) break;
      mul *= 128;
      if (i - off - 1 >= 4) return -1;
    }
    if (i + len > bytes.length) return i + len - bytes.length;
    off = i + len;
  }
  return 0;
}

function runInput(port: number, input: Input): Promise<Outcome> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1');
    s.setNoDelay(true);
    const parser = mqttPacket.parser({ protocolVersion: input.version } as never);
    let internal = false;
    let pong = false;
    let done = false;
    const finish = (answered: Outcome['answered']) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      s.destroy();
      resolve({ internal, answered });
    };
    parser.on('packet', (p: Record<string, any>) => {
      if ((p.cmd === 'disconnect' || p.cmd === 'connack') && p.reasonCode === 0x80) internal = true;
      if (p.cmd === 'pingresp') pong = true;
    });
    parser.on('error', () => {});
    s.on('data', (d) => {
      try {
        parser.parse(d);
      } catch {
        /* not our concern */
      }
      if (pong) finish('pingresp');
    });
    s.on('error', () => {});
    s.on('close', () => finish('closed'));
    const timer = setTimeout(() => finish('timeout'), WAIT_MS + 5000);
    s.once('connect', () => {
      // a partial last packet is completed with zeros (when that is cheap) so the PINGREQ after it gets read
      const need = outstanding(input.bytes);
      const fill = need > 0 && need <= 4096 ? Buffer.alloc(need) : Buffer.alloc(0);
      s.write(Buffer.concat([input.prefix, input.bytes, fill, Buffer.from([0xc0, 0x00])]));
      clearTimeout(timer);
      setTimeout(() => finish('timeout'), WAIT_MS).unref();
    });
  });
}

describe('mqtt fuzz', () => {
  let broker: BrokerProcess;
  let dataDir: string;
  let port: number;
  before(async () => {
    dataDir = tempDir();
    broker = await spawnBroker({ SWITCHYARD_DATA_DIR: dataDir, SWITCHYARD_ALLOW_ANONYMOUS: 'true', NODE_OPTIONS: '--inspect=127.0.0.1:0' });
    const list = await rest(broker.port, broker.auth(), 'GET', '/api/v1/server/interfaces');
    port = (list.json as Array<{ name: string; port: number }>).find((i) => i.name === 'MQTT Interface')!.port;
  });
  after(async () => {
    await broker?.stop();
    removeDir(dataDir);
  });

  test(`fuzz - up to ${INPUTS} malformed inputs (seed printed): no crash, no internal error, every connection closed, memory back near its start`, async () => {
    const rnd = prng(SEED);
    console.log(`# fuzz seed ${SEED} (SWITCHYARD_FUZZ_SEED=${SEED} SWITCHYARD_FUZZ_INPUTS=${INPUTS} to replay)`);
    // warm up with valid traffic so the baseline includes what any broker has after its first clients
    for (let i = 0; i < 200; i++) await runInput(port, { strategy: 'warmup', version: 4, prefix: CONNECTS[0]!(4), bytes: CORPUS[0]!(4) });
    await new Promise((r) => setTimeout(r, 1000));
    const insp = await inspector(broker.stderr);
    const heapStart = await insp.heapAfterGc();
    const pid = broker.proc.pid!;
    const rssStart = rssMb(pid);
    let peak = rssStart;
    const sampler = setInterval(() => (peak = Math.max(peak, rssMb(pid))), 200);
    const byStrategy = new Map<string, { n: number; closed: number; pong: number; timeout: number }>();
    let internal = 0;
    const first: Input[] = [];
    const t0 = Date.now();
    let next = 0;
    const deadline = t0 + SECONDS * 1000;
    const worker = async () => {
      while (next < INPUTS && broker.proc.exitCode === null && Date.now() < deadline) {
        next++;
        const input = makeInput(rnd);
        const out = await runInput(port, input);
        const st = byStrategy.get(input.strategy) ?? { n: 0, closed: 0, pong: 0, timeout: 0 };
        st.n++;
        if (out.answered === 'closed') st.closed++;
        else if (out.answered === 'pingresp') st.pong++;
        else st.timeout++;
        byStrategy.set(input.strategy, st);
        if (out.internal) {
          internal++;
          if (first.length < 5) first.push(input);
        }
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    const elapsed = Date.now() - t0;
    clearInterval(sampler);
    // every fuzz connection ends (closed by the broker, or by us after the wait)
    let open = -1;
    for (let i = 0; i < 50; i++) {
      const m = await fetch(`http://127.0.0.1:${broker.port}/metrics`, { headers: broker.auth() }).then((r) => r.text());
      open = Number(/^switchyard_connections (\d+)/m.exec(m)?.[1] ?? -1);
      if (open === 0) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    await new Promise((r) => setTimeout(r, 1000));
    const heapEnd = await insp.heapAfterGc();
    insp.close();
    const rssEnd = rssMb(pid);
    const log = broker.stdout() + broker.stderr().replace(/^(Debugger listening on|For help, see|Debugger attached|Waiting for the debugger).*$/gm, '');
    const errorLines = log.split('\n').filter((l) => /\b(ERROR|FATAL)\b|MQTT connection failed|^\s+at /.test(l));
    const warnLines = log.split('\n').filter((l) => /\bWARN\b/.test(l)).length;
    for (const [k, v] of [...byStrategy].sort()) console.log(`#   ${k.padEnd(10)} ${String(v.n).padStart(8)} inputs: closed ${v.closed}, answered PINGRESP ${v.pong}, left open (partial packet) ${v.timeout}`);
    console.log(
      `# fuzz: ${next} inputs in ${(elapsed / 1000).toFixed(1)} s; crashes ${broker.proc.exitCode === null ? 0 : 1}; internal errors ${internal} (0x80 answers), ` +
        `${errorLines.length} ERROR/stack lines, ${warnLines} WARN lines; connections open afterwards ${open}; V8 heap after full GC ${heapStart.toFixed(1)} MB -> ${heapEnd.toFixed(1)} MB; RSS ${rssStart.toFixed(0)} MB -> peak ${peak.toFixed(0)} MB -> ${rssEnd.toFixed(0)} MB after`,
    );
    for (const i of first) console.log(`#   0x80 for ${i.strategy} v${i.version}: prefix ${i.prefix.toString('hex')} input ${i.bytes.toString('hex').slice(0, 200)}`);
    for (const l of errorLines.slice(0, 5)) console.log(`#   ${l}`);
    assert.equal(broker.proc.exitCode, null, 'the broker is still running');
    assert.ok(next >= MIN_INPUTS, `only ${next} inputs within ${SECONDS} s`);
    assert.equal(internal, 0, 'no DISCONNECT / CONNACK 0x80 (internal error)');
    assert.deepEqual(errorLines, [], 'no ERROR line and no stack trace in the log');
    assert.equal(open, 0, 'every fuzz connection was closed');
    assert.ok(heapEnd - heapStart < HEAP_SLACK_MB, `heap after GC ${heapStart.toFixed(1)} -> ${heapEnd.toFixed(1)} MB`);
  });
});
