import { isIP } from 'node:net';
import { addressList, inList } from '../../transport/address-list.js';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { AuthContext } from '../../security/types.js';

/**
 * The real client address of a REST request behind reverse proxies (docs/security.md, "Behind a proxy").
 *
 * `RestApi.trustedProxies` lists the addresses or CIDR ranges of the proxies in front of the server (default none).
 * Fastify's `trustProxy` is given `trustsPeer`: when the socket peer is one of them, the forwarding header
 * (`RestApi.trustedProxyHeader`: X-Forwarded-For, or the RFC 7239 Forwarded header, whose `for=` values are copied
 * into X-Forwarded-For first) is read from the right, and `request.ip` is the rightmost address that is not a
 * trusted proxy: a client cannot forge its address by sending the header itself, since the proxy appends what it
 * saw. A request from any other peer keeps the socket address; its headers are ignored.
 *
 * `proxied` (no lockout exemption, AuthManager.lockoutExemptAddresses) is true when a forwarding header is present
 * at all, trusted or not: a request through a local proxy is not a local administrator.
 */

/** Fastify's `trustProxy` for RestApi.trustedProxies (false: none, the socket peer is the client). */
export function trustProxyOf(trusted: readonly string[]): false | ((address: string, hop: number) => boolean) {
  if (trusted.length === 0) return false;
  const list = addressList(trusted, 'RestApi.trustedProxies');
  return (address) => inList(list, address);
}

/**
 * The `for=` values of RFC 7239 Forwarded headers, left to right (`for="[2001:db8::1]:4711"` → `2001:db8::1`,
 * `for=192.0.2.1:80` → `192.0.2.1`); an obfuscated or `unknown` node ends the list there (nothing left of it is
 * believed).
 */
export function forwardedFor(header: string): string[] {
  const out: string[] = [];
  for (const element of header.split(',')) {
    for (const pair of element.split(';')) {
      const m = /^\s*for\s*=\s*(?:"([^"]*)"|([^\s;,]*))\s*$/i.exec(pair);
      if (!m) continue;
      let v = (m[1] ?? m[2] ?? '').trim();
      const bracket = /^\[([^\]]+)\](?::\d+)?$/.exec(v);
      if (bracket) v = bracket[1]!;
      else if (/^\d+\.\d+\.\d+\.\d+:\d+$/.test(v)) v = v.slice(0, v.lastIndexOf(':'));
      if (isIP(v) === 0) out.length = 0; // unknown / obfuscated: only what is right of it can be traced
      else out.push(v);
    }
  }
  return out;
}

/**
 * With `Forwarded` as the trusted header: a request from a trusted proxy gets X-Forwarded-For rewritten from its
 * Forwarded header (any X-Forwarded-For it carried is dropped), so `request.ip` reads the header the proxy wrote.
 * Registered before anything reads `request.ip`.
 */
export function registerClientAddress(app: FastifyInstance, trusted: readonly string[], header: 'X-Forwarded-For' | 'Forwarded'): void {
  if (trusted.length === 0 || header !== 'Forwarded') return;
  const list = addressList(trusted);
  app.addHook('onRequest', async (request) => {
    if (!inList(list, request.raw.socket?.remoteAddress)) return;
    const fwd = request.headers.forwarded;
    delete request.raw.headers['x-forwarded-for'];
    if (fwd === undefined) return;
    const chain = forwardedFor(Array.isArray(fwd) ? fwd.join(',') : fwd);
    if (chain.length > 0) request.raw.headers['x-forwarded-for'] = chain.join(', ');
  });
}

/** Did the request come through a proxy (a forwarding header, believed or not)? */
export function viaProxy(request: FastifyRequest): boolean {
  const h = request.headers;
  return h['x-forwarded-for'] !== undefined || h.forwarded !== undefined || h['x-real-ip'] !== undefined;
}

/** Fires when the client goes away before the response is sent (a password check not yet started is dropped). */
export function closedSignalOf(reply: FastifyReply): AbortSignal {
  const ac = new AbortController();
  const res = reply.raw;
  if (res.destroyed || res.socket?.destroyed) ac.abort();
  else res.once('close', () => {
    if (!res.writableFinished) ac.abort();
  });
  return ac.signal;
}

/** The authentication context of a REST request: real address, proxied or not, and a signal of the client leaving. */
export function authContextOf(request: FastifyRequest, reply: FastifyReply): AuthContext {
  return { clientAddress: request.ip, protocol: 'REST', proxied: viaProxy(request), signal: closedSignalOf(reply) };
}
