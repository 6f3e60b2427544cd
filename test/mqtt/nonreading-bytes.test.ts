import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import mqttPacket from 'mqtt-packet';
import { CONFIG_DIR, removeDir, spawnBroker, tempDir, type BrokerProcess } from '../helpers.js';
import { RawClient, inspector, rssMb, writable, rest, type HeldMemory } from './helpers.js';

/**
 * The byte cap of a subscription (DestinationManager.maxQueuedBytes, default 8 MiB; docs/messaging.md "Flow control
 * and limits") against a broker in a child process whose RSS is read from /proc/<pid>/status (the pattern of
 * nonreading-memory.test.ts). A subscriber that never reads is sent 16 KiB messages at QoS 1 and at QoS 0 with the
 * default caps: the messages held for it stop at 8 MiB (the message cap of 10 000 alone let it hold 10 000 x 16 KiB,
 * +198.5 MB), QoS 1 publishes beyond it are refused to the publisher (MQTT 5 PUBACK 0x97), QoS 0 copies are dropped and
 * counted. Bound asserted: 48 MB held because of the subscriber (V8 heap and ArrayBuffers after a full GC).
 *
 * What the subscriber holds is measured against a control: the same publisher first sends the same traffic (N QoS 1
 * and N QoS 0 messages of 16 KiB) to a topic without subscribers, then, after 6 s of quiet, to the non-reading
 * subscriber's topic; the growth asserted is what the broker's V8 holds after a full GC (heap plus ArrayBuffers, the
 * payloads; read over its inspector) with the subscriber still connected, minus the same after the control. RSS figures
 * are printed, not asserted: on Node 24 under a loaded CI machine the peak of the same traffic varied by 40 MB between
 * the two phases, and the quiet RSS after it by 70 MB between runs (garbage of refused and dropped payloads waiting
 * for V8's external-memory heuristics, allocator arenas), which says nothing about what the subscriber holds. Handling 16 KiB messages at all grows a fresh
 * broker by 29-44 MB with no subscriber (refused and dropped payloads and socket reads are garbage until V8 collects
 * them, which it does by its own external-memory heuristics; optimised code; allocator arenas), so a growth measured
 * from the fresh broker could not tell a bounded subscriber from an unbounded one. Also printed: the growth over the
 * RSS just before the second phase, and from the fresh broker. The code before the byte cap: +157 MB over the control
 * (10 000 messages held).
 */
/**
 * Measured: 8.2 MB on Node 20 (8.0 MB of it ArrayBuffers: the 8 MiB held), 26.9-31.7 MB on Node 24, where ArrayBuffers
 * are 30-35 MB with the same 8 MiB counted; what keeps the other ~25 MB alive on Node 24 is not found yet (not the
 * held payloads: copying them out of their socket reads changed nothing). The code before the byte cap: about 160 MB.
 */
const BOUND_MB = 48;
const PAYLOAD = Buffer.alloc(16 * 1024, 0x5a);
const N = 12_000;
const DEFAULT_MAX_QUEUED_BYTES = 8 * 1024 * 1024;

