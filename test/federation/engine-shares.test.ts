/**
 * The engine's hook for federated shared subscriptions: an external group is fed only through publishToGroup, a
 * message handed to a group reaches that group only, and group appearance/disappearance is reported.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Engine } from '../../src/engine/index.js';
import { pushSink, texts } from '../engine/helpers.js';

describe('federation - engine hook for shared groups fed by a link', () => {
  it('federation - an external group gets no local publishes, publishToGroup reaches that group only', async () => {
    const engine = new Engine();
    const events: string[] = [];
    engine.onSharedGroup((e, g, f) => events.push(`${e} ${g} ${f}`));
    engine.setExternalShares((_g, f) => f.startsWith('fed/'));
    const m1 = pushSink();
    const m2 = pushSink();
    const local = pushSink();
    const plain = pushSink();
    engine.subscribe({ sessionId: 's1', filter: '$share/g/fed/#', qos: 1, sink: m1 });
    engine.subscribe({ sessionId: 's2', filter: '$share/g/fed/#', qos: 1, sink: m2 });
    engine.subscribe({ sessionId: 's3', filter: '$share/h/other/#', qos: 1, sink: local });
    engine.subscribe({ sessionId: 's4', filter: 'fed/#', qos: 1, sink: plain });
    assert.deepEqual(events, ['added g fed/#', 'added h other/#']);

    await engine.publish('fed/a', { payload: Buffer.from('local'), qos: 1 });
    await engine.publish('other/a', { payload: Buffer.from('not federated'), qos: 1 });
    assert.deepEqual([...texts(m1.got), ...texts(m2.got)], [], 'the external group is not fed locally');
    assert.deepEqual(texts(local.got), ['not federated']);
    assert.deepEqual(texts(plain.got), ['local']);

    await engine.publishToGroup('g', 'fed/#', 'fed/a', { payload: Buffer.from('from the link 1'), qos: 1, retain: true });
    await engine.publishToGroup('g', 'fed/#', 'fed/b', { payload: Buffer.from('from the link 2'), qos: 1 });
    assert.deepEqual([...texts(m1.got), ...texts(m2.got)].sort(), ['from the link 1', 'from the link 2'], 'once each, across the members');
    assert.ok(m1.got.length === 1 && m2.got.length === 1, 'round robin between the members');
    assert.deepEqual(texts(plain.got), ['local'], 'a message handed to a group reaches no other subscription');
    assert.equal(engine.retained('fed/a'), undefined, 'never retained');

    await assert.rejects(engine.publishToGroup('nobody', 'fed/#', 'fed/a', { payload: Buffer.from('x'), qos: 1 }), /no member/);
    engine.setExternalShares(undefined);
    await engine.publish('fed/c', { payload: Buffer.from('local again'), qos: 1 });
    assert.equal([...texts(m1.got), ...texts(m2.got)].filter((t) => t === 'local again').length, 1, 'not external any more: fed locally');
    await engine.close();
  });

  it('federation - a full member of an external group refuses only what is handed to that group', async () => {
    const engine = new Engine();
    engine.setExternalShares(() => true);
    engine.subscribe({ sessionId: 'f', filter: '$share/full/fed/#', qos: 1, sink: pushSink(0), refuseWhenFull: true, maxDepth: 1 });
    await engine.publishToGroup('full', 'fed/#', 'fed/x', { payload: Buffer.from('1'), qos: 1 }); // held: the member is now full
    await engine.publish('fed/x', { payload: Buffer.from('2'), qos: 1 }); // not for the group: not refused because of it
    await assert.rejects(engine.publishToGroup('full', 'fed/#', 'fed/x', { payload: Buffer.from('3'), qos: 1 }), /Quota exceeded/);
    await engine.close();
  });
});
