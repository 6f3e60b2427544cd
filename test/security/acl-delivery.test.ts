import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import type { MqttClient } from 'mqtt';
import { endpointsOf } from '../../src/endpoints/endpoints.service.js';
import { basicAuth, startServer, waitUntil, type TestServer } from '../helpers.js';
import { b64, unb64 } from '../rest-client.js';
import { SseClient } from '../sse-client.js';
import { createUser, mqttClients } from './helpers.js';

/**
 * The ACL matrix: a subscriber never receives a message on a topic it may not read, whatever filter and path it
 * subscribed with. Deny (subscribe, for alice's identity) on one topic or on a subtree × subscription by the exact
 * topic, `+`, `#` and a shared filter × MQTT, REST consume and SSE × the deny in place before subscribing or set while
 * subscribed. In every cell the denied topic's messages (live, retained, held before the change) never arrive, and
 * messages the subscriber may read do (so "nothing arrived" is not a broken pipe).
 */
type Path = 'mqtt' | 'rest' | 'sse';
type DenyKind = 'topic' | 'subtree';
type FilterKind = 'exact' | 'plus' | 'hash' | 'shared';

describe('ACL per delivered topic', () => {
  let s: TestServer;
  let url: string;
  let base: string;
  const mq = mqttClients(() => url);
  let alice: Awaited<ReturnType<typeof createUser>>;
  let cell = 0;

  before(async () => {
    s = await startServer({
      overrides: { NetworkManager: { data: [{ name: 'mqtt-acl', url: 'tcp://127.0.0.1:0/', protocolConfigs: [{ type: 'mqtt' }] }] } },
    });
    await waitUntil(() => !!endpointsOf(s.rt).entries.get('mqtt-acl')?.handle, 10000, 'MQTT endpoint listening');
    url = `mqtt://127.0.0.1:${endpointsOf(s.rt).entries.get('mqtt-acl')!.handle!.port}`;
    await s.app.listen({ port: 0, host: '127.0.0.1' });
    base = `http://127.0.0.1:${(s.app.server.address() as AddressInfo).port}`;
    alice = await createUser(s, 'alice', 'alice-password-1'); // joins everyone: may subscribe under /
  });
  after(async () => {
    mq.endAll();
    await s.close();
  });

  const publish = async (topic: string, text: string, retain = false) => {
    const r = await s.inject({ method: 'POST', url: '/api/v1/messaging/publish', payload: { destinationName: topic, message: { payload: b64(text) }, retain } });
    assert.equal(r.statusCode, 200, r.body);
  };
  const setDeny = async (key: string, on: boolean) => {
    const entries = on ? [{ principalType: 'IDENTITY', principalId: alice.uuid, effect: 'DENY', permissions: ['subscribe'] }] : [];
    const r = await s.inject({ method: 'PUT', url: '/api/v1/auth/resources/acl', payload: { resourceType: 'Topic', resourceKey: key, entries } });
    assert.equal(r.statusCode, 200, r.body);
  };

  /** One subscriber of alice over one path; `received` are payload texts in arrival order. */
  interface Subscriber {
    granted: boolean;
    received: string[];
    /** Pull what arrived (REST consume; a no-op for push paths). */
    poll(): Promise<void>;
    close(): Promise<void>;
  }

  async function subscribe(path: Path, filter: string, dest: string, group: string | undefined): Promise<Subscriber> {
    const received: string[] = [];
    if (path === 'mqtt') {
      const { c } = await mq.connect({ protocolVersion: 5, username: 'alice', password: alice.password, clientId: `acl-${cell}` });
      c.on('message', (_t, payload) => received.push(payload.toString()));
      const [code] = await mq.subAck(c, [filter], 1);
      return { granted: code! < 0x80, received, poll: async () => {}, close: async () => void (await (c as MqttClient).endAsync()) };
    }
    if (path === 'rest') {
      const headers = alice.auth;
      const r = await s.app.inject({
        method: 'POST',
        url: '/api/v1/messaging/subscribe',
        headers,
        payload: { destinationName: dest, ...(group ? { namedSubscription: group } : {}), retainMessage: true, maxDepth: 100 },
      });
      if (r.statusCode === 403) return { granted: false, received, poll: async () => {}, close: async () => {} };
      assert.equal(r.statusCode, 200, r.body);
      return {
        granted: true,
        received,
        poll: async () => {
          const c = await s.app.inject({ method: 'POST', url: '/api/v1/messaging/consume', headers, payload: { destination: dest, depth: 100 } });
          assert.equal(c.statusCode, 200, c.body);
          for (const m of c.json().consumedMessages as Array<{ payload: string }>) received.push(unb64(m.payload));
        },
        close: async () => {
          await s.app.inject({ method: 'POST', url: '/api/v1/messaging/unsubscribe', headers, payload: { destinationName: dest } });
        },
      };
    }
    const t = await fetch(`${base}/api/v1/messaging/sse?destination=${encodeURIComponent(dest)}`, { headers: basicAuth('alice', alice.password) });
    if (t.status === 403) return { granted: false, received, poll: async () => {}, close: async () => {} };
    assert.equal(t.status, 200, await t.clone().text());
    const token = await t.text();
    const q = new URLSearchParams({ destinationName: dest, retainMessage: 'true', maxDepth: '100', ...(group ? { namedSubscription: group } : {}) });
    const sse = new SseClient(`${base}/api/v1/messaging/sse/stream/${token}?${q}`);
    await sse.started;
    assert.equal(sse.status, 200); // the server subscribes in the same turn as it sends the headers
    return {
      granted: true,
      get received() {
        return sse.events.map((e) => unb64((JSON.parse(e.data) as { payload: string }).payload));
      },
      poll: async () => {},
      close: async () => {
        sse.close();
        await sse.done;
      },
    };
  }

  async function until(sub: Subscriber, text: string): Promise<void> {
    await waitUntil(
      async () => {
        await sub.poll();
        return sub.received.includes(text);
      },
      5000,
      `"${text}" delivered`,
    );
  }

  const filters: Record<FilterKind, (p: string) => { filter: string; dest: string; group?: string; control: string }> = {
    exact: (p) => ({ filter: `${p}/private/bob`, dest: `${p}/private/bob`, control: '' }),
    plus: (p) => ({ filter: `${p}/+/bob`, dest: `${p}/+/bob`, control: `${p}/public/bob` }),
    hash: (p) => ({ filter: `${p}/#`, dest: `${p}/#`, control: `${p}/public/bob` }),
    shared: (p) => ({ filter: `$share/g${p}/${p}/#`, dest: `${p}/#`, group: `g${p}`, control: `${p}/public/bob` }),
  };

  for (const path of ['mqtt', 'rest', 'sse'] as Path[]) {
    for (const deny of ['topic', 'subtree'] as DenyKind[]) {
      for (const kind of ['exact', 'plus', 'hash', 'shared'] as FilterKind[]) {
        test(`acl delivery - deny on a ${deny}, ${kind} filter, ${path}: denied before subscribing, nothing of the topic arrives (live or retained)`, async () => {
          const p = `m${++cell}`;
          const f = filters[kind](p);
          const denied = `${p}/private/bob`;
          const denyKey = deny === 'topic' ? denied : `${p}/private`;
          await setDeny(denyKey, true);
          await publish(denied, 'retained-denied', true);
          const sub = await subscribe(path, f.filter, f.dest, f.group);
          try {
            if (kind === 'exact') assert.equal(sub.granted, false, 'subscribing to the denied topic itself is refused');
            if (!sub.granted) return;
            await publish(denied, 'live-denied');
            if (deny === 'subtree') await publish(`${p}/private/x/y`, 'deep-denied');
            await publish(f.control, 'control');
            await until(sub, 'control');
            assert.deepEqual(
              sub.received.filter((t) => t.endsWith('denied')),
              [],
              `no denied message through ${f.filter} over ${path}`,
            );
          } finally {
            await sub.close();
            await publish(denied, '', true); // clear the retained message
            await setDeny(denyKey, false);
          }
        });

        test(`acl delivery - deny on a ${deny}, ${kind} filter, ${path}: set while subscribed, applies at once; lifted, delivery resumes`, async () => {
          const p = `m${++cell}`;
          const f = filters[kind](p);
          const denied = `${p}/private/bob`;
          const denyKey = deny === 'topic' ? denied : `${p}/private`;
          const sub = await subscribe(path, f.filter, f.dest, f.group);
          try {
            assert.equal(sub.granted, true, 'no deny yet: the subscription is granted');
            await publish(denied, 'before');
            await until(sub, 'before');
            if (path === 'rest') await publish(denied, 'held-denied'); // held in the REST buffer, not consumed yet
            await setDeny(denyKey, true);
            await publish(denied, 'live-denied');
            if (deny === 'subtree') await publish(`${p}/private/x/y`, 'deep-denied');
            await sub.poll(); // REST: consumed while denied (the held message must not come out)
            await setDeny(denyKey, false);
            await publish(denied, 'after');
            await until(sub, 'after');
            assert.deepEqual(
              sub.received.filter((t) => t.endsWith('denied')),
              [],
              `nothing published or held while denied arrives through ${f.filter} over ${path}`,
            );
          } finally {
            await sub.close();
            await setDeny(denyKey, false);
          }
        });
      }
    }
  }

  test('acl delivery - the default test/nosubscribe deny holds through test/# and # (MQTT, REST, SSE)', async () => {
    const bob = await createUser(s, 'bob-default', 'bob-password-12');
    const { c } = await mq.connect({ protocolVersion: 4, username: 'bob-default', password: bob.password });
    const got: string[] = [];
    c.on('message', (t, payload) => got.push(`${t}=${payload.toString()}`));
    assert.deepEqual(await mq.subAck(c, ['test/nosubscribe', 'test/#', '#'], 0), [0x80, 0, 0]);
    const r = await s.app.inject({ method: 'POST', url: '/api/v1/messaging/subscribe', headers: bob.auth, payload: { destinationName: 'test/#', maxDepth: 100 } });
    assert.equal(r.statusCode, 200);
    const token = await (await fetch(`${base}/api/v1/messaging/sse?destination=test/%23`, { headers: bob.auth })).text();
    const sse = new SseClient(`${base}/api/v1/messaging/sse/stream/${token}?destinationName=test/%23`);
    await sse.started;
    assert.equal(sse.status, 200);
    await publish('test/nosubscribe', 'secret');
    await publish('test/open', 'open');
    await waitUntil(() => got.includes('test/open=open'), 5000, 'test/open over MQTT');
    await sse.waitFor((ev) => ev.length >= 1);
    assert.deepEqual(got.filter((x) => x.startsWith('test/nosubscribe')), []);
    assert.deepEqual(
      sse.events.map((e) => (JSON.parse(e.data) as { destinationName: string }).destinationName),
      ['test/open'],
    );
    sse.close();
    await sse.done;
    const consumed = await s.app.inject({ method: 'POST', url: '/api/v1/messaging/consume', headers: bob.auth, payload: { destination: 'test/#' } });
    assert.deepEqual(
      (consumed.json().consumedMessages as Array<{ destinationName: string }>).map((m) => m.destinationName),
      ['test/open'],
    );
    await c.endAsync();
  });
});
