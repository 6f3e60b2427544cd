import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import mqtt, { type MqttClient } from 'mqtt';
import { WebSocket } from 'ws';
import { endpointsOf } from '../../src/endpoints/endpoints.service.js';
import { startServer, waitUntil, type TestServer } from '../helpers.js';

/**
 * MQTT over WebSocket: an endpoint accepts upgrades on any path by default (mqtt.js connects to `/` unless told
 * otherwise; the default endpoint's URL says `/mqtt`), and an optional allow-list (`paths` in the `ws` protocol entry)
 * restricts them.
 */
describe('MQTT over WebSocket paths', () => {
  let s: TestServer;
  const clients: MqttClient[] = [];
  const port = (name: string) => endpointsOf(s.rt).entries.get(name)!.handle!.port;
  before(async () => {
    s = await startServer({
      overrides: {
        NetworkManager: {
          data: [
            { name: 'ws-any', url: 'ws://127.0.0.1:0/mqtt', protocolConfigs: [{ type: 'mqtt' }, { type: 'ws' }] },
            { name: 'ws-listed', url: 'ws://127.0.0.1:0/mqtt', protocolConfigs: [{ type: 'mqtt' }, { type: 'ws', paths: ['/mqtt', '/broker/ws'] }] },
          ],
        },
      },
    });
    await waitUntil(() => !!endpointsOf(s.rt).entries.get('ws-any')?.handle && !!endpointsOf(s.rt).entries.get('ws-listed')?.handle, 10000, 'WebSocket endpoints listening');
  });
  after(async () => {
    for (const c of clients) c.end(true);
    await s.close();
  });

  const connect = (url: string, opts: mqtt.IClientOptions = {}) =>
    new Promise<MqttClient>((resolve, reject) => {
      const c = mqtt.connect(url, { username: 'admin', password: s.adminPassword, reconnectPeriod: 0, connectTimeout: 5000, ...opts });
      clients.push(c);
      c.once('connect', () => resolve(c));
      c.once('error', (err) => reject(err));
      c.once('close', () => reject(new Error('closed before CONNACK')));
    });

  test('websocket - mqtt.js with default options (path /) connects, publishes and receives', async () => {
    const c = await connect(`ws://127.0.0.1:${port('ws-any')}`);
    await c.subscribeAsync('ws/default', { qos: 1 });
    const got = new Promise<string>((r) => c.once('message', (_t, p) => r(p.toString())));
    await c.publishAsync('ws/default', 'over ws', { qos: 1 });
    assert.equal(await got, 'over ws');
    const v5 = await connect(`ws://127.0.0.1:${port('ws-any')}/mqtt`, { protocolVersion: 5 });
    assert.equal(v5.connected, true, 'the URL path still works');
  });

  test('websocket - with an allow-list only the listed paths are upgraded; others get 404', async () => {
    const ok = await connect(`ws://127.0.0.1:${port('ws-listed')}/broker/ws`);
    assert.equal(ok.connected, true);
    await assert.rejects(connect(`ws://127.0.0.1:${port('ws-listed')}`), /closed before CONNACK/);
    const status = (path: string) =>
      new Promise<number>((resolve, reject) => {
        const ws = new WebSocket(`ws://127.0.0.1:${port('ws-listed')}${path}`, 'mqtt');
        ws.once('open', () => {
          ws.terminate();
          resolve(101);
        });
        ws.once('unexpected-response', (_req, res) => {
          resolve(res.statusCode ?? 0);
          ws.terminate();
        });
        ws.once('error', (err) => (err.message.includes('Unexpected server response') ? undefined : reject(err)));
      });
    assert.equal(await status('/'), 404);
    assert.equal(await status('/other'), 404);
    assert.equal(await status('/broker/ws/'), 101, 'a trailing slash does not matter');
  });

  test('websocket - a path that is not a path is refused at configuration', async () => {
    const r = await s.inject({
      method: 'PUT',
      url: '/api/v1/server/interface/ws-listed',
      payload: { name: 'ws-listed', url: 'ws://127.0.0.1:0/mqtt', protocolConfigs: [{ type: 'mqtt' }, { type: 'ws', paths: ['no-slash'] }] },
    });
    assert.equal(r.statusCode, 400, r.body);
    assert.match(r.json().status, /WebSocket path starts with \//);
  });
});
