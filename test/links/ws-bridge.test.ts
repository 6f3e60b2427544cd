import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import type { MqttClient } from 'mqtt';
import { startServer, type TestServer } from '../helpers.js';
import { collect, connectClient, publishMany, until } from './helpers.js';

const servers: TestServer[] = [];
const clients: MqttClient[] = [];
after(async () => {
  for (const c of clients) c.end(true);
  for (const s of servers.reverse()) await s.close();
});

test('links - an MQTT bridge over ws:// between two Switchyard brokers, push and pull, QoS 1', async () => {
  const b = await startServer({ auth: false, overrides: { AuthManager: { authenticationEnabled: false, authorisationEnabled: false } } });
  servers.push(b);
  const bWs = b.rt.service('endpoints')!.entries.get('MQTT WebSocket Interface')!.handle!.port;
  const bTcp = b.rt.service('endpoints')!.entries.get('MQTT Interface')!.handle!.port;
  const a = await startServer({
    auth: false,
    overrides: {
      AuthManager: { authenticationEnabled: false, authorisationEnabled: false },
      NetworkConnectionManager: {
        data: [
          {
            name: 'to-b',
            url: `ws://127.0.0.1:${bWs}/mqtt`,
            backoff: { initial: 100, max: 1000, jitter: 0 },
            linkConfigs: [
              { direction: 'push', localNamespace: 'a/#', remoteNamespace: 'from-a/', qualityOfService: 1 },
              { direction: 'pull', localNamespace: 'from-b/', remoteNamespace: 'b/#', qualityOfService: 1 },
            ],
          },
        ],
      },
    },
  });
  servers.push(a);
  const aTcp = a.rt.service('endpoints')!.entries.get('MQTT Interface')!.handle!.port;
  const svc = a.rt.service('integrations')!;
  await until(() => svc.connectionState(svc.find('to-b')) === 'Established', 10000, 'established over ws');

  const onB: Array<{ topic: string; payload: string }> = [];
  const bSub = await connectClient(bTcp, { clientId: 'b-sub' });
  clients.push(bSub);
  await collect(bSub, 'from-a/#', onB);
  const onA: Array<{ topic: string; payload: string }> = [];
  const aSub = await connectClient(aTcp, { clientId: 'a-sub' });
  clients.push(aSub);
  await collect(aSub, 'from-b/#', onA);

  const aPub = await connectClient(aTcp, { clientId: 'a-pub' });
  clients.push(aPub);
  await publishMany(aPub, () => 'a/t', 100, 1, 'a');
  const bPub = await connectClient(bTcp, { clientId: 'b-pub' });
  clients.push(bPub);
  await publishMany(bPub, () => 'b/t', 100, 1, 'b');
  await until(() => onB.length >= 100 && onA.length >= 100, 15000, 'both directions over ws');
  await new Promise((r) => setTimeout(r, 200));
  assert.deepEqual(onB.map((m) => m.payload), Array.from({ length: 100 }, (_, i) => `a-${i}`));
  assert.ok(onB.every((m) => m.topic === 'from-a/t'));
  assert.deepEqual(onA.map((m) => m.payload), Array.from({ length: 100 }, (_, i) => `b-${i}`));
  assert.ok(onA.every((m) => m.topic === 'from-b/t'));
  const conn = (await a.inject({ url: '/api/v1/server/integration/to-b/connection' })).json() as { protocolName: string; protocolVersion: string; connectedTimeMs: number };
  assert.equal(conn.protocolName, 'MQTT');
  assert.equal(conn.protocolVersion, '5');
  assert.ok(conn.connectedTimeMs >= 0);
});
