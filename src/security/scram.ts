import { createHash, createHmac, pbkdf2, randomBytes, timingSafeEqual } from 'node:crypto';

/**
 * SCRAM-SHA-256 (RFC 5802 message format, RFC 7677 mechanism), server side, with node:crypto only. Used by MQTT 5
 * enhanced authentication (method name "SCRAM-SHA-256"). Channel binding is not offered (gs2 "n" or "y" only).
 *
 * Per user the store keeps what RFC 5802 §3 calls the server's credentials: salt, iteration count, StoredKey and
 * ServerKey, derived with PBKDF2-HMAC-SHA-256 whenever a password is set. They cannot be computed from the scrypt
 * hash, so a user whose password was set before they existed has none until the password is set again.
 */
export const SCRAM_SHA_256 = 'SCRAM-SHA-256';
export const SCRAM_ITERATIONS = 4096;

/** Stored with the user (base64 fields); never the password. */
export interface ScramCredentials {
  salt: string;
  iterations: number;
  storedKey: string;
  serverKey: string;
}

/** A message that breaks the SCRAM grammar, or an exchange that cannot go on (`code` is RFC 5802's server-error). */
export class ScramError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'ScramError';
  }
}

// RFC 3454 tables used by SASLprep (RFC 4013): C.1.2 non-ASCII spaces map to SPACE, B.1 characters map to nothing.
// eslint-disable-next-line no-misleading-character-class
const NON_ASCII_SPACE = /[\u00a0\u1680\u2000-\u200b\u202f\u205f\u3000]/g;
// eslint-disable-next-line no-misleading-character-class
const MAPPED_TO_NOTHING = /[\u00ad\u034f\u1806\u180b-\u180d\u200b-\u200d\u2060\ufe00-\ufe0f\ufeff]/g;

/** SASLprep (RFC 4013) mapping and NFKC normalisation; for ASCII passwords the identity. */
export function saslPrep(s: string): string {
  return s.replace(MAPPED_TO_NOTHING, '').replace(NON_ASCII_SPACE, ' ').normalize('NFKC');
}

const hmac = (key: Buffer, data: string | Buffer): Buffer => createHmac('sha256', key).update(data).digest();
const sha256 = (data: Buffer): Buffer => createHash('sha256').update(data).digest();

/** StoredKey and ServerKey from SaltedPassword (RFC 5802 §3). */
export function keysOf(saltedPassword: Buffer): { storedKey: Buffer; serverKey: Buffer } {
  return { storedKey: sha256(hmac(saltedPassword, 'Client Key')), serverKey: hmac(saltedPassword, 'Server Key') };
}

/** The credentials to store for a password (PBKDF2-HMAC-SHA-256, a new random salt). */
export async function scramCredentials(password: string, iterations = SCRAM_ITERATIONS, salt: Buffer = randomBytes(16)): Promise<ScramCredentials> {
  const salted = await new Promise<Buffer>((resolve, reject) => pbkdf2(Buffer.from(saslPrep(password), 'utf8'), salt, iterations, 32, 'sha256', (err, key) => (err ? reject(err) : resolve(key))));
  const { storedKey, serverKey } = keysOf(salted);
  return { salt: salt.toString('base64'), iterations, storedKey: storedKey.toString('base64'), serverKey: serverKey.toString('base64') };
}

/** Credentials that match no password: used for unknown users so the exchange looks the same (salt from `key`). */
export function mockCredentials(key: Buffer, username: string): ScramCredentials {
  const salt = hmac(key, `scram-salt\u0000${username}`).subarray(0, 16);
  return { salt: salt.toString('base64'), iterations: SCRAM_ITERATIONS, storedKey: randomBytes(32).toString('base64'), serverKey: randomBytes(32).toString('base64') };
}

export interface ClientFirst {
  /** gs2-header, e.g. "n,," (repeated base64-encoded in the client-final-message's c= attribute). */
  gs2Header: string;
  username: string;
  clientNonce: string;
  /** client-first-message-bare, part of the AuthMessage. */
  bare: string;
}

const PRINTABLE = /^[\x21-\x2b\x2d-\x7e]+$/; // RFC 5802 "printable": %x21-2B / %x2D-7E (no ',')

