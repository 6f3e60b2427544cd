import { randomUUID } from 'node:crypto';
import { BrokerError, ForbiddenError } from '../errors.js';
import type { Runtime } from '../runtime/runtime.js';
import type { Principal } from '../security/types.js';

/**
 * A temporary token for opening an SSE stream: random, single use, expires after `lifetime` ms
 * (`RestApi.sseTokenLifetime`, 60 s). The token replaces authentication for the stream (service specification,
 * Authentication 5): it is bound to the user who asked for it, and the stream runs with that user's rights as they
 * are when the stream opens, so a browser `EventSource` from another origin needs nothing but the URL.
 */
export interface StreamToken {
  token: string;
  kind: 'log' | 'messaging' | 'actors';
  /** For messaging tokens: the destination the token is bound to. */
  destination?: string;
  /** The user who asked for it. */
  principal: Principal;
  expires: number;
}

/** Outstanding (unused, unexpired) tokens per user, and in all: beyond that a token request is a 429. */
export const MAX_TOKENS_PER_USER = 100;
export const MAX_TOKENS = 10_000;

export class TokenStore {
  private readonly tokens = new Map<string, StreamToken>();
  constructor(
    private readonly lifetime: number,
    private readonly now: () => number = Date.now,
  ) {}

  issue(kind: StreamToken['kind'], principal: Principal, extra: { destination?: string } = {}): string {
    this.sweep();
    if (this.tokens.size >= MAX_TOKENS) throw new BrokerError(`Too many outstanding stream tokens (${MAX_TOKENS}); use or let some expire first`, 429);
    let mine = 0;
    for (const t of this.tokens.values()) if (t.principal.uniqueId === principal.uniqueId) mine++;
    if (mine >= MAX_TOKENS_PER_USER) {
      throw new BrokerError(`Too many outstanding stream tokens for ${principal.username} (${MAX_TOKENS_PER_USER}); use or let some expire first`, 429);
    }
    const token = randomUUID();
    this.tokens.set(token, { token, kind, principal, ...extra, expires: this.now() + this.lifetime });
    return token;
  }

  /** Uses a token up. Unknown, already used, expired or wrong kind: 403 with the reason. */
  consume(token: string, kind: StreamToken['kind']): StreamToken {
    const rec = this.tokens.get(token);
    this.tokens.delete(token);
    if (!rec) throw new ForbiddenError('Token is unknown or has already been used');
    if (rec.expires <= this.now()) throw new ForbiddenError('Token has expired');
    if (rec.kind !== kind) throw new ForbiddenError(`Token was issued for a ${rec.kind} stream`);
    return rec;
  }

  /** Outstanding tokens (for tests). */
  get size(): number {
    return this.tokens.size;
  }

  private sweep(): void {
    const now = this.now();
    for (const [k, v] of this.tokens) if (v.expires <= now) this.tokens.delete(k);
  }
}

/**
 * The principal a stream runs as: the token's user with its current groups (a user deleted since is a 403), or the
 * token's own principal when there are no stored users (authentication off, anonymous).
 */
export function streamPrincipal(rt: Runtime, rec: StreamToken): Principal {
  const sm = rt.service('security')?.manager;
  if (sm === undefined || !sm.enabled || rec.principal.anonymous) return rec.principal;
  const u = sm.identities.user(rec.principal.uniqueId);
  if (!u) throw new ForbiddenError('The user this token was issued to no longer exists');
  return sm.principalOf(u);
}

/** The permission the stream's route would need of a caller, checked for the token's user (403 naming it). */
export function requireStreamPermission(rt: Runtime, principal: Principal, permission: 'connect' | 'view_stats'): void {
  if (!rt.security.enabled || !rt.config.RestApi.enableAuthentication) return;
  if (!rt.security.isAllowed(principal, permission, 'Server', rt.serverName)) {
    throw new ForbiddenError(`Access denied: ${principal.username} lacks ${permission} on Server ${rt.serverName}`);
  }
}
