/**
 * The partition policy's admission (src/cluster/admission.ts) as the membership's states change: nothing is refused
 * before the first membership or while a member; everything that changes cluster state is refused once the node has
 * been a member and is cut off (Isolated, Connecting again) or its node id is held by another process (Refused).
 * The answers on the wire are in test/cluster/partition.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { PartitionAdmission } from '../../src/cluster/admission.js';
import { ClusterState } from '../../src/cluster/membership.js';

describe('cluster admission', () => {
  test('cluster admission - a starting broker refuses nothing until it has been a member, then refuses while cut off and not once it is back', () => {
    const a = new PartitionAdmission();
    a.onState(ClusterState.Connecting, 'connecting to NATS');
    assert.equal(a.refusal(), undefined, 'the first start serves as a single broker');
    a.onState(ClusterState.Member, '');
    assert.equal(a.refusal(), undefined);
    a.onState(ClusterState.Isolated, 'no connection to NATS for a heartbeat');
    assert.match(a.refusal() ?? '', /cut off from the cluster \(Isolated: no connection to NATS for a heartbeat\)/);
    a.onState(ClusterState.Connecting, 'cannot take the lease');
    assert.match(a.refusal() ?? '', /Connecting: cannot take the lease/, 'connecting again after having been a member');
    a.onState(ClusterState.Member, '');
    assert.equal(a.refusal(), undefined, 'back: served again');
    a.onState(ClusterState.Stopped, 'stopped');
    assert.equal(a.refusal(), undefined, 'the cluster stopped (shutdown): nothing left to protect');
  });

  test('cluster admission - a node whose id another process holds refuses from the start', () => {
    const a = new PartitionAdmission();
    a.onState(ClusterState.Refused, 'node id x is held by another process');
    assert.match(a.refusal() ?? '', /Refused: node id x is held by another process/);
  });
});
