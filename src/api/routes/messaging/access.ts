import type { FastifyRequest } from 'fastify';
import { hasWildcard, parseSharedFilter } from '../../../engine/index.js';
import { ForbiddenError } from '../../../errors.js';
import type { Runtime } from '../../../runtime/runtime.js';
import { ANONYMOUS, type Permission, type Principal } from '../../../security/types.js';

/** The caller's principal (set by the auth plugin; anonymous when security is off). */
export function principalOf(request: FastifyRequest): Principal {
  return (request as { principal?: Principal }).principal ?? ANONYMOUS;
}

/** Checks a destination permission the way MQTT does; 403 naming what is missing. */
export function requireDestination(rt: Runtime, request: FastifyRequest, permission: Permission, destination: string): void {
  const principal = principalOf(request);
  const type = rt.engine?.isQueueName(destination) ? 'Queue' : 'Topic';
  if (!rt.security.isAllowed(principal, permission, type, destination)) {
    throw new ForbiddenError(`Access denied: ${principal.username} lacks ${permission} on ${type} ${destination}`);
  }
}

/** subscribe on the filter, and wildcard_subscription on the server for a wildcard filter. */
export function requireSubscribe(rt: Runtime, request: FastifyRequest, filter: string): void {
  const topic = parseSharedFilter(filter)?.filter ?? filter;
  requireDestination(rt, request, 'subscribe', topic);
  if (hasWildcard(topic)) {
    const principal = principalOf(request);
    if (!rt.security.isAllowed(principal, 'wildcard_subscription', 'Server', rt.serverName)) {
      throw new ForbiddenError(`Access denied: ${principal.username} lacks wildcard_subscription on Server ${rt.serverName}`);
    }
  }
}

/**
 * A subscription of a persistent login's session is durable: it needs durable on the same resource as subscribe
 * (the topic or queue; the filter itself for a wildcard filter; a shared filter's topic).
 */
export function requireDurable(rt: Runtime, request: FastifyRequest, filter: string): void {
  const topic = parseSharedFilter(filter)?.filter ?? filter;
  const principal = principalOf(request);
  const type = rt.engine?.isQueueName(topic) ? 'Queue' : 'Topic';
  if (!rt.security.isAllowed(principal, 'durable', type, topic)) {
    throw new ForbiddenError(
      `Access denied: ${principal.username} lacks durable on ${type} ${topic}, needed to subscribe in the durable session of a persistent login; log in with persistent: false for a subscription that ends with the session`,
    );
  }
}
