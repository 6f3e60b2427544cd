import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, createHmac, pbkdf2Sync, randomBytes } from 'node:crypto';
import mqtt, { type IClientOptions, type MqttClient } from 'mqtt';
import { endpointsOf } from '../../src/endpoints/endpoints.service.js';
import { hashPassword } from '../../src/security/passwords.js';
import { securityOf } from '../../src/security/service.js';
import { startServer, waitUntil, type TestServer } from '../helpers.js';
import { auditLines, createUser, groupId, login } from '../security/helpers.js';
import { RawClient } from './helpers.js';

const METHOD = 'SCRAM-SHA-256';

/** A small SCRAM-SHA-256 client (RFC 5802 / 7677), written from the RFC independently of the server's code. */
function scramClient(username: string, password: string) {
  const hmac = (k: Buffer, d: string) => createHmac('sha256', k).update(d).digest();
  const nonce = randomBytes(18).toString('base64');
  const gs2 = 'n,,';
  const bare = `n=${username.replace(/=/g, '=3D').replace(/,/g, '=2C')},r=${nonce}`;
  let salted = Buffer.alloc(0);
  let authMessage = '';
  return {
    first: Buffer.from(gs2 + bare),
    final(serverFirstData: Buffer): Buffer {
      const serverFirst = serverFirstData.toString();
      const a = Object.fromEntries(serverFirst.split(',').map((kv) => [kv[0], kv.slice(2)])) as Record<string, string>;
      assert.ok(a.r!.startsWith(nonce) && a.r!.length > nonce.length, `server nonce extends the client's: ${serverFirst}`);
      assert.ok(Number(a.i) >= 4096, 'at least 4096 iterations');
      salted = pbkdf2Sync(password, Buffer.from(a.s!, 'base64'), Number(a.i), 32, 'sha256');
      const clientKey = hmac(salted, 'Client Key');
      const storedKey = createHash('sha256').update(clientKey).digest();
      const withoutProof = `c=${Buffer.from(gs2).toString('base64')},r=${a.r}`;
      authMessage = `${bare},${serverFirst},${withoutProof}`;
      const signature = hmac(storedKey, authMessage);
      const proof = Buffer.from(clientKey.map((b, i) => b ^ signature[i]!));
      return Buffer.from(`${withoutProof},p=${proof.toString('base64')}`);
    },
    /** The server-final-message a genuine server sends. */
    expectedServerFinal(): string {
      return `v=${hmac(hmac(salted, 'Server Key'), authMessage).toString('base64')}`;
    },
  };
}

