import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:net';
import mqtt, { type MqttClient } from 'mqtt';
import { writeContestedConfig, adminPasswordOf, removeDir, spawnBroker, tempDir, waitUntil, type BrokerProcess } from '../helpers.js';
import { RawClient, rest } from '../mqtt/helpers.js';

/** Endpoint lifecycles driven over REST and observed by real MQTT clients, against the broker process. */
describe('mqtt endpoint lifecycle over REST', () => {
  const dirs: string[] = [];
  let broker: BrokerProcess;
  let configDir: string;
  let dataDir: string;
  let password: string;
  let auth: Record<string, string>;
  let blocker: Server;
  let blockedPort: number;
  const clients: MqttClient[] = [];

  const api = (method: string, path: string, body?: unknown) => rest(broker.port, auth, method, path, body);
  const info = async (name: string) => {
    await api('DELETE', '/api/v1/server/cache');
    const r = await api('GET', `/api/v1/server/interface/${encodeURIComponent(name)}`);
    assert.equal(r.status, 200, JSON.stringify(r.json));
    return r.json as { name: string; port: number; state: string; uniqueId: string; config: Record<string, any> };
  };
  const connect = async (port: number, opts: mqtt.IClientOptions = {}) => {
    const c = await mqtt.connectAsync(`mqtt://127.0.0.1:${port}`, { username: 'admin', password, reconnectPeriod: 0, connectTimeout: 2000, ...opts });
    clients.push(c);
    return c;
  };
  /** A new connection is refused: closed (or not accepted) without a CONNACK. */
  const refused = async (port: number): Promise<boolean> => {
    let r: RawClient;
    try {
      r = await RawClient.open(port);
    } catch {
      return true; // connection refused: nothing listens
    }
    r.send({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: 4, clean: true, clientId: 'probe', keepalive: 0, username: 'admin', password: Buffer.from(password) });
    try {
      await r.waitClosed(3000);
    } catch {
      r.destroy();
      return false;
    }
    return !r.packets.some((p) => p.cmd === 'connack');
  };
  const roundTrip = async (c: MqttClient, topic: string) => {
    await c.subscribeAsync(topic, { qos: 1 });
    const got = new Promise<string>((res) => c.once('message', (_t, p) => res(p.toString())));
    await c.publishAsync(topic, 'ping', { qos: 1 });
    return got;
  };

  async function boot(): Promise<void> {
    broker = await spawnBroker({ SWITCHYARD_DATA_DIR: dataDir, SWITCHYARD_CONFIG_DIR: configDir });
    password = adminPasswordOf(dataDir);
    auth = broker.auth();
  }

  before(async () => {
    configDir = tempDir();
    dataDir = tempDir();
    dirs.push(configDir, dataDir);
    blocker = createServer();
    await new Promise<void>((res) => blocker.listen(0, '127.0.0.1', res));
    blockedPort = (blocker.address() as { port: number }).port;
    writeContestedConfig(configDir, blockedPort);
    await boot();
  });
  after(async () => {
    for (const c of clients) c.end(true);
    await broker?.stop('SIGKILL');
    blocker?.close();
    dirs.forEach(removeDir);
  });

  test('a port already in use: the endpoint is Failed, /health says Warning, it retries and starts once the port is free', async () => {
    assert.equal((await info('contested')).state, 'Failed');
    assert.equal(await (await fetch(`http://127.0.0.1:${broker.port}/health`)).text(), 'Warning');
    const status = await api('GET', '/api/v1/server/status');
    await api('DELETE', '/api/v1/server/cache');
    assert.equal((status.json as Array<{ name: string; status: string }>).find((x) => x.name === 'Endpoints')?.status, 'WARN');
    assert.equal((await info('main')).state, 'Started', 'the other endpoint is unaffected');
    await new Promise<void>((res) => blocker.close(() => res()));
    await waitUntil(async () => (await info('contested')).state === 'Started', 10000, 'contested endpoint started');
    const c = await connect(blockedPort);
    assert.equal(await roundTrip(c, 'contested/x'), 'ping');
  });

  test('pause refuses new connections and keeps existing ones; resume accepts again', async () => {
    const port = (await info('main')).port;
    const old = await connect(port, { protocolVersion: 5 });
    const r = await api('PATCH', '/api/v1/server/interface/main', { state: 'paused' });
    assert.deepEqual(r, { status: 200, json: { status: 'Success' } });
    assert.equal((await info('main')).state, 'Paused');
    assert.ok(await refused(port), 'a new connection is refused while paused');
    assert.equal(await roundTrip(old, 'paused/x'), 'ping', 'the existing connection keeps working');
    const again = await api('PATCH', '/api/v1/server/interface/main', { state: 'paused' });
    assert.deepEqual(again, { status: 200, json: { status: 'No change' } }, 'asking for the state it is in is "No change" (issue 11; MAPS answers so)');
    assert.equal((await api('PATCH', '/api/v1/server/interface/main', { state: 'resumed' })).status, 200);
    const fresh = await connect(port);
    assert.equal(await roundTrip(fresh, 'resumed/x'), 'ping');
  });

  test('stop closes the listener and its connections (v5 clients get DISCONNECT 0x8B); start listens again', async () => {
    const port = (await info('main')).port;
    const c = await connect(port, { protocolVersion: 5 });
    const reason = new Promise<number | undefined>((res) => c.once('disconnect', (p) => res(p.reasonCode)));
    assert.equal((await api('PATCH', '/api/v1/server/interface/main', { state: 'stopped' })).status, 200);
    assert.equal(await reason, 0x8b);
    assert.equal((await info('main')).state, 'Stopped');
    assert.ok(await refused(port), 'nothing accepts connections on a stopped endpoint');
    const paused = await api('PATCH', '/api/v1/server/interface/main', { state: 'paused' });
    assert.equal(paused.status, 409, 'pausing a stopped endpoint is a conflict');
    assert.match(paused.json.status, /Stopped/);
    assert.equal((await api('PATCH', '/api/v1/server/interface/main', { state: 'started' })).status, 200);
    const now = await info('main');
    assert.equal(now.state, 'Started');
    assert.equal(await roundTrip(await connect(now.port), 'restarted/x'), 'ping');
  });

  test('PATCH /interfaces applies to every endpoint; bad input is a 400 naming the problem', async () => {
    assert.equal((await api('PATCH', '/api/v1/server/interfaces', { state: 'paused' })).status, 200);
    assert.equal((await info('main')).state, 'Paused');
    assert.equal((await info('contested')).state, 'Paused');
    assert.equal((await api('PATCH', '/api/v1/server/interfaces', { state: 'resumed' })).status, 200);
    assert.equal((await info('main')).state, 'Started');
    const bad = await api('PATCH', '/api/v1/server/interfaces', { state: 'explode' });
    assert.equal(bad.status, 400);
    assert.match(bad.json.status, /explode/);
    assert.equal((await api('GET', '/api/v1/server/interface/nope')).status, 404);
    assert.equal((await api('GET', '/api/v1/server/interfaces?filter=state%20%3D')).status, 400);
    const started = await api('GET', `/api/v1/server/interfaces?filter=${encodeURIComponent("state = 'started'")}`);
    assert.deepEqual((started.json as Array<{ name: string }>).map((e) => e.name).sort(), ['contested', 'main']);
  });

  test('PUT validates the limits, naming each violated field', async () => {
    const r = await api('PUT', '/api/v1/server/interface/main', { name: 'main', url: 'http://x y', backlog: 0, selectorTaskWait: 1001, schemaLoadingVersion: 11, protocolConfigs: [] });
    assert.equal(r.status, 400);
    for (const field of ['url', 'backlog', 'selectorTaskWait', 'schemaLoadingVersion', 'protocolConfigs', 'authenticationRealm', 'endPointConfig']) {
      assert.match(r.json.status, new RegExp(`'${field}'`), `names ${field}`);
    }
  });

  test('PUT applies a valid change by restarting the endpoint, and keeps it across a broker restart', async () => {
    const before = await info('main');
    const cfg = { ...before.config, url: 'tcp://127.0.0.1:0/', protocolConfigs: [{ type: 'mqtt', serverReceiveMaximum: 7 }] };
    const r = await api('PUT', `/api/v1/server/interface/${before.uniqueId}`, cfg);
    assert.deepEqual(r, { status: 200, json: { status: 'Success' } });
    const after1 = await info('main');
    assert.equal(after1.state, 'Started');
    const c = await connect(after1.port, { protocolVersion: 5 });
    const ack = await new Promise<mqtt.IConnackPacket>((res) => {
      if ((c as unknown as { connackPacket?: mqtt.IConnackPacket }).connackPacket) res((c as unknown as { connackPacket: mqtt.IConnackPacket }).connackPacket);
    });
    assert.equal(ack.properties?.receiveMaximum, 7, 'the new limit is in force');
    assert.equal(await broker.stop('SIGTERM'), 0);
    await boot();
    const after2 = await info('main');
    assert.equal(after2.config.protocolConfigs[0].serverReceiveMaximum, 7, 'the change survived the restart');
  });

  test('connections: list, detail with session and subscriptions, DELETE sends a v5 client DISCONNECT 0x98', async () => {
    const port = (await info('main')).port;
    const c = await connect(port, { protocolVersion: 5, clientId: 'inspected' });
    await c.subscribeAsync('insp/#', { qos: 1 });
    const list = await api('GET', `/api/v1/server/connections?filter=${encodeURIComponent("clientId = 'inspected'")}`);
    assert.equal(list.status, 200);
    assert.equal(list.json.length, 1);
    const id = list.json[0].id;
    assert.equal(list.json[0].protocolVersion, '5.0');
    assert.equal(list.json[0].user, 'admin');
    const detail = await api('GET', `/api/v1/server/connections/${id}`);
    assert.equal(detail.json.protocolInformation.type, 'mqttV5');
    assert.equal(detail.json.protocolInformation.sessionInfo.subscriptionInfo.subscriptionContextList[0].destinationName, 'insp/#');
    const perEndpoint = await api('GET', '/api/v1/server/interface/main/connections');
    assert.ok((perEndpoint.json as Array<{ id: number }>).some((x) => x.id === id));
    const reason = new Promise<number | undefined>((res) => c.once('disconnect', (p) => res(p.reasonCode)));
    assert.deepEqual(await api('DELETE', `/api/v1/server/connections/${id}`), { status: 200, json: { status: 'Success' } });
    assert.equal(await reason, 0x98);
    assert.equal((await api('GET', `/api/v1/server/connections/${id}`)).status, 404);
    assert.equal((await api('GET', '/api/v1/server/connections/abc')).status, 400);
    const st = await api('GET', '/api/v1/server/interface/main/status');
    assert.ok(st.json.totalBytesReceived > 0 && typeof st.json.bytesReceived === 'number');
  });
});
