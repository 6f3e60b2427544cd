/** The REST response cache (src/api/cache.ts): state views dropped on transitions, a cap on its entries. */
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { test } from 'node:test';
import { ResponseCache, type TransitionSource } from '../../src/api/cache.js';
import type { ActorTransition } from '../../src/runtime/events.js';

function bus(): TransitionSource & { move(kind: string): void; listeners(): number } {
  const e = new EventEmitter();
  return {
    on: (ev, l) => e.on(ev, l),
    off: (ev, l) => e.off(ev, l),
    move: (kind) => e.emit('actor.transition', { systemId: `${kind}:x`, kind, from: 'a', to: 'b', event: 'e', at: 0 } satisfies ActorTransition),
    listeners: () => e.listenerCount('actor.transition'),
  };
}

test('cache - a state view is dropped when an actor of its kind moves, not when another kind does', async () => {
  const c = new ResponseCache(true, 30000, 10000);
  const b = bus();
  c.follow(b);
  c.follow(b); // once only
  assert.equal(b.listeners(), 1);
  let state = 'Started';
  const view = () => c.getState('interfaces|', ['endpoint'], () => state);
  assert.equal(await view(), 'Started');
  state = 'Failed';
  assert.equal(await view(), 'Started', 'cached while nothing moved');
  b.move('integration');
  assert.equal(await view(), 'Started', 'another kind leaves it');
  b.move('endpoint');
  assert.equal(await view(), 'Failed');
  c.close();
  assert.equal(b.listeners(), 0, 'close stops listening');
});

test('cache - a view made while its actors moved is answered but not kept; without follow() state views are not cached', async () => {
  const c = new ResponseCache(true, 30000, 10000);
  const b = bus();
  let calls = 0;
  // not following: never cached
  await c.getState('k|', ['endpoint'], () => ++calls);
  await c.getState('k|', ['endpoint'], () => ++calls);
  assert.equal(calls, 2);
  c.follow(b);
  const r = await c.getState('k|', ['endpoint'], async () => {
    b.move('endpoint'); // the actor changes state while the view is being made
    return 'old';
  });
  assert.equal(r, 'old');
  assert.equal(c.size, 0, 'not stored');
  assert.equal(await c.getState('k|', ['endpoint'], () => 'new'), 'new');
  assert.equal(c.size, 1);
  c.close();
});

test('cache - at most maxEntries entries: the oldest goes first', async () => {
  const c = new ResponseCache(true, 30000, 10000, Date.now, 3);
  for (let i = 0; i < 10; i++) await c.get(`f|${i}`, () => i);
  assert.equal(c.size, 3);
  let produced = false;
  assert.equal(await c.get('f|9', () => ((produced = true), -1)), 9, 'the newest is still there');
  assert.equal(produced, false);
  assert.equal(await c.get('f|0', () => -1), -1, 'the oldest was dropped');
  c.close();
});
