/**
 * The runtime's one typed event bus: every event a service, a route or main.ts exchanges through the runtime is
 * named with its arguments. The kernel's own events are here; a domain adds its events by declaration merging, next
 * to the code that emits them (the engine's in src/messaging/messaging.service.ts, `user.deleted` in
 * src/security/types.ts, the cluster's in src/cluster/cluster.service.ts):
 *
 *   declare module '../runtime/events.js' {
 *     interface RuntimeEvents { 'integration.linked': [name: string, remote: string] }
 *   }
 *
 * Listeners run synchronously in registration order (Node's EventEmitter underneath); a listener that throws is
 * logged and does not stop the others.
 */
export interface RuntimeEvents {
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
