import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import mqttPacket from 'mqtt-packet';
import { CONFIG_DIR, removeDir, spawnBroker, tempDir, type BrokerProcess } from '../helpers.js';
import { RawClient, rssMb, writable, closedWithin, rest } from './helpers.js';

/**
 * Per-connection memory of clients that never read (issue 20 item 7), against a broker in a child process whose RSS
 * is read from /proc/<pid>/status. A QoS 1 publisher that never reads gets a PUBACK per PUBLISH: once the bytes
 * waiting for its socket pass the cap the broker stops reading it, so its publishes stop being accepted, and it is
 * cut after writeStallTimeout. The bound asserted is the issue's: at most 16 MB peak growth per such client.
 */
const STALL_MS = 12_000;
const FLOOD_MS = 8_000;
/**
 * The non-reading publisher floods until the broker cuts it, at most this long: the broker is congested (and its
 * stall timer starts) only once the PUBACKs fill the loopback socket buffers (a few MB, about a million PUBACKs), which
 * takes 8 s on a quiet machine and longer on a loaded one.
 */
const FLOOD_MAX_MS = 45_000;
const BOUND_MB = 16;
/** The reading client's flood that brings the broker to its working set before the base is taken. */
const WARM_MS = 6_000;

/** The runtime settings `npm start`, the image and the systemd unit use (young generation and glibc arenas). */
const PRODUCTION_ENV = {
  NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --max-semi-space-size=4`.trim(),
  MALLOC_ARENA_MAX: '2',
  MALLOC_MMAP_THRESHOLD_: '4194304',
  MALLOC_TRIM_THRESHOLD_: '131072',
};

describe('mqtt memory of clients that never read', () => {
  let broker: BrokerProcess;
  let dataDir: string;
  let configDir: string;
  let port: number;
  let password: string;
  const clients: RawClient[] = [];

  before(async () => {
    dataDir = tempDir();
    configDir = tempDir('switchyard-config-');
    for (const f of readdirSync(CONFIG_DIR)) if (f.endsWith('.yaml')) copyFileSync(join(CONFIG_DIR, f), join(configDir, f));
    const mqttCfg = `{ type: mqtt, writeStallTimeout: ${STALL_MS}, serverReceiveMaximum: 65535 }`;
    writeFileSync(join(configDir, 'NetworkManager.yaml'), `NetworkManager:\n  data:\n    - name: MQTT Interface\n      url: tcp://127.0.0.1:0/\n      protocolConfigs: [${mqttCfg}]\n`);
    // subscriptions hold at most 1000 messages here (default 10 000): the subscriber's measure is then its connection,
    // not the documented per-subscription cap (docs/messaging.md "Flow control and limits")
    writeFileSync(join(configDir, 'DestinationManager.yaml'), readFileSync(join(CONFIG_DIR, 'DestinationManager.yaml'), 'utf8') + '  maxQueuedMessages: 1000\n');
    broker = await spawnBroker({ SWITCHYARD_DATA_DIR: dataDir, SWITCHYARD_CONFIG_DIR: configDir, ...PRODUCTION_ENV });
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

  /**
   * Samples the broker's RSS every 50 ms from a base that is the broker's working set under the same traffic: after
   * the broker has been quiet for 6 s (the password checks — scrypt needs 16 MiB for a moment — and the idle reclaim
   * of what came before, runtime/reclaim.ts, are not counted against the client), a client that does read its PUBACKs
   * floods QoS 1 PUBLISHes for WARM_MS, and the base is the RSS when it stops. That traffic grows V8's young generation
   * to its working size (1 → 8 MiB with `--max-semi-space-size=4`, more with a larger setting) and fills the socket
   * buffers, which any client's traffic needs and which the idle reclaim had shrunk; what the non-reading client
   * makes the broker hold beyond that is what is bounded. The reference is the higher of the RSS when the reading
   * client stops and its peak: on a loaded machine the major GC runs late, and the garbage of the same traffic from a
   * client that reads is not the non-reader's (a broker that kept the PUBACKs it cannot write grows by hundreds of
   * MB within the flood). Both growths are printed.
   */
  const rssSampler = async (version: 4 | 5) => {
    await new Promise((r) => setTimeout(r, 6000));
    const pid = broker.proc.pid!;
    const quiet = rssMb(pid);
    const warm = await RawClient.open(port, version);
    clients.push(warm);
    await warm.connect({ clientId: `warm-${version}-${Date.now()}`, username: 'admin', password, keepalive: 0, clean: true });
    warm.socket.removeAllListeners('data');
    warm.socket.on('data', () => {}); // reads (and drops) its PUBACKs
    let warmPeak = quiet;
    const wt = setInterval(() => (warmPeak = Math.max(warmPeak, rssMb(pid))), 50);
    await flood(warm.socket, version, `nonreading/warm/${version}`, WARM_MS);
    clearInterval(wt);
    warm.destroy();
    const base = Math.max(rssMb(pid), warmPeak);
    let peak = base;
    const t = setInterval(() => (peak = Math.max(peak, rssMb(pid))), 50);
    return {
      base,
      describe: () => `quiet ${quiet.toFixed(1)} MB, under a reading client's ${WARM_MS} ms flood (its peak, or the RSS when it stopped if higher) ${base.toFixed(1)} MB`,
      stop() {
        clearInterval(t);
        peak = Math.max(peak, rssMb(pid));
        return { base, peak, growth: peak - base, fromQuiet: peak - quiet };
      },
    };
  };

  /** A raw client whose socket is never read again after `ready`. */
  const nonReader = async (version: 4 | 5, clientId: string, ready?: (c: RawClient) => Promise<void>): Promise<RawClient> => {
    const c = await RawClient.open(port, version);
    clients.push(c);
    const ack = await c.connect({ clientId, username: 'admin', password, keepalive: 0, clean: true });
    assert.equal(version === 5 ? ack.reasonCode : ack.returnCode, 0);
    if (ready) await ready(c);
    c.socket.pause();
    c.socket.removeAllListeners('data');
    return c;
  };

  /** QoS 1 PUBLISHes (packet ids cycling) as fast as the socket takes them, for `ms` or until it closes. */
  const flood = async (s: Socket, version: 4 | 5, topic: string, ms: number): Promise<{ publishes: number; bytes: number }> => {
    const payload = Buffer.alloc(64, 1);
    let pid = 0;
    let publishes = 0;
    let bytes = 0;
    const t0 = Date.now();
    while (!s.destroyed && Date.now() - t0 < ms) {
      const bufs: Buffer[] = [];
      for (let i = 0; i < 256; i++) {
        pid = (pid % 65535) + 1;
        bufs.push(mqttPacket.generate({ cmd: 'publish', topic, payload, qos: 1, messageId: pid, retain: false, dup: false } as never, { protocolVersion: version } as never));
      }
      const b = Buffer.concat(bufs);
      publishes += 256;
      bytes += b.length;
      if (!s.write(b)) await writable(s, 250);
    }
    return { publishes, bytes };
  };

  for (const version of [4, 5] as const) {
    test(`memory - a QoS 1 publisher (${version === 5 ? 'v5' : '3.1.1'}) that never reads its PUBACKs: broker RSS peak growth <= ${BOUND_MB} MB, cut after writeStallTimeout`, async () => {
      const c = await nonReader(version, `nonreading-pub-${version}`);
      const rss = await rssSampler(version);
      const closed = closedWithin(c.socket, FLOOD_MAX_MS + STALL_MS + 10_000);
      const t0 = Date.now();
      const sent = await flood(c.socket, version, `nonreading/pub/${version}`, FLOOD_MAX_MS);
      const flooded = Date.now() - t0;
      const r = rss.stop();
      const closedAfter = await closed;
      const cutAt = closedAfter === undefined ? undefined : Date.now() - t0;
      console.log(
        `# non-reading QoS 1 publisher (${version === 5 ? 'v5' : '3.1.1'}): wrote ${sent.publishes} PUBLISHes (${(sent.bytes / 1048576).toFixed(1)} MiB) in ${flooded} ms (until cut, at most ${FLOOD_MAX_MS}); ` +
          `broker RSS ${rss.describe()} -> peak ${r.peak.toFixed(1)} MB: peak growth ${r.growth.toFixed(1)} MB (bound ${BOUND_MB} MB; ${r.fromQuiet.toFixed(1)} MB over the quiet RSS); ` +
          `connection cut ${cutAt === undefined ? 'never' : `${cutAt} ms after the flood began`} (writeStallTimeout ${STALL_MS} ms)`,
      );
      assert.ok(r.growth <= BOUND_MB, `peak RSS growth ${r.growth.toFixed(1)} MB > ${BOUND_MB} MB`);
      assert.notEqual(closedAfter, undefined, 'the non-reading publisher is disconnected once it stays stalled');
      // the broker still answers
      const ping = await rest(broker.port, broker.auth(), 'GET', '/api/v1/ping');
      assert.equal(ping.status, 200);
    });
  }

  test(`memory - a QoS 1 subscriber that never reads: broker RSS peak growth <= ${BOUND_MB} MB while another client publishes to it`, async () => {
    const topic = 'nonreading/sub';
    const sub = await nonReader(4, 'nonreading-sub', async (c) => {
      c.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic, qos: 1 }] });
      await c.next('suback');
    });
    // the publisher reads (its PUBACKs) so only the subscriber is the non-reader
    const pub = await RawClient.open(port, 5);
    clients.push(pub);
    await pub.connect({ clientId: 'reading-pub', username: 'admin', password, keepalive: 0, clean: true });
    const rss = await rssSampler(5);
    const sent = await flood(pub.socket, 5, topic, FLOOD_MS);
    const r = rss.stop();
    console.log(
      `# non-reading QoS 1 subscriber: another client wrote ${sent.publishes} PUBLISHes to it in ${FLOOD_MS} ms (publisher ${pub.closed ? 'closed' : 'still connected'}); ` +
        `broker RSS ${rss.describe()} -> peak ${r.peak.toFixed(1)} MB: peak growth ${r.growth.toFixed(1)} MB (bound ${BOUND_MB} MB; ${r.fromQuiet.toFixed(1)} MB over the quiet RSS)`,
    );
    assert.ok(r.growth <= BOUND_MB, `peak RSS growth ${r.growth.toFixed(1)} MB > ${BOUND_MB} MB`);
    sub.destroy();
    pub.destroy();
  });
});
