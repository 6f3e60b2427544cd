import { test } from 'node:test';
import assert from 'node:assert/strict';
import { HashAbortedError, HashPool, ServerBusyError, type ScryptJob } from '../../src/security/hash-pool.js';
import { hashPassword, verifyPassword } from '../../src/security/passwords.js';

/** The password-hashing pool (docs/security.md "Password hashing"): bounded queue, dropped work, same results. */
const job = (pw: string): ScryptJob => ({ password: Buffer.from(pw), salt: Buffer.from('salt-salt-salt-1'), keylen: 64, N: 16384, r: 8, p: 1, maxmem: 64 << 20 });

test('hash pool - a check whose caller left is dropped unhashed; beyond the queue a check is refused at once as busy', async () => {
  const pool = new HashPool({ workers: 1, queueLimit: 3, perSourceLimit: 2 });
  try {
    const running = pool.scrypt(job('first'), undefined, 'x');
    const ac = new AbortController();
    const waiting = [pool.scrypt(job('a'), ac.signal, 'x'), pool.scrypt(job('b'), ac.signal, 'y'), pool.scrypt(job('c'), undefined, 'y')];
    // the queue (3) is full: refused without waiting
    await assert.rejects(pool.scrypt(job('d'), undefined, 'z'), ServerBusyError);
    ac.abort(); // two callers went away
    await assert.rejects(waiting[0]!, HashAbortedError);
    await assert.rejects(waiting[1]!, HashAbortedError);
    await running;
    await waiting[2];
    assert.deepEqual({ hashed: pool.stats.hashed, dropped: pool.stats.dropped, refused: pool.stats.refused, queued: pool.stats.queued }, { hashed: 2, dropped: 2, refused: 1, queued: 0 });
    // an already aborted signal is dropped at once
    await assert.rejects(pool.scrypt(job('e'), AbortSignal.abort()), HashAbortedError);
  } finally {
    await pool.close();
  }
});

test('hash pool - fair per source: one source holds at most its share of the queue and sources are served round-robin', async () => {
  const pool = new HashPool({ workers: 1, queueLimit: 10, perSourceLimit: 2 });
  try {
    const order: string[] = [];
    const run = (name: string, source: string) => pool.scrypt(job(name), undefined, source).then(() => void order.push(name));
    const jobs = [run('x0', 'burst'), run('x1', 'burst'), run('x2', 'burst')];
    await assert.rejects(pool.scrypt(job('x3'), undefined, 'burst'), ServerBusyError, 'a third waiting check of the same source is refused');
    jobs.push(run('y1', 'other')); // another source still gets in, and is served before the burst's second
    await Promise.all(jobs);
    assert.deepEqual(order, ['x0', 'x1', 'y1', 'x2']);
  } finally {
    await pool.close();
  }
});

test('hash pool - verifyPassword on the pool agrees with crypto.scrypt', async () => {
  const pool = new HashPool({ workers: 1, queueLimit: 8 });
  try {
    const stored = await hashPassword('correct-horse-battery');
    assert.equal(await verifyPassword('correct-horse-battery', stored, { pool }), true);
    assert.equal(await verifyPassword('wrong-horse-battery', stored, { pool }), false);
    assert.equal(await verifyPassword('anything', undefined, { pool }), false, 'no stored hash never matches');
    assert.equal(await verifyPassword('correct-horse-battery', stored), true, 'and without a pool');
  } finally {
    await pool.close();
  }
});
