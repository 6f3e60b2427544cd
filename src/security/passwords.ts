import { randomBytes, randomInt, scrypt, timingSafeEqual, type ScryptOptions } from 'node:crypto';
import { ValidationError } from '../errors.js';
import { HashAbortedError, ServerBusyError, type HashPool } from './hash-pool.js';
import { scramCredentials, type ScramCredentials } from './scram.js';

/**
 * Password hashing with scrypt (node:crypto) and the AuthManager password policy. A hash is stored as
 * `scrypt$N$r$p$<salt b64>$<key b64>`, so the parameters can be raised later without breaking old hashes.
 */
const N = 16384;
const R = 8;
const P = 1;
const KEYLEN = 64;

function scryptAsync(password: Buffer, salt: Buffer, keylen: number, opts: ScryptOptions): Promise<Buffer> {
  return new Promise((resolve, reject) => scrypt(password, salt, keylen, opts, (err, key) => (err ? reject(err) : resolve(key))));
}

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await scryptAsync(Buffer.from(password, 'utf8'), salt, KEYLEN, { N, r: R, p: P, maxmem: 64 * 1024 * 1024 });
  return `scrypt$${N}$${R}$${P}$${salt.toString('base64')}$${key.toString('base64')}`;
}

/**
 * What is stored when a password is set: the scrypt hash (CONNECT / REST logins) and the SCRAM-SHA-256 credentials
 * (MQTT 5 enhanced authentication). Never the password itself.
 */
export async function passwordCredentials(password: string): Promise<{ passwordHash: string; scramSha256: ScramCredentials }> {
  const [passwordHash, scramSha256] = await Promise.all([hashPassword(password), scramCredentials(password)]);
  return { passwordHash, scramSha256 };
}

/** A hash that matches no password, verified for unknown users so both paths cost the same. */
let dummyHash: Promise<string> | undefined;

/**
 * Constant-time comparison. An empty or malformed stored hash never matches (but still costs one scrypt). With a
 * `pool` the hash runs on its worker threads, off libuv's thread pool that the store uses (hash-pool.ts): it may be
 * refused at once (ServerBusyError) when the pool's queue is full, and is dropped (HashAbortedError) when `signal`
 * fires before its turn. Without a pool: crypto.scrypt (libuv), as for setting a password.
 */
export async function verifyPassword(
  password: string | Buffer,
  stored: string | undefined,
  opts: { pool?: HashPool; signal?: AbortSignal; /** Whose check it is (the client address): the pool's queue is fair per source. */ source?: string } = {},
): Promise<boolean> {
  let hash = stored;
  let usable = true;
  if (!hash || !hash.startsWith('scrypt$')) {
    dummyHash ??= hashPassword(randomBytes(12).toString('hex'));
    hash = await dummyHash;
    usable = false;
  }
  const [, n, r, p, saltB64, keyB64] = hash.split('$');
  const expected = Buffer.from(keyB64 ?? '', 'base64');
  const pw = typeof password === 'string' ? Buffer.from(password, 'utf8') : password;
  const salt = Buffer.from(saltB64 ?? '', 'base64');
  const params = { N: Number(n), r: Number(r), p: Number(p), maxmem: 64 * 1024 * 1024 };
  const keylen = expected.length || KEYLEN;
  let key: Buffer;
  try {
    key = opts.pool ? await opts.pool.scrypt({ password: pw, salt, keylen, ...params }, opts.signal, opts.source) : await scryptAsync(pw, salt, keylen, params);
  } catch (err) {
    if (opts.pool) {
      if (err instanceof HashAbortedError || err instanceof ServerBusyError) throw err; // dropped or refused: no verdict
      // the pool failed (a worker crashed): a fault of the server, not a wrong password (no failed login counted)
      throw new ServerBusyError(`password check failed: ${(err as Error).message}`);
    }
    return false;
  }
  if (opts.signal?.aborted) throw new HashAbortedError(); // hashed, but nobody is there to answer
  return key.length === expected.length && timingSafeEqual(key, expected) && usable;
}

export interface PasswordPolicy {
  minimumPasswordLength: number;
  requireUpperCase: boolean;
  requireLowerCase: boolean;
  requireDigit: boolean;
  requireSpecial: boolean;
}

/** Throws a ValidationError naming the first rule the password breaks. */
export function checkPasswordPolicy(password: string, policy: PasswordPolicy): void {
  const length = [...password].length;
  if (length < policy.minimumPasswordLength) {
    throw new ValidationError(`Password is too short: it has ${length} characters and the policy requires at least ${policy.minimumPasswordLength}`);
  }
  if (length > 1024) throw new ValidationError('Password is too long: at most 1024 characters');
  if (policy.requireUpperCase && !/\p{Lu}/u.test(password)) throw new ValidationError('Password must contain an upper-case letter');
  if (policy.requireLowerCase && !/\p{Ll}/u.test(password)) throw new ValidationError('Password must contain a lower-case letter');
  if (policy.requireDigit && !/\p{Nd}/u.test(password)) throw new ValidationError('Password must contain a digit');
  if (policy.requireSpecial && !/[^\p{L}\p{Nd}]/u.test(password)) throw new ValidationError('Password must contain a special character (neither a letter nor a digit)');
}

/** A random password that satisfies any policy (upper, lower, digit, special) and is easy to copy from a terminal and pass to CLI tools. */
export function randomPassword(length = 20): string {
  const upper = 'ABCDEFGHJKLMNPQRSTUVWXYZ';
  const lower = 'abcdefghijkmnopqrstuvwxyz';
  const digits = '23456789';
  const special = '_.';
  const all = upper + lower + digits;
  const pick = (set: string) => set[randomInt(set.length)]!;
  const chars = [pick(upper), pick(lower), pick(digits), pick(special)];
  while (chars.length < Math.max(length, 12)) chars.push(pick(all));
  for (let i = chars.length - 1; i > 0; i--) {
    const j = randomInt(i + 1);
    [chars[i], chars[j]] = [chars[j]!, chars[i]!];
  }
  // Starts with a letter, so command-line tools never read it as an option (mosquitto_pub -P <password>).
  return pick(upper + lower) + chars.join('');
}
