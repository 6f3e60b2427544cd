import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Message, PushSink } from '../../src/engine/index.js';
import { orderServices } from '../../src/runtime/service-order.js';
import { startServer, waitUntil, type TestServer } from '../helpers.js';

describe('services', () => {
  test('services - boot order is computed from dependsOn: dependencies first, registration order otherwise', () => {
    const order = orderServices([
      { name: 'views', dependsOn: ['endpoints', 'engine'] },
      { name: 'security' },
      { name: 'endpoints', dependsOn: ['broker'] },
      { name: 'engine', dependsOn: ['security'] },
      { name: 'broker', dependsOn: ['engine'] },
      { name: 'extra' },
    ]).map((s) => s.name);
    assert.deepEqual(order, ['security', 'engine', 'broker', 'endpoints', 'views', 'extra']);
    assert.throws(() => orderServices([{ name: 'a', dependsOn: ['nothing'] }]), /service "a" depends on "nothing", which is not registered/);
    assert.throws(
      () => orderServices([{ name: 'a', dependsOn: ['b'] }, { name: 'b', dependsOn: ['a'] }]),
      /services depend on each other in a cycle: a → b; b → a/,
    );
  });

  describe('the registered services', () => {
    let s: TestServer;
    before(async () => {
      s = await startServer({ auth: false, overrides: { MessageDaemon: { systemTopicInterval: 100 } } });
    });
    after(async () => s?.close());

    test('services - every declared dependency starts first; the MQTT broker before the endpoints that carry it', () => {
      const order = s.rt.serviceOrder();
      const at = new Map(order.map((svc, i) => [svc.name, i]));
      for (const svc of order) for (const d of svc.dependsOn ?? []) assert.ok(at.get(d)! < at.get(svc.name)!, `${d} before ${svc.name}`);
      assert.ok(at.get('mqttBroker')! < at.get('endpoints')!);
      assert.ok(s.rt.service('endpoints')?.broker, 'the endpoints reach the broker through the registry');
      assert.equal(s.rt.service('mqttBroker')?.broker, s.rt.service('endpoints')?.broker);
    });

    test('services - $SYS/server/interface/status carries the endpoint statuses (the read-only views)', async () => {
      const latest = new Map<string, string>();
      const sink: PushSink = {
        kind: 'push',
        deliver: (_sub, msg: Message, destinationName: string) => {
          latest.set(destinationName, msg.payload.toString('utf8'));
          return true;
        },
      };
      s.rt.engine!.subscribe({ sessionId: 'sys-if', filter: '$SYS/server/interface/status', sink });
      await waitUntil(() => latest.has('$SYS/server/interface/status'), 10000, '$SYS/server/interface/status');
      const list = JSON.parse(latest.get('$SYS/server/interface/status')!) as Array<{ interfaceName: string }>;
      assert.deepEqual(list.map((i) => i.interfaceName).sort(), ['MQTT Interface', 'MQTT WebSocket Interface']);
      s.rt.engine!.closeSession('sys-if');
    });
  });
});
