import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { loadConfig } from '../../src/config/load.js';
import { ConfigError } from '../../src/errors.js';
import { CONFIG_DIR, startServer, type TestServer } from '../helpers.js';

/**
 * The cap on activated virtual actors per kind (MessageDaemon.virtualActors.maxActive): inspecting many actors one
 * by one keeps at most the cap activated (the least recently used at rest is passivated first); busy actors
 * (paused) used within the last second are not passivated, so a command beyond the cap still gets its actor and
 * the count goes back to the cap at the next activation; a passivated paused destination stays paused.
 */
const CAP = 5;

describe('virtual actor cap', () => {
  let s: TestServer;
  before(async () => {
    s = await startServer({ overrides: { RestApi: { enableCache: false }, MessageDaemon: { enableSystemTopics: false, virtualActors: { maxActive: CAP } } } });
  });
  after(async () => s?.close());

  const activated = () => s.rt.childActors('destinations').filter(([id]) => id.startsWith('destination:')).length;
  const inspect = async (name: string) => {
    const r = await s.inject(`/api/v1/server/actors/${encodeURIComponent(`destination:${name}`)}`);
    assert.equal(r.statusCode, 200, r.body);
    return r.json() as { state: string; status: string };
  };
  const listed = async (name: string) => {
    const r = await s.inject(`/api/v1/server/actors?prefix=${encodeURIComponent(`destination:${name}`)}&limit=1`);
    assert.equal(r.statusCode, 200, r.body);
    return (r.json() as { items: Array<{ systemId: string; state: string; status: string }> }).items.find((i) => i.systemId === `destination:${name}`);
  };
  const command = (name: string, state: string) =>
    s.inject({ method: 'PATCH', url: `/api/v1/server/destinations/${encodeURIComponent(name)}`, payload: { state } });

  test('virtual actors - inspecting 200 destinations one by one keeps at most maxActive activated, least recently used out first', async () => {
    const e = s.rt.engine!;
    for (let i = 0; i < 200; i++) await e.publish(`cap/${i}`, { payload: 'x' });
    let most = 0;
    for (let i = 0; i < 200; i++) {
      const one = await inspect(`cap/${i}`);
      assert.equal(one.state, 'live.run.active,load.normal');
      most = Math.max(most, activated());
    }
    assert.equal(most, CAP, 'never more than the cap activated');
    // the last CAP inspected are the ones left; the first ones were passivated and are listed passive
    assert.equal((await listed('cap/199'))?.status, 'active');
    assert.equal((await listed('cap/0'))?.status, 'passive');
    // an activated one used again becomes the most recently used: it survives the next activations
    await inspect('cap/195');
    for (let i = 0; i < CAP - 1; i++) await inspect(`cap/${100 + i}`);
    assert.equal((await listed('cap/195'))?.status, 'active', 'used again: not the least recently used');
    assert.equal((await listed('cap/196'))?.status, 'passive', 'the least recently used went');
    assert.equal(s.rt.passivateIdle(0), CAP, 'all at rest');
  });

  test('virtual actors - beyond the cap a command still gets its actor; busy ones go only once idle for a second, and stay paused', async () => {
    const e = s.rt.engine!;
    for (let i = 0; i <= CAP; i++) {
      const r = await command(`cap/${i}`, 'paused');
      assert.equal(r.statusCode, 200, r.body);
    }
    // CAP + 1 paused destinations, each used within the last second: none could be passivated to make room
    assert.equal(activated(), CAP + 1, 'the command beyond the cap was carried out by an activated actor');
    for (let i = 0; i <= CAP; i++) assert.equal(e.isPaused(`cap/${i}`), true);
    await new Promise((r) => setTimeout(r, 1200));
    // the next activation passivates the least recently used busy ones until it fits
    assert.equal((await inspect('cap/50')).state, 'live.run.active,load.normal');
    assert.equal(activated(), CAP);
    const first = await listed('cap/0');
    assert.deepEqual([first?.status, first?.state], ['passive', 'live.run.paused,load.normal'], 'passivated, still paused (the engine record)');
    assert.equal(e.isPaused('cap/0'), true);
    // and a command on it activates it again, paused
    const r = await command('cap/0', 'paused');
    assert.equal(r.statusCode, 200, r.body);
    assert.match(r.body, /No change/i);
    for (let i = 0; i <= CAP; i++) assert.equal((await command(`cap/${i}`, 'resumed')).statusCode, 200);
  });

  test('virtual actors - the subscription kind has its own cap: 30 durable subscriptions inspected one by one', async () => {
    const e = s.rt.engine!;
    const subs = Array.from({ length: 30 }, (_, i) => e.subscribe({ sessionId: `cap-${i}`, filter: `cap/sub/${i}`, durable: true, qos: 1, sink: { kind: 'push', deliver: () => true } }));
    const activeSubs = () => s.rt.childActors('subscriptions').filter(([id]) => id.startsWith('subscription:')).length;
    let most = 0;
    for (const sub of subs) {
      const r = await s.inject(`/api/v1/server/actors/${encodeURIComponent(`subscription:${sub.key}`)}`);
      assert.equal(r.statusCode, 200, r.body);
      assert.equal(r.json().state, 'active');
      most = Math.max(most, activeSubs());
    }
    assert.equal(most, CAP);
    for (const sub of subs) e.unsubscribe(sub);
  });

  test('virtual actors - MessageDaemon.virtualActors.maxActive is validated', () => {
    for (const bad of [0, -1, 1.5, 'many', 2_000_000]) {
      assert.throws(
        () => loadConfig({ configDir: CONFIG_DIR, env: {}, overrides: { MessageDaemon: { virtualActors: { maxActive: bad } } } } as never),
        (err: Error) => err instanceof ConfigError && /maxActive/.test(err.message),
        `maxActive ${String(bad)} refused`,
      );
    }
    assert.equal(loadConfig({ configDir: CONFIG_DIR, env: {} }).config.MessageDaemon.virtualActors.maxActive, 1000, 'default');
  });
});
