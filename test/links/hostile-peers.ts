/**
 * Peers that speak NATS or MQTT badly, for the inbound-limit tests of links (hostile-peers.test.ts): TCP servers on
 * 127.0.0.1 that do the handshake correctly and then send one huge message, an endless protocol line, or a flood.
 * Plus the broker's RSS (from /proc) and a /health latency probe.
 */
import { readFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import mqttPacket from 'mqtt-packet';

export interface HostilePeer {
  port: number;
  /** Connections accepted so far. */
  connections: number;
  /** Bytes of the attack written so far (all connections). */
  bytesSent: number;
  close(): Promise<void>;
}

function listen(srv: Server): Promise<number> {
  return new Promise((resolve, reject) => {
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => resolve((srv.address() as { port: number }).port));
  });
}

function closer(srv: Server, sockets: Set<Socket>) {
  return () =>
    new Promise<void>((resolve) => {
      for (const s of sockets) s.destroy();
      srv.close(() => resolve());
    });
}

/** Writes `unit` over and over as fast as the socket takes it, until it closes (yielding to the event loop). */
function flood(peer: HostilePeer, sock: Socket, unit: Buffer): void {
  const chunk = Buffer.concat(Array.from({ length: Math.max(1, Math.floor(65536 / unit.length)) }, () => unit));
  let n = 0;
  const pump = (): void => {
    while (!sock.destroyed && sock.writable) {
      peer.bytesSent += chunk.length;
      const more = sock.write(chunk);
      if (!more) {
        sock.once('drain', pump);
        return;
      }
      if (++n % 8 === 0) {
        setImmediate(pump);
        return;
      }
    }
  };
  pump();
}

/** Writes `head`, then `size` filler bytes, then `tail`, at the pace the socket takes them. */
function stream(peer: HostilePeer, sock: Socket, head: Buffer, size: number, tail: Buffer): void {
  sock.write(head);
  const filler = Buffer.alloc(65536, 0x78);
  let left = size;
  let n = 0;
  const pump = (): void => {
    while (left > 0 && !sock.destroyed && sock.writable) {
      const c = left >= filler.length ? filler : filler.subarray(0, left);
      left -= c.length;
      peer.bytesSent += c.length;
      const more = sock.write(c);
      if (left === 0) sock.write(tail);
      if (!more) {
        sock.once('drain', pump);
        return;
      }
      if (++n % 8 === 0) {
        setImmediate(pump);
        return;
      }
    }
  };
  pump();
}

export type NatsAttack = 'huge-msg' | 'endless-line' | 'ping-flood' | 'msg-flood';

/**
 * A "NATS server": INFO (max_payload 1 MiB), PONG to PING; then
 * - `huge-msg`: answers the client's first request (a JetStream API call) with a MSG of `size` bytes to its inbox;
 * - `endless-line`: answers it with a MSG line that never ends (`size` bytes of arguments, no CR LF);
 * - `ping-flood`: PINGs without end after the handshake;
 * - `msg-flood`: small MSGs without end to the first subscription that is not an inbox.
 */
export async function hostileNats(attack: NatsAttack, size = 60 * 1024 * 1024): Promise<HostilePeer> {
  const sockets = new Set<Socket>();
  const srv = createServer((sock) => {
    sockets.add(sock);
    sock.on('close', () => sockets.delete(sock));
    sock.on('error', () => undefined);
    peer.connections++;
    const info = { server_id: 'HOSTILE', server_name: 'hostile', version: '2.10.22', proto: 1, go: 'go1.22', host: '127.0.0.1', port: peer.port, headers: true, max_payload: 1048576, jetstream: true, client_id: peer.connections };
    sock.write(`INFO ${JSON.stringify(info)}\r\n`);
    let buf: Buffer = Buffer.alloc(0);
    let skip = 0;
    let started = false;
    const subs: Array<{ subject: string; sid: string }> = [];
    const request = (reply: string) => {
      if (started || (attack !== 'huge-msg' && attack !== 'endless-line')) return;
      const inbox = subs.find((s) => s.subject.startsWith('_INBOX')) ?? subs[0];
      if (!inbox) return;
      started = true;
      if (attack === 'huge-msg') stream(peer, sock, Buffer.from(`MSG ${reply} ${inbox.sid} ${size}\r\n`), size, Buffer.from('\r\n'));
      else stream(peer, sock, Buffer.from(`MSG ${reply} ${inbox.sid} `), size, Buffer.from(''));
    };
    sock.on('data', (d: Buffer) => {
      buf = buf.length ? Buffer.concat([buf, d]) : d;
      for (;;) {
        if (skip > 0) {
          const k = Math.min(skip, buf.length);
          buf = buf.subarray(k);
          skip -= k;
          if (skip > 0) return;
          continue;
        }
        const nl = buf.indexOf(10);
        if (nl < 0) return;
        const line = buf.subarray(0, nl).toString('latin1').trim();
        buf = buf.subarray(nl + 1);
        const [op = '', ...args] = line.split(/\s+/);
        switch (op.toUpperCase()) {
          case 'PING':
            sock.write('PONG\r\n');
            if (attack === 'ping-flood' && !started) {
              started = true;
              flood(peer, sock, Buffer.from('PING\r\n'));
            }
            break;
          case 'SUB':
            subs.push({ subject: args[0]!, sid: args[args.length - 1]! });
            if (attack === 'msg-flood' && !started && !args[0]!.startsWith('_INBOX')) {
              started = true;
              const subject = args[0]!.replace(/>$/, 'x').replace(/\*/g, 'y');
              flood(peer, sock, Buffer.from(`MSG ${subject} ${args[args.length - 1]} 5\r\nhello\r\n`));
            }
            break;
          case 'PUB':
            skip = Number(args[args.length - 1]) + 2;
            if (args.length === 3) request(args[1]!);
            break;
          case 'HPUB':
            skip = Number(args[args.length - 1]) + 2;
            if (args.length === 4) request(args[1]!);
            break;
        }
      }
    });
  });
  const peer: HostilePeer = { port: 0, connections: 0, bytesSent: 0, close: closer(srv, sockets) };
  peer.port = await listen(srv);
  return peer;
}

