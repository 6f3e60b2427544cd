import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { connect as netConnect, type Socket } from 'node:net';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import mqttPacket from 'mqtt-packet';
import { NetworkManagerSchema } from '../../src/config/schema.js';
import { Runtime } from '../../src/runtime/runtime.js';
import { endpointsOf } from '../../src/endpoints/endpoints.service.js';
import { parseProxyHeader, V2_SIGNATURE } from '../../src/transport/proxy-protocol.js';
import { CONFIG_DIR, MQTT_TEST_ENV, removeDir, startServer, tempDir, waitUntil, type TestServer } from '../helpers.js';
import { auditLines, createUser } from '../security/helpers.js';

/**
 * The PROXY protocol (v1 text, v2 binary) on MQTT endpoints with `proxyProtocol: true` (docs/security.md, "Behind a
 * proxy"): raw sockets play the proxy. The address the header names is the client's in GET
 * /api/v1/server/connections, in the per-address login limits and in the audit; a connection without a valid header
 * is closed; the key is refused on endpoints that cannot carry the header (ws, wss, serial).
 */

function v1(src: string, srcPort: number): Buffer {
  const fam = src.includes(':') ? 'TCP6' : 'TCP4';
  const dst = fam === 'TCP6' ? '::1' : '127.0.0.1';
  return Buffer.from(`PROXY ${fam} ${src} ${dst} ${srcPort} 1883\r\n`, 'latin1');
}

function v2(src: string, srcPort: number, opts: { command?: number; extra?: number } = {}): Buffer {
  const six = src.includes(':');
  const addr = (a: string) => {
    if (!six) return Buffer.from(a.split('.').map(Number));
    const [h = '', t = ''] = a.split('::');
    const hs = h ? h.split(':') : [];
    const ts = t ? t.split(':') : [];
    const groups = [...hs, ...Array(8 - hs.length - ts.length).fill('0'), ...ts];
    const b = Buffer.alloc(16);
    groups.forEach((g, i) => b.writeUInt16BE(parseInt(g, 16), i * 2));
    return b;
  };
  const ports = Buffer.alloc(4);
  ports.writeUInt16BE(srcPort, 0);
  ports.writeUInt16BE(1883, 2);
  const body = Buffer.concat([addr(src), addr(six ? '::1' : '127.0.0.1'), ports, Buffer.alloc(opts.extra ?? 0)]);
  const head = Buffer.alloc(4);
  head[0] = 0x20 | (opts.command ?? 1);
  head[1] = six ? 0x21 : 0x11;
  head.writeUInt16BE(body.length, 2);
  return Buffer.concat([V2_SIGNATURE, head, body]);
}

const connectBytes = (username: string, password: string, version: 4 | 5 = 4, clientId = '') =>
  mqttPacket.generate(
    { cmd: 'connect', protocolId: 'MQTT', protocolVersion: version, clean: true, clientId, keepalive: 0, username, password: Buffer.from(password) } as never,
    { protocolVersion: version } as never,
  );

/**
 * Opens a socket (plain or TLS after the header), writes `header` then a CONNECT; resolves with the CONNACK code or
 * 'closed' when the server closes the connection without one. The socket is left open when `keep`.
 */
function attempt(
  port: number,
  header: Buffer | undefined,
  connect: Buffer | undefined,
  opts: { version?: 4 | 5; tls?: boolean; keep?: boolean; timeoutMs?: number } = {},
): Promise<{ code: number | 'closed'; socket: Socket }> {
  const version = opts.version ?? 4;
  return new Promise((resolve, reject) => {
    const raw = netConnect({ port, host: '127.0.0.1' });
    const parser = mqttPacket.parser({ protocolVersion: version } as never);
    let settled = false;
    const finish = (code: number | 'closed', s: Socket) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (!opts.keep) s.destroy();
      resolve({ code, socket: s });
    };
    const timer = setTimeout(() => {
      raw.destroy();
      reject(new Error('neither CONNACK nor close within the timeout'));
    }, opts.timeoutMs ?? 10_000);
    raw.on('error', () => {});
    raw.once('connect', () => {
      if (header) raw.write(header);
      let s: Socket = raw;
      if (opts.tls) {
        const t = tlsConnect({ socket: raw, rejectUnauthorized: false, servername: 'localhost' });
        t.on('error', () => {});
        t.once('secureConnect', () => connect && t.write(connect));
        s = t;
      } else if (connect) raw.write(connect);
      parser.on('packet', (p: Record<string, any>) => {
        if (p.cmd === 'connack') finish(version === 5 ? p.reasonCode : p.returnCode, s);
      });
      s.on('data', (b: Buffer) => parser.parse(b));
      s.once('close', () => finish('closed', s));
    });
  });
}

