import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { basicAuth, startServer, type TestServer } from '../helpers.js';
import { auditLines, createGroup, createUser, groupId, login } from './helpers.js';

describe('users and groups', () => {
  let s: TestServer;
  before(async () => {
    s = await startServer({ overrides: { AuthManager: { requireUpperCase: true, requireDigit: true, loginRateLimit: 10000 } } });
  });
  after(async () => s.close());

  const addUser = (username: unknown, password: unknown) => s.inject({ method: 'POST', url: '/api/v1/auth/users', payload: { username, password } as object });

  test('users - create, read, filter and delete; duplicates are a 409', async () => {
    const r = await addUser('dora', 'Dora-password-1');
    assert.equal(r.statusCode, 201);
    assert.equal(r.json().status, 'User added successfully');
    const id = r.json().uniqueId;
    const one = await s.inject(`/api/v1/auth/users/${id}`);
    const everyone = await groupId(s, 'everyone');
    assert.deepEqual(one.json(), { username: 'dora', uniqueId: id, groupList: [{ name: 'everyone', uniqueId: everyone }], attributes: {} }, 'a new user joins everyone');
    const filtered = await s.inject(`/api/v1/auth/users?filter=${encodeURIComponent("username = 'dora'")}`);
    assert.deepEqual(filtered.json().map((u: { username: string }) => u.username), ['dora']);
    const badFilter = await s.inject(`/api/v1/auth/users?filter=${encodeURIComponent('username =')}`);
    assert.equal(badFilter.statusCode, 400);
    assert.match(badFilter.json().status, /position/);
    const dup = await addUser('dora', 'Dora-password-2');
    assert.equal(dup.statusCode, 409);
    assert.equal(dup.json().status, 'Username already exists: dora');
    assert.equal((await s.inject({ method: 'DELETE', url: `/api/v1/auth/users/${id}` })).statusCode, 204);
    assert.equal((await s.inject(`/api/v1/auth/users/${id}`)).statusCode, 404);
    assert.equal((await login(s, 'dora', 'Dora-password-1')).statusCode, 401);
    const lines = await auditLines(s, (l) => l.event === 'user.deleted' && l.username === 'dora');
    assert.ok(lines.some((l) => l.event === 'user.created' && l.username === 'dora' && l.by === 'admin'));
  });

  test('users - the password policy is enforced with a message naming the rule', async () => {
    const cases: Array<[string, RegExp]> = [
      ['Short-1', /too short: it has 7 characters and the policy requires at least 12/],
      ['lowercase-only-1', /must contain an upper-case letter/],
      ['No-Digits-Here-At-All', /must contain a digit/],
    ];
    for (const [pw, re] of cases) {
      const r = await addUser('policy-user', pw);
      assert.equal(r.statusCode, 400, pw);
      assert.match(r.json().status, re);
    }
    assert.equal((await addUser('policy-user', 'Good-Enough-Pass-1')).statusCode, 201);
  });

  test('users - hostile input is a 400 naming the problem', async () => {
    const cases: Array<[unknown, unknown, RegExp]> = [
      ['', 'Valid-password-1', /Username is required/],
      ['a:b', 'Valid-password-1', /must not contain ':'/],
      ['x'.repeat(200), 'Valid-password-1', /too long/],
      ['tab\there', 'Valid-password-1', /control characters/],
      [{ $ne: 1 }, 'Valid-password-1', /username/],
      ['ok-name', 12345, /password/],
    ];
    for (const [u, p, re] of cases) {
      const r = await addUser(u, p);
      assert.equal(r.statusCode, 400, `${JSON.stringify(u)}: ${r.body}`);
      assert.match(r.json().status, re);
    }
    assert.equal((await s.inject('/api/v1/auth/users/../../etc')).statusCode, 404);
    const badId = await s.inject('/api/v1/auth/users/12345');
    assert.equal(badId.statusCode, 400);
    assert.match(badId.json().status, /userUuid must be a UUID/);
    const unknown = await s.inject('/api/v1/auth/users/00000000-0000-4000-8000-000000000009');
    assert.equal(unknown.statusCode, 404);
    assert.match(unknown.json().status, /User not found/);
  });

  test('users - a user changes their own password only with the current one; another user\'s needs a full administrator', async () => {
    const everyone = await groupId(s, 'everyone');
    const eve = await createUser(s, 'eve', 'Eve-password-01', [everyone]);
    const mallory = await createUser(s, 'mallory', 'Mallory-password-1', [everyone]);
    const url = `/api/v1/auth/users/${eve.uuid}/password`;
    const noCurrent = await s.app.inject({ method: 'PUT', url, headers: eve.auth, payload: { newPassword: 'Eve-password-02' } });
    assert.equal(noCurrent.statusCode, 400);
    assert.match(noCurrent.json().status, /currentPassword is required/);
    const wrong = await s.app.inject({ method: 'PUT', url, headers: eve.auth, payload: { newPassword: 'Eve-password-02', currentPassword: 'nope' } });
    assert.equal(wrong.statusCode, 403);
    const weak = await s.app.inject({ method: 'PUT', url, headers: eve.auth, payload: { newPassword: 'weak', currentPassword: 'Eve-password-01' } });
    assert.equal(weak.statusCode, 400);
    assert.match(weak.json().status, /too short/);
    const ok = await s.app.inject({ method: 'PUT', url, headers: eve.auth, payload: { newPassword: 'Eve-password-02', currentPassword: 'Eve-password-01' } });
    assert.equal(ok.statusCode, 204);
    assert.equal((await login(s, 'eve', 'Eve-password-02')).statusCode, 200);
    const other = await s.app.inject({ method: 'PUT', url, headers: mallory.auth, payload: { newPassword: 'Mallory-owns-you-1', currentPassword: 'Eve-password-02' } });
    assert.equal(other.statusCode, 403);
    assert.match(other.json().status, /only a full administrator/);
    const byAdmin = await s.inject({ method: 'PUT', url, payload: { newPassword: 'Admin-set-this-1' } });
    assert.equal(byAdmin.statusCode, 204, 'an administrator needs no current password');
    assert.equal((await s.app.inject({ url: '/api/v1/session', headers: basicAuth('eve', 'Admin-set-this-1') })).statusCode, 200);
    const empty = await s.inject({ method: 'PUT', url, payload: { newPassword: '' } });
    assert.equal(empty.statusCode, 400);
    assert.match(empty.json().status, /New password is required/);
  });

  test('users - the anonymous user and your own account cannot be deleted', async () => {
    const anon = (await s.inject(`/api/v1/auth/users?filter=${encodeURIComponent("username = 'anonymous'")}`)).json()[0];
    const r = await s.inject({ method: 'DELETE', url: `/api/v1/auth/users/${anon.uniqueId}` });
    assert.equal(r.statusCode, 409);
    const admin = (await s.inject('/api/v1/session')).json().uniqueId;
    const self = await s.inject({ method: 'DELETE', url: `/api/v1/auth/users/${admin}` });
    assert.equal(self.statusCode, 409);
    assert.match(self.json().status, /your own account/);
  });

  test('groups - the POST body is the raw name; membership order is kept; deleting a group removes every membership', async () => {
    const r = await s.inject({ method: 'POST', url: '/api/v1/auth/groups', headers: { 'content-type': 'text/plain' }, payload: 'shift-ops' });
    assert.equal(r.statusCode, 201);
    assert.equal(r.json().status, 'Successfully added group shift-ops');
    const ops = r.json().uniqueId;
    const viewers = await createGroup(s, 'viewers');
    const dup = await s.inject({ method: 'POST', url: '/api/v1/auth/groups', headers: { 'content-type': 'text/plain' }, payload: 'shift-ops' });
    assert.equal(dup.statusCode, 409);
    assert.equal(dup.json().status, 'Group shift-ops already exists');
    const empty = await s.inject({ method: 'POST', url: '/api/v1/auth/groups', headers: { 'content-type': 'text/plain' }, payload: '  ' });
    assert.equal(empty.statusCode, 400);
    assert.match(empty.json().status, /Group name is required/);
    const json = await s.inject({ method: 'POST', url: '/api/v1/auth/groups', payload: { name: 'x' } });
    assert.equal(json.statusCode, 400);

    const frank = await createUser(s, 'frank', 'Frank-password-1');
    const add = await s.inject({ method: 'POST', url: `/api/v1/auth/groups/${viewers}/${frank.uuid}` });
    assert.deepEqual(add.json(), { status: 'Successfully added user frank to group viewers' });
    await s.inject({ method: 'POST', url: `/api/v1/auth/groups/${ops}/${frank.uuid}` });
    const user = (await s.inject(`/api/v1/auth/users/${frank.uuid}`)).json();
    assert.deepEqual(user.groupList.map((g: { name: string }) => g.name), ['everyone', 'viewers', 'shift-ops'], 'membership order (a new user is in everyone first)');
    const group = (await s.inject(`/api/v1/auth/groups/${ops}`)).json();
    assert.deepEqual(group.usersList, [{ username: 'frank', uniqueId: frank.uuid }]);
    assert.equal((await s.inject({ method: 'POST', url: `/api/v1/auth/groups/${ops}/00000000-0000-4000-8000-000000000009` })).statusCode, 404);

    assert.equal((await s.inject({ method: 'DELETE', url: `/api/v1/auth/groups/${ops}` })).statusCode, 204);
    assert.deepEqual((await s.inject(`/api/v1/auth/users/${frank.uuid}`)).json().groupList.map((g: { name: string }) => g.name), ['everyone', 'viewers']);
    assert.equal((await s.inject(`/api/v1/auth/groups/${ops}`)).statusCode, 404);
    const rm = await s.inject({ method: 'DELETE', url: `/api/v1/auth/groups/${viewers}/${frank.uuid}` });
    assert.deepEqual(rm.json(), { status: 'User frank removed from group viewers' });
    const filtered = await s.inject(`/api/v1/auth/groups?filter=${encodeURIComponent("name = 'viewers'")}`);
    assert.deepEqual(filtered.json(), [{ name: 'viewers', uniqueId: viewers, usersList: [] }]);
    await auditLines(s, (l) => l.event === 'group.deleted' && l.group === 'shift-ops');
  });
});
