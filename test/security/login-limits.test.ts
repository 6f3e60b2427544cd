import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect as netConnect } from 'node:net';
import mqttPacket from 'mqtt-packet';
import { AddressLimits, addressKey } from '../../src/security/address-limits.js';
import { securityOf } from '../../src/security/service.js';
import { endpointsOf } from '../../src/endpoints/endpoints.service.js';
import { basicAuth, startServer, waitUntil, type TestServer } from '../helpers.js';
import { auditLines, createUser, login } from './helpers.js';

/**
 * Login limits (docs/security.md): per-source-address failure limits on every login path, checked before the
 * per-user lockout; unknown names counted per address; public routes ignore credentials; the per-user lock does not
 * apply from lockout-exempt addresses. REST requests come from any address through `inject({ remoteAddress })`;
 * MQTT clients from other loopback addresses (127.0.0.2, ... work on Linux) with a socket `localAddress`.
 */

/** One CONNECT from `localAddress`; resolves with the CONNACK code (v5 reasonCode, 3.1.1 returnCode). */
function mqttConnect(port: number, localAddress: string, opts: { username: string; password?: string; version?: 4 | 5; properties?: Record<string, unknown> }): Promise<number> {
  const version = opts.version ?? 5;
  return new Promise((resolve, reject) => {
    const socket = netConnect({ port, host: '127.0.0.1', localAddress });
    const parser = mqttPacket.parser({ protocolVersion: version } as never);
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error('no CONNACK within 10 s'));
    }, 10_000);
    parser.on('packet', (p: Record<string, any>) => {
      if (p.cmd !== 'connack') return;
      clearTimeout(timer);
      socket.destroy();
      resolve(version === 5 ? p.reasonCode : p.returnCode);
    });
    socket.on('data', (b) => parser.parse(b));
    socket.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    socket.on('connect', () => {
      const packet = {
        cmd: 'connect',
        protocolId: 'MQTT',
        protocolVersion: version,
        clean: true,
        clientId: '',
        keepalive: 0,
        username: opts.username,
        ...(opts.password !== undefined ? { password: Buffer.from(opts.password) } : {}),
        ...(opts.properties ? { properties: opts.properties } : {}),
      };
      socket.write(mqttPacket.generate(packet as never, { protocolVersion: version } as never));
    });
  });
}