describe('proxy protocol', () => {
  let s: TestServer;
  let certDir: string;
  const ports: Record<string, number> = {};

  before(async () => {
    certDir = tempDir('switchyard-proxy-cert-');
    mkdirSync(certDir, { recursive: true });
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', join(certDir, 'key.pem'), '-out', join(certDir, 'cert.pem'), '-days', '2', '-subj', '/CN=localhost'], {
      stdio: 'ignore',
    });
    s = await startServer({
      overrides: {
        AuthManager: { loginRateLimit: 100000, addressFailureLimit: 4, addressBlockSeconds: 300 },
        NetworkManager: {
          data: [
            { name: 'mqtt-proxied', url: 'tcp://127.0.0.1:0/', endPointConfig: { connectionTimeout: 1500 }, protocolConfigs: [{ type: 'mqtt', proxyProtocol: true }] },
            {
              name: 'mqtt-proxied-tls',
              url: 'ssl://127.0.0.1:0/',
              endPointConfig: { sslConfig: { keyFile: join(certDir, 'key.pem'), certFile: join(certDir, 'cert.pem') } },
              protocolConfigs: [{ type: 'mqtt', proxyProtocol: true }],
            },
            { name: 'mqtt-proxy-allowed', url: 'tcp://127.0.0.1:0/', endPointConfig: { proxyProtocolMode: 'REQUIRED', allowedProxyHosts: '192.0.2.1, 10.0.0.0/8' }, protocolConfigs: [{ type: 'mqtt' }] },
            { name: 'mqtt-proxy-optional', url: 'tcp://127.0.0.1:0/', endPointConfig: { proxyProtocolMode: 'ENABLED' }, protocolConfigs: [{ type: 'mqtt' }] },
            { name: 'mqtt-direct', url: 'tcp://127.0.0.1:0/', protocolConfigs: [{ type: 'mqtt' }] },
          ],
        },
      },
    });
    for (const name of ['mqtt-proxied', 'mqtt-proxied-tls', 'mqtt-proxy-allowed', 'mqtt-proxy-optional', 'mqtt-direct']) {
      await waitUntil(() => !!endpointsOf(s.rt).entries.get(name)?.handle, 10000, `${name} listening`);
      ports[name] = endpointsOf(s.rt).entries.get(name)!.handle!.port;
    }
  });
  after(async () => {
    await s?.close();
    removeDir(certDir);
  });

  const connections = async () => (await s.inject('/api/v1/server/connections')).json() as Array<{ name: string; proxyAddress: string; endpoint: string; clientId: string; user: string }>;

  test('proxy protocol - v1 and v2 (IPv4, IPv6) headers give the real client address in GET /api/v1/server/connections', async () => {
    const port = ports['mqtt-proxied']!;
    const a = await attempt(port, v1('203.0.113.7', 40001), connectBytes('admin', s.adminPassword, 4, 'pp-v1'), { keep: true });
    const b = await attempt(port, v2('198.51.100.20', 40002), connectBytes('admin', s.adminPassword, 5, 'pp-v2'), { keep: true, version: 5 });
    const c = await attempt(port, v2('2001:db8::7', 40003), connectBytes('admin', s.adminPassword, 4, 'pp-v2-6'), { keep: true });
    const d = await attempt(ports['mqtt-proxied-tls']!, v1('203.0.113.8', 40004), connectBytes('admin', s.adminPassword, 4, 'pp-tls'), { keep: true, tls: true });
    try {
      assert.deepEqual([a.code, b.code, c.code, d.code], [0, 0, 0, 0], 'every CONNECT behind a header is accepted');
      const list = await connections();
      const byId = new Map(list.map((x) => [x.clientId, x]));
      assert.equal(byId.get('pp-v1')?.name, 'tcp_/203.0.113.7:40001');
      assert.equal(byId.get('pp-v2')?.name, 'tcp_/198.51.100.20:40002');
      assert.equal(byId.get('pp-v2-6')?.name, 'tcp_/2001:db8::7:40003');
      assert.equal(byId.get('pp-tls')?.name, 'ssl_/203.0.113.8:40004', 'ssl:// reads the header before the TLS handshake');
      assert.match(byId.get('pp-v1')!.proxyAddress, /^127\.0\.0\.1:\d+$/, 'proxyAddress is the proxy (the socket peer)');
    } finally {
      for (const x of [a, b, c, d]) x.socket.destroy();
    }
  });

  test('proxy protocol - per-address blocking and the audit use the real address; other clients behind the same proxy still log in', async () => {
    const port = ports['mqtt-proxied']!;
    const codes: Array<number | 'closed'> = [];
    for (let i = 0; i < 4; i++) codes.push((await attempt(port, v1('203.0.113.66', 41000 + i), connectBytes('admin', `wrong-${i}`))).code);
    assert.deepEqual(codes, [4, 4, 4, 4], 'bad user name or password (3.1.1: 4)');
    // 203.0.113.66 is blocked now: even the right password, 3.1.1 return code 3, v5 0x9F
    assert.equal((await attempt(port, v1('203.0.113.66', 41010), connectBytes('admin', s.adminPassword))).code, 3);
    assert.equal((await attempt(port, v2('203.0.113.66', 41011), connectBytes('admin', s.adminPassword, 5), { version: 5 })).code, 0x9f);
    // another client behind the same proxy, and admin on loopback directly, are not blocked
    assert.equal((await attempt(port, v1('203.0.113.67', 41012), connectBytes('admin', s.adminPassword))).code, 0);
    assert.equal((await attempt(ports['mqtt-direct']!, undefined, connectBytes('admin', s.adminPassword))).code, 0);
    const lines = await auditLines(s, (l) => l.event === 'login.address_blocked' && l.clientAddress === '203.0.113.66');
    assert.ok(lines.some((l) => l.event === 'login.failed' && l.clientAddress === '203.0.113.66'), 'failures audited with the real address');
  });

  test('proxy protocol - the loopback lockout exemption does not apply to proxied connections; a locked user let through directly is audited', async () => {
    const port = ports['mqtt-proxied']!;
    const victim = await createUser(s, 'pp-victim', 'victim-password-123');
    // five failures from five different real addresses (none reaches the address limit): the user is locked
    for (let i = 0; i < 5; i++) assert.equal((await attempt(port, v1(`192.0.2.${10 + i}`, 42000 + i), connectBytes('pp-victim', `wrong-${i}`))).code, 4);
    // a proxied connection claiming to come from 127.0.0.1 gets no exemption: locked (3.1.1: 4)
    assert.equal((await attempt(port, v1('127.0.0.1', 42010), connectBytes('pp-victim', victim.password))).code, 4, 'locked behind the proxy');
    assert.equal((await attempt(port, v2('::1', 42011), connectBytes('pp-victim', victim.password))).code, 4, 'locked behind the proxy (v2, ::1)');
    // a direct loopback connection is exempt, and the audit says so
    assert.equal((await attempt(ports['mqtt-direct']!, undefined, connectBytes('pp-victim', victim.password))).code, 0, 'direct loopback: exempt');
    await auditLines(s, (l) => l.event === 'login.lock_exempt' && l.username === 'pp-victim');
  });

  test('proxy protocol - a connection without a valid header is closed: none, garbage, oversized, or too slow', async () => {
    const port = ports['mqtt-proxied']!;
    const errorsBefore = endpointsOf(s.rt).entries.get('mqtt-proxied')!.stats.errors;
    assert.equal((await attempt(port, undefined, connectBytes('admin', s.adminPassword))).code, 'closed', 'a bare CONNECT');
    assert.equal((await attempt(port, Buffer.from('PROXY TCP4 not-an-address 127.0.0.1 1 2\r\n'), connectBytes('admin', s.adminPassword))).code, 'closed', 'a bad v1 address');
    assert.equal((await attempt(port, Buffer.from(`PROXY TCP4 ${'1'.repeat(200)}`), undefined)).code, 'closed', 'a v1 line over 107 bytes');
    assert.equal((await attempt(port, v2('203.0.113.9', 1, { extra: 4000 }), connectBytes('admin', s.adminPassword))).code, 'closed', 'a v2 header over the cap');
    const t0 = Date.now();
    assert.equal((await attempt(port, Buffer.from('PROXY TCP4 203.0'), undefined)).code, 'closed', 'an incomplete header');
    assert.ok(Date.now() - t0 >= 1000, 'closed by the connectionTimeout (1.5 s here), not at once');
    assert.ok(endpointsOf(s.rt).entries.get('mqtt-proxied')!.stats.errors >= errorsBefore + 5, 'counted as endpoint errors');
    // v2 LOCAL (a proxy's health check): accepted with the proxy's own address
    const local = await attempt(port, v2('203.0.113.9', 1, { command: 0 }), connectBytes('admin', s.adminPassword, 4, 'pp-local'), { keep: true });
    try {
      assert.equal(local.code, 0);
      assert.match((await connections()).find((c) => c.clientId === 'pp-local')!.name, /^tcp_\/127\.0\.0\.1:\d+$/);
    } finally {
      local.socket.destroy();
    }
  });

  test('proxy protocol - allowedProxyHosts: a peer not listed may not send a header (closed)', async () => {
    // the tests connect from 127.0.0.1, which is not in '192.0.2.1, 10.0.0.0/8'
    assert.equal((await attempt(ports['mqtt-proxy-allowed']!, v1('203.0.113.5', 1), connectBytes('admin', s.adminPassword))).code, 'closed');
  });

  test('proxy protocol - proxyProtocolMode ENABLED: a header is used when present, a bare CONNECT is accepted as direct', async () => {
    const port = ports['mqtt-proxy-optional']!;
    const a = await attempt(port, v2('203.0.113.44', 43001), connectBytes('admin', s.adminPassword, 4, 'pp-opt-h'), { keep: true });
    const b = await attempt(port, undefined, connectBytes('admin', s.adminPassword, 4, 'pp-opt-n'), { keep: true });
    try {
      assert.deepEqual([a.code, b.code], [0, 0]);
      const byId = new Map((await connections()).map((x) => [x.clientId, x]));
      assert.equal(byId.get('pp-opt-h')?.name, 'tcp_/203.0.113.44:43001');
      assert.match(byId.get('pp-opt-n')?.name ?? '', /^tcp_\/127\.0\.0\.1:\d+$/);
      assert.equal(byId.get('pp-opt-n')?.proxyAddress, '');
    } finally {
      a.socket.destroy();
      b.socket.destroy();
    }
  });

  test('proxy protocol - the codec: v1 TCP4/TCP6/UNKNOWN, v2 PROXY/LOCAL, partial input, absent when optional', () => {
    assert.deepEqual(parseProxyHeader(v1('203.0.113.7', 5), true), { state: 'done', length: v1('203.0.113.7', 5).length, version: 1, source: { address: '203.0.113.7', port: 5 } });
    assert.deepEqual(parseProxyHeader(Buffer.from('PROXY UNKNOWN\r\n\x10'), true), { state: 'done', length: 15, version: 1 });
    assert.equal(parseProxyHeader(v2('2001:db8::7', 9).subarray(0, 20), true).state, 'partial');
    assert.deepEqual(parseProxyHeader(v2('2001:db8::7', 9), true), { state: 'done', length: 52, version: 2, source: { address: '2001:db8::7', port: 9 } });
    assert.deepEqual(parseProxyHeader(Buffer.from([0x10, 0x0c]), false), { state: 'absent' });
    assert.throws(() => parseProxyHeader(Buffer.from([0x10, 0x0c]), true), /did not start with a PROXY protocol/);
    assert.throws(() => parseProxyHeader(Buffer.from('PROXY TCP4 1.2.3.4 5.6.7.8 99999 1\r\n'), true), /bad port/);
  });

  test('proxy protocol - the key is refused on ws, wss and serial endpoints, at config validation', async () => {
    const refused = (data: unknown[]) => {
      const r = NetworkManagerSchema.safeParse({ data });
      assert.equal(r.success, false);
      return JSON.stringify(r.error!.issues);
    };
    assert.match(refused([{ name: 'w', url: 'ws://127.0.0.1:0/mqtt', protocolConfigs: [{ type: 'mqtt', proxyProtocol: true }, { type: 'ws' }] }]), /tcp:\/\/ and ssl:\/\/ endpoints only, not ws/);
    assert.match(refused([{ name: 'w', url: 'ws://127.0.0.1:0/mqtt', protocolConfigs: [{ type: 'mqtt' }, { type: 'ws', proxyProtocol: true }] }]), /never to WebSocket endpoints/);
    assert.match(refused([{ name: 'w', url: 'wss://127.0.0.1:0/mqtt', endPointConfig: { proxyProtocolMode: 'REQUIRED' }, protocolConfigs: [{ type: 'mqtt' }] }]), /proxyProtocolMode/);
    assert.match(refused([{ name: 'g', url: 'serial:///dev/ttyS9', protocolConfigs: [{ type: 'NMEA-0183', proxyProtocol: true }] }]), /never to serial endpoints/);
    assert.match(refused([{ name: 't', url: 'tcp://127.0.0.1:0/', endPointConfig: { allowedProxyHosts: '10.0.0.0/99' }, protocolConfigs: [{ type: 'mqtt' }] }]), /IP addresses or CIDR/);
    // false stays accepted (MAPS configurations carry the key), and true on tcp:// is valid
    assert.equal(NetworkManagerSchema.safeParse({ data: [{ name: 'w', url: 'ws://127.0.0.1:0/', protocolConfigs: [{ type: 'mqtt', proxyProtocol: false }, { type: 'ws', proxyProtocol: false }] }] }).success, true);
    // the server refuses to start with it
    const dir = tempDir();
    try {
      await assert.rejects(
        Runtime.create({
          configDir: CONFIG_DIR,
          env: MQTT_TEST_ENV,
          stdoutLogs: false,
          overrides: {
            MessageDaemon: { dataDirectory: dir },
            NetworkManager: { data: [{ name: 'w', url: 'ws://127.0.0.1:0/mqtt', protocolConfigs: [{ type: 'mqtt', proxyProtocol: true }, { type: 'ws' }] }] },
          },
        }),
        /proxyProtocol/,
      );
    } finally {
      removeDir(dir);
    }
  });
});