export type MqttAttack = 'huge-publish' | 'pingresp-flood' | 'publish-flood';

/**
 * An "MQTT broker": CONNACK to CONNECT (in the client's protocol version), SUBACK to SUBSCRIBE; then
 * - `huge-publish`: a PUBLISH whose fixed header announces 256 MB (the largest MQTT length), its body streamed;
 * - `pingresp-flood`: PINGRESPs without end after the CONNACK;
 * - `publish-flood`: small QoS 0 PUBLISHes without end to the first subscription's topic.
 */
export async function hostileMqtt(attack: MqttAttack): Promise<HostilePeer> {
  const sockets = new Set<Socket>();
  const srv = createServer((sock) => {
    sockets.add(sock);
    sock.on('close', () => sockets.delete(sock));
    sock.on('error', () => undefined);
    peer.connections++;
    let version = 4;
    let started = false;
    const parser = mqttPacket.parser({ protocolVersion: 5 });
    parser.on('error', () => sock.destroy());
    parser.on('packet', (p: mqttPacket.Packet) => {
      if (p.cmd === 'connect') {
        version = (p as mqttPacket.IConnectPacket).protocolVersion ?? 4;
        (parser as unknown as { settings: { protocolVersion: number } }).settings.protocolVersion = version;
        sock.write(mqttPacket.generate({ cmd: 'connack', sessionPresent: false, ...(version === 5 ? { reasonCode: 0 } : { returnCode: 0 }) }, { protocolVersion: version }));
        if (attack === 'pingresp-flood' && !started) {
          started = true;
          flood(peer, sock, Buffer.from([0xd0, 0x00]));
        }
      } else if (p.cmd === 'subscribe') {
        const s = p as mqttPacket.ISubscribePacket;
        sock.write(mqttPacket.generate({ cmd: 'suback', messageId: s.messageId, granted: s.subscriptions.map(() => 0) }, { protocolVersion: version }));
        if (started) return;
        started = true;
        const topic = s.subscriptions[0]!.topic.replace(/#$/, 'x').replace(/\+/g, 'y');
        if (attack === 'huge-publish') {
          const total = 268435455; // the largest remaining length MQTT can express
          const t = Buffer.from(topic);
          const head = Buffer.concat([Buffer.from([0x30, 0xff, 0xff, 0xff, 0x7f, t.length >> 8, t.length & 0xff]), t, version === 5 ? Buffer.from([0]) : Buffer.alloc(0)]);
          stream(peer, sock, head, total - (head.length - 5), Buffer.alloc(0));
        } else if (attack === 'publish-flood') {
          flood(peer, sock, mqttPacket.generate({ cmd: 'publish', topic, payload: Buffer.from('hello'), qos: 0, retain: false, dup: false }, { protocolVersion: version }));
        }
      } else if (p.cmd === 'pingreq') {
        sock.write(Buffer.from([0xd0, 0x00]));
      } else if (p.cmd === 'disconnect') {
        sock.end();
      }
    });
    sock.on('data', (d: Buffer) => parser.parse(d));
  });
  const peer: HostilePeer = { port: 0, connections: 0, bytesSent: 0, close: closer(srv, sockets) };
  peer.port = await listen(srv);
  return peer;
}

/** The resident set of a process, MiB (Linux /proc). */
export function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : 0;
}

/** Samples a process's RSS every 25 ms until stopped: the peak, MiB. */
export function rssSampler(pid: number): { stop(): number; peak(): number } {
  let peak = rssMiB(pid);
  const timer = setInterval(() => {
    try {
      peak = Math.max(peak, rssMiB(pid));
    } catch {
      /* exited */
    }
  }, 25);
  return {
    peak: () => peak,
    stop: () => {
      clearInterval(timer);
      return peak;
    },
  };
}

/** GET /health one after the other for `ms`: the slowest answer (a request that fails or takes 10 s counts as 10 s). */
export async function healthLatency(port: number, ms: number): Promise<{ max: number; count: number }> {
  const end = Date.now() + ms;
  let max = 0;
  let count = 0;
  while (Date.now() < end) {
    const t0 = performance.now();
    try {
      await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(10000) });
    } catch {
      /* timed out: counted as its time */
    }
    max = Math.max(max, performance.now() - t0);
    count++;
    await new Promise((r) => setTimeout(r, 50));
  }
  return { max, count };
}