describe('mqtt byte cap of a subscriber that never reads', () => {
  let broker: BrokerProcess;
  let dataDir: string;
  let configDir: string;
  let port: number;
  let password: string;
  const clients: RawClient[] = [];

  before(async () => {
    dataDir = tempDir();
    configDir = tempDir('switchyard-config-');
    // the shipped configuration (DestinationManager.yaml: the default caps), with an MQTT endpoint on a random port
    // that does not cut the non-reading subscriber during the test (writeStallTimeout 120 s)
    for (const f of readdirSync(CONFIG_DIR)) if (f.endsWith('.yaml')) copyFileSync(join(CONFIG_DIR, f), join(configDir, f));
    const mqttCfg = '{ type: mqtt, writeStallTimeout: 120000, serverReceiveMaximum: 65535 }';
    writeFileSync(join(configDir, 'NetworkManager.yaml'), `NetworkManager:\n  data:\n    - name: MQTT Interface\n      url: tcp://127.0.0.1:0/\n      protocolConfigs: [${mqttCfg}]\n`);
    broker = await spawnBroker({ SWITCHYARD_DATA_DIR: dataDir, SWITCHYARD_CONFIG_DIR: configDir, NODE_OPTIONS: '--inspect=127.0.0.1:0' });
    password = readFileSync(join(dataDir, 'admin_password'), 'utf8').trim();
    const list = await rest(broker.port, broker.auth(), 'GET', '/api/v1/server/interfaces');
    port = (list.json as Array<{ name: string; port: number }>).find((i) => i.name === 'MQTT Interface')!.port;
  });
  after(async () => {
    for (const c of clients) c.destroy();
    await broker?.stop();
    removeDir(dataDir);
    removeDir(configDir);
  });

  const connect = async (clientId: string): Promise<RawClient> => {
    const c = await RawClient.open(port, 5);
    clients.push(c);
    const ack = await c.connect({ clientId, username: 'admin', password, keepalive: 0, clean: true });
    assert.equal(ack.reasonCode, 0);
    return c;
  };

  /** QoS 1 PUBLISHes of PAYLOAD, `window` unacknowledged at a time; the count of each PUBACK reason code. */
  const publishQos1 = async (c: RawClient, topic: string, n: number, window = 100): Promise<Map<number, number>> => {
    const codes = new Map<number, number>();
    let pid = 0;
    for (let i = 0; i < n; i += window) {
      const end = Math.min(n, i + window);
      const bufs: Buffer[] = [];
      for (let k = i; k < end; k++) {
        pid = (pid % 65535) + 1;
        bufs.push(mqttPacket.generate({ cmd: 'publish', topic, payload: PAYLOAD, qos: 1, messageId: pid, retain: false, dup: false } as never, { protocolVersion: 5 } as never));
      }
      c.write(Buffer.concat(bufs));
      for (let k = i; k < end; k++) {
        const ack = await c.next('puback', 30000);
        const rc = (ack.reasonCode as number | undefined) ?? 0;
        codes.set(rc, (codes.get(rc) ?? 0) + 1);
      }
    }
    return codes;
  };

  /** QoS 0 PUBLISHes of PAYLOAD as fast as the socket takes them; then one QoS 1 PUBLISH whose PUBACK says all were handled. */
  const publishQos0 = async (c: RawClient, topic: string, n: number): Promise<void> => {
    const one = mqttPacket.generate({ cmd: 'publish', topic, payload: PAYLOAD, qos: 0, retain: false, dup: false } as never, { protocolVersion: 5 } as never);
    for (let i = 0; i < n; i += 64) {
      const b = Buffer.concat(Array.from({ length: Math.min(64, n - i) }, () => one));
      if (!c.socket.write(b)) await writable(c.socket, 1000);
    }
    c.send({ cmd: 'publish', topic: 'nonreading-bytes/sync', payload: 'sync', qos: 1, messageId: 1, retain: false, dup: false });
    await c.next('puback', 60000);
  };

  test(`memory - a subscriber that never reads, sent ${N} QoS 1 and ${N} QoS 0 messages of 16 KiB: the broker holds <= ${BOUND_MB} MB for it at the default maxQueuedBytes, QoS 1 refused with 0x97, QoS 0 drops counted`, async () => {
    const topic = 'nonreading-bytes/t';
    const sub = await connect('nonreading-bytes-sub');
    sub.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic, qos: 1 }] });
    await sub.next('suback');
    sub.socket.pause();
    sub.socket.removeAllListeners('data');
    const pub = await connect('nonreading-bytes-pub');

    const pid = broker.proc.pid!;
    const quiet = () => new Promise((r) => setTimeout(r, 6000)); // the password checks and the idle reclaim are not counted
    /** Peak RSS while `work` runs, sampled every 50 ms. */
    const peakDuring = async (work: () => Promise<void>): Promise<number> => {
      let peak = rssMb(pid);
      const sampler = setInterval(() => (peak = Math.max(peak, rssMb(pid))), 50);
      try {
        await work();
      } finally {
        clearInterval(sampler);
      }
      return Math.max(peak, rssMb(pid));
    };
    await quiet();
    const fresh = rssMb(pid);
    const warmPeak = await peakDuring(async () => {
      const warm = await publishQos1(pub, 'nonreading-bytes/nobody', N);
      assert.equal((warm.get(0) ?? 0) + (warm.get(0x10) ?? 0), N, `all accepted: ${JSON.stringify([...warm])}`);
      await publishQos0(pub, 'nonreading-bytes/nobody', N);
    });
    await quiet();
    const base = rssMb(pid);
    const insp = await inspector(broker.stderr);
    const heldBefore = await insp.heldAfterGc();
    let codes = new Map<number, number>();
    const peak = await peakDuring(async () => {
      codes = await publishQos1(pub, topic, N);
      await publishQos0(pub, topic, N);
    });
    // what stays, the subscriber still connected and holding what it was sent: V8's heap and ArrayBuffer memory after
    // a full GC, against the same after the control traffic
    const heldAfter = await insp.heldAfterGc();
    insp.close();
    const total = (h: HeldMemory) => h.heap + h.arrayBuffers;
    const growth = total(heldAfter) - total(heldBefore);

    const d = await rest(broker.port, broker.auth(), 'GET', `/api/v1/server/destination/detail?destinationName=${encodeURIComponent(topic)}`);
    assert.equal(d.status, 200);
    const st = (d.json.subscriptionList as Array<Record<string, number>>)[0]!;
    const accepted = codes.get(0) ?? 0;
    const refused = codes.get(0x97) ?? 0;
    console.log(
      `# non-reading subscriber, 16 KiB payloads: QoS 1 ${accepted} acknowledged, ${refused} refused (0x97); QoS 0 ${N} sent, ${st.messagesDropped} dropped for it; ` +
        `it holds ${st.size} messages, ${(st.queuedBytes! / 1048576).toFixed(2)} MiB (maxQueuedBytes ${(st.maxQueuedBytes! / 1048576).toFixed(0)} MiB, maxQueuedMessages ${st.maxQueuedMessages}); ` +
        `broker RSS: fresh ${fresh.toFixed(1)} MB, peak ${warmPeak.toFixed(1)} MB with the same traffic to no subscriber (+${(warmPeak - fresh).toFixed(1)} MB), ` +
        `peak ${peak.toFixed(1)} MB with the non-reading subscriber (+${(peak - base).toFixed(1)} MB over the ${base.toFixed(1)} MB before it, +${(peak - fresh).toFixed(1)} MB over the fresh broker, ` +
        `${(peak - warmPeak).toFixed(1)} MB above the control's peak); after a full GC, V8 heap + ArrayBuffers ${total(heldBefore).toFixed(1)} MB after the control, ` +
        `${total(heldAfter).toFixed(1)} MB (heap ${heldAfter.heap.toFixed(1)}, ArrayBuffers ${heldAfter.arrayBuffers.toFixed(1)}) with the subscriber holding: ` +
        `memory the subscriber holds ${growth.toFixed(1)} MB (bound ${BOUND_MB} MB)`,
    );
    assert.ok(growth <= BOUND_MB, `the broker holds ${growth.toFixed(1)} MB more with the non-reading subscriber than after the same traffic without it: > ${BOUND_MB} MB`);
    // the cap that decided is the bytes, with the shipped defaults
    assert.equal(st.maxQueuedBytes, DEFAULT_MAX_QUEUED_BYTES);
    assert.equal(st.maxQueuedMessages, 10_000);
    assert.ok(st.queuedBytes! <= DEFAULT_MAX_QUEUED_BYTES + PAYLOAD.length + 512, `queuedBytes ${st.queuedBytes} beyond the cap plus one message`);
    assert.ok(st.queuedBytes! >= DEFAULT_MAX_QUEUED_BYTES - PAYLOAD.length, `queuedBytes ${st.queuedBytes}: the subscription filled up to its cap`);
    assert.ok(st.size < 1000, `${st.size} messages held: far below the message cap`);
    // the publisher was told: every QoS 1 publish is either acknowledged (and held for the subscriber) or refused
    assert.equal(accepted + refused, N, `reason codes ${JSON.stringify([...codes])}`);
    assert.equal(accepted, st.size, 'every acknowledged message is held for the subscriber');
    assert.equal(st.messagesRefused, refused);
    assert.ok(refused >= N - 1000, `${refused} refused`);
    // QoS 0: dropped and counted (the held copies are QoS 1, which a QoS 0 copy never replaces)
    assert.equal(st.messagesDropped, N);
    const metrics = await rest(broker.port, broker.auth(), 'GET', '/metrics');
    const metric = (name: string) => Number(new RegExp(`^switchyard_${name} (\\S+)$`, 'm').exec(String(metrics.json))?.[1]);
    assert.ok(metric('messages_dropped_total') >= N, 'drops in /metrics');
    assert.ok(metric('messages_refused_total') >= refused, 'refusals in /metrics');
    assert.ok(metric('subscription_queued_bytes') >= st.queuedBytes!, 'the bytes held in /metrics');
    // REST publishers are refused alike: 429 with a JSON status
    const r = await rest(broker.port, broker.auth(), 'POST', '/api/v1/messaging/publish', { destinationName: topic, message: { payload: PAYLOAD.toString('base64'), qualityOfService: 1 } });
    assert.equal(r.status, 429, JSON.stringify(r.json));
    assert.match(r.json.status, /Quota exceeded/);
    assert.ok(!pub.closed, 'the publisher stays connected');
    const ping = await rest(broker.port, broker.auth(), 'GET', '/api/v1/ping');
    assert.equal(ping.status, 200);
  });
});