/** Enhanced authentication (MQTT 5 §4.12) with SCRAM-SHA-256, real sockets, authentication on. */
describe('MQTT 5 enhanced authentication (SCRAM-SHA-256)', () => {
  let s: TestServer;
  let port: number;
  let slowPort: number;
  let offPort: number;
  const clients: MqttClient[] = [];
  const raws: RawClient[] = [];
  let carol: Awaited<ReturnType<typeof createUser>>;

  before(async () => {
    s = await startServer({
      overrides: {
        AuthManager: { maxFailuresBeforeLock: 3, lockoutExemptAddresses: [] }, // the per-user lock applies on loopback too
        NetworkManager: {
          data: [
            { name: 'scram', url: 'tcp://127.0.0.1:0/', protocolConfigs: [{ type: 'mqtt' }] },
            { name: 'scram-short', url: 'tcp://127.0.0.1:0/', protocolConfigs: [{ type: 'mqtt' }], endPointConfig: { connectionTimeout: 1000 } },
            { name: 'no-enhanced', url: 'tcp://127.0.0.1:0/', protocolConfigs: [{ type: 'mqtt', authenticationMethods: [] }] },
          ],
        },
      },
    });
    const eps = endpointsOf(s.rt).entries;
    await waitUntil(() => ['scram', 'scram-short', 'no-enhanced'].every((n) => !!eps.get(n)?.handle), 10000, 'endpoints listening');
    port = eps.get('scram')!.handle!.port;
    slowPort = eps.get('scram-short')!.handle!.port;
    offPort = eps.get('no-enhanced')!.handle!.port;
    carol = await createUser(s, 'carol', 'carol-password-1', [await groupId(s, 'everyone')]);
  });
  after(async () => {
    for (const c of clients) c.end(true);
    for (const r of raws) r.destroy();
    await s.close();
  });

  const raw = async (p = port) => {
    const r = await RawClient.open(p, 5);
    raws.push(r);
    return r;
  };
  const connectPacket = (props: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
    cmd: 'connect',
    protocolId: 'MQTT',
    protocolVersion: 5,
    clean: true,
    clientId: '',
    keepalive: 0,
    properties: props,
    ...extra,
  });

  /** Raw SCRAM login up to CONNACK; returns the client, the CONNACK and the SCRAM state. */
  async function scramLogin(username: string, password: string, p = port, extra: Record<string, unknown> = {}) {
    const r = await raw(p);
    const sc = scramClient(username, password);
    r.send(connectPacket({ authenticationMethod: METHOD, authenticationData: sc.first }, extra));
    const challenge = await r.next('auth');
    assert.equal(challenge.reasonCode, 0x18, 'AUTH Continue authentication');
    assert.equal(challenge.properties?.authenticationMethod, METHOD);
    r.send({ cmd: 'auth', reasonCode: 0x18, properties: { authenticationMethod: METHOD, authenticationData: sc.final(challenge.properties.authenticationData) } });
    const connack = await r.next('connack');
    return { r, connack, sc };
  }

  /** CONNECT with SCRAM where the server answers at once (no AUTH expected). */
  async function scramLoginFirstOnly(username: string) {
    const r = await raw();
    r.send(connectPacket({ authenticationMethod: METHOD, authenticationData: scramClient(username, 'irrelevant').first }));
    return { r, connack: await r.next('connack') };
  }

  /** mqtt.js v5 with SCRAM through its handleAuth hook; resolves with the client and its CONNACK, or rejects with the error. */
  function scramMqttJs(username: string, password: string, opts: IClientOptions = {}): Promise<{ c: MqttClient; connack: mqtt.IConnackPacket; expected: string }> {
    const sc = scramClient(username, password);
    return new Promise((resolve, reject) => {
      const c = mqtt.connect(`mqtt://127.0.0.1:${port}`, {
        protocolVersion: 5,
        reconnectPeriod: 0,
        connectTimeout: 5000,
        properties: { authenticationMethod: METHOD, authenticationData: sc.first },
        ...opts,
      });
      clients.push(c);
      c.handleAuth = (packet, cb) => {
        if (packet.reasonCode !== 0x18) return cb();
        cb(undefined, { cmd: 'auth', reasonCode: 0x18, properties: { authenticationMethod: METHOD, authenticationData: sc.final(packet.properties!.authenticationData as Buffer) } });
      };
      c.once('connect', (connack) => resolve({ c, connack, expected: sc.expectedServerFinal() }));
      c.once('error', (err) => {
        c.end(true);
        reject(err);
      });
    });
  }

  test('scram - mqtt.js logs in with SCRAM-SHA-256; CONNACK proves the server knows the password; the client works as that user and ACLs apply', async () => {
    const { c, connack, expected } = await scramMqttJs('carol', carol.password);
    assert.equal(connack.reasonCode, 0);
    assert.equal(connack.properties?.authenticationMethod, METHOD, 'CONNACK names the method [MQTT-4.12.0-5]');
    assert.equal(Buffer.from(connack.properties!.authenticationData!).toString(), expected, 'server-final-message v= is the server signature');

    const got: string[] = [];
    c.on('message', (t, payload) => got.push(`${t}=${payload}`));
    await c.subscribeAsync('scram/#', { qos: 1 });
    await c.publishAsync('scram/a', 'hello', { qos: 1 });
    await waitUntil(() => got.includes('scram/a=hello'), 5000, 'own message back');

    // ACLs are carol's: the default ACL denies test/nosubscribe to everyone; an identity DENY on publish applies
    const sub = await c.subscribeAsync('test/nosubscribe', { qos: 1 }).then(
      (g) => g.map((x) => x.qos as number),
      (err: { packet?: { granted?: number[] } }) => err.packet?.granted ?? [],
    );
    assert.deepEqual(sub, [0x87]);
    await s.inject({ method: 'PUT', url: '/api/v1/auth/resources/acl', payload: { resourceType: 'Topic', resourceKey: 'scram/closed', entries: [{ principalType: 'IDENTITY', principalId: carol.uuid, effect: 'DENY', permissions: ['publish'] }] } });
    const refused = await c.publishAsync('scram/closed', 'x', { qos: 1 }).then(
      (p) => (p as { reasonCode?: number } | undefined)?.reasonCode,
      (err: { code?: number }) => err.code,
    );
    assert.equal(refused, 0x87, 'PUBACK Not authorized for carol');
    const lines = await auditLines(s, (l) => l.event === 'login.succeeded' && l.username === 'carol' && l.method === METHOD);
    assert.ok(lines.some((l) => l.event === 'login.succeeded' && l.protocol === 'MQTT' && l.method === METHOD));
  });

  test('scram - the CONNECT takes effect only after the exchange: the session takeover and the will apply at CONNACK', async () => {
    const watcher = await scramMqttJs('admin', s.adminPassword);
    const wills: string[] = [];
    watcher.c.on('message', (t, p) => wills.push(`${t}=${p}`));
    await watcher.c.subscribeAsync('scram-will/#', { qos: 1 });
    const owner = await raw();
    assert.equal((await owner.connect({ protocolVersion: 5, clientId: 'scram-owner', username: 'carol', password: Buffer.from(carol.password) })).reasonCode, 0);

    const r = await raw();
    const sc = scramClient('carol', carol.password);
    r.send(connectPacket({ authenticationMethod: METHOD, authenticationData: sc.first }, { clientId: 'scram-owner', will: { topic: 'scram-will/gone', payload: Buffer.from('bye'), qos: 1, retain: false, properties: {} } }));
    const challenge = await r.next('auth');
    owner.send({ cmd: 'pingreq' });
    await owner.next('pingresp'); // the exchange is pending: the connection with the same client id is untouched
    assert.equal(owner.closed, false);

    r.send({ cmd: 'auth', reasonCode: 0x18, properties: { authenticationMethod: METHOD, authenticationData: sc.final(challenge.properties.authenticationData) } });
    assert.equal((await r.next('connack')).reasonCode, 0);
    assert.equal((await owner.next('disconnect')).reasonCode, 0x8e, 'taken over only now');
    r.destroy(); // no DISCONNECT: the will of the SCRAM CONNECT is published
    await waitUntil(() => wills.includes('scram-will/gone=bye'), 5000, 'will published');
  });

  test('scram - a wrong password gets CONNACK 0x87 and counts toward the lockout like a wrong password in CONNECT', async () => {
    const dave = await createUser(s, 'dave', 'dave-password-1', [await groupId(s, 'everyone')]);
    const { r, connack } = await scramLogin('dave', 'not-daves-password');
    assert.equal(connack.reasonCode, 0x87, 'Not authorized');
    assert.equal(connack.properties?.authenticationData, undefined, 'no server signature for a failed login');
    await r.waitClosed();
    await assert.rejects(scramMqttJs('dave', 'still-wrong-1'), (err: Error & { code?: number }) => err.code === 0x87);
    // an unknown user name runs the same exchange and fails the same way
    const unknown = await scramLogin('nobody-here', 'whatever-password');
    assert.equal(unknown.connack.reasonCode, 0x87);
    // the third failure (maxFailuresBeforeLock 3) locks dave: now even the right password is refused, by SCRAM, CONNECT and REST
    await scramLogin('dave', 'third-wrong-one');
    const locked = (await s.inject('/api/v1/auth/user-lockouts')).json() as Array<{ username: string; locked: boolean }>;
    assert.ok(locked.some((l) => l.username === 'dave' && l.locked), 'dave is locked out');
    const right = await scramLoginFirstOnly('dave'); // refused at once, before any challenge
    assert.equal(right.connack.reasonCode, 0x87);
    assert.match(String(right.connack.properties?.reasonString), /locked/);
    assert.equal((await login(s, 'dave', dave.password)).statusCode, 401, 'REST login refused while locked');
    const lines = await auditLines(s, (l) => l.event === 'lockout.locked' && l.username === 'dave');
    assert.equal(lines.filter((l) => l.event === 'login.failed' && l.username === 'dave' && l.method === METHOD && l.reason === 'bad credentials').length, 3);
  });

  test('scram - an unknown method gets CONNACK 0x8C [MQTT-4.12.0-1]; so does SCRAM where the endpoint switched it off', async () => {
    const r = await raw();
    r.send(connectPacket({ authenticationMethod: 'KERBEROS', authenticationData: Buffer.from('x') }));
    const ack = await r.next('connack');
    assert.equal(ack.reasonCode, 0x8c);
    await r.waitClosed();
    const off = await raw(offPort);
    off.send(connectPacket({ authenticationMethod: METHOD, authenticationData: scramClient('carol', carol.password).first }));
    assert.equal((await off.next('connack')).reasonCode, 0x8c);
    await off.waitClosed();
  });

  test('scram - protocol errors: AUTH without a method in CONNECT → DISCONNECT 0x82 [MQTT-4.12.0-7]; data without method → CONNACK 0x82; PUBLISH before CONNACK → closed [MQTT-3.1.2-30]', async () => {
    const r = await raw();
    assert.equal((await r.connect({ protocolVersion: 5, username: 'carol', password: Buffer.from(carol.password) })).reasonCode, 0);
    r.send({ cmd: 'auth', reasonCode: 0x19, properties: { authenticationMethod: METHOD, authenticationData: scramClient('carol', carol.password).first } });
    const d = await r.next('disconnect');
    assert.equal(d.reasonCode, 0x82);
    await r.waitClosed();

    const noMethod = await raw();
    noMethod.send(connectPacket({ authenticationData: Buffer.from('n,,n=carol,r=abc') }));
    assert.equal((await noMethod.next('connack')).reasonCode, 0x82);
    await noMethod.waitClosed();

    const early = await raw();
    early.send(connectPacket({ authenticationMethod: METHOD, authenticationData: scramClient('carol', carol.password).first }));
    await early.next('auth');
    early.send({ cmd: 'publish', topic: 'scram/early', payload: Buffer.from('x'), qos: 0, retain: false, dup: false });
    await early.waitClosed();
    assert.equal(early.packets.filter((p) => p.cmd === 'connack' && p.reasonCode === 0).length, 0, 'never connected');
  });

  test('scram - a user whose password predates SCRAM fails like an unknown name (no hint that it exists; the audit says why); after a password change SCRAM works', async () => {
    const erin = await createUser(s, 'erin', 'erin-password-1', [await groupId(s, 'everyone')]);
    // the record as it was before SCRAM support: only the scrypt hash
    const sm = securityOf(s.rt);
    await sm.identities.setPasswordHash(erin.uuid, await hashPassword(erin.password));
    assert.equal(sm.identities.user(erin.uuid)!.scramSha256, undefined);
    const { connack } = await scramLogin('erin', erin.password);
    const unknown = await scramLogin('nobody-at-all', erin.password);
    assert.equal(connack.reasonCode, 0x87);
    assert.deepEqual(connack.properties, unknown.connack.properties, 'the same answer as for a name that does not exist');
    assert.doesNotMatch(String(connack.properties?.reasonString), /erin|SCRAM credentials|set the password/);
    await auditLines(s, (l) => l.event === 'login.failed' && l.username === 'erin' && /set it again/.test(String(l.reason)));
    const plain = await raw();
    assert.equal((await plain.connect({ protocolVersion: 5, username: 'erin', password: Buffer.from(erin.password) })).reasonCode, 0, 'user name and password still work');

    const ch = await s.inject({ method: 'PUT', url: `/api/v1/auth/users/${erin.uuid}/password`, payload: { newPassword: 'erin-password-2' } });
    assert.ok(ch.statusCode < 300, ch.body);
    const again = await scramLogin('erin', 'erin-password-2');
    assert.equal(again.connack.reasonCode, 0);
    const stored = JSON.stringify(sm.identities.user(erin.uuid));
    assert.ok(!stored.includes('erin-password-2'), 'the plain password is not stored');
  });

  test('scram - re-authentication: AUTH 0x19 → AUTH 0x18 → AUTH 0x00 with the server signature; packets keep flowing meanwhile', async () => {
    const { r, connack } = await scramLogin('carol', carol.password);
    assert.equal(connack.reasonCode, 0);
    r.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: 'reauth/t', qos: 1 }] });
    await r.next('suback');

    const sc = scramClient('carol', carol.password);
    r.send({ cmd: 'auth', reasonCode: 0x19, properties: { authenticationMethod: METHOD, authenticationData: sc.first } });
    const challenge = await r.next('auth');
    assert.equal(challenge.reasonCode, 0x18);
    // during the exchange: publish and receive as usual
    r.send({ cmd: 'publish', topic: 'reauth/t', payload: Buffer.from('during'), qos: 1, messageId: 2, retain: false, dup: false });
    assert.equal((await r.next('puback')).messageId, 2);
    assert.equal((await r.next('publish')).payload.toString(), 'during');

    r.send({ cmd: 'auth', reasonCode: 0x18, properties: { authenticationMethod: METHOD, authenticationData: sc.final(challenge.properties.authenticationData) } });
    const ok = await r.next('auth');
    assert.equal(ok.reasonCode, 0x00, 'AUTH Success');
    assert.equal(ok.properties?.authenticationMethod, METHOD);
    assert.equal(Buffer.from(ok.properties.authenticationData).toString(), sc.expectedServerFinal());
    r.send({ cmd: 'pingreq' });
    await r.next('pingresp');
    assert.equal(r.closed, false, 'still connected');
  });

  test('scram - re-authentication with a wrong password: DISCONNECT 0x87 and the connection closes [MQTT-4.12.1-2]; as another user too', async () => {
    const { r } = await scramLogin('carol', carol.password);
    const sc = scramClient('carol', 'wrong-password-x');
    r.send({ cmd: 'auth', reasonCode: 0x19, properties: { authenticationMethod: METHOD, authenticationData: sc.first } });
    const challenge = await r.next('auth');
    r.send({ cmd: 'auth', reasonCode: 0x18, properties: { authenticationMethod: METHOD, authenticationData: sc.final(challenge.properties.authenticationData) } });
    const d = await r.next('disconnect');
    assert.equal(d.reasonCode, 0x87);
    await r.waitClosed();

    const other = await scramLogin('carol', carol.password);
    const admin = scramClient('admin', s.adminPassword);
    other.r.send({ cmd: 'auth', reasonCode: 0x19, properties: { authenticationMethod: METHOD, authenticationData: admin.first } });
    const ch = await other.r.next('auth');
    other.r.send({ cmd: 'auth', reasonCode: 0x18, properties: { authenticationMethod: METHOD, authenticationData: admin.final(ch.properties.authenticationData) } });
    assert.equal((await other.r.next('disconnect')).reasonCode, 0x87, 'a connection cannot switch to another user');
    await other.r.waitClosed();
  });

  test('scram - a client that never finishes the exchange is closed at the connect timeout, never connected', async () => {
    const r = await raw(slowPort);
    const started = Date.now();
    r.send(connectPacket({ authenticationMethod: METHOD, authenticationData: scramClient('carol', carol.password).first }));
    await r.next('auth');
    await r.waitClosed(5000);
    const took = Date.now() - started;
    assert.ok(took >= 800 && took < 4000, `closed after ${took} ms (connectionTimeout 1000)`);
    assert.equal(r.packets.filter((p) => p.cmd === 'connack').length, 0);
  });
});
