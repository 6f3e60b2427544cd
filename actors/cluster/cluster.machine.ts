import { assign, fromCallback, setup } from 'xstate';

/**
 * This broker's membership of the cluster (a singleton actor, systemId `cluster`, only when `Cluster.enabled`):
 *
 *   connecting → member ⇄ isolated        (isolated: lost NATS or its quorum; back: member)
 *   connecting / member / isolated → refused   (the node id is held by another process; final until a restart)
 *
 * The machine holds the lifecycle only. Its I/O is supplied by the runtime (src/cluster/cluster.service.ts) with
 * `machine.provide`: `membership` (callback) lives exactly as long as the actor; it owns the NATS connection and the
 * lease (src/cluster/membership.ts), reports its state changes as `membership.*` events, and on exit writes the lease
 * as left and closes the connection.
 */
export interface ClusterInput {
  nodeId: string;
  clusterName: string;
}

export interface ClusterContext extends ClusterInput {
  epoch: number;
  /** Why it is not a member (cleared when it is). */
  lastError?: string;
}

export type ClusterEvent =
  | { type: 'membership.connecting'; reason: string }
  | { type: 'membership.member'; epoch: number }
  | { type: 'membership.isolated'; reason: string }
  | { type: 'membership.refused'; reason: string };

export const clusterMachine = setup({
  types: {
    context: {} as ClusterContext,
    events: {} as ClusterEvent,
    input: {} as ClusterInput,
  },
  actors: {
    membership: fromCallback<ClusterEvent, ClusterInput>(() => () => {}),
  },
  actions: {
    recordMember: assign({ epoch: ({ event }) => (event.type === 'membership.member' ? event.epoch : 0), lastError: undefined }),
    recordReason: assign({ lastError: ({ event }) => ('reason' in event ? event.reason : undefined) }),
  },
}).createMachine({
  id: 'cluster',
  context: ({ input }) => ({ ...input, epoch: 0, lastError: 'connecting to NATS' }),
  invoke: { id: 'membership', src: 'membership', input: ({ context }) => ({ nodeId: context.nodeId, clusterName: context.clusterName }) },
  initial: 'connecting',
  states: {
    connecting: {
      on: {
        'membership.connecting': { actions: 'recordReason' },
        'membership.member': { target: 'member', actions: 'recordMember' },
        'membership.refused': { target: 'refused', actions: 'recordReason' },
      },
    },
    member: {
      on: {
        'membership.member': { actions: 'recordMember' }, // rejoined under a new epoch
        'membership.isolated': { target: 'isolated', actions: 'recordReason' },
        'membership.refused': { target: 'refused', actions: 'recordReason' },
      },
    },
    isolated: {
      on: {
        'membership.isolated': { actions: 'recordReason' },
        'membership.member': { target: 'member', actions: 'recordMember' },
        'membership.refused': { target: 'refused', actions: 'recordReason' },
      },
    },
    refused: {},
  },
});

/** The state as the API names it (src/cluster/membership.ts ClusterState). */
export function clusterStateName(value: unknown): 'Connecting' | 'Member' | 'Isolated' | 'Refused' {
  switch (value) {
    case 'member':
      return 'Member';
    case 'isolated':
      return 'Isolated';
    case 'refused':
      return 'Refused';
    default:
      return 'Connecting';
  }
}
