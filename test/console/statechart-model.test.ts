import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createActor } from 'xstate';
import { destinationMachine } from '../../actors/destinations/destination.machine.js';
import { stateString } from '../../src/runtime/inspector.js';
import { machineDefinition, type MachineDefinition } from '../../src/runtime/machine-definition.js';

/**
 * What the console's statechart highlights (console/lib/statechart.js, run here in Node): the active states of an
 * actor's state string, parallel regions included, and the transitions a live transition took. The state strings
 * come from a real destination machine, written as the inspector writes them.
 */
interface Model {
  activePaths(def: MachineDefinition, state: string): Set<string>;
  firedTransitions(def: MachineDefinition, t: { from: string; to: string; event: string }): number[];
}
const model = (await import('../../console/lib/statechart.js' as string)) as Model;

test('console statecharts - a parallel state string highlights each region and the transition taken', () => {
  const def = machineDefinition(destinationMachine);
  const actor = createActor(destinationMachine.provide({ actions: { pauseDestination: () => {}, resumeDestination: () => {} } }), { input: { name: 'a/b', type: 'topic' } }).start();
  const before = stateString(actor.getSnapshot().value);
  assert.equal(before, 'live.run.active,load.normal', 'a later region is written relative to its parallel state');
  assert.deepEqual([...model.activePaths(def, before)].sort(), ['live', 'live.load', 'live.load.normal', 'live.run', 'live.run.active']);

  actor.send({ type: 'destination.pause' } as never);
  const after = stateString(actor.getSnapshot().value);
  assert.ok(model.activePaths(def, after).has('live.run.paused'));
  const fired = model.firedTransitions(def, { from: before, to: after, event: 'destination.pause' }).map((i) => def.transitions[i]!);
  assert.deepEqual(fired.map((t) => [t.source, t.targets]), [['live.run.active', ['live.run.paused']]]);
  assert.deepEqual(model.firedTransitions(def, { from: before, to: after, event: 'destination.resume' }), [], 'not a transition of another event');
  actor.stop();
});