function saslName(raw: string): string {
  if (/=(?!2C|3D)/.test(raw)) throw new ScramError('invalid-username-encoding', 'bad "=" escape in the user name');
  const name = raw.replace(/=2C/g, ',').replace(/=3D/g, '=');
  if (name === '') throw new ScramError('invalid-username-encoding', 'empty user name');
  return name;
}

/** Parses a client-first-message (RFC 5802 §7). */
export function parseClientFirst(msg: string): ClientFirst {
  const m = /^([ny]|p=[^,]*),(a=[^,]*)?,(.*)$/s.exec(msg);
  if (!m) throw new ScramError('other-error', 'client-first-message must start with a gs2-header such as "n,,"');
  if (m[1]!.startsWith('p=')) throw new ScramError('channel-binding-not-supported', 'channel binding is not supported');
  const gs2Header = `${m[1]},${m[2] ?? ''},`;
  const bare = m[3]!;
  const attrs = bare.split(',');
  if (attrs[0]?.startsWith('m=')) throw new ScramError('extensions-not-supported', 'mandatory extensions are not supported');
  if (!attrs[0]?.startsWith('n=') || !attrs[1]?.startsWith('r=')) throw new ScramError('other-error', 'client-first-message-bare must be "n=<user>,r=<nonce>"');
  const username = saslName(attrs[0].slice(2));
  if (m[2] !== undefined && m[2] !== '' && saslName(m[2].slice(2)) !== username) {
    throw new ScramError('invalid-username-encoding', 'an authorization identity other than the user name is not supported');
  }
  const clientNonce = attrs[1].slice(2);
  if (!PRINTABLE.test(clientNonce)) throw new ScramError('other-error', 'the client nonce must be printable characters other than ","');
  return { gs2Header, username, clientNonce, bare };
}

/**
 * One server-side exchange: `serverFirst` after the client-first-message, then `finish` with the client-final-message
 * returns the server-final-message ("v=...") when the proof is right, or throws a ScramError ('invalid-proof', ...).
 */
export class ScramServer {
  readonly serverFirst: string;
  private readonly nonce: string;
  private done = false;

  constructor(
    readonly first: ClientFirst,
    private readonly creds: ScramCredentials,
    serverNonce: string = randomBytes(18).toString('base64'),
  ) {
    this.nonce = first.clientNonce + serverNonce;
    this.serverFirst = `r=${this.nonce},s=${creds.salt},i=${creds.iterations}`;
  }

  finish(clientFinal: string): string {
    if (this.done) throw new ScramError('other-error', 'the exchange is over');
    this.done = true;
    const i = clientFinal.lastIndexOf(',p=');
    if (i < 0) throw new ScramError('other-error', 'client-final-message has no proof (p=)');
    const withoutProof = clientFinal.slice(0, i);
    const attrs = withoutProof.split(',');
    if (!attrs[0]?.startsWith('c=') || !attrs[1]?.startsWith('r=')) throw new ScramError('other-error', 'client-final-message must be "c=<binding>,r=<nonce>,...,p=<proof>"');
    if (attrs[0].slice(2) !== Buffer.from(this.first.gs2Header, 'utf8').toString('base64')) throw new ScramError('channel-bindings-dont-match', 'the channel binding (c=) does not repeat the gs2-header');
    if (attrs[1].slice(2) !== this.nonce) throw new ScramError('other-error', 'the nonce (r=) is not the one of this exchange');
    const proof = Buffer.from(clientFinal.slice(i + 3), 'base64');
    const storedKey = Buffer.from(this.creds.storedKey, 'base64');
    const authMessage = `${this.first.bare},${this.serverFirst},${withoutProof}`;
    const clientSignature = hmac(storedKey, authMessage);
    if (proof.length !== clientSignature.length) throw new ScramError('invalid-proof', 'the proof has the wrong length');
    const clientKey = Buffer.alloc(proof.length);
    for (let k = 0; k < proof.length; k++) clientKey[k] = proof[k]! ^ clientSignature[k]!;
    if (!timingSafeEqual(sha256(clientKey), storedKey)) throw new ScramError('invalid-proof', 'the proof is wrong');
    return `v=${hmac(Buffer.from(this.creds.serverKey, 'base64'), authMessage).toString('base64')}`;
  }
}
