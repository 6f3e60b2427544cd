import type { DestinationType, DurableChange, Subscription } from '../engine/index.js';
import type { UserDeletion } from '../security/types.js';

/**
 * The runtime's one typed event bus: every event a service, a route or main.ts exchanges through the runtime is
 * named here with its arguments. A new service adds its own events by declaration merging, next to its code:
 *
 *   declare module '../runtime/events.js' {
 *     interface RuntimeEvents { 'integration.linked': [name: string, remote: string] }
 *   }
 *
 * Listeners run synchronously in registration order (Node's EventEmitter underneath); a listener that throws is
 * logged and does not stop the others.
 */
export interface RuntimeEvents {
  'destination.created': [name: string, type: DestinationType];
  'destination.deleted': [name: string, type: DestinationType];
  'destination.highWater': [name: string, depth: number];
  'destination.lowWater': [name: string, depth: number];
  'subscription.changed': [sub: Subscription, change: DurableChange];
  /** A durable subscription reached its cap (full) or has room again (edges only). */
  'subscription.full': [sub: Subscription, full: boolean];
  'store.failed': [err: unknown];
  /** A user was deleted (USER_DELETED): listeners end what it had open and count it into `ended`. */
  'user.deleted': [deletion: UserDeletion];
  /** A REST login session ended (logout). */
  'rest.session.ended': [sessionId: string];
  /** `PATCH /api/v1/server {"state":"shutdown"}`: main.ts closes the listener, then stops the runtime. */
  'shutdown-requested': [];
  /** An actor changed state (from the runtime's inspection of the actor system). */
  'actor.transition': [transition: ActorTransition];
  /** A lifecycle command went through the command helper (src/runtime/command.ts). */
  'actor.command': [command: CommandRecord];
  /** A supervisor spent its restart budget and told its parent; `action` is what the parent does about it. */
  'supervisor.escalated': [escalation: Escalation];
}

export interface ActorTransition {
  systemId: string;
  kind: string;
  from: string;
  to: string;
  event: string;
  /** Epoch ms. */
  at: number;
}

export interface CommandRecord {
  systemId: string;
  event: string;
  outcome: 'sent' | 'no-change' | 'conflict' | 'timeout' | 'missing';
  state: string;
}

export interface Escalation {
  /** The supervisor that failed (`supervisor:<name>` or a shard of one). */
  subtree: string;
  error: string;
  /** restart: the parent restarts it after `delayMs`; give-up: the parent's own budget is spent (server: degraded). */
  action: 'restart' | 'give-up';
  delayMs?: number;
  attempt?: number;
}

export type RuntimeEventName = keyof RuntimeEvents;
export type RuntimeListener<K extends RuntimeEventName> = (...args: RuntimeEvents[K]) => void;
