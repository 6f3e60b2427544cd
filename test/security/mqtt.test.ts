import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { IClientOptions, MqttClient } from 'mqtt';
import { endpointsOf } from '../../src/endpoints/endpoints.service.js';
import { startServer, waitUntil, type TestServer } from '../helpers.js';
import { createGroup, createUser, groupId, leaveEveryone, mqttClients } from './helpers.js';

/** Real mqtt.js clients against the broker's MQTT endpoint on 127.0.0.1:<random>, with the ACLs of the security service. */
describe('MQTT security', () => {
  let s: TestServer;
  let url: string;
  const mq = mqttClients(() => url);
  let alice: Awaited<ReturnType<typeof createUser>>;
  let team: string;

  before(async () => {
    s = await startServer({
      overrides: { NetworkManager: { data: [{ name: 'mqtt-test', url: 'tcp://127.0.0.1:0/', protocolConfigs: [{ type: 'mqtt' }] }] } },
    });
    await waitUntil(() => !!endpointsOf(s.rt).entries.get('mqtt-test')?.handle, 10000, 'MQTT endpoint listening');
    url = `mqtt://127.0.0.1:${endpointsOf(s.rt).entries.get('mqtt-test')!.handle!.port}`;
    team = await createGroup(s, 'mqtt-team');
    alice = await createUser(s, 'alice', 'alice-password-1', [await groupId(s, 'everyone'), team]);
  });
  after(async () => {
    mq.endAll();
    await s.close();
  });

  const connect = async (opts: IClientOptions): Promise<MqttClient> => (await mq.connect(opts)).c;
  const subAck = mq.subAck;
  const setAcl = (resourceKey: string, entries: unknown[]) =>
    s.inject({ method: 'PUT', url: '/api/v1/auth/resources/acl', payload: { resourceType: 'Topic', resourceKey, entries } });

  test('mqtt - a wrong password is refused: v5 reason 0x86, 3.1.1 return code 4', async () => {
    await assert.rejects(connect({ protocolVersion: 5, username: 'alice', password: 'wrong-password' }), (err: Error & { code?: number }) => {
      assert.equal(err.code, 0x86);
      return true;
    });
    await assert.rejects(connect({ protocolVersion: 4, username: 'alice', password: 'wrong-password' }), (err: Error & { code?: number }) => {
      assert.equal(err.code, 4);
      return true;
    });
    await assert.rejects(connect({ protocolVersion: 4 }), (err: Error & { code?: number }) => {
      assert.equal(err.code, 4, 'no credentials and anonymous access off');
      return true;
    });
  });

  test('mqtt - a user without connect is refused: v5 0x87, 3.1.1 return code 5', async () => {
    await leaveEveryone(s, (await createUser(s, 'no-connect', 'no-connect-pass-1')).uuid); // in no group: no connect
    await assert.rejects(connect({ protocolVersion: 5, username: 'no-connect', password: 'no-connect-pass-1' }), (err: Error & { code?: number }) => {
      assert.equal(err.code, 0x87);
      return true;
    });
    await assert.rejects(connect({ protocolVersion: 4, username: 'no-connect', password: 'no-connect-pass-1' }), (err: Error & { code?: number }) => {
      assert.equal(err.code, 5);
      return true;
    });
  });

  test('mqtt - subscribe is refused per topic in SUBACK; allowed after an ACL change without reconnecting', async () => {
    await setAcl('plant/secret', [{ principalType: 'GROUP', principalId: team, effect: 'DENY', permissions: ['subscribe'] }]);
    const c = await connect({ protocolVersion: 5, username: 'alice', password: alice.password });
    assert.deepEqual(await subAck(c, ['plant/secret', 'plant/open']), [0x87, 1], 'plant/secret refused with Not authorized, plant/open granted');
    await setAcl('plant/secret', []);
    assert.deepEqual(await subAck(c, ['plant/secret']), [1], 'same connection, new decision');
    assert.deepEqual(await subAck(c, ['test/nosubscribe']), [0x87], 'the default ACL denies test/nosubscribe to everyone');
    const v3 = await connect({ protocolVersion: 4, username: 'alice', password: alice.password });
    await setAcl('plant/secret', [{ principalType: 'GROUP', principalId: team, effect: 'DENY', permissions: ['subscribe'] }]);
    assert.deepEqual(await subAck(v3, ['plant/secret', 'plant/open']), [0x80, 1], 'MQTT 3.1.1: 0x80 Failure for the refused topic');
  });

  test('mqtt - publish is refused per ACL (the message is not delivered); allowed after an ACL change', async () => {
    const watcher = await connect({ protocolVersion: 5, username: 'admin', password: s.adminPassword });
    const got: string[] = [];
    watcher.on('message', (_t, payload) => got.push(payload.toString()));
    await watcher.subscribeAsync('line/+/out', { qos: 1 });
    await setAcl('line/1', [{ principalType: 'IDENTITY', principalId: alice.uuid, effect: 'DENY', permissions: ['publish'] }]);
    const c = await connect({ protocolVersion: 5, username: 'alice', password: alice.password });
    const refused = await c.publishAsync('line/1/out', 'denied', { qos: 1 }).then(
      (p) => p,
      (err: Error & { code?: number }) => err,
    );
    const code = (refused as { reasonCode?: number; code?: number } | undefined)?.reasonCode ?? (refused as { code?: number } | undefined)?.code;
    assert.equal(code, 0x87, 'PUBACK says Not authorized');
    await setAcl('line/1', []);
    await c.publishAsync('line/1/out', 'allowed', { qos: 1 });
    await waitUntil(() => got.includes('allowed'), 5000, 'allowed message delivered');
    assert.deepEqual(got, ['allowed'], 'the denied message never arrived');
  });

  test('mqtt - retain needs the retain permission; a wildcard subscription needs wildcard_subscription', async () => {
    await setAcl('keep', [{ principalType: 'IDENTITY', principalId: alice.uuid, effect: 'DENY', permissions: ['retain'] }]);
    const c = await connect({ protocolVersion: 5, username: 'alice', password: alice.password });
    const r = await c.publishAsync('keep/x', 'r', { qos: 1, retain: true }).then(
      (p) => p,
      (err: Error & { code?: number }) => err,
    );
    const code = (r as { reasonCode?: number; code?: number } | undefined)?.reasonCode ?? (r as { code?: number } | undefined)?.code;
    assert.equal(code, 0x87);
    await c.publishAsync('keep/x', 'not retained', { qos: 1 }); // without retain it is allowed

    const plain = await createUser(s, 'no-wildcards', 'no-wildcards-pass-1', [team]);
    await leaveEveryone(s, plain.uuid); // only team: no wildcard_subscription
    await s.inject({
      method: 'PUT',
      url: '/api/v1/auth/resources/acl',
      payload: { resourceType: 'Server', resourceKey: s.rt.serverName, entries: [...(await s.inject(`/api/v1/auth/resources/acl?resourceType=Server&resourceKey=${s.rt.serverName}`)).json().entries, { principalType: 'IDENTITY', principalId: plain.uuid, effect: 'ALLOW', permissions: ['connect'] }] },
    });
    await setAcl('/', [
      ...(await s.inject('/api/v1/auth/resources/acl?resourceType=Topic&resourceKey=/')).json().entries,
      { principalType: 'IDENTITY', principalId: plain.uuid, effect: 'ALLOW', permissions: ['subscribe'] },
    ]);
    const w = await connect({ protocolVersion: 5, username: 'no-wildcards', password: 'no-wildcards-pass-1' });
    assert.deepEqual(await subAck(w, ['a/#', 'a/b'], 0), [0x87, 0], 'the wildcard filter is refused, the plain one granted');
  });
});
