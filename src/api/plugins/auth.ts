import { randomUUID } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest, RouteOptions } from 'fastify';
import { AddressBlockedError } from '../../security/address-limits.js';
import { HashAbortedError, ServerBusyError } from '../../security/hash-pool.js';
import type { SecurityManager } from '../../security/service.js';
import type { SessionRecord } from '../../security/sessions.js';
import { TokenInvalidError } from '../../security/sessions.js';
import { ANONYMOUS, AuthenticationFailedError, type Principal, type RoutePermission } from '../../security/types.js';
import type { ApiContext } from '../context.js';
import { authContextOf } from './client-address.js';

/**
 * Enforcement for every REST route. When authentication is on (AuthManager.authenticationEnabled and
 * RestApi.enableAuthentication) a route needs a principal (401) and the permission it declares in
 * `config.permission` on its resource (403); routes without a declaration need `rest_api_access` on Server;
 * `config.public: true` marks the open ones (/health, /api/v1/ping, /api/v1/login, the OpenAPI document).
 *
 * The principal comes from, in order: `Authorization: Basic`, `Authorization: Bearer <jwt>`, the
 * `maps_access_token` cookie; with none of them and anonymous access on, the anonymous user. It is put on
 * `request.principal`; a login session (cookie or Bearer) on `request.loginSession`.
 *
 * Public routes ignore credentials entirely: nothing is checked, counted or audited (`/health` with a wrong
 * password is just `/health`). A route marked `readsLoginSession` (the login) only reads an existing login session
 * from the cookie or a Bearer token, quietly. Login limits (docs/security.md): while the source address is blocked
 * after repeated failures, a request with credentials is answered 429 with Retry-After before anything is checked;
 * a forged Bearer token or cookie counts as a failure of the address (an expired one or one of an ended session
 * does not: it was ours).
 */
declare module 'fastify' {
  interface FastifyContextConfig {
    /** Public route that still reads the caller's login session (cookie or Bearer), never Basic credentials. */
    readsLoginSession?: boolean;
  }
  interface FastifyRequest {
    /** Who is calling (set for every matched route; the anonymous principal when authentication is off). */
    principal?: Principal;
    /** How the principal was established. */
    authMethod?: 'basic' | 'bearer' | 'cookie' | 'anonymous' | 'none';
    /** The login session behind a cookie or Bearer token. */
    loginSession?: SessionRecord;
    /**
     * The session id the caller's credentials give (`login:<id>` for a cookie or Bearer login session,
     * `basic:<user uuid>` for Basic); undefined otherwise. Use `sessionIdOf(request)`, which falls back to the
     * `maps_session` cookie.
     */
    sessionId?: string;
    /** The reply of this request (`sessionIdOf` sets the `maps_session` cookie on it). */
    sessionReply?: FastifyReply;
    /** A `maps_session` id made for this request by `sessionIdOf` (the same one for every call). */
    generatedSessionId?: string;
  }
}

export const DEFAULT_PERMISSION: RoutePermission = { permission: 'rest_api_access', resourceType: 'Server' };
export const ACCESS_COOKIE = 'maps_access_token';
export const SESSION_COOKIE = 'maps_session';

/** The permission a route needs, or undefined for a public route. */
export function routePermission(config: { permission?: RoutePermission; public?: boolean } | undefined): RoutePermission | undefined {
  if (config?.public) return undefined;
  const p = config?.permission ?? DEFAULT_PERMISSION;
  return { permission: p.permission, resourceType: p.resourceType ?? 'Server' };
}

/**
 * The session a request belongs to, for binding SSE tokens and REST messaging sessions: the login session (cookie
 * or Bearer), else the `maps_session` cookie, else for Basic callers their user, else a new `maps_session` cookie
 * set on this reply. Values are prefixed by their source, so a cookie can never pose as another kind.
 */
