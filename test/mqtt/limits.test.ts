import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import mqtt, { type MqttClient } from 'mqtt';
import mqttPacket from 'mqtt-packet';
import WebSocket from 'ws';
import { CONFIG_DIR, removeDir, spawnBroker, tempDir, type BrokerProcess } from '../helpers.js';
import { RawClient, rssMb, writable, closedWithin, rest } from './helpers.js';

/**
 * Per-connection limits against a broker in a child process (its RSS is measured from /proc): the pre-auth byte cap
 * and no reading while CONNECT is authenticated, write-side backpressure with a disconnect after writeStallTimeout,
 * and the idle limit of 3.1.1 clients with keep alive 0 (docs/messaging.md "Flow control and limits"). Timings are
 * printed, not asserted; the RSS bound is asserted.
 */
const STALL_MS = 2000;
const IDLE_S = 2;
const PRE_AUTH = 256 * 1024;
/** Broker RSS may grow by at most this much over its baseline during an attack (before the fixes: +1.1 GB, +263 MB). */
const RSS_BOUND_MB = 200;

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s[Math.floor(s.length / 2)]!;
}

function openSocket(port: number): Promise<Socket> {
  return new Promise((res, rej) => {
    const s = connect(port, '127.0.0.1');
    s.once('connect', () => res(s));
    s.once('error', rej);
  });
}

