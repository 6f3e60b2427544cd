import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Message, PushSink } from '../../src/engine/index.js';
import { startServer, waitUntil, type TestServer } from '../helpers.js';

/** A push sink keeping the latest payload per topic and every topic seen. */
function recorder() {
  const latest = new Map<string, string>();
  const counts = new Map<string, number>();
  const sink: PushSink = {
    kind: 'push',
    deliver: (_sub, msg: Message, destinationName: string) => {
      latest.set(destinationName, msg.payload.toString('utf8'));
      counts.set(destinationName, (counts.get(destinationName) ?? 0) + 1);
      return true;
    },
  };
  return { sink, latest, counts };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('$SYS topics', () => {
  let s: TestServer;
  before(async () => {
    s = await startServer({ auth: false, overrides: { MessageDaemon: { systemTopicInterval: 100 } } });
  });
  after(async () => s.close());

  test('$SYS - a subscriber of $SYS/# through the engine gets version, uptime, time and message counts', async () => {
    const { sink, latest } = recorder();
    s.rt.engine!.subscribe({ sessionId: 'sys-watch', filter: '$SYS/#', sink });
    // retained: they arrive at once on subscribe
    assert.equal(latest.get('$SYS/broker/version'), '0.1.0');
    assert.match(latest.get('$SYS/broker/uptime') ?? '', /^\d+$/);
    assert.ok(!Number.isNaN(Date.parse(latest.get('$SYS/broker/time') ?? '')), 'time is ISO-8601');
    assert.equal(latest.get('$SYS/broker/timestamp'), latest.get('$SYS/broker/time'), 'alias');
    for (const t of ['$SYS/broker/clients/connected', '$SYS/clients/connected', '$SYS/load/connected', '$SYS/broker/subscriptions/count']) {
      assert.match(latest.get(t) ?? '', /^\d+$/, t);
    }

    // messages published by clients show up in the counts at the next update
    const before = Number(latest.get('$SYS/broker/messages/received'));
    for (let i = 0; i < 7; i++) await s.rt.engine!.publish('factory/counter', { payload: String(i) });
    await waitUntil(() => Number(latest.get('$SYS/broker/messages/received')) === before + 7, 10000, 'messages/received to count 7 more');
    assert.equal(latest.get('$SYS/messages/received'), latest.get('$SYS/broker/messages/received'), 'alias carries the same value');
    assert.equal(latest.get('$SYS/broker/publish/messages/received'), latest.get('$SYS/broker/messages/received'));
    s.rt.engine!.closeSession('sys-watch');
  });

  test('$SYS - retained messages counted; stored queue messages counted', async () => {
    const { sink, latest } = recorder();
    s.rt.engine!.subscribe({ sessionId: 'sys-watch-2', filter: '$SYS/broker/messages/#', sink });
    await s.rt.engine!.publish('factory/state', { payload: 'on', retain: true });
    await s.rt.engine!.publish('queue/work', { payload: 'w1' });
    await s.rt.engine!.publish('queue/work', { payload: 'w2' });
    await waitUntil(
      () => latest.get('$SYS/broker/messages/retained/count') === '1' && latest.get('$SYS/broker/messages/stored') === '2',
      10000,
      'retained and stored counts',
    );
    s.rt.engine!.closeSession('sys-watch-2');
  });

  test('$SYS - averaged topics have /1, /5, /10, /15 minute children', async () => {
    const { sink, latest } = recorder();
    s.rt.engine!.subscribe({ sessionId: 'sys-avg', filter: '$SYS/#', sink });
    for (const base of ['$SYS/broker/messages/received', '$SYS/broker/clients/connected', '$SYS/broker/load/bytes/received', '$SYS/subscriptions/count']) {
      for (const m of [1, 5, 10, 15]) assert.match(latest.get(`${base}/${m}`) ?? '', /^\d+\.\d\d$/, `${base}/${m}`);
    }
    assert.equal(latest.get('$SYS/broker/version/1'), undefined, 'version has no averages');
    // a burst of publishes makes the 1-minute rate of messages received positive
    for (let i = 0; i < 50; i++) await s.rt.engine!.publish('factory/burst', { payload: 'x' });
    await waitUntil(() => Number(latest.get('$SYS/broker/messages/received/1')) > 0, 10000, 'a positive 1-minute rate');
    s.rt.engine!.closeSession('sys-avg');
  });

  test('$SYS - $SYS/server/* carry JSON: statistics, server details, interfaces, destinations without system ones', async () => {
    const { sink, latest } = recorder();
    s.rt.engine!.subscribe({ sessionId: 'sys-json', filter: '$SYS/server/#', sink });
    await waitUntil(() => latest.has('$SYS/server/destination/status') && latest.has('$SYS/server/details'), 10000, '$SYS/server topics');
    const details = JSON.parse(latest.get('$SYS/server/details')!);
    assert.equal(details.serverName, s.rt.serverName);
    assert.equal(details.version, '0.1.0');
    const status = JSON.parse(latest.get('$SYS/server/status')!);
    assert.equal(typeof status.totalPublishedMessages, 'number');
    assert.ok(Array.isArray(JSON.parse(latest.get('$SYS/server/interface/status')!)));
    const dests = JSON.parse(latest.get('$SYS/server/destination/status')!) as Array<{ name: string }>;
    assert.ok(dests.length > 0);
    assert.ok(dests.every((d) => !d.name.startsWith('$')), 'no $SYS destinations listed');
    s.rt.engine!.closeSession('sys-json');
  });

  test('$SYS - a topic is published again only when its value changed', async () => {
    const { sink, counts } = recorder();
    s.rt.engine!.subscribe({ sessionId: 'sys-change', filter: '$SYS/broker/#', sink });
    const time0 = counts.get('$SYS/broker/time') ?? 0;
    // time changes at every update; version never does
    await waitUntil(() => (counts.get('$SYS/broker/time') ?? 0) >= time0 + 3, 10000, 'three more updates');
    assert.equal(counts.get('$SYS/broker/version'), 1, 'version came once (retained, on subscribe)');
    s.rt.engine!.closeSession('sys-change');
  });
});

describe('$SYS topic switches', () => {
  const servers: TestServer[] = [];
  after(async () => {
    for (const s of servers) await s.close();
  });
  const start = async (md: Record<string, unknown>) => {
    const s = await startServer({ auth: false, overrides: { MessageDaemon: { systemTopicInterval: 100, ...md } } });
    servers.push(s);
    return s;
  };
  /** Waits for a few update intervals, then lists the $SYS destinations. */
  const sysNamesAfterUpdates = async (s: TestServer) => {
    await sleep(400);
    return s.rt.engine!.destinationNames().filter((n) => n.startsWith('$SYS/'));
  };

  test('$SYS - enableSystemTopics false publishes nothing', async () => {
    const s = await start({ enableSystemTopics: false });
    assert.deepEqual(await sysNamesAfterUpdates(s), []);
  });

  test('$SYS - enableSystemStatusTopics false leaves out $SYS/server/*', async () => {
    const s = await start({ enableSystemStatusTopics: false });
    const names = await sysNamesAfterUpdates(s);
    assert.ok(names.includes('$SYS/broker/version'));
    assert.ok(!names.some((n) => n.startsWith('$SYS/server/')), names.filter((n) => n.startsWith('$SYS/server/')).join(', '));
  });

  test('$SYS - enableSystemTopicAverages false leaves out the /1 /5 /10 /15 children', async () => {
    const s = await start({ enableSystemTopicAverages: false });
    const names = await sysNamesAfterUpdates(s);
    assert.ok(names.includes('$SYS/broker/messages/received'));
    assert.ok(!names.some((n) => /\/(1|5|10|15)$/.test(n)), names.filter((n) => /\/(1|5|10|15)$/.test(n)).join(', '));
  });
});
