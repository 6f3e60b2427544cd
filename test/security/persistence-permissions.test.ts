import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import mqtt, { type IClientOptions, type IConnackPacket, type MqttClient } from 'mqtt';
import { endpointsOf } from '../../src/endpoints/endpoints.service.js';
import { restSessionsOf } from '../../src/messaging/rest-sessions.service.js';
import { basicAuth, startServer, waitUntil, type TestServer } from '../helpers.js';
import { SseClient } from '../sse-client.js';
import { auditLines, createUser, groupId, mqttClients } from './helpers.js';

/**
 * persistent_session (MQTT CONNECT), durable (subscriptions of persistent MQTT sessions and persistent REST logins)
 * and what deleting a user ends: real mqtt.js clients on a TCP endpoint and real HTTP requests, authentication on.
 */
describe('persistent sessions, durable subscriptions and user deletion', () => {
  let s: TestServer;
  let url: string;
  let base: string;
  const clients: MqttClient[] = [];
  const mq = mqttClients(() => url);
  let everyone: string;
  let alice: Awaited<ReturnType<typeof createUser>>;
  let dora: Awaited<ReturnType<typeof createUser>>;

  before(async () => {
    s = await startServer({
      overrides: {
        NetworkManager: { data: [{ name: 'mqtt-test', url: 'tcp://127.0.0.1:0/', protocolConfigs: [{ type: 'mqtt' }] }] },
        AuthManager: { loginRateLimit: 1000 },
      },
    });
    await waitUntil(() => !!endpointsOf(s.rt).entries.get('mqtt-test')?.handle, 10000, 'MQTT endpoint listening');
    url = `mqtt://127.0.0.1:${endpointsOf(s.rt).entries.get('mqtt-test')!.handle!.port}`;
    await s.app.listen({ port: 0, host: '127.0.0.1' });
    base = `http://127.0.0.1:${(s.app.server!.address() as { port: number }).port}`;
    everyone = await groupId(s, 'everyone');
    alice = await createUser(s, 'alice', 'alice-password-1', [everyone]);
    // dora: in everyone (connect, subscribe, durable, ...) but denied persistent_session on the Server
    dora = await createUser(s, 'dora', 'dora-password-12', [everyone]);
    const server = await s.inject(`/api/v1/auth/resources/acl?resourceType=Server&resourceKey=${s.rt.serverName}`);
    const put = await s.inject({
      method: 'PUT',
      url: '/api/v1/auth/resources/acl',
      payload: {
        resourceType: 'Server',
        resourceKey: s.rt.serverName,
        entries: [...server.json().entries, { principalType: 'IDENTITY', principalId: dora.uuid, effect: 'DENY', permissions: ['persistent_session'] }],
      },
    });
    assert.equal(put.statusCode, 200, put.body);
  });
  after(async () => {
    for (const c of clients) c.end(true);
    mq.endAll();
    await s.close();
  });

  const connect = mq.connect;
  const subAck = mq.subAck;
  const end = (c: MqttClient) => new Promise<void>((r) => c.end(false, {}, () => r()));
  const publish = async (topic: string, text: string) => {
    const r = await s.inject({ method: 'POST', url: '/api/v1/messaging/publish', payload: { destinationName: topic, message: { payload: Buffer.from(text).toString('base64') } } });
    assert.equal(r.statusCode, 200, r.body);
  };
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  const setTopicAcl = (resourceKey: string, entries: unknown[]) =>
    s.inject({ method: 'PUT', url: '/api/v1/auth/resources/acl', payload: { resourceType: 'Topic', resourceKey, entries } });

  /** A REST caller over real HTTP that keeps its cookies. */
  class Http {
    cookies = new Map<string, string>();
    async req(method: string, path: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
      const r = await fetch(`${base}${path}`, {
        method,
        headers: { ...(body !== undefined ? { 'content-type': 'application/json' } : {}), cookie: [...this.cookies].map(([k, v]) => `${k}=${v}`).join('; ') },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
      for (const c of r.headers.getSetCookie()) {
        const [kv] = c.split(';');
        const i = kv!.indexOf('=');
        this.cookies.set(kv!.slice(0, i), kv!.slice(i + 1));
      }
      const text = await r.text();
      return { status: r.status, json: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
    }
    async login(username: string, password: string, extra: Record<string, unknown> = {}) {
      const r = await this.req('POST', '/api/v1/login', { username, password, ...extra });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      return r;
    }
  }

  test('persistent_session - v5 without it: accepted with Session Expiry Interval 0 and a Reason String; nothing is kept', async () => {
    const opts: IClientOptions = { protocolVersion: 5, clientId: 'dora-v5', clean: false, username: 'dora', password: dora.password, properties: { sessionExpiryInterval: 3600 } };
    const { c, connack } = await connect(opts);
    assert.equal(connack.sessionPresent, false);
    assert.equal(connack.properties?.sessionExpiryInterval, 0, 'CONNACK overrides the Session Expiry Interval');
    assert.match(String(connack.properties?.reasonString), /persistent_session/);
    assert.deepEqual(await subAck(c, ['dora/t']), [1], 'the (non-persistent) session subscribes as usual');
    await end(c);
    await publish('dora/t', 'while away');
    const got: string[] = [];
    const again = await connect(opts);
    again.c.on('message', (_t, p) => got.push(p.toString()));
    assert.equal(again.connack.sessionPresent, false, 'the session ended with the connection');
    await sleep(300);
    assert.deepEqual(got, [], 'nothing was queued');
    // DISCONNECT cannot make it persistent either
    await new Promise<void>((r) => again.c.end(false, { properties: { sessionExpiryInterval: 3600 } }, () => r()));
    await sleep(100);
    assert.equal(endpointsOf(s.rt).broker!.sessions.has('dora-v5'), false);

    const quiet = await connect({ ...opts, properties: { sessionExpiryInterval: 3600, requestProblemInformation: false } });
    assert.equal(quiet.connack.properties?.sessionExpiryInterval, 0);
    assert.equal(quiet.connack.properties?.reasonString, undefined, 'no Reason String with Request Problem Information 0');
    await end(quiet.c);

    const lines = await auditLines(s, (l) => l.event === 'access.denied' && l.permission === 'persistent_session' && l.username === 'dora');
    const line = lines.find((l) => l.event === 'access.denied' && l.permission === 'persistent_session' && l.username === 'dora')!;
    assert.equal(line.protocol, 'MQTT');
    assert.equal(line.outcome, 'session expiry set to 0');
  });

  test('persistent_session - 3.1.1 clean session 0 without it: CONNACK return code 5 (audited); clean session 1 connects', async () => {
    await assert.rejects(connect({ protocolVersion: 4, clientId: 'dora-v3', clean: false, username: 'dora', password: dora.password }), (err: Error & { code?: number }) => {
      assert.equal(err.code, 5);
      return true;
    });
    assert.equal(endpointsOf(s.rt).broker!.sessions.has('dora-v3'), false);
    const { c } = await connect({ protocolVersion: 4, clientId: 'dora-v3', clean: true, username: 'dora', password: dora.password });
    await end(c);
    await auditLines(s, (l) => l.event === 'access.denied' && l.permission === 'persistent_session' && l.outcome === 'connection refused (clean session 0)');
  });

  test('persistent_session - a user with it keeps its session (v5 and 3.1.1)', async () => {
    const opts: IClientOptions = { protocolVersion: 5, clientId: 'alice-v5', clean: false, username: 'alice', password: alice.password, properties: { sessionExpiryInterval: 3600 } };
    const first = await connect(opts);
    assert.equal(first.connack.properties?.sessionExpiryInterval, undefined, 'no override');
    assert.equal(first.connack.properties?.reasonString, undefined);
    assert.deepEqual(await subAck(first.c, ['alice/t']), [1]);
    await end(first.c);
    await publish('alice/t', 'kept');
    const got: string[] = [];
    const again = await new Promise<{ c: MqttClient; connack: IConnackPacket }>((resolve, reject) => {
      const c = mqtt.connect(url, { reconnectPeriod: 0, ...opts });
      clients.push(c);
      c.on('message', (_t, p) => got.push(p.toString()));
      c.once('connect', (connack) => resolve({ c, connack }));
      c.once('error', reject);
    });
    assert.equal(again.connack.sessionPresent, true);
    await waitUntil(() => got.includes('kept'), 5000, 'held message delivered');
    await end(again.c);

    const v3 = await connect({ protocolVersion: 4, clientId: 'alice-v3', clean: false, username: 'alice', password: alice.password });
    assert.equal(v3.connack.returnCode, 0);
    await end(v3.c);
    const back = await connect({ protocolVersion: 4, clientId: 'alice-v3', clean: false, username: 'alice', password: alice.password });
    assert.equal(back.connack.sessionPresent, true);
    await end(back.c);
  });

  test("client id of another user's session: refused (v5 0x87, 3.1.1 code 5) and the owner's connection stays up", async () => {
    const owner = await connect({ protocolVersion: 5, clientId: 'alice-owned', clean: false, username: 'alice', password: alice.password, properties: { sessionExpiryInterval: 3600 } });
    let ownerClosed = false;
    owner.c.once('close', () => (ownerClosed = true));
    await assert.rejects(connect({ protocolVersion: 5, clientId: 'alice-owned', clean: true, username: 'dora', password: dora.password }), (err: Error & { code?: number }) => {
      assert.equal(err.code, 0x87);
      return true;
    });
    await assert.rejects(connect({ protocolVersion: 4, clientId: 'alice-owned', clean: true, username: 'dora', password: dora.password }), (err: Error & { code?: number }) => {
      assert.equal(err.code, 5);
      return true;
    });
    assert.equal(ownerClosed, false, 'the owner was not cut off');
    assert.deepEqual(await subAck(owner.c, ['alice/owned']), [1], 'the owner still works');
    await end(owner.c);
    // the stored session still refuses the other user; its owner gets it back
    await assert.rejects(connect({ protocolVersion: 5, clientId: 'alice-owned', clean: false, username: 'dora', password: dora.password }), /Not authorized/i);
    const back = await connect({ protocolVersion: 5, clientId: 'alice-owned', clean: false, username: 'alice', password: alice.password, properties: { sessionExpiryInterval: 3600 } });
    assert.equal(back.connack.sessionPresent, true);
    await end(back.c);
    await auditLines(s, (l) => l.event === 'access.denied' && l.outcome === 'connection refused (client id of another user)');
  });

  test('durable - denied durable on a topic: refused for a persistent MQTT session (0x87 / 0x80) and a persistent REST login (403); allowed otherwise', async () => {
    assert.equal((await setTopicAcl('dur/secret', [{ principalType: 'IDENTITY', principalId: alice.uuid, effect: 'DENY', permissions: ['durable'] }])).statusCode, 200);
    const persistent = await connect({ protocolVersion: 5, clientId: 'alice-dur', clean: false, username: 'alice', password: alice.password, properties: { sessionExpiryInterval: 600 } });
    assert.deepEqual(
      await subAck(persistent.c, ['dur/secret', 'dur/open', 'dur/#']),
      [0x87, 1, 1],
      'resolved like subscribe: a wildcard filter is its own resource (dur/# → dur → /), not dur/secret',
    );
    const clean = await connect({ protocolVersion: 5, clientId: 'alice-clean', clean: true, username: 'alice', password: alice.password });
    assert.deepEqual(await subAck(clean.c, ['dur/secret']), [1], 'a clean session needs no durable');
    const v3 = await connect({ protocolVersion: 4, clientId: 'alice-dur3', clean: false, username: 'alice', password: alice.password });
    assert.deepEqual(await subAck(v3.c, ['dur/secret', 'dur/open']), [0x80, 1]);
    for (const c of [persistent.c, clean.c, v3.c]) await end(c);

    const rest = new Http();
    await rest.login('alice', alice.password, { persistent: true, sessionId: 'dur-1' });
    const refused = await rest.req('POST', '/api/v1/messaging/subscribe', { destinationName: 'dur/secret' });
    assert.equal(refused.status, 403);
    assert.match(String(refused.json.status), /lacks durable on Topic dur\/secret/);
    assert.equal((await rest.req('POST', '/api/v1/messaging/subscribe', { destinationName: 'dur/open' })).status, 200);
    const plain = new Http();
    await plain.login('alice', alice.password);
    assert.equal((await plain.req('POST', '/api/v1/messaging/subscribe', { destinationName: 'dur/secret' })).status, 200, 'not persistent: no durable needed');
    await rest.req('POST', '/api/v1/logout');
    await plain.req('POST', '/api/v1/logout');
    await setTopicAcl('dur/secret', []);
  });

  test('user deletion - closes live MQTT connections (DISCONNECT 0x98), refuses the cookie, discards persistent MQTT and REST sessions', async () => {
    const ed = await createUser(s, 'ed', 'ed-password-123', [everyone]);
    // a persistent MQTT session, offline, holding a message
    const pOpts: IClientOptions = { protocolVersion: 5, clientId: 'ed-persistent', clean: false, username: 'ed', password: ed.password, properties: { sessionExpiryInterval: 3600 } };
    const p = await connect(pOpts);
    assert.deepEqual(await subAck(p.c, ['ed/t']), [1]);
    await end(p.c);
    await publish('ed/t', 'held for ed');
    // a live v5 connection
    const live = await connect({ protocolVersion: 5, clientId: 'ed-live', username: 'ed', password: ed.password });
    const disconnected = new Promise<number | undefined>((r) => live.c.once('disconnect', (packet) => r(packet.reasonCode)));
    const closed = new Promise<void>((r) => live.c.once('close', () => r()));
    // a persistent REST login with a subscription holding a message
    const rest = new Http();
    await rest.login('ed', ed.password, { persistent: true, sessionId: 'ed-rest' });
    assert.equal((await rest.req('POST', '/api/v1/messaging/subscribe', { destinationName: 'ed/rest', maxDepth: 10 })).status, 200);
    await publish('ed/rest', 'held for ed over REST');
    assert.equal(restSessionsOf(s.rt)!.get(`rest:durable:${ed.uuid}:ed-rest`)?.subscriptions.length, 1);

    // an open SSE stream of ed (Basic credentials)
    const edAuth = basicAuth('ed', ed.password);
    const token = await (await fetch(`${base}/api/v1/messaging/sse?destination=ed/sse`, { headers: edAuth })).text();
    const stream = new SseClient(`${base}/api/v1/messaging/sse/stream/${token}?destinationName=ed/sse`, edAuth);
    await stream.started;
    assert.equal(stream.status, 200, 'the stream is open');

    const del = await s.inject({ method: 'DELETE', url: `/api/v1/auth/users/${ed.uuid}` });
    assert.equal(del.statusCode, 204, del.body);
    await stream.done; // the server ended the stream

    assert.equal(await disconnected, 0x98, 'DISCONNECT Administrative action');
    await closed;
    const refused = await rest.req('POST', '/api/v1/messaging/consume', {});
    assert.equal(refused.status, 401, 'the old cookie is refused');
    const broker = endpointsOf(s.rt).broker!;
    assert.equal(broker.sessions.has('ed-persistent'), false, 'the persistent MQTT session is gone');
    assert.equal(restSessionsOf(s.rt)!.get(`rest:durable:${ed.uuid}:ed-rest`), undefined, 'the persistent REST session is gone');
    assert.equal(s.rt.engine!.subscription(`rest:durable:${ed.uuid}:ed-rest`, 'ed/rest'), undefined);
    const lines = await auditLines(s, (l) => l.event === 'user.deleted' && l.username === 'ed');
    const line = lines.find((l) => l.event === 'user.deleted' && l.username === 'ed')!;
    assert.equal(line.mqttConnections, 1);
    assert.equal(line.mqttSessions, 1);
    assert.equal(line.persistentRestSessions, 1);
    assert.equal(line.loginSessionsEnded, 1);
    assert.equal(line.sseStreams, 1);

    // the same name again is a new user: no old session, no held messages
    const ed2 = await createUser(s, 'ed', 'ed-password-456', [everyone]);
    const got: string[] = [];
    const again = await new Promise<{ c: MqttClient; connack: IConnackPacket }>((resolve, reject) => {
      const c = mqtt.connect(url, { reconnectPeriod: 0, ...pOpts, password: ed2.password });
      clients.push(c);
      c.on('message', (_t, m) => got.push(m.toString()));
      c.once('connect', (connack) => resolve({ c, connack }));
      c.once('error', reject);
    });
    assert.equal(again.connack.sessionPresent, false, 'the old session is not seen');
    await sleep(300);
    assert.deepEqual(got, []);
    await end(again.c);
    const rest2 = new Http();
    await rest2.login('ed', ed2.password, { persistent: true, sessionId: 'ed-rest' });
    const depths = await rest2.req('POST', '/api/v1/messaging/subscriptionDepth', {});
    assert.deepEqual(depths.json.subscriptionDepths, [], 'no old REST subscription');
    await rest2.req('POST', '/api/v1/logout');
  });
});