describe('login limits', () => {
  let s: TestServer;
  let port: number;

  before(async () => {
    s = await startServer({
      overrides: {
        AuthManager: {
          loginRateLimit: 100000,
          addressFailureLimit: 8,
          addressBlockSeconds: 300,
          lockoutTableSize: 10, // lowered: unknown names must not be able to fill it
          lockoutExemptAddresses: ['127.0.0.1'], // the tests' own loopback address only (127.0.0.2+ are "elsewhere")
        },
        NetworkManager: { data: [{ name: 'mqtt-limits', url: 'tcp://127.0.0.1:0/', protocolConfigs: [{ type: 'mqtt' }] }] },
      },
    });
    await waitUntil(() => !!endpointsOf(s.rt).entries.get('mqtt-limits')?.handle, 10000, 'MQTT endpoint listening');
    port = endpointsOf(s.rt).entries.get('mqtt-limits')!.handle!.port;
  });
  after(async () => s.close());

  const basic = (url: string, username: string, password: string, remoteAddress: string) =>
    s.app.inject({ url, headers: basicAuth(username, password), remoteAddress });

  test('login limits - many made-up names no longer hide a real user failures (lockout table of 10)', async () => {
    const sm = securityOf(s.rt);
    const olga = await createUser(s, 'olga-limits', 'olga-password-123');
    // 60 unknown names (6 times the table) from 20 addresses (3 each: below the address limit)
    const attempts: Promise<unknown>[] = [];
    for (let i = 0; i < 60; i++) {
      const clientAddress = `10.20.${Math.floor(i / 3)}.7`;
      attempts.push(sm.authenticate(`made-up-${i}`, 'guess-password', { protocol: 'REST', clientAddress }).catch((e: unknown) => e));
    }
    await Promise.all(attempts);
    // none of them is in the per-user table; it holds users only
    assert.equal(sm.lockouts.status('made-up-1'), undefined);
    // now the real user: five wrong passwords over Basic from one address, then the right one is refused
    for (let i = 0; i < 5; i++) assert.equal((await basic('/api/v1/session', 'olga-limits', `wrong-password-${i}`, '10.30.0.1')).statusCode, 401);
    assert.equal(sm.lockouts.status('olga-limits')?.failures, 5, 'every failure of the real user was counted');
    const right = await basic('/api/v1/session', 'olga-limits', olga.password, '10.30.0.2');
    assert.equal(right.statusCode, 401, 'locked: the right password is refused from a non-exempt address');
    assert.equal(right.headers['retry-after'], '30');
    const listed = (await s.inject('/api/v1/auth/user-lockouts')).json() as Array<{ username: string; uuid: string | null }>;
    assert.deepEqual(
      listed.map((l) => l.username),
      ['olga-limits'],
      'the lockout list holds the real user and no made-up name',
    );
    // the made-up names are remembered per address: the same name from its address locks like a user
    for (let i = 0; i < 4; i++) await sm.authenticate('made-up-0', 'guess', { protocol: 'REST', clientAddress: '10.20.0.7' }).catch(() => {});
    await assert.rejects(sm.authenticate('made-up-0', 'guess', { protocol: 'REST', clientAddress: '10.20.0.7' }), /locked/);
    const lines = await auditLines(s, (l) => l.event === 'login.failed' && l.username === 'made-up-59');
    assert.equal(lines.find((l) => l.event === 'login.failed' && l.username === 'made-up-59')?.clientAddress, '10.20.19.7', 'audited with its source');
    assert.equal(sm.lockouts.reset('olga-limits'), true);
  });

  test('login limits - an address that keeps failing over MQTT is blocked (0x9F, 3.1.1: 3) while admin logs in from loopback', async () => {
    const sm = securityOf(s.rt);
    const codes: number[] = [];
    for (let i = 0; i < 8; i++) codes.push(await mqttConnect(port, '127.0.0.2', { username: 'admin', password: `wrong-${i}` }));
    assert.deepEqual(codes, Array(8).fill(0x86), 'eight bad user name or password');
    const adminLock = sm.lockouts.status('admin');
    assert.equal(adminLock?.locked, true, 'the per-user lock stays: admin is locked for everyone not exempt');
    const failuresBefore = adminLock!.failures;
    // blocked: even the right password is refused at once, and nothing is counted
    assert.equal(await mqttConnect(port, '127.0.0.2', { username: 'admin', password: s.adminPassword }), 0x9f, 'Connection rate exceeded');
    assert.equal(await mqttConnect(port, '127.0.0.2', { username: 'admin', password: 'wrong-again', version: 4 }), 3, '3.1.1: server unavailable');
    const scram = { authenticationMethod: 'SCRAM-SHA-256', authenticationData: Buffer.from('n,,n=admin,r=0123456789abcdef') };
    assert.equal(await mqttConnect(port, '127.0.0.2', { username: 'admin', properties: scram }), 0x9f, 'SCRAM too: refused before the exchange');
    assert.equal(sm.lockouts.status('admin')?.failures, failuresBefore, 'a blocked attempt touches no lockout state');
    // the same address over REST: 429 with Retry-After, before any check
    const rest = await basic('/api/v1/session', 'admin', s.adminPassword, '127.0.0.2');
    assert.equal(rest.statusCode, 429);
    assert.ok(Number(rest.headers['retry-after']) > 0);
    assert.match(rest.json().status, /Too many failed logins from 127\.0\.0\.2/);
    const viaLogin = await s.app.inject({ method: 'POST', url: '/api/v1/login', payload: { username: 'admin', password: s.adminPassword }, remoteAddress: '127.0.0.2' });
    assert.equal(viaLogin.statusCode, 429);
    // a third address is not blocked but admin's lock applies there
    assert.equal(await mqttConnect(port, '127.0.0.3', { username: 'admin', password: s.adminPassword }), 0x86);
    // admin on 127.0.0.1 (exempt from the per-user lock) connects and uses REST
    assert.equal(await mqttConnect(port, '127.0.0.1', { username: 'admin', password: s.adminPassword }), 0);
    assert.equal((await s.inject('/api/v1/session')).statusCode, 200);
    const lines = await auditLines(s, (l) => l.event === 'login.address_blocked' && l.clientAddress === '127.0.0.2');
    assert.ok(lines.some((l) => l.event === 'login.failed' && l.clientAddress === '127.0.0.2' && l.protocol === 'MQTT'), 'MQTT failures audited with their source');
    sm.lockouts.reset('admin');
  });

  test('login limits - /health with bad Basic credentials counts nothing (public routes ignore credentials)', async () => {
    const sm = securityOf(s.rt);
    const carol = await createUser(s, 'carol-limits', 'carol-password-123');
    for (const url of ['/health', '/api/v1/ping', '/openapi.json']) {
      for (let i = 0; i < 6; i++) {
        const r = await basic(url, 'carol-limits', 'wrong', '10.40.0.1');
        assert.equal(r.statusCode, 200, `${url} answers`);
      }
    }
    const forged = await s.app.inject({ url: '/health', headers: { authorization: 'Bearer not-a-token' }, remoteAddress: '10.40.0.1' });
    assert.equal(forged.statusCode, 200);
    assert.equal(sm.lockouts.status('carol-limits'), undefined, 'carol has no failures');
    assert.equal(sm.lockouts.addresses.blockedSeconds('10.40.0.1'), 0);
    assert.equal((await basic('/api/v1/session', 'carol-limits', carol.password, '10.40.0.1')).statusCode, 200, 'carol logs in');
  });

  test('login limits - forged Bearer tokens count against the address; Basic and login are then 429', async () => {
    const from = '10.50.0.1';
    for (let i = 0; i < 8; i++) {
      const r = await s.app.inject({ url: '/api/v1/session', headers: { authorization: `Bearer forged.${i}.token` }, remoteAddress: from });
      assert.equal(r.statusCode, 401);
    }
    const r = await s.app.inject({ url: '/api/v1/session', headers: s.auth, remoteAddress: from });
    assert.equal(r.statusCode, 429, 'blocked before the (right) Basic credentials are looked at');
    const cookie = await s.app.inject({ url: '/api/v1/session', cookies: { maps_access_token: 'x.y.z' }, remoteAddress: from });
    assert.equal(cookie.statusCode, 429);
    // without credentials a protected route is a plain 401, a public one answers
    assert.equal((await s.app.inject({ url: '/api/v1/session', remoteAddress: from })).statusCode, 401);
    assert.equal((await s.app.inject({ url: '/health', remoteAddress: from })).statusCode, 200);
    // an expired or ended session's token is ours, not a guess: it does not count
    const ok = await login(s, 'admin', s.adminPassword);
    const token = String(ok.headers['set-cookie']).match(/maps_access_token=([^;]+)/)![1]!;
    await s.app.inject({ method: 'POST', url: '/api/v1/logout', headers: { authorization: `Bearer ${token}` } });
    for (let i = 0; i < 10; i++) {
      assert.equal((await s.app.inject({ url: '/api/v1/session', headers: { authorization: `Bearer ${token}` }, remoteAddress: '10.50.0.2' })).statusCode, 401);
    }
    assert.equal(securityOf(s.rt).lockouts.addresses.blockedSeconds('10.50.0.2'), 0);
  });

  test('selector - a filter beyond the selector bounds is a 400 with a clear status', async () => {
    const long = `name LIKE '${'%_'.repeat(9000)}'`;
    const r = await s.inject(`/api/v1/server/destination?filter=${encodeURIComponent(long)}`);
    assert.equal(r.statusCode, 400);
    assert.match(r.json().status, /Selector is too long: \d+ characters \(limit 16384\)/);
    const redos = `name LIKE '${'%a'.repeat(20)}b'`;
    const ok = await s.inject(`/api/v1/server/destination?filter=${encodeURIComponent(redos)}`);
    assert.equal(ok.statusCode, 200, 'the ReDoS pattern of the issue is a plain, fast filter');
  });
});

