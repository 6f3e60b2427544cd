import { randomUUID } from 'node:crypto';
import { ForbiddenError } from '../errors.js';

/** A temporary token for opening an SSE stream: random, single use, expires after `lifetime` ms. */
export interface StreamToken {
  token: string;
  kind: 'log' | 'messaging';
  /** For messaging tokens: the destination the token is bound to. */
  destination?: string;
  /** The session that asked for it (REST session id, or the principal once security lands). */
  sessionId?: string;
  expires: number;
}

export class TokenStore {
  private readonly tokens = new Map<string, StreamToken>();
  constructor(
    private readonly lifetime: number,
    private readonly now: () => number = Date.now,
  ) {}

  issue(kind: StreamToken['kind'], extra: { destination?: string; sessionId?: string } = {}): string {
    this.sweep();
    const token = randomUUID();
    this.tokens.set(token, { token, kind, ...extra, expires: this.now() + this.lifetime });
    return token;
  }

  /** Uses a token up. Unknown, already used, expired, wrong kind or wrong session: 403 with the reason. */
  consume(token: string, kind: StreamToken['kind'], sessionId?: string): StreamToken {
    const rec = this.tokens.get(token);
    this.tokens.delete(token);
    if (!rec) throw new ForbiddenError('Token is unknown or has already been used');
    if (rec.expires <= this.now()) throw new ForbiddenError('Token has expired');
    if (rec.kind !== kind) throw new ForbiddenError(`Token was issued for a ${rec.kind} stream`);
    if (rec.sessionId !== undefined && rec.sessionId !== sessionId) {
      throw new ForbiddenError('Token belongs to another session');
    }
    return rec;
  }

  private sweep(): void {
    const now = this.now();
    for (const [k, v] of this.tokens) if (v.expires <= now) this.tokens.delete(k);
  }
}