export function sessionIdOf(request: FastifyRequest): string {
  if (request.sessionId) return request.sessionId;
  const c = request.cookies?.[SESSION_COOKIE];
  // The cookie alphabet has no ':', so a cookie can never pose as a login: or basic: session.
  if (c && /^[A-Za-z0-9-]{8,64}$/.test(c)) return c;
  let v = request.generatedSessionId;
  if (!v) {
    v = randomUUID();
    request.generatedSessionId = v;
    request.sessionReply?.setCookie(SESSION_COOKIE, v, { path: '/', httpOnly: true, sameSite: 'lax', secure: request.protocol === 'https' });
  }
  return v;
}

/** LoginRequest.persistent and .sessionId of the caller's login session, for the messaging engine session. */
export function loginSessionOf(request: FastifyRequest): { sessionId: string; persistent: boolean; engineSessionId?: string } | undefined {
  const s = request.loginSession;
  return s ? { sessionId: s.sessionId, persistent: s.persistent, engineSessionId: s.engineSessionId } : undefined;
}

class AuthFailure extends Error {
  constructor(
    message: string,
    readonly error: 'invalid_request' | 'invalid_token',
    readonly retryAfter?: number,
    /** The source address is blocked: 429, not 401. */
    readonly blocked = false,
    /** The password-hashing queue is full: 503, not 401. */
    readonly busy = false,
  ) {
    super(message);
  }
}

/** A public route that reads the login session (the login): cookie or Bearer only, any failure ignored. */
async function readLoginSession(request: FastifyRequest, sm: SecurityManager): Promise<void> {
  const header = request.headers.authorization;
  const bearer = header !== undefined ? /^\s*bearer\s+(\S+)\s*$/i.exec(header)?.[1] : undefined;
  const token = bearer ?? (header === undefined ? request.cookies?.[ACCESS_COOKIE] : undefined);
  if (!token) return;
  try {
    const s = await sm.sessions.verify(token);
    if (!sm.identities.user(s.uniqueId)) return;
    request.loginSession = s;
    request.sessionId = `login:${s.sessionId}`;
  } catch {
    /* no session to replace */
  }
}

async function resolvePrincipal(request: FastifyRequest, reply: FastifyReply, sm: SecurityManager): Promise<void> {
  const ctx = authContextOf(request, reply); // the real address (RestApi.trustedProxies), proxied or not, closed signal
  const header = request.headers.authorization;
  if (header !== undefined || request.cookies?.[ACCESS_COOKIE]) {
    // a blocked address: refused before any check (no scrypt, no lockout state touched)
    const blocked = sm.lockouts.addressRefusal(sm.limitAddress(ctx), { protocol: 'REST', route: request.routeOptions.url });
    if (blocked) throw new AuthFailure(blocked.message, 'invalid_request', blocked.retryAfterSeconds, true);
  }
  let method: 'bearer' | 'cookie' = 'cookie';
  const fromSession = (s: SessionRecord, method: 'bearer' | 'cookie') => {
    const u = sm.identities.user(s.uniqueId);
    if (!u) throw new AuthFailure('The user of this session no longer exists', 'invalid_token');
    request.principal = sm.principalOf(u);
    request.loginSession = s;
    request.authMethod = method;
    request.sessionId = `login:${s.sessionId}`;
  };
  try {
    if (header !== undefined) {
      const m = /^\s*(\S+)\s*(.*)$/.exec(header);
      const scheme = m?.[1]?.toLowerCase();
      const cred = (m?.[2] ?? '').trim();
      if (scheme === 'basic') {
        const decoded = Buffer.from(cred, 'base64').toString('utf8');
        const i = decoded.indexOf(':');
        if (!cred || i < 0) throw new AuthFailure('Malformed Basic credentials: expected base64 of username:password', 'invalid_request');
        request.principal = await sm.authenticateBasic(decoded.slice(0, i), decoded.slice(i + 1), ctx);
        request.authMethod = 'basic';
        request.sessionId = `basic:${request.principal.uniqueId}`;
        return;
      }
      if (scheme === 'bearer') {
        method = 'bearer';
        if (!cred) throw new AuthFailure('Bearer token is missing', 'invalid_request');
        fromSession(await sm.sessions.verify(cred), 'bearer');
        return;
      }
      throw new AuthFailure(`Unsupported Authorization scheme '${m?.[1] ?? ''}'; use Basic or Bearer`, 'invalid_request');
    }
    const cookie = request.cookies?.[ACCESS_COOKIE];
    if (cookie) fromSession(await sm.sessions.verify(cookie), 'cookie');
  } catch (err) {
    if (err instanceof AuthFailure) throw err;
    if (err instanceof TokenInvalidError) {
      if (err.forged) {
        const fields = { username: null, protocol: 'REST', clientAddress: request.ip, method, reason: 'invalid token' };
        sm.audit.event('login.failed', fields, `login failed: invalid ${method === 'bearer' ? 'Bearer token' : 'access cookie'}`);
        sm.lockouts.addressFailed(sm.limitAddress(ctx), { protocol: 'REST', method });
      }
      throw new AuthFailure(err.message, 'invalid_token');
    }
    if (err instanceof AddressBlockedError) throw new AuthFailure(err.message, 'invalid_request', err.retryAfterSeconds, true);
    if (err instanceof ServerBusyError || err instanceof HashAbortedError) throw new AuthFailure(err.message, 'invalid_request', 1, false, true);
    if (err instanceof AuthenticationFailedError) throw new AuthFailure(err.message, 'invalid_token', err.retryAfterSeconds);
    throw err;
  }
}

