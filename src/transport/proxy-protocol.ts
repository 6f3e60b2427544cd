/**
 * The PROXY protocol, versions 1 (text) and 2 (binary), as HAProxy specifies it
 * (https://www.haproxy.org/download/2.9/doc/proxy-protocol.txt): a proxy in front of the broker sends one header
 * before the client's bytes, naming the client's address. A pure codec: `parseProxyHeader` looks at the bytes
 * received so far and says whether a header is complete, incomplete, absent or bad; `readProxyHeader` applies it to
 * a socket with a size cap and a timeout (docs/security.md, "Behind a proxy").
 */
import { isIPv4, isIPv6, type Socket } from 'node:net';

/** v2 signature: \r\n\r\n\0\r\nQUIT\n. */
export const V2_SIGNATURE = Buffer.from([0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a]);
const V1_PREFIX = Buffer.from('PROXY ', 'latin1');
/** A v1 line is at most 107 bytes with its CRLF (section 2.1). */
export const V1_MAX = 107;
/** A v2 header: 16 bytes and at most this much address and TLV data (a larger one closes the connection). */
export const V2_MAX_PAYLOAD = 2048;

export interface ProxySource {
  address: string;
  port: number;
}

export type ProxyParse =
  /** More bytes are needed. */
  | { state: 'partial' }
  /** The bytes do not start with a PROXY header at all. */
  | { state: 'absent' }
  /** A header of `length` bytes; `source` is undefined for LOCAL (v2) and UNKNOWN (v1): use the socket's peer. */
  | { state: 'done'; length: number; version: 1 | 2; source?: ProxySource };

export class ProxyProtocolError extends Error {
  constructor(message: string) {
    super(`PROXY protocol: ${message}`);
    this.name = 'ProxyProtocolError';
  }
}

/** Is `buf` (shorter than `sig`) a prefix of `sig`, or does it start with all of it? */
function startsLike(buf: Buffer, sig: Buffer): boolean {
  const n = Math.min(buf.length, sig.length);
  return buf.subarray(0, n).equals(sig.subarray(0, n));
}

function port(s: string): number {
  if (!/^\d{1,5}$/.test(s)) throw new ProxyProtocolError(`bad port '${s}'`);
  const n = Number(s);
  if (n > 65535) throw new ProxyProtocolError(`bad port '${s}'`);
  return n;
}

function parseV1(buf: Buffer): ProxyParse {
  const end = buf.indexOf('\r\n', 0, 'latin1');
  if (end < 0) {
    if (buf.length >= V1_MAX) throw new ProxyProtocolError(`v1 header longer than ${V1_MAX} bytes`);
    return { state: 'partial' };
  }
  if (end + 2 > V1_MAX) throw new ProxyProtocolError(`v1 header longer than ${V1_MAX} bytes`);
  const line = buf.toString('latin1', 0, end);
  const parts = line.split(' ');
  if (parts[1] === 'UNKNOWN') return { state: 'done', length: end + 2, version: 1 };
  if (parts.length !== 6) throw new ProxyProtocolError(`malformed v1 header '${line.slice(0, 60)}'`);
  const [, proto, src, dst, sport, dport] = parts as [string, string, string, string, string, string];
  const check = proto === 'TCP4' ? isIPv4 : proto === 'TCP6' ? isIPv6 : undefined;
  if (!check) throw new ProxyProtocolError(`unknown v1 protocol '${proto.slice(0, 20)}'`);
  if (!check(src) || !check(dst)) throw new ProxyProtocolError(`bad ${proto} address in '${line.slice(0, 80)}'`);
  port(dport);
  return { state: 'done', length: end + 2, version: 1, source: { address: src, port: port(sport) } };
}

function ipv6(b: Buffer): string {
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(b.readUInt16BE(i).toString(16));
  // the shortest form (RFC 5952): the longest run of two or more zero groups becomes ::
  let best = -1;
  let bestLen = 0;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== '0') {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === '0') j++;
    if (j - i > bestLen && j - i >= 2) {
      best = i;
      bestLen = j - i;
    }
    i = j;
  }
  if (best < 0) return groups.join(':');
  return `${groups.slice(0, best).join(':')}::${groups.slice(best + bestLen).join(':')}`;
}

