import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createActor, fromCallback, fromPromise, SimulatedClock } from 'xstate';
import {
  backoffDelay,
  integrationConnectionState,
  integrationMachine,
  integrationRunState,
} from '../../actors/integrations/integration.machine.js';

/** A link whose connect fails `failures` times, then succeeds; records every close and every lost-callback. */
function harness(opts: { failures: number; jitter?: number }) {
  let attempts = 0;
  const closes: string[] = [];
  let lose: ((reason: string) => void) | undefined;
  const logic = integrationMachine.provide({
    actors: {
      connectTransport: fromPromise(async () => {
        attempts++;
        if (attempts <= opts.failures) throw new Error(`refused #${attempts}`);
      }),
      establishLinks: fromPromise(async () => {}),
      linkFlow: fromCallback(({ sendBack }) => {
        lose = (reason) => sendBack({ type: 'transport.lost', reason });
        return () => {
          lose = undefined;
        };
      }),
    },
    actions: { closeTransport: (_a, p: { name: string }) => void closes.push(p.name) },
  });
  const clock = new SimulatedClock();
  const actor = createActor(logic, {
    clock,
    input: { name: 'l1', autoStart: true, backoffInitial: 100, backoffMax: 800, jitter: opts.jitter ?? 0 },
  });
  const conn = () => integrationConnectionState(actor.getSnapshot().value);
  const run = () => integrationRunState(actor.getSnapshot().value);
  const settle = () => new Promise((r) => setImmediate(r));
  return { actor, clock, conn, run, settle, closes, attempts: () => attempts, lose: (r: string) => lose?.(r) };
}

test('links - backoff doubles from the initial wait up to the cap, less at most the jitter fraction', () => {
  const ctx = { backoffInitial: 100, backoffMax: 800, jitter: 0 };
  assert.deepEqual([1, 2, 3, 4, 5, 9].map((attempts) => backoffDelay({ ...ctx, attempts })), [100, 200, 400, 800, 800, 800]);
  const jittered = backoffDelay({ ...ctx, jitter: 0.5, attempts: 3 }, () => 1);
  assert.equal(jittered, 200); // 400 less half of it
  for (let i = 0; i < 50; i++) {
    const d = backoffDelay({ ...ctx, jitter: 0.2, attempts: 4 });
    assert.ok(d >= 640 && d <= 800, `jittered wait ${d} within [640, 800]`);
  }
});

test('links - a refused connection goes Delayed, retries with growing waits and ends Established; the attempts reset', async () => {
  const h = harness({ failures: 3 });
  h.actor.start();
  await h.settle();
  assert.equal(h.run(), 'Started');
  assert.equal(h.conn(), 'Delayed');
  assert.equal(h.actor.getSnapshot().context.lastError, 'refused #1');
  assert.equal(h.actor.getSnapshot().context.delayMs, 100);
  h.clock.increment(99);
  await h.settle();
  assert.equal(h.attempts(), 1, 'no retry before the backoff ran out');
  h.clock.increment(1);
  await h.settle();
  assert.equal(h.attempts(), 2);
  assert.equal(h.actor.getSnapshot().context.delayMs, 200, 'the second wait doubles');
  h.clock.increment(200);
  await h.settle();
  assert.equal(h.actor.getSnapshot().context.delayMs, 400);
  h.clock.increment(400);
  await h.settle();
  assert.equal(h.attempts(), 4);
  assert.equal(h.conn(), 'Established');
  assert.equal(h.actor.getSnapshot().context.attempts, 0);
  assert.ok(h.closes.length >= 3, 'each Delayed closes the failed transport');
  h.actor.stop();
});

test('links - a link unestablished for longer than the backoff cap is tagged degraded (health Warning) until established', async () => {
  const h = harness({ failures: 100 });
  h.actor.start();
  await h.settle();
  assert.equal(h.actor.getSnapshot().hasTag('degraded'), false);
  for (let t = 0; t < 8; t++) {
    h.clock.increment(100);
    await h.settle();
  }
  assert.equal(h.actor.getSnapshot().hasTag('degraded'), true, 'stalled after backoffMax (800 ms) without Established');
  assert.equal(h.conn(), 'Delayed');
  // stopping clears it (a stopped link is not a problem)
  h.actor.send({ type: 'integration.stop' });
  assert.equal(h.conn(), 'Shutdown');
  assert.equal(h.actor.getSnapshot().hasTag('degraded'), false);
  h.actor.stop();
});

test('links - a lost transport goes Delayed then back to Established; pause closes, resume reconnects, stop is Shutdown', async () => {
  const h = harness({ failures: 0 });
  h.actor.start();
  await h.settle();
  assert.equal(h.conn(), 'Established');
  h.lose('socket closed');
  assert.equal(h.conn(), 'Delayed');
  assert.equal(h.actor.getSnapshot().context.lastError, 'socket closed');
  h.clock.increment(100);
  await h.settle();
  assert.equal(h.conn(), 'Established');

  const closesBefore = h.closes.length;
  h.actor.send({ type: 'integration.pause' });
  assert.equal(h.run(), 'Paused');
  assert.equal(h.conn(), 'Disconnected');
  assert.equal(h.closes.length, closesBefore + 1, 'pause closes the transport: nothing flows');
  assert.equal(h.actor.getSnapshot().can({ type: 'integration.pause' }), false);
  h.actor.send({ type: 'integration.resume' });
  await h.settle();
  assert.equal(h.run(), 'Started');
  assert.equal(h.conn(), 'Established');
  h.actor.send({ type: 'integration.stop' });
  assert.equal(h.run(), 'Stopped');
  assert.equal(h.conn(), 'Shutdown');
  assert.equal(h.actor.getSnapshot().can({ type: 'integration.resume' }), false);
  h.actor.send({ type: 'integration.start' });
  await h.settle();
  assert.equal(h.conn(), 'Established');
  h.actor.stop();
});

test('links - autoStart false waits Stopped for a start', async () => {
  const logic = integrationMachine.provide({
    actors: { connectTransport: fromPromise(async () => {}), establishLinks: fromPromise(async () => {}) },
  });
  const actor = createActor(logic, { input: { name: 'x', autoStart: false, backoffInitial: 10, backoffMax: 10, jitter: 0 } });
  actor.start();
  assert.equal(integrationRunState(actor.getSnapshot().value), 'Stopped');
  assert.equal(integrationConnectionState(actor.getSnapshot().value), 'Shutdown');
  actor.stop();
});
