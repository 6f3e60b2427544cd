import { randomUUID } from 'node:crypto';
import { errors as joseErrors, jwtVerify, SignJWT } from 'jose';
import type { Store } from '../store/store.js';

/**
 * Login sessions. A login makes a server-side session (kept in the `sessions` sublevel, so it survives a restart)
 * and a JWT (HS256, key made on first boot and kept in the store) naming it in `sid`. A token is accepted only
 * while its session exists, so logout really ends it.
 */
export interface SessionRecord {
  sessionId: string;
  username: string;
  uniqueId: string;
  createdAt: number;
  expiresAt: number;
  longLived: boolean;
  /** LoginRequest.persistent / sessionId, for the messaging engine session. */
  persistent: boolean;
  engineSessionId?: string;
  clientAddress?: string;
}

export const SHORT_LIFETIME_S = 15 * 60;
export const LONG_LIFETIME_S = 7 * 24 * 60 * 60;
const ISSUER = 'switchyard';

export class TokenInvalidError extends Error {
  /** `forged`: not signed by this server (or malformed), a guess that counts against the source address. */
  constructor(
    message: string,
    readonly forged = false,
  ) {
    super(message);
  }
}

export class Sessions {
  private readonly sessions = new Map<string, SessionRecord>();

  constructor(
    private readonly store: Store,
    private readonly key: Uint8Array,
    private readonly now: () => number,
  ) {}

  async load(): Promise<void> {
    this.sessions.clear();
    const now = this.now();
    for await (const [k, s] of this.store.entriesJson<SessionRecord>('sessions')) {
      if (s.expiresAt > now) this.sessions.set(k, s);
      else await this.store.del('sessions', k);
    }
  }

  get(sessionId: string): SessionRecord | undefined {
    const s = this.sessions.get(sessionId);
    return s && s.expiresAt > this.now() ? s : undefined;
  }

  private async sign(s: SessionRecord): Promise<string> {
    return new SignJWT({ sid: s.sessionId, uid: s.uniqueId })
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .setSubject(s.username)
      .setIssuer(ISSUER)
      .setIssuedAt(Math.floor(this.now() / 1000))
      .setExpirationTime(Math.floor(s.expiresAt / 1000))
      .sign(this.key);
  }

  async create(user: { username: string; uniqueId: string }, opts: { longLived: boolean; persistent: boolean; engineSessionId?: string; clientAddress?: string }) {
    await this.sweep();
    const lifetime = opts.longLived ? LONG_LIFETIME_S : SHORT_LIFETIME_S;
    const now = this.now();
    const s: SessionRecord = {
      sessionId: randomUUID(),
      username: user.username,
      uniqueId: user.uniqueId,
      createdAt: now,
      expiresAt: now + lifetime * 1000,
      longLived: opts.longLived,
      persistent: opts.persistent,
      ...(opts.engineSessionId ? { engineSessionId: opts.engineSessionId } : {}),
      ...(opts.clientAddress ? { clientAddress: opts.clientAddress } : {}),
    };
    await this.store.putJson('sessions', s.sessionId, s);
    this.sessions.set(s.sessionId, s);
    return { session: s, token: await this.sign(s), maxAge: lifetime };
  }

  /** Verifies signature (HS256 only), issuer, expiry and that the session still exists for the same user. */
  async verify(token: string): Promise<SessionRecord> {
    let payload;
    try {
      ({ payload } = await jwtVerify(token, this.key, { algorithms: ['HS256'], issuer: ISSUER, currentDate: new Date(this.now()) }));
    } catch (err) {
      if (err instanceof joseErrors.JWTExpired) throw new TokenInvalidError('The token has expired; log in again');
      throw new TokenInvalidError('The token is not valid', true);
    }
    const s = typeof payload.sid === 'string' ? this.get(payload.sid) : undefined;
    if (!s || s.username !== payload.sub) throw new TokenInvalidError('The session of this token has ended; log in again');
    return s;
  }

  /** A new token for the same session, with the session's own lifetime (7 days stays 7 days). */
  async refresh(sessionId: string) {
    const s = this.get(sessionId);
    if (!s) throw new TokenInvalidError('The session has ended; log in again');
    const lifetime = s.longLived ? LONG_LIFETIME_S : SHORT_LIFETIME_S;
    const next = { ...s, expiresAt: this.now() + lifetime * 1000 };
    await this.store.putJson('sessions', s.sessionId, next);
    this.sessions.set(s.sessionId, next);
    return { session: next, token: await this.sign(next), maxAge: lifetime };
  }

  async end(sessionId: string): Promise<SessionRecord | undefined> {
    const s = this.sessions.get(sessionId);
    this.sessions.delete(sessionId);
    await this.store.del('sessions', sessionId);
    return s;
  }

  /** Ends every session of a user (password reset, user deleted); `except` keeps the caller's own. */
  async endAllFor(uniqueId: string, except?: string): Promise<string[]> {
    const ended: string[] = [];
    for (const s of [...this.sessions.values()]) {
      if (s.uniqueId === uniqueId && s.sessionId !== except) {
        await this.end(s.sessionId);
        ended.push(s.sessionId);
      }
    }
    return ended;
  }

  private async sweep(): Promise<void> {
    const now = this.now();
    for (const [k, s] of this.sessions) {
      if (s.expiresAt <= now) {
        this.sessions.delete(k);
        await this.store.del('sessions', k);
      }
    }
  }
}