function parseV2(buf: Buffer): ProxyParse {
  if (buf.length < 16) return { state: 'partial' };
  const verCmd = buf[12]!;
  if (verCmd >> 4 !== 2) throw new ProxyProtocolError(`unsupported v2 version ${verCmd >> 4}`);
  const cmd = verCmd & 0x0f;
  if (cmd > 1) throw new ProxyProtocolError(`unknown v2 command ${cmd}`);
  const fam = buf[13]!;
  const len = buf.readUInt16BE(14);
  if (len > V2_MAX_PAYLOAD) throw new ProxyProtocolError(`v2 header of ${len} bytes is over the cap of ${V2_MAX_PAYLOAD}`);
  if (buf.length < 16 + len) return { state: 'partial' };
  const length = 16 + len;
  if (cmd === 0) return { state: 'done', length, version: 2 }; // LOCAL: the proxy's own connection (health check)
  const body = buf.subarray(16, length);
  switch (fam >> 4) {
    case 0: // AF_UNSPEC: the receiver uses the socket's addresses
      return { state: 'done', length, version: 2 };
    case 1: {
      if (len < 12) throw new ProxyProtocolError('v2 IPv4 address block too short');
      const a = body.subarray(0, 4);
      return { state: 'done', length, version: 2, source: { address: `${a[0]}.${a[1]}.${a[2]}.${a[3]}`, port: body.readUInt16BE(8) } };
    }
    case 2: {
      if (len < 36) throw new ProxyProtocolError('v2 IPv6 address block too short');
      return { state: 'done', length, version: 2, source: { address: ipv6(body.subarray(0, 16)), port: body.readUInt16BE(32) } };
    }
    case 3: // AF_UNIX: no network address, the proxy's
      return { state: 'done', length, version: 2 };
    default:
      throw new ProxyProtocolError(`unknown v2 address family ${fam >> 4}`);
  }
}

/**
 * Looks at the first bytes of a connection. `required`: anything that cannot become a header is an error; else a
 * connection whose bytes do not start like a header has none (`absent`).
 */
export function parseProxyHeader(buf: Buffer, required: boolean): ProxyParse {
  if (buf.length === 0) return { state: 'partial' };
  if (startsLike(buf, V1_PREFIX)) return buf.length < V1_PREFIX.length ? { state: 'partial' } : parseV1(buf);
  if (startsLike(buf, V2_SIGNATURE)) return buf.length < V2_SIGNATURE.length ? { state: 'partial' } : parseV2(buf);
  if (required) throw new ProxyProtocolError('the connection did not start with a PROXY protocol v1 or v2 header');
  return { state: 'absent' };
}

export interface ProxyHeaderOptions {
  /** A header must come first (else it is used when present). */
  required: boolean;
  /** ms the whole header may take to arrive. */
  timeoutMs: number;
}

/**
 * Reads the PROXY header from a new socket. Resolves with the source it names (undefined: none, or LOCAL/UNKNOWN)
 * once the header is complete; the bytes after it are put back (`unshift`) and the socket is left paused: the
 * caller attaches its reader and resumes it. Rejects (the caller closes the socket) on a bad or missing header, the
 * timeout, or the socket closing first.
 */
export function readProxyHeader(socket: Socket, opts: ProxyHeaderOptions): Promise<ProxySource | undefined> {
  return new Promise((resolve, reject) => {
    let buf: Buffer = Buffer.alloc(0);
    const done = (err: Error | undefined, source?: ProxySource, rest?: Buffer) => {
      clearTimeout(timer);
      socket.pause();
      socket.removeListener('data', onData);
      socket.removeListener('close', onClose);
      socket.removeListener('error', onClose);
      if (err) return reject(err);
      if (rest && rest.length > 0) socket.unshift(rest);
      resolve(source);
    };
    const onData = (chunk: Buffer) => {
      buf = buf.length === 0 ? chunk : Buffer.concat([buf, chunk]);
      let r: ProxyParse;
      try {
        r = parseProxyHeader(buf, opts.required);
      } catch (err) {
        return done(err as Error);
      }
      if (r.state === 'partial') {
        if (buf.length > 16 + V2_MAX_PAYLOAD) done(new ProxyProtocolError('header too long'));
        return;
      }
      if (r.state === 'absent') return done(undefined, undefined, buf);
      done(undefined, r.source, buf.subarray(r.length));
    };
    const onClose = () => done(new ProxyProtocolError('the connection closed before its header'));
    const timer = setTimeout(() => done(new ProxyProtocolError(`no complete header within ${opts.timeoutMs} ms`)), opts.timeoutMs);
    socket.on('data', onData);
    socket.once('close', onClose);
    socket.once('error', onClose);
  });
}
