import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createActor, fromPromise, SimulatedClock } from 'xstate';
import { deviceMachine, type DeviceReading } from '../../actors/devices/device.machine.js';
import { diagramMarkdown } from '../../src/runtime/diagrams.js';
import { ROOT } from '../helpers.js';

/** The device lifecycle with fake I/O on XState's simulated clock (delays advance by hand). */
function harness() {
  const state = { answering: true, inits: 0, reads: 0, published: [] as DeviceReading[] };
  const logic = deviceMachine.provide({
    actors: {
      initDevice: fromPromise<void, { name: string }>(async () => {
        state.inits++;
        if (!state.answering) throw new Error('Remote I/O error');
      }),
      readDevice: fromPromise<DeviceReading, { name: string }>(async () => {
        state.reads++;
        if (!state.answering) throw new Error('Remote I/O error');
        return { temperature: 21.5 };
      }),
    },
    actions: { publishReading: ({ event }) => state.published.push((event as unknown as { output: DeviceReading }).output) },
  });
  const clock = new SimulatedClock();
  const actor = createActor(logic, { clock, input: { name: 'd', interval: 1000, retryInitial: 100, retryMax: 5000, offlineAfter: 3 } });
  return { state, clock, actor };
}
const settle = () => new Promise((r) => setTimeout(r, 5));

test('devices - machine: detected → online → polling publishes at once, then every interval', async () => {
  const { state, clock, actor } = harness();
  actor.start();
  await settle(); // init resolves
  clock.increment(0);
  await settle(); // first reading, taken at once
  assert.equal(state.published.length, 1);
  assert.equal(actor.getSnapshot().value, 'online');
  clock.increment(999);
  await settle();
  assert.equal(state.published.length, 1, 'not before the interval');
  clock.increment(1);
  await settle();
  assert.equal(state.published.length, 2);
  actor.stop();
});

test('devices - machine: failures back off (doubling), go offline after offlineAfter, recover on device.found; device.gone removes', async () => {
  const { state, clock, actor } = harness();
  actor.start();
  await settle();
  clock.increment(0);
  await settle();
  state.answering = false;
  clock.increment(1000);
  await settle();
  assert.equal(actor.getSnapshot().value, 'error');
  assert.equal(actor.getSnapshot().context.attempts, 1);
  const inits = state.inits;
  clock.increment(99);
  await settle();
  assert.equal(state.inits, inits, 'waits the first backoff (100 ms)');
  clock.increment(1);
  await settle();
  assert.equal(state.inits, inits + 1, 're-initialises after the backoff');
  assert.equal(actor.getSnapshot().value, 'error');
  clock.increment(199);
  await settle();
  assert.equal(state.inits, inits + 1, 'second backoff is 200 ms');
  clock.increment(1);
  await settle();
  assert.equal(actor.getSnapshot().value, 'offline', 'offline after 3 consecutive failures');
  assert.ok(actor.getSnapshot().hasTag('degraded'));
  state.answering = true;
  actor.send({ type: 'device.found' });
  await settle();
  clock.increment(0);
  await settle();
  assert.equal(actor.getSnapshot().value, 'online');
  assert.equal(actor.getSnapshot().context.attempts, 0);
  actor.send({ type: 'device.gone' });
  assert.equal(actor.getSnapshot().status, 'done');
});

test('devices - docs/machines/device.md is generated from the machine (npm run diagrams)', () => {
  assert.equal(readFileSync(join(ROOT, 'docs', 'machines', 'device.md'), 'utf8'), diagramMarkdown(deviceMachine));
});