describe('address limits (unit)', () => {
  const policy = {
    failureLimit: 3,
    windowSeconds: 60,
    blockSeconds: 120,
    maxAddresses: 100,
    namesPerAddress: 4,
    exempt: ['127.0.0.0/8', '::1', '192.168.5.5'],
    maxFailuresBeforeLock: 2,
    initialLockSeconds: 30,
    maxLockSeconds: 900,
    failureDecaySeconds: 900,
  };

  test('address limits - blocks after the limit within the window, for blockSeconds; the window resets', () => {
    let now = 1_000_000;
    const a = new AddressLimits(policy, () => now);
    a.failed('10.0.0.1');
    a.failed('10.0.0.1');
    now += 61_000; // window over: counting starts again
    assert.equal(a.failed('10.0.0.1').blocked, false);
    assert.equal(a.failed('10.0.0.1').blocked, false);
    assert.equal(a.failed('10.0.0.1').blocked, true);
    assert.equal(a.blockedSeconds('10.0.0.1'), 120);
    assert.equal(a.blockedSeconds('::ffff:10.0.0.1'), 120, 'IPv4-mapped IPv6 is the same address');
    now += 120_000;
    assert.equal(a.blockedSeconds('10.0.0.1'), 0);
  });

  test('address limits - IPv6 counts per /64; exempt list takes addresses and CIDR ranges', () => {
    assert.equal(addressKey('2001:db8:1:2:aaaa::1'), addressKey('2001:db8:1:2:bbbb:cccc:dddd:eeee'));
    assert.notEqual(addressKey('2001:db8:1:2::1'), addressKey('2001:db8:1:3::1'));
    const a = new AddressLimits(policy, () => 0);
    assert.equal(a.exempt('127.0.0.2'), true);
    assert.equal(a.exempt('::ffff:127.0.0.1'), true);
    assert.equal(a.exempt('::1'), true);
    assert.equal(a.exempt('192.168.5.5'), true);
    assert.equal(a.exempt('192.168.5.6'), false);
    assert.equal(a.exempt(undefined), false);
  });

  test('address limits - memory is bounded: addresses and unknown names per address', () => {
    let now = 0;
    const a = new AddressLimits({ ...policy, failureLimit: 1000 }, () => now);
    for (let i = 0; i < 10_000; i++) {
      now++;
      a.nameFailed(`10.${i >> 8}.${i & 255}.1`, `name-${i}`);
    }
    assert.equal(a.size, 100, 'at most maxAddresses entries');
    for (let i = 0; i < 50; i++) a.nameFailed('10.99.0.1', `n-${i}`);
    assert.equal(a.nameStatus('10.99.0.1', 'n-0'), undefined, 'the oldest names of an address are forgotten first');
    assert.equal(a.nameStatus('10.99.0.1', 'n-49')?.failures, 1);
    // a name locks after maxFailuresBeforeLock from that address only
    a.nameFailed('10.99.0.1', 'n-49');
    assert.equal(a.nameStatus('10.99.0.1', 'n-49')?.locked, true);
    assert.equal(a.nameStatus('10.99.0.2', 'n-49'), undefined);
  });
});
