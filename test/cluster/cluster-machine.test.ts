/**
 * The cluster machine with a fake membership (machine.provide): lifecycle only, no NATS.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createActor, fromCallback } from 'xstate';
import { clusterMachine, clusterStateName, type ClusterEvent, type ClusterInput } from '../../actors/cluster/cluster.machine.js';

function start() {
  let send!: (e: ClusterEvent) => void;
  let stopped = 0;
  const membership = fromCallback<ClusterEvent, ClusterInput>(({ sendBack }) => {
    send = sendBack;
    return () => void stopped++;
  });
  const actor = createActor(clusterMachine.provide({ actors: { membership } }), { input: { nodeId: 'n1', clusterName: 'main' } });
  actor.start();
  return { actor, send: (e: ClusterEvent) => send(e), stopped: () => stopped };
}

test('cluster machine - connecting → member ⇄ isolated, the epoch and the reason kept in context', () => {
  const { actor, send } = start();
  assert.equal(clusterStateName(actor.getSnapshot().value), 'Connecting');
  send({ type: 'membership.member', epoch: 3 });
  assert.equal(clusterStateName(actor.getSnapshot().value), 'Member');
  assert.equal(actor.getSnapshot().context.epoch, 3);
  send({ type: 'membership.isolated', reason: 'NATS connection lost' });
  assert.equal(clusterStateName(actor.getSnapshot().value), 'Isolated');
  assert.equal(actor.getSnapshot().context.lastError, 'NATS connection lost');
  send({ type: 'membership.member', epoch: 4 }); // declared gone meanwhile: rejoined under a new epoch
  assert.equal(clusterStateName(actor.getSnapshot().value), 'Member');
  assert.deepEqual([actor.getSnapshot().context.epoch, actor.getSnapshot().context.lastError], [4, undefined]);
  actor.stop();
});

test('cluster machine - refused stays refused; the membership is stopped with the actor only', () => {
  const { actor, send, stopped } = start();
  send({ type: 'membership.refused', reason: 'node id n1 is held by another process' });
  assert.equal(clusterStateName(actor.getSnapshot().value), 'Refused');
  send({ type: 'membership.member', epoch: 1 });
  assert.equal(clusterStateName(actor.getSnapshot().value), 'Refused');
  assert.equal(stopped(), 0, 'refused keeps the membership (its view says why)');
  actor.stop();
  assert.equal(stopped(), 1);
});