describe('mqtt connection limits', () => {
  let broker: BrokerProcess;
  let dataDir: string;
  let configDir: string;
  let port: number;
  let wsPort: number;
  let password: string;
  const sockets: Socket[] = [];
  const clients: MqttClient[] = [];

  before(async () => {
    dataDir = tempDir();
    configDir = tempDir('switchyard-config-');
    for (const f of readdirSync(CONFIG_DIR)) if (f.endsWith('.yaml')) copyFileSync(join(CONFIG_DIR, f), join(configDir, f));
    const mqttCfg = `{ type: mqtt, writeStallTimeout: ${STALL_MS}, maxIdleKeepAliveZero: ${IDLE_S}, maxPreAuthBytes: ${PRE_AUTH}, serverReceiveMaximum: 65535 }`;
    writeFileSync(
      join(configDir, 'NetworkManager.yaml'),
      `NetworkManager:\n  data:\n    - name: MQTT Interface\n      url: tcp://127.0.0.1:0/\n      protocolConfigs: [${mqttCfg}]\n` +
        `    - name: MQTT WebSocket Interface\n      url: ws://127.0.0.1:0/mqtt\n      protocolConfigs: [${mqttCfg}, { type: ws }]\n`,
    );
    broker = await spawnBroker({ SWITCHYARD_DATA_DIR: dataDir, SWITCHYARD_CONFIG_DIR: configDir });
    password = readFileSync(join(dataDir, 'admin_password'), 'utf8').trim();
    const list = await rest(broker.port, broker.auth(), 'GET', '/api/v1/server/interfaces');
    port = (list.json as Array<{ name: string; port: number }>).find((i) => i.name === 'MQTT Interface')!.port;
    wsPort = (list.json as Array<{ name: string; port: number }>).find((i) => i.name === 'MQTT WebSocket Interface')!.port;
  });
  after(async () => {
    for (const c of clients) c.end(true);
    for (const s of sockets) s.destroy();
    await broker?.stop();
    removeDir(dataDir);
    removeDir(configDir);
  });

  /** Another client's QoS 1 round trips (publish → its own subscription) every 50 ms until `stop()`. */
  const probe = async (name: string) => {
    const c = await mqtt.connectAsync(`mqtt://127.0.0.1:${port}`, { username: 'admin', password, clientId: `probe-${name}`, reconnectPeriod: 0, keepalive: 30 });
    clients.push(c);
    const topic = `probe/${name}`;
    await c.subscribeAsync(topic, { qos: 1 });
    const rtts: number[] = [];
    let sentAt = 0;
    let running = true;
    let waiting: (() => void) | undefined;
    c.on('message', () => {
      rtts.push(performance.now() - sentAt);
      waiting?.();
    });
    const loop = (async () => {
      while (running && c.connected) {
        sentAt = performance.now();
        const got = new Promise<void>((r) => (waiting = r));
        c.publish(topic, 'x', { qos: 1 });
        await Promise.race([got, new Promise((r) => setTimeout(r, 5000))]);
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    return {
      async stop() {
        running = false;
        await loop;
        return { n: rtts.length, median: median(rtts), max: Math.max(...rtts), connected: c.connected };
      },
    };
  };

  /** Samples the broker's RSS every 100 ms. */
  const rssSampler = () => {
    const base = rssMb(broker.proc.pid!);
    let peak = base;
    const t = setInterval(() => (peak = Math.max(peak, rssMb(broker.proc.pid!))), 100);
    return {
      base,
      stop() {
        clearInterval(t);
        return { base, peak, end: rssMb(broker.proc.pid!) };
      },
    };
  };

  test('limits - a publisher that never reads is paused, then disconnected after writeStallTimeout; broker RSS stays bounded', async () => {
    const p = await probe('nonreader');
    const rss = rssSampler();
    // the offender subscribes to its own topic (so its socket fills in a second, not after millions of PUBACKs),
    // then publishes QoS 1 as fast as the socket takes it and never reads
    const raw = await RawClient.open(port, 4);
    await raw.connect({ clientId: 'nonreader', username: 'admin', password, keepalive: 60 });
    raw.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: 'flood/self', qos: 0 }] });
    await raw.next('suback');
    const s = raw.socket;
    s.pause();
    s.removeAllListeners('data');
    const payload = Buffer.alloc(512, 1);
    let pid = 0;
    let sent = 0;
    const t0 = Date.now();
    const closed = closedWithin(s, 30000);
    while (!s.destroyed && Date.now() - t0 < 30000) {
      const bufs: Buffer[] = [];
      for (let i = 0; i < 64; i++) {
        pid = (pid % 65535) + 1;
        bufs.push(mqttPacket.generate({ cmd: 'publish', topic: 'flood/self', payload, qos: 1, messageId: pid, retain: false, dup: false } as never));
      }
      const b = Buffer.concat(bufs);
      sent += b.length;
      if (!s.write(b)) await writable(s, 1000);
    }
    const closedAfter = await closed;
    const r = rss.stop();
    const rt = await p.stop();
    console.log(
      `# non-reading publisher: wrote ${(sent / 1048576).toFixed(1)} MiB, disconnected after ${closedAfter} ms (writeStallTimeout ${STALL_MS} ms); ` +
        `broker RSS ${r.base.toFixed(0)} MB -> peak ${r.peak.toFixed(0)} MB (bound +${RSS_BOUND_MB} MB), ${r.end.toFixed(0)} MB after; ` +
        `other client's round trip: median ${rt.median.toFixed(2)} ms, max ${rt.max.toFixed(1)} ms over ${rt.n}`,
    );
    assert.notEqual(closedAfter, undefined, 'the non-reading publisher is disconnected');
    assert.ok(r.peak - r.base < RSS_BOUND_MB, `RSS grew ${(r.peak - r.base).toFixed(0)} MB`);
    assert.ok(rt.connected && rt.n > 0, 'the other client kept working');
  });

  test('limits - over WebSocket too: a client that never reads is paused, then disconnected after writeStallTimeout', async () => {
    const rss = rssSampler();
    const ws = new WebSocket(`ws://127.0.0.1:${wsPort}/mqtt`, 'mqtt');
    ws.binaryType = 'nodebuffer';
    await new Promise<void>((res, rej) => {
      ws.once('open', () => res());
      ws.once('error', rej);
    });
    const closed = new Promise<number>((res) => {
      const t0 = Date.now();
      ws.once('close', () => res(Date.now() - t0));
    });
    const first = new Promise<Buffer>((res) => ws.once('message', (d: Buffer) => res(d)));
    ws.send(mqttPacket.generate({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: 4, clean: true, clientId: 'ws-nonreader', keepalive: 60, username: 'admin', password: Buffer.from(password) } as never));
    assert.equal((await first)[3], 0, 'CONNACK 0');
    ws.send(mqttPacket.generate({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: 'flood/ws', qos: 0 }] } as never));
    await new Promise((r) => setTimeout(r, 200));
    (ws as unknown as { _socket: Socket })._socket.pause(); // never read again
    const payload = Buffer.alloc(512, 1);
    let pid = 0;
    let sent = 0;
    const t0 = Date.now();
    let open = true;
    void closed.then(() => (open = false));
    while (open && Date.now() - t0 < 30000) {
      if (ws.bufferedAmount > 4 * 1048576) {
        await new Promise((r) => setTimeout(r, 50)); // our own send buffer is full: the broker stopped reading
        continue;
      }
      const bufs: Buffer[] = [];
      for (let i = 0; i < 64; i++) {
        pid = (pid % 65535) + 1;
        bufs.push(mqttPacket.generate({ cmd: 'publish', topic: 'flood/ws', payload, qos: 1, messageId: pid, retain: false, dup: false } as never));
      }
      const b = Buffer.concat(bufs);
      sent += b.length;
      ws.send(b);
      await new Promise((r) => setImmediate(r));
    }
    const after = await Promise.race([closed, new Promise<undefined>((r) => setTimeout(() => r(undefined), 1000))]);
    const r = rss.stop();
    ws.terminate();
    console.log(`# WebSocket non-reading client: wrote ${(sent / 1048576).toFixed(1)} MiB, disconnected after ${after} ms; broker RSS ${r.base.toFixed(0)} MB -> peak ${r.peak.toFixed(0)} MB`);
    assert.notEqual(after, undefined, 'the WebSocket client is disconnected');
    assert.ok(r.peak - r.base < RSS_BOUND_MB, `RSS grew ${(r.peak - r.base).toFixed(0)} MB`);
  });

  test('limits - 3.1.1 clients with keep alive 0 that stay silent are closed after maxIdleKeepAliveZero; one that pings stays', async () => {
    const talker = await RawClient.open(port, 4);
    assert.equal((await talker.connect({ clientId: 'talker', username: 'admin', password, keepalive: 0 })).returnCode, 0);
    const pings = setInterval(() => talker.send({ cmd: 'pingreq' }), 500);
    const silent: RawClient[] = [];
    try {
      // 50 silent clients, connected five at a time (each CONNECT costs one scrypt on a shared machine)
      const lifetimes: Array<Promise<number>> = [];
      for (let i = 0; i < 50; i += 5) {
        await Promise.all(
          Array.from({ length: 5 }, async (_, k) => {
            const r = await RawClient.open(port, 4);
            silent.push(r);
            assert.equal((await r.connect({ clientId: `silent-${i + k}`, username: 'admin', password, keepalive: 0 })).returnCode, 0);
            const at = Date.now();
            lifetimes.push(r.waitClosed(IDLE_S * 1000 + 10000).then(() => Date.now() - at));
          }),
        );
      }
      const times = await Promise.all(lifetimes);
      console.log(`# keep alive 0: ${times.length} of 50 silent clients closed ${Math.min(...times)}..${Math.max(...times)} ms after their CONNACK (maxIdleKeepAliveZero ${IDLE_S} s)`);
      assert.equal(times.length, 50);
      assert.equal(talker.closed, false, 'a client that sends packets is not idle');
    } finally {
      clearInterval(pings);
      talker.destroy();
      for (const r of silent) r.destroy();
    }
  });

  test('limits - pre-auth flood: CONNECTs keep scrypt busy while 10 unauthenticated connections send 20 MiB each; bounded RSS, offenders closed', async () => {
    const p = await probe('preauth');
    const rss = rssSampler();
    let running = true;
    let attempts = 0;
    // CONNECT flood keeping scrypt busy: each CONNECT costs one scrypt (with the right password, so the address is
    // not blocked by failed logins and every one of them really checks a password)
    const connectFlood = Array.from({ length: 6 }, async () => {
      while (running) {
        const s = await openSocket(port).catch(() => undefined);
        if (!s) continue;
        s.on('error', () => {});
        const answered = new Promise<void>((r) => {
          const t = setTimeout(r, 5000);
          s.once('data', () => (clearTimeout(t), r()));
          s.once('close', () => (clearTimeout(t), r()));
        });
        attempts++;
        s.write(mqttPacket.generate({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: 4, clean: true, clientId: '', keepalive: 0, username: 'admin', password: Buffer.from(password) } as never));
        await answered;
        s.destroy();
      }
    });
    // 10 connections: CONNECT with a made-up name, then as many packets as the socket takes
    const junk = mqttPacket.generate({ cmd: 'publish', topic: 'junk', payload: Buffer.alloc(60 * 1024, 7), qos: 0, retain: false, dup: false } as never);
    const offenders = await Promise.all(
      Array.from({ length: 10 }, async (_, i) => {
        const s = await openSocket(port);
        sockets.push(s);
        s.on('error', () => {});
        const closed = closedWithin(s, 60000);
        s.write(mqttPacket.generate({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: 4, clean: true, clientId: `offender-${i}`, keepalive: 0, username: `made-up-${i}`, password: Buffer.from('guess') } as never));
        let sent = 0;
        while (!s.destroyed && sent < 20 * 1048576) {
          sent += junk.length;
          if (!s.write(junk)) await writable(s, 200);
          if (s.destroyed) break;
        }
        return { closed: await closed, sent };
      }),
    );
    // one CONNECT of 1 MiB (remaining length 1 048 576), more than maxPreAuthBytes: closed before it is complete
    const big = await openSocket(port);
    sockets.push(big);
    big.on('error', () => {});
    const bigClosed = closedWithin(big, 10000);
    big.write(Buffer.concat([Buffer.from([0x10, 0x80, 0x80, 0x40]), Buffer.alloc(1048576)]));
    const bigAfter = await bigClosed;
    running = false;
    await Promise.all(connectFlood);
    const r = rss.stop();
    const rt = await p.stop();
    const closedTimes = offenders.map((o) => o.closed);
    const sentMiB = offenders.reduce((a, o) => a + o.sent, 0) / 1048576;
    console.log(
      `# pre-auth flood: ${attempts} CONNECTs checked meanwhile (scrypt busy); 10 offenders with made-up names wrote ${sentMiB.toFixed(1)} MiB in all (the broker stops reading while CONNECT is checked), ` +
        `closed after ${closedTimes.join(', ')} ms; oversized CONNECT closed after ${bigAfter} ms; ` +
        `broker RSS ${r.base.toFixed(0)} MB -> peak ${r.peak.toFixed(0)} MB (bound +${RSS_BOUND_MB} MB), ${r.end.toFixed(0)} MB after; ` +
        `other client's round trip: median ${rt.median.toFixed(2)} ms, max ${rt.max.toFixed(1)} ms over ${rt.n}`,
    );
    assert.ok(closedTimes.every((t) => t !== undefined), 'every offender is disconnected');
    assert.notEqual(bigAfter, undefined, 'a CONNECT beyond maxPreAuthBytes is closed');
    assert.ok(r.peak - r.base < RSS_BOUND_MB, `RSS grew ${(r.peak - r.base).toFixed(0)} MB`);
    assert.ok(rt.connected && rt.n > 0, 'the other client kept working');
  });

});
