/**
 * Slow requests on the REST server (issue 20 item 10): 300 connections sending a body byte by byte were all still
 * open after 321 s, because Fastify turns Node's `requestTimeout` off (0) and nothing else limits the time a body
 * takes to arrive.
 *
 * - `RestApi.requestTimeout` (ms, default 30 000) becomes Node's `server.requestTimeout`: a request whose headers
 *   and body have not all arrived within it is answered 408 `{"status": ...}` (plugins/errors.ts `clientErrorHandler`)
 *   and its connection closed. Node checks open connections every `connectionsCheckingInterval`, set here to a
 *   quarter of the timeout (at most 1 s), so the cut comes within 1.25 x the timeout. Responses that stream (SSE) are
 *   not affected: only receiving the request counts.
 * - `RestApi.maxSlowRequestsPerAddress` (default 16): requests from one client address (`request.ip`, so behind
 *   `RestApi.trustedProxies` the real client) whose body is still arriving, at most this many at a time; one more
 *   is answered 429 and its connection closed without reading its body.
 */
import type { IncomingMessage } from 'node:http';
import type { FastifyInstance } from 'fastify';
import type { RestApiConfig } from '../../config/schema.js';

/** Node's connection-check period for a request timeout: a quarter of it, at most 1 s, at least 100 ms. */
export function connectionsCheckingInterval(requestTimeout: number): number {
  return Math.max(100, Math.min(1000, Math.floor(requestTimeout / 4)));
}

/** Has the request a body still to come (a Content-Length above 0 or a chunked body not read to its end)? */
function bodyPending(raw: IncomingMessage): boolean {
  if (raw.complete) return false;
  const len = raw.headers['content-length'];
  if (len !== undefined) return Number(len) > 0;
  return raw.headers['transfer-encoding'] !== undefined;
}

/** The client address a request whose body is still arriving was counted under, until it arrived or closed. */
const COUNTED_AT = Symbol('switchyard.slowRequestCountedAt');
/** Entries of addresses with no request pending are dropped when the table holds this many (or twice what the last sweep left). */
const SWEEP_AT = 1024;
type Counted = IncomingMessage & { [COUNTED_AT]?: string | undefined };

/** Counts, per client address, the requests whose body is still arriving, and refuses one over the cap (429). */
export function registerSlowRequestCap(app: FastifyInstance, rest: Pick<RestApiConfig, 'maxSlowRequestsPerAddress'>): void {
  const cap = rest.maxSlowRequestsPerAddress;
  const pending = new Map<string, number>();
  let sweepAt = SWEEP_AT;
  // one listener for every request (not a closure per request: the bundle keeps function names, so each would also
  // get its name defined), run on 'end' and on 'close', whichever comes first releases. The address a request was
  // counted under is a property of the request, not an entry of a WeakMap: with a WeakMap every POST's request and
  // response objects survived V8's young-generation collections and were promoted (the sampling heap profiler: 6.4 of 26 MB promoted over 4 s were the table's
  // own reallocations on delete, most of the rest the requests' objects), and the server thread spent 13 % of its
  // time collecting against 1.5 % for a bare Fastify route
  const release = function (this: IncomingMessage): void {
    const counted = this as Counted;
    const address = counted[COUNTED_AT];
    if (address === undefined) return;
    counted[COUNTED_AT] = undefined;
    // an address back at 0 keeps its entry (deleting the last entry of a Map shrinks its table and the next request
    // grows it again: a table allocated and promoted per request); addresses at 0 are swept when there are many
    pending.set(address, Math.max(0, (pending.get(address) ?? 1) - 1));
  };
  app.addHook('onRequest', (request, reply, done) => {
    const raw = request.raw;
    if (!bodyPending(raw)) return done();
    const address = request.ip ?? raw.socket?.remoteAddress ?? '';
    const n = pending.get(address) ?? 0;
    if (n >= cap) {
      // its body is not read: the connection closes once the answer is out
      reply.raw.once('finish', () => raw.socket?.destroy());
      void reply
        .code(429)
        .header('connection', 'close')
        .send({ status: `Too many requests from ${address} whose body is still arriving (at most ${cap} at a time)` });
      return;
    }
    if (n === 0 && pending.size >= sweepAt) {
      for (const [a, k] of pending) if (k === 0) pending.delete(a);
      sweepAt = Math.max(SWEEP_AT, 2 * pending.size); // amortised: many addresses with bodies pending are not rescanned per request
    }
    pending.set(address, n + 1);
    (raw as Counted)[COUNTED_AT] = address;
    raw.on('end', release);
    raw.on('close', release);
    done();
  });
}