/**
 * 401 with the challenges a client can answer. A script in a browser that says so with `X-Requested-With:
 * XMLHttpRequest` (the web console) gets no Basic challenge: the browser would answer it with its own password
 * dialog instead of letting the page show its login form.
 */
export function unauthorised(reply: FastifyReply, message: string, error: 'invalid_request' | 'invalid_token' = 'invalid_request', retryAfter?: number): FastifyReply {
  const bearer = `Bearer realm="switchyard", error="${error}"`;
  const fromScript = String(reply.request?.headers['x-requested-with'] ?? '').toLowerCase() === 'xmlhttprequest';
  reply
    .code(401)
    .header('www-authenticate', fromScript ? [bearer] : [`Basic realm="switchyard", charset="UTF-8"`, bearer])
    .header('cache-control', 'no-store');
  if (retryAfter !== undefined) reply.header('retry-after', String(retryAfter));
  return reply.send({ status: message });
}

export function registerAuth(app: FastifyInstance, ctx: ApiContext): void {
  const { rt } = ctx;
  app.decorateRequest('principal', undefined);
  app.decorateRequest('authMethod', undefined);
  app.decorateRequest('loginSession', undefined);
  app.decorateRequest('sessionId', undefined);
  app.decorateRequest('sessionReply', undefined);
  app.decorateRequest('generatedSessionId', undefined);
  // the security service's manager, through the typed registry (the service object stays; its manager is per boot)
  const securityService = rt.service('security');

  // The Swagger UI serves the OpenAPI document and its own static files: public like the document.
  app.addHook('onRoute', (route) => {
    if (route.url.startsWith('/swagger-ui')) route.config = { ...(route.config ?? {}), public: true } as typeof route.config;
  });

  // A callback hook: with security off (every request is anonymous, nothing to await) it answers at once, without
  // the promise an async hook costs every request; otherwise it runs `authenticate` and goes on when it settles,
  // as an async hook would (an early reply it sent ends the request there).
  app.addHook('onRequest', (request, reply, done) => {
    if (rt.security.enabled) {
      authenticate(request, reply).then(() => done(), done);
      return;
    }
    request.sessionReply = reply;
    if (request.routeOptions.url) {
      // what `authenticate` does with security off: anonymous, whatever credentials came
      request.principal = ANONYMOUS;
      request.authMethod = 'none';
    }
    done();
  });

  const authenticate = async (request: FastifyRequest, reply: FastifyReply): Promise<unknown> => {
    request.sessionReply = reply;
    if (!request.routeOptions.url) return; // no route: the 404/405 handler answers
    const sec = rt.security;
    const sm = securityService?.manager;
    const need = routePermission(request.routeOptions.config);
    const enforce = sec.enabled && rt.config.RestApi.enableAuthentication;
    let failure: AuthFailure | undefined;
    if (!need) {
      // a public route: credentials are ignored entirely (never checked, counted or audited)
      if (sm && sec.enabled && request.routeOptions.config?.readsLoginSession) await readLoginSession(request, sm);
    } else if (sm && sec.enabled) {
      try {
        await resolvePrincipal(request, reply, sm);
      } catch (err) {
        if (!(err instanceof AuthFailure)) throw err;
        failure = err;
      }
    }
    if (!sec.enabled) {
      request.principal = ANONYMOUS;
      request.authMethod = 'none';
      return;
    }
    if (!need || !enforce) {
      if (!request.principal && sm && (sm.allowAnonymous || !enforce)) {
        request.principal = sm.anonymousPrincipal();
        request.authMethod = 'anonymous';
      }
      return;
    }
    if (failure?.busy) {
      return reply.code(503).header('retry-after', String(failure.retryAfter ?? 1)).header('cache-control', 'no-store').send({ status: failure.message });
    }
    if (failure?.blocked) {
      return reply
        .code(429)
        .header('retry-after', String(failure.retryAfter ?? 1))
        .header('cache-control', 'no-store')
        .send({ status: failure.message });
    }
    if (failure) {
      if (failure.error === 'invalid_token' && request.cookies?.[ACCESS_COOKIE] && !request.headers.authorization) reply.clearCookie(ACCESS_COOKIE, { path: '/' });
      return unauthorised(reply, `User not authenticated: ${failure.message}`, failure.error, failure.retryAfter);
    }
    if (!request.principal) {
      if (sm?.allowAnonymous) {
        request.principal = sm.anonymousPrincipal();
        request.authMethod = 'anonymous';
      } else {
        return unauthorised(reply, 'User not authenticated: send Authorization: Basic or Bearer, or log in with POST /api/v1/login');
      }
    }
    const type = need.resourceType ?? 'Server';
    const key = type === 'Server' ? rt.serverName : '/';
    if (!sec.isAllowed(request.principal, need.permission, type, key)) {
      sm?.audit.denied(
        { username: request.principal.username, method: request.method, route: request.routeOptions.url, permission: need.permission, resourceType: type, resourceKey: key, clientAddress: request.ip },
        `access denied: ${request.principal.username} lacks ${need.permission} on ${type} ${key}`,
      );
      return reply.code(403).send({ status: `Access denied: ${request.method} ${request.routeOptions.url} needs the permission ${need.permission} on ${type} ${key}` });
    }
  };
}

/**
 * Adds each operation's required permission (`x-required-permission`) and its security requirement to the
 * OpenAPI document; public operations get `security: []`.
 */
export function annotateOpenApi(doc: Record<string, unknown>, routes: RouteOptions[]): Record<string, unknown> {
  const paths = (doc.paths ?? {}) as Record<string, Record<string, Record<string, unknown>>>;
  for (const r of routes) {
    const path = r.url.replace(/:([A-Za-z0-9_]+)/g, '{$1}');
    const item = paths[path];
    if (!item) continue;
    const need = routePermission(r.config as { permission?: RoutePermission; public?: boolean });
    for (const m of Array.isArray(r.method) ? r.method : [r.method]) {
      const op = item[m.toLowerCase()];
      if (!op) continue;
      if (need) {
        op['x-required-permission'] = { permission: need.permission, resourceType: need.resourceType };
        // the service specification: "Discovery of servers lists only basicAuth as its scheme"
        op.security = path === '/api/v1/server/discovery' && m === 'GET' ? [{ basicAuth: [] }] : [{ basicAuth: [] }, { authScheme: [] }, { cookieAuth: [] }];
      } else {
        op.security = [];
      }
    }
  }
  return doc;
}
