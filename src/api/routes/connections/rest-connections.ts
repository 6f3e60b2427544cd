import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { ApiContext } from '../../context.js';
import { SESSION_COOKIE } from '../../plugins/auth.js';

/**
 * REST sessions as connections (MAPS lists its HTTP sessions in `GET /api/v1/server/connections` with `adapter`
 * "rest-server", `protocolName` "REST", `protocolVersion` "1.1" and `name` "<scheme>_/<ip>:<port>").
 *
 * A REST session is a caller's session as the API knows it: a login session (cookie or Bearer), a Basic user, or the
 * anonymous `maps_session` cookie; requests without any of those are not a session. Each is listed from its first
 * request until `RestApi.inactiveTimeout` ms without one, with its user, the address of its latest request, and the
 * bytes of its request and answer bodies. Ids are numbers from 10^15 up, apart from the network connections' ids.
 * At most `MAX_TRACKED` sessions are kept (the least recently seen one goes first), so callers cannot grow memory.
 */
export const MAX_TRACKED = 10_000;
export const REST_ID_BASE = 1_000_000_000_000_000;

export interface RestConnection {
  id: number;
  adapter: 'rest-server';
  name: string;
  user: string;
  protocolName: 'REST';
  protocolVersion: string;
  proxyAddress: string;
  connectedTimeMs: number;
  lastRead: number;
  lastWrite: number;
  totalBytesRead: number;
  totalBytesWritten: number;
  totalOverflow: number;
  totalUnderflow: number;
  bytesRead: number;
  bytesWritten: number;
  overFlow: number;
  underFlow: number;
  endpoint: string;
  clientId: string;
}

export class RestConnections {
  private readonly byKey = new Map<string, RestConnection>();
  private nextId = REST_ID_BASE;

  constructor(
    private readonly idleTimeout: () => number,
    readonly now: () => number = Date.now,
  ) {}

  /** Records one answered request of a session. */
  seen(key: string, info: { user: string; address: string; port: number; scheme: string; httpVersion: string; bytesIn: number; bytesOut: number; at: number }): void {
    let c = this.byKey.get(key);
    if (c) this.byKey.delete(key); // re-inserted below: the map stays in least-recently-seen order
    else {
      c = {
        id: this.nextId++,
        adapter: 'rest-server',
        name: '',
        user: info.user,
        protocolName: 'REST',
        protocolVersion: info.httpVersion,
        proxyAddress: '',
        connectedTimeMs: info.at,
        lastRead: info.at,
        lastWrite: info.at,
        totalBytesRead: 0,
        totalBytesWritten: 0,
        totalOverflow: 0,
        totalUnderflow: 0,
        bytesRead: 0,
        bytesWritten: 0,
        overFlow: 0,
        underFlow: 0,
        endpoint: 'REST API',
        clientId: '',
      };
      while (this.byKey.size >= MAX_TRACKED) this.byKey.delete(this.byKey.keys().next().value!);
    }
    c.name = `${info.scheme}_/${info.address}:${info.port}`;
    c.user = info.user;
    c.protocolVersion = info.httpVersion;
    c.lastRead = info.at;
    c.lastWrite = this.now();
    c.totalBytesRead += info.bytesIn;
    c.bytesRead += info.bytesIn;
    c.totalBytesWritten += info.bytesOut;
    c.bytesWritten += info.bytesOut;
    this.byKey.set(key, c);
  }

  /** The live REST sessions (idle ones are dropped first). */
  list(): RestConnection[] {
    const limit = this.now() - this.idleTimeout();
    for (const [k, c] of this.byKey) {
      if (c.lastWrite >= limit) break; // the rest were seen later
      this.byKey.delete(k);
    }
    return [...this.byKey.values()].map((c) => ({ ...c }));
  }

  get size(): number {
    return this.byKey.size;
  }
}

/** The session key of a request, or undefined when the request belongs to no session. */
function sessionKey(request: FastifyRequest): string | undefined {
  if (request.sessionId) return request.sessionId;
  const c = request.cookies?.[SESSION_COOKIE];
  return c && /^[A-Za-z0-9-]{8,64}$/.test(c) ? `cookie:${c}` : undefined;
}

/** Records the request in its REST session's entry (a request without a session or principal is not tracked). */
function trackResponse(tracker: RestConnections, request: FastifyRequest, reply: FastifyReply, payload: unknown): void {
  const key = sessionKey(request);
  if (key === undefined || request.principal === undefined) return;
  const bytesIn = Number(request.headers['content-length'] ?? 0);
  // the answer's body: its declared length (a file stream), else the payload about to be written
  const declared = reply.getHeader('content-length');
  const bytesOut = declared !== undefined ? Number(declared) : typeof payload === 'string' ? Buffer.byteLength(payload) : Buffer.isBuffer(payload) ? payload.length : 0;
  tracker.seen(key, {
    user: request.principal.username,
    address: request.ip,
    port: request.socket?.remotePort ?? 0,
    scheme: request.protocol,
    httpVersion: request.raw.httpVersion || '1.1',
    bytesIn: Number.isFinite(bytesIn) ? bytesIn : 0,
    bytesOut: Number.isFinite(bytesOut) ? bytesOut : 0,
    at: tracker.now(),
  });
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The REST-session tracker (decorated on the root instance by `trackRestConnections`; routes inherit it). */
    restConnections?: RestConnections;
  }
}

/**
 * Registers the tracking hook on the root instance and decorates it with the tracker (a plain decoration instead of
 * a look-up table keyed by the API context); call after the auth plugin and before the routes are registered.
 */
export function trackRestConnections(app: FastifyInstance, ctx: ApiContext): RestConnections {
  const tracker = new RestConnections(() => ctx.rt.config.RestApi.inactiveTimeout);
  app.decorate('restConnections', tracker);
  // A callback onSend hook, not an async one (no promise per request on every route), and not onResponse: any
  // onResponse hook makes Fastify attach 'finish' and 'error' listeners to every response (and take them off again).
  // A response written raw (an SSE stream) passes no onSend: its session is seen through its other requests.
  app.addHook('onSend', (request, reply, payload, done) => {
    trackResponse(tracker, request, reply, payload);
    done(null, payload);
  });
  return tracker;
}
