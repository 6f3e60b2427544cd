import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Message, PushSink } from '../../src/engine/index.js';
import { startServer, type TestServer } from '../helpers.js';

/**
 * Virtual actors: every destination and durable subscription is listed, inspected and commanded as an actor,
 * whether or not its XState instance is active; publishing to new topics activates none; an activated actor back
 * at rest is passivated and its state survives in the engine's record.
 */
describe('virtual actors', () => {
  let s: TestServer;
  before(async () => {
    s = await startServer({ overrides: { RestApi: { enableCache: false }, MessageDaemon: { enableSystemTopics: false } } });
  });
  after(async () => s?.close());

  interface Row {
    systemId: string;
    state: string;
    status: string;
    parent: string;
  }
  const page = async (query: string) => {
    const r = await s.inject(`/api/v1/server/actors?${query}`);
    assert.equal(r.statusCode, 200, r.body);
    return r.json() as { total: number; items: Row[] };
  };
  const row = async (systemId: string) => (await page(`prefix=${encodeURIComponent(systemId)}&limit=1`)).items.find((r) => r.systemId === systemId);
  const liveDestinationActors = () => s.rt.childActors('destinations').filter(([id]) => id.startsWith('destination:')).length;
  const destinationsStatus = async () =>
    ((await s.inject('/api/v1/server/status')).json() as Array<{ name: string; status: string; comment: string }>).find((x) => x.name === 'Destinations')!;

  test('virtual actors - 2 000 new topics: every one listed and paged with its state, none activated', async () => {
    const e = s.rt.engine!;
    for (let i = 0; i < 2000; i++) await e.publish(`virt/${i}`, { payload: 'x' });
    assert.equal(liveDestinationActors(), 0, 'publishing activated no destination actor');
    const all = await page('kind=destination&limit=10&offset=1000');
    assert.ok(all.total >= 2000, `total ${all.total}`);
    assert.equal(all.items.length, 10);
    for (const r of all.items) {
      assert.equal(r.status, 'passive');
      assert.equal(r.state, 'live.run.active,load.normal');
      assert.equal(r.parent, 'supervisor:destinations');
    }
    const pfx = await page(`prefix=${encodeURIComponent('destination:virt/19')}&limit=1000`);
    assert.equal(pfx.total, 111, 'virt/19 and virt/190..1999');
    const sup = (await page('kind=supervisor&prefix=supervisor:destinations')).items[0] as Row & { childCount: number; children: string[] };
    assert.ok(sup.childCount >= 2000);
    assert.equal(sup.children.length, 50);
    const st = await destinationsStatus();
    assert.equal(st.status, 'OK');
    assert.match(st.comment, /^\d+ running \(0 active\)$/);
    assert.ok(Number(st.comment.split(' ')[0]) >= 2000);
    assert.equal(liveDestinationActors(), 0, 'listing activated nothing');
  });

  test('virtual actors - a passive destination is inspected and commanded; at rest again it is passivated', async () => {
    const e = s.rt.engine!;
    const got: string[] = [];
    const sink: PushSink = {
      kind: 'push',
      deliver: (_sub, msg: Message) => {
        got.push(msg.payload.toString());
        return true;
      },
    };
    e.subscribe({ sessionId: 'virt-watch', filter: 'virt/7', sink });
    const id = 'destination:virt/7';
    // inspection activates it
    const one = await s.inject(`/api/v1/server/actors/${encodeURIComponent(id)}`);
    assert.equal(one.statusCode, 200);
    assert.equal(one.json().state, 'live.run.active,load.normal');
    assert.ok(one.json().accepts.includes('destination.pause'));
    assert.equal((await row(id))?.status, 'active');
    // commanded through the registry
    s.rt.actor('destination', 'virt/7')!.send({ type: 'destination.pause' });
    await e.publish('virt/7', { payload: 'held' });
    assert.deepEqual(got, []);
    assert.equal((await row(id))?.state, 'live.run.paused,load.normal');
    assert.equal(s.rt.passivateIdle(0), 0, 'a paused actor is not at rest: it stays active');
    s.rt.actor('destination', 'virt/7')!.send({ type: 'destination.resume' });
    assert.deepEqual(got, ['held']);
    assert.equal(s.rt.passivateIdle(0), 1, 'back at rest: passivated');
    assert.equal(liveDestinationActors(), 0);
    assert.deepEqual(await row(id), { ...(await row(id))!, status: 'passive', state: 'live.run.active,load.normal' });
    e.closeSession('virt-watch');
  });

  test('virtual actors - the engine record is the state: a passive actor shows it and activation resumes it', async () => {
    const e = s.rt.engine!;
    e.pauseDestination('virt/8');
    const passive = await row('destination:virt/8');
    assert.deepEqual([passive?.status, passive?.state], ['passive', 'live.run.paused,load.normal']);
    assert.deepEqual((await page('kind=destination&state=live.run.paused')).items.map((r) => r.systemId), ['destination:virt/8']);
    const actor = s.rt.actor('destination', 'virt/8')!;
    assert.deepEqual(actor.getSnapshot().value, { live: { run: 'paused', load: 'normal' } }, 'activation resumed it paused');
    actor.send({ type: 'destination.resume' });
    assert.equal(e.isPaused('virt/8'), false);
    assert.equal(s.rt.passivateIdle(0), 1);
    // an unknown or deleted destination has no actor
    assert.equal((await s.inject(`/api/v1/server/actors/${encodeURIComponent('destination:virt/none')}`)).statusCode, 404);
    await e.deleteDestination('virt/9');
    assert.equal(s.rt.actor('destination', 'virt/9'), undefined);
    assert.equal(await row('destination:virt/9'), undefined);
  });

  test('virtual actors - a durable subscription is listed passive, activated with its history, passivated', async () => {
    const e = s.rt.engine!;
    const sink: PushSink = { kind: 'push', deliver: () => true };
    const sub = e.subscribe({ sessionId: 'virt|client', filter: 'virt/sub/#', durable: true, qos: 1, sink });
    const id = `subscription:${sub.key}`;
    assert.deepEqual([(await row(id))?.status, (await row(id))?.state], ['passive', 'active']);
    sub.hibernate();
    sub.attach(sink);
    sub.hibernate();
    assert.deepEqual([(await row(id))?.status, (await row(id))?.state], ['passive', 'hibernated']);
    const one = (await s.inject(`/api/v1/server/actors/${encodeURIComponent(id)}`)).json();
    assert.equal(one.state, 'hibernated');
    assert.equal(one.context.hibernations, 2);
    assert.equal(one.context.sessionId, 'virt|client');
    sub.attach(sink);
    assert.equal((await row(id))?.state, 'active');
    assert.equal((await row(id))?.status, 'active');
    assert.ok(s.rt.passivateIdle(0) >= 1);
    assert.equal((await row(id))?.status, 'passive');
    e.unsubscribe(sub);
    assert.equal(await row(id), undefined);
  });
});
