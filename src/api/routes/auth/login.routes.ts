import type { FastifyReply, FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { BrokerError, ForbiddenError, ValidationError } from '../../../errors.js';
import { AddressBlockedError } from '../../../security/address-limits.js';
import { ServerBusyError } from '../../../security/hash-pool.js';
import { securityOf, type SecurityManager } from '../../../security/service.js';
import type { SessionRecord } from '../../../security/sessions.js';
import { AuthenticationFailedError } from '../../../security/types.js';
import type { ApiContext } from '../../context.js';
import { ACCESS_COOKIE, sessionIdOf, unauthorised } from '../../plugins/auth.js';
import { authContextOf } from '../../plugins/client-address.js';
import { ErrorResponses, StatusResponse } from '../../schemas.js';

const LoginRequest = z
  .object({
    username: z.string().trim().min(1, 'username is required').max(256),
    password: z.string().max(1024, 'password is too long'),
    persistent: z
      .boolean()
      .default(false)
      .describe('true: the messaging state (REST subscriptions) is durable: kept after logout and idle timeout, resumed by the next persistent login with the same sessionId; needs persistent_session'),
    sessionId: z
      .string()
      .max(256)
      .optional()
      .describe('names the messaging session to resume (persistent) or to discard (not persistent); per user; default: the login session id'),
    longLived: z.boolean().default(false),
  })
  .meta({ id: 'LoginRequest' });
const LoginResponse = z
  .object({
    status: z.string(),
    username: z.string().optional(),
    uniqueId: z.string().optional(),
    accessMap: z.record(z.string(), z.string()).optional(),
    groupList: z.array(z.string()).optional().describe('Switchyard: group names in membership order'),
    authenticationMethod: z.string().optional().describe('Switchyard: basic, bearer, cookie or anonymous'),
    sessionExpiresAt: z.string().optional().describe('Switchyard: when the login session (and its token) expires, ISO-8601'),
    sessionId: z.string().optional().describe('Switchyard, persistent logins: the sessionId to log in with again to resume the messaging session'),
  })
  .meta({ id: 'LoginResponse' });

const connect = { permission: { permission: 'connect' as const } };

/** The login response (also the refresh response, as the specification says) for a login session. */
function loginResponse(sm: SecurityManager, session: SessionRecord, authenticationMethod: string) {
  const u = sm.identities.user(session.uniqueId);
  return {
    status: 'Success',
    username: u?.username ?? session.username,
    uniqueId: session.uniqueId,
    accessMap: {},
    groupList: (u?.groups ?? []).map((g) => sm.identities.group(g)?.name ?? g),
    authenticationMethod,
    sessionExpiresAt: new Date(session.expiresAt).toISOString(),
    ...(session.persistent ? { sessionId: session.engineSessionId ?? session.sessionId } : {}),
  };
}

function setAccessCookie(request: FastifyRequest, reply: FastifyReply, token: string, maxAge: number): void {
  reply.setCookie(ACCESS_COOKIE, token, { path: '/', httpOnly: true, sameSite: 'strict', secure: request.protocol === 'https', maxAge });
}

/** AccessRequestApi: login, logout, refreshToken, session. */
export const loginRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  const { rt } = ctx;
  const auth = rt.config.AuthManager;

  app.post(
    '/api/v1/login',
    {
      config: {
        public: true,
        // credentials in headers are ignored; an existing login session (cookie or Bearer) is read, to be replaced
        readsLoginSession: true,
        rateLimit: {
          max: auth.loginRateLimit,
          timeWindow: 60000,
          keyGenerator: (req: FastifyRequest) => req.ip,
          errorResponseBuilder: (req: FastifyRequest, c: { ttl: number }) =>
            new BrokerError(`Too many login attempts from ${req.ip}; try again in ${Math.max(1, Math.ceil(c.ttl / 1000))} s`, 429),
        },
      },
      schema: {
        tags: ['User Authentication'],
        summary: 'User login',
        description:
          'Checks the credentials and sets the maps_access_token cookie (JWT, HS256; 15 minutes, 7 days when longLived; HttpOnly, SameSite=Strict, Secure over HTTPS). ' +
          'The cookie value also works as `Authorization: Bearer`. Bad credentials: 401 with WWW-Authenticate; a locked account: 401 with Retry-After. Rate-limited per client address (429), and an address with AuthManager.addressFailureLimit failed logins (on any path) is refused with 429 and Retry-After for AuthManager.addressBlockSeconds. ' +
          '`persistent: true` makes the REST messaging session durable (docs/messaging.md); without the persistent_session permission it is a 403.',
        body: LoginRequest,
        response: { 200: LoginResponse, 429: StatusResponse, 503: StatusResponse, ...ErrorResponses },
      },
    },
    async (req, reply) => {
      const sm = securityOf(rt);
      if (!sm.enabled) return { status: 'Auth not enforced', username: 'anonymous', accessMap: {} };
      let principal;
      try {
        principal = await sm.authenticate(req.body.username, req.body.password, authContextOf(req, reply));
      } catch (err) {
        if (err instanceof ServerBusyError) {
          // the password-hashing queue is full (AuthManager.passwordHashQueue)
          return reply.code(503).header('retry-after', String(err.retryAfterSeconds)).header('cache-control', 'no-store').send({ status: err.message });
        }
        if (err instanceof AddressBlockedError) {
          // too many failed logins from this address: refused before the password was looked at
          return reply.code(429).header('retry-after', String(err.retryAfterSeconds ?? 1)).header('cache-control', 'no-store').send({ status: err.message });
        }
        if (err instanceof AuthenticationFailedError) return unauthorised(reply, err.message, 'invalid_request', err.retryAfterSeconds);
        throw err;
      }
      if (req.body.persistent && !rt.security.isAllowed(principal, 'persistent_session', 'Server', rt.serverName)) {
        sm.audit.denied(
          { username: principal.username, route: '/api/v1/login', permission: 'persistent_session', resourceType: 'Server', resourceKey: rt.serverName, clientAddress: req.ip },
          `persistent login refused: ${principal.username} lacks persistent_session`,
        );
        throw new ForbiddenError(
          `Access denied: ${principal.username} lacks persistent_session on Server ${rt.serverName}; log in with persistent: false for a session that ends with the login`,
        );
      }
      if (req.loginSession) {
        await sm.sessions.end(req.loginSession.sessionId);
        ctx.sessions?.close(sessionIdOf(req)); // its messaging session goes with it (a persistent one is left, to resume)
      }
      const { token, session, maxAge } = await sm.sessions.create(principal, {
        longLived: req.body.longLived,
        persistent: req.body.persistent,
        engineSessionId: req.body.sessionId,
        clientAddress: req.ip,
      });
      // Clean start: a login naming a sessionId without persistent ends that session's durable state (this user's only).
      if (!req.body.persistent && req.body.sessionId) ctx.sessions?.discard(principal.uniqueId, req.body.sessionId);
      setAccessCookie(req, reply, token, maxAge);
      return loginResponse(sm, session, 'cookie');
    },
  );

  app.post(
    '/api/v1/logout',
    {
      config: connect,
      schema: {
        tags: ['User Authentication'],
        summary: 'User logout',
        description:
          'Ends the login session on the server (its token is refused afterwards) and clears the cookie. The REST messaging session ends with it, except that of a persistent login: its subscriptions hibernate and keep holding messages.',
        response: { 200: StatusResponse, ...ErrorResponses },
      },
    },
    async (req, reply) => {
      const sm = securityOf(rt);
      const sid = sessionIdOf(req);
      if (req.loginSession) {
        await sm.sessions.end(req.loginSession.sessionId);
        sm.audit.event('logout', { username: req.loginSession.username, sessionId: req.loginSession.sessionId, clientAddress: req.ip }, 'logout');
      }
      ctx.sessions?.close(sid);
      rt.emit('rest.session.ended', sid);
      reply.clearCookie(ACCESS_COOKIE, { path: '/' });
      return { status: 'Success' };
    },
  );

  app.get(
    '/api/v1/refreshToken',
    {
      config: connect,
      schema: {
        tags: ['User Authentication'],
        summary: 'Refreshes the users JWT',
        description:
          'A new token (in the maps_access_token cookie) for the same login session, with the lifetime of the login (15 minutes, or 7 days when longLived). ' +
          'Answers the login response, as the specification says (MAPS answers the text ok), with the new sessionExpiresAt. Basic credentials have no session to refresh: 400.',
        response: { 200: LoginResponse, ...ErrorResponses },
      },
    },
    async (req, reply) => {
      const sm = securityOf(rt);
      if (!sm.enabled) return { status: 'Auth not enforced', username: 'anonymous', accessMap: {} };
      if (!req.loginSession) {
        throw new ValidationError('There is no login session to refresh: log in with POST /api/v1/login (Basic credentials need no refresh)');
      }
      const { token, maxAge, session } = await sm.sessions.refresh(req.loginSession.sessionId);
      setAccessCookie(req, reply, token, maxAge);
      return loginResponse(sm, session, req.authMethod ?? 'cookie');
    },
  );

  app.get(
    '/api/v1/session',
    {
      config: connect,
      schema: { tags: ['User Authentication'], summary: 'Returns the current authentication session', response: { 200: LoginResponse, ...ErrorResponses } },
    },
    async (req) => {
      const sm = securityOf(rt);
      const p = req.principal;
      if (!sm.enabled || !p) return { status: 'Auth not enforced', accessMap: {} };
      const u = sm.identities.user(p.uniqueId);
      return {
        status: 'Success',
        username: p.username,
        uniqueId: p.uniqueId,
        accessMap: {},
        groupList: (u?.groups ?? []).map((g) => sm.identities.group(g)?.name ?? g),
        authenticationMethod: req.authMethod ?? 'none',
        ...(req.loginSession ? { sessionExpiresAt: new Date(req.loginSession.expiresAt).toISOString() } : {}),
        ...(req.loginSession?.persistent ? { sessionId: req.loginSession.engineSessionId ?? req.loginSession.sessionId } : {}),
      };
    },
  );
};
