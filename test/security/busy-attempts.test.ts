import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, type TestServer } from '../helpers.js';
import { createUser } from './helpers.js';

/**
 * AuthManager.addressAttemptLimit counts password checks an address starts. A login the hash pool refused as busy
 * (its queue full: 503) or dropped before it ran made no hash, so it does not use up the address's budget: after a
 * burst that was partly refused as busy, the address may still make as many checks as were not made.
 */
let s: TestServer;
before(async () => {
  s = await startServer({
    overrides: { AuthManager: { loginRateLimit: 100000, addressAttemptLimit: 4, addressAttemptWindow: 600, passwordHashWorkers: 1, passwordHashQueue: 1, lockoutExemptAddresses: [] } },
  });
  await createUser(s, 'dora', 'dora-password-1');
});
after(async () => s.close());

test('login limits - logins refused as busy do not use up the address attempt budget', async () => {
  const login = () => s.app.inject({ method: 'POST', url: '/api/v1/login', payload: { username: 'dora', password: 'dora-password-1' }, remoteAddress: '10.9.9.9' });
  // four at once from one address: one hashes, one waits, the rest are refused as busy (the pool's queue holds one)
  const burst = await Promise.all(Array.from({ length: 4 }, login));
  const codes = burst.map((r) => r.statusCode).sort();
  const hashed = codes.filter((c) => c === 200).length;
  const busy = codes.filter((c) => c === 503).length;
  assert.ok(busy >= 1, `some were refused as busy: ${codes.join(', ')}`);
  assert.equal(hashed + busy, 4, `each was hashed or refused as busy: ${codes.join(', ')}`);
  // the budget of 4 is used only by the checks that ran: the same number of logins is still allowed, then 429
  for (let i = 0; i < 4 - hashed; i++) {
    const r = await login();
    assert.equal(r.statusCode, 200, `login ${i + 1} after the burst (${hashed} hashed in it): ${r.statusCode} ${r.body}`);
  }
  const over = await login();
  assert.equal(over.statusCode, 429, `the fifth check within the window is refused: ${over.statusCode} ${over.body}`);
});
