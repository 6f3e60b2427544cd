import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { AclStore, ancestors, explainDecision, type Subject } from '../../src/security/acl.js';
import type { Store } from '../../src/store/store.js';
import type { Permission, ResourceType } from '../../src/security/types.js';
import { startServer, type TestServer } from '../helpers.js';
import { createGroup, createUser, groupId } from './helpers.js';

/** An in-memory stand-in for the store's `acl` sublevel. */
function memoryStore(): Store {
  const m = new Map<string, unknown>();
  return {
    async putJson(_n: string, k: string, v: unknown) {
      m.set(k, v);
    },
    async del(_n: string, k: string) {
      m.delete(k);
    },
    async *entriesJson() {
      for (const e of m) yield e;
    },
  } as unknown as Store;
}

const U = '11111111-1111-4111-8111-111111111111';
const G1 = '22222222-2222-4222-8222-222222222222';
const G2 = '33333333-3333-4333-8333-333333333333';
const bob: Subject = { uniqueId: U, username: 'bob', groups: [{ uniqueId: G1, name: 'ops' }, { uniqueId: G2, name: 'dev' }] };

type Grant = [ResourceType, string, string, boolean, 'ALLOW' | 'DENY', Permission[]];
async function aclWith(grants: Grant[]): Promise<AclStore> {
  const acl = new AclStore(memoryStore(), () => {});
  for (const g of grants) await acl.grant(...g);
  return acl;
}

describe('ACL evaluation', () => {
  test('acl - ancestors: destinations walk to /, Server to *, other types only themselves', () => {
    assert.deepEqual(ancestors('Topic', '/a/b/c'), ['/a/b/c', '/a/b', '/a', '/']);
    assert.deepEqual(ancestors('Queue', 'sensors/room1'), ['sensors/room1', 'sensors', '/']);
    assert.deepEqual(ancestors('Topic', '/'), ['/']);
    assert.deepEqual(ancestors('Server', 'broker-1'), ['broker-1', '*']);
    assert.deepEqual(ancestors('Schema', '/a/b'), ['/a/b']);
  });

  const table: Array<{ name: string; grants: Grant[]; type?: ResourceType; key: string; perm?: Permission; allowed: boolean; reason: string; explain: RegExp }> = [
    {
      name: 'identity beats group at the same level (identity allows, group denies)',
      grants: [
        ['Topic', '/a', G1, true, 'DENY', ['publish']],
        ['Topic', '/a', U, false, 'ALLOW', ['publish']],
      ],
      key: '/a',
      allowed: true,
      reason: 'ALLOW_EXPLICIT_IDENTITY',
      explain: /^ALLOW: publish on Topic \/a for user 'bob': decided by the ALLOW entry of the user's own entry \(IDENTITY 1111.*\) on the resource itself \(Topic \/a\)/,
    },
    {
      name: 'identity beats group at the same level (identity denies, group allows)',
      grants: [
        ['Topic', '/a', G1, true, 'ALLOW', ['publish']],
        ['Topic', '/a', U, false, 'DENY', ['publish']],
      ],
      key: '/a',
      allowed: false,
      reason: 'DENY_EXPLICIT_IDENTITY',
      explain: /^DENY: .*decided by the DENY entry of the user's own entry .* on the resource itself/,
    },
    {
      name: 'specific beats inherited (a group deny on /a/b beats the identity allow on /)',
      grants: [
        ['Topic', '/', U, false, 'ALLOW', ['publish']],
        ['Topic', '/a/b', G2, true, 'DENY', ['publish']],
      ],
      key: '/a/b/c',
      allowed: false,
      reason: 'DENY_INHERITED_RESOURCE',
      explain: /^DENY: publish on Topic \/a\/b\/c for user 'bob': decided by the DENY entry of its group 'dev' \(GROUP 3333.*\) inherited from the ancestor Topic \/a\/b/,
    },
    {
      name: 'specific beats inherited (an allow on /a beats a deny on /)',
      grants: [
        ['Topic', '/', G1, true, 'DENY', ['subscribe']],
        ['Topic', '/a', G1, true, 'ALLOW', ['subscribe']],
      ],
      key: '/a/x',
      perm: 'subscribe',
      allowed: true,
      reason: 'ALLOW_INHERITED_RESOURCE',
      explain: /inherited from the ancestor Topic \/a;/,
    },
    {
      name: 'between groups at one level, membership order decides',
      grants: [
        ['Topic', '/', G2, true, 'ALLOW', ['publish']],
        ['Topic', '/', G1, true, 'DENY', ['publish']],
      ],
      key: '/',
      allowed: false,
      reason: 'DENY_EXPLICIT_GROUP',
      explain: /its group 'ops'/,
    },
    {
      name: 'an entry for another permission does not decide: the walk goes on',
      grants: [
        ['Topic', '/a', U, false, 'ALLOW', ['subscribe']],
        ['Topic', '/', G1, true, 'ALLOW', ['publish']],
      ],
      key: '/a',
      allowed: true,
      reason: 'ALLOW_INHERITED_RESOURCE',
      explain: /its group 'ops' .* inherited from the ancestor Topic \//,
    },
    {
      name: 'default deny when nothing matches',
      grants: [['Queue', '/', G1, true, 'ALLOW', ['publish']]],
      key: '/a',
      allowed: false,
      reason: 'DEFAULT_DENY',
      explain: /^DENY: publish on Topic \/a for user 'bob': no ACL entry of the user or its groups \('ops', 'dev'\) on Topic \/a, Topic \/ mentions publish; default deny$/,
    },
    {
      name: 'Server: the server id, then *',
      grants: [['Server', '*', G1, true, 'ALLOW', ['view_stats']]],
      type: 'Server',
      key: 'broker-1',
      perm: 'view_stats',
      allowed: true,
      reason: 'ALLOW_INHERITED_RESOURCE',
      explain: /inherited from the ancestor Server \*/,
    },
  ];

  for (const row of table) {
    test(`acl - ${row.name}`, async () => {
      const acl = await aclWith(row.grants);
      const type = row.type ?? 'Topic';
      const perm = row.perm ?? 'publish';
      const d = acl.evaluate(bob, perm, type, row.key);
      assert.equal(d.allowed, row.allowed);
      assert.equal(d.reason, row.reason);
      assert.match(explainDecision(bob, perm, type, row.key, d), row.explain);
    });
  }
});

describe('ACL API', () => {
  let s: TestServer;
  let carol: Awaited<ReturnType<typeof createUser>>;
  let team: string;
  before(async () => {
    s = await startServer();
    team = await createGroup(s, 'team');
    carol = await createUser(s, 'carol', 'carol-password-1', [await groupId(s, 'everyone'), team]);
  });
  after(async () => s.close());

  const put = (body: unknown, query = '') => s.inject({ method: 'PUT', url: `/api/v1/auth/resources/acl${query}`, payload: body as object });
  const check = (body: Record<string, unknown>) => s.inject({ method: 'POST', url: '/api/v1/auth/acl/check', payload: { identityId: carol.uuid, explain: true, ...body } });

  test('acl - PUT accepts names in any case, replaces atomically, and the view shows DENY entries', async () => {
    const r = await put({
      resourceType: 'topic',
      resourceKey: '/plant',
      entries: [
        { principalType: 'GROUP', principalId: team, effect: 'ALLOW', permissions: ['PUBLISH', 'Subscribe'] },
        { principalType: 'identity', principalId: carol.uuid, effect: 'deny', permissions: ['publish'] },
      ],
    });
    assert.equal(r.statusCode, 200, r.body);
    assert.deepEqual(r.json(), {
      resourceType: 'Topic',
      resourceKey: '/plant',
      entries: [
        { principalType: 'GROUP', principalId: team, effect: 'ALLOW', permissions: ['publish', 'subscribe'] },
        { principalType: 'IDENTITY', principalId: carol.uuid, effect: 'DENY', permissions: ['publish'] },
      ],
    });
    const view = await s.inject('/api/v1/auth/resources/acl?resourceType=TOPIC&resourceKey=/plant');
    assert.deepEqual(view.json(), r.json());
    const replaced = await put({ resourceType: 'Topic', resourceKey: '/plant', entries: [{ principalType: 'GROUP', principalId: team, effect: 'ALLOW', permissions: ['view'] }] });
    assert.deepEqual(replaced.json().entries, [{ principalType: 'GROUP', principalId: team, effect: 'ALLOW', permissions: ['view'] }], 'the old entries are gone');
    const cleared = await put({ resourceType: 'Topic', resourceKey: '/plant', entries: [] });
    assert.deepEqual(cleared.json().entries, []);
  });

  test('acl - check explains identity-over-group, inheritance and default deny, and the decision changes with the ACL (cache cleared)', async () => {
    let r = await check({ resourceType: 'Topic', resourceKey: '/line/1', permission: 'PUBLISH' });
    assert.equal(r.json().decision, 'ALLOW', 'everyone may publish under /');
    assert.equal(r.json().permission, 'PUBLISH', 'echoed as sent');
    assert.match(r.json().reason, /its group 'everyone' .* inherited from the ancestor Topic \//);
    assert.equal(r.json().sources.length, 1);
    assert.match(r.json().sources[0], /^GROUP everyone \([0-9a-f-]+\) ALLOW \[.*publish.*\] on Topic \/$/);
    const principal = s.rt.security.authenticate('carol', 'carol-password-1', { protocol: 'test' });
    const p = await principal;
    assert.equal(s.rt.security.isAllowed(p, 'publish', 'Topic', '/line/1'), true);

    await put({ resourceType: 'Topic', resourceKey: '/line', entries: [{ principalType: 'GROUP', principalId: team, effect: 'DENY', permissions: ['publish'] }] });
    r = await check({ resourceType: 'Topic', resourceKey: '/line/1', permission: 'publish' });
    assert.equal(r.json().decision, 'DENY');
    assert.equal(r.json().decisionReason, 'DENY_INHERITED_RESOURCE');
    assert.match(r.json().reason, /decided by the DENY entry of its group 'team' .* inherited from the ancestor Topic \/line/);
    assert.equal(s.rt.security.isAllowed(p, 'publish', 'Topic', '/line/1'), false, 'the cached decision was cleared');

    await put({
      resourceType: 'Topic',
      resourceKey: '/line',
      entries: [
        { principalType: 'GROUP', principalId: team, effect: 'DENY', permissions: ['publish'] },
        { principalType: 'IDENTITY', principalId: carol.uuid, effect: 'ALLOW', permissions: ['publish'] },
      ],
    });
    r = await check({ resourceType: 'Topic', resourceKey: '/line', permission: 'publish' });
    assert.equal(r.json().decision, 'ALLOW');
    assert.equal(r.json().decisionReason, 'ALLOW_EXPLICIT_IDENTITY');
    assert.match(r.json().reason, /the user's own entry .* on the resource itself \(Topic \/line\) \(an identity entry is tried before group entries/);

    r = await check({ resourceType: 'Schema', resourceKey: '/line', permission: 'schema_publish' });
    assert.equal(r.json().decision, 'DENY');
    assert.equal(r.json().decisionReason, 'DEFAULT_DENY');
    assert.match(r.json().reason, /default deny$/);
    assert.deepEqual(r.json().sources, []);

    const quiet = await check({ resourceType: 'Topic', resourceKey: '/line', permission: 'publish', explain: false });
    assert.deepEqual(quiet.json(), { decision: 'ALLOW', permission: 'publish', reason: null, sources: null, decisionReason: null });
    const byName = await check({ identityId: 'carol', resourceType: 'Topic', resourceKey: '/line', permission: 'publish' });
    assert.equal(byName.json().decision, 'ALLOW', 'identityId may be a username');
  });

  test('acl - group membership changes apply at once', async () => {
    const p = await s.rt.security.authenticate('carol', 'carol-password-1', { protocol: 'test' });
    await put({ resourceType: 'Queue', resourceKey: '/orders', entries: [{ principalType: 'GROUP', principalId: team, effect: 'ALLOW', permissions: ['purge'] }] });
    assert.equal(s.rt.security.isAllowed(p, 'purge', 'Queue', '/orders'), true);
    await s.inject({ method: 'DELETE', url: `/api/v1/auth/groups/${team}/${carol.uuid}` });
    assert.equal(s.rt.security.isAllowed(p, 'purge', 'Queue', '/orders'), false);
    await s.inject({ method: 'POST', url: `/api/v1/auth/groups/${team}/${carol.uuid}` });
    assert.equal(s.rt.security.isAllowed(p, 'purge', 'Queue', '/orders'), true);
  });

  test('acl - identity and group views list explicit ALLOW and DENY entries; the group route is reachable', async () => {
    await put({ resourceType: 'Topic', resourceKey: '/views', entries: [{ principalType: 'IDENTITY', principalId: carol.uuid, effect: 'DENY', permissions: ['retain'] }, { principalType: 'GROUP', principalId: team, effect: 'ALLOW', permissions: ['retain'] }] });
    const idView = await s.inject(`/api/v1/auth/identities/${carol.uuid}/acl`);
    assert.equal(idView.statusCode, 200);
    assert.equal(idView.json().principalType, 'IDENTITY');
    assert.ok(idView.json().entries.some((e: { resourceKey: string; effect: string; permissions: string[] }) => e.resourceKey === '/views' && e.effect === 'DENY' && e.permissions[0] === 'retain'));
    assert.ok(!idView.json().entries.some((e: { resourceKey: string; effect: string }) => e.resourceKey === '/views' && e.effect === 'ALLOW'), "the group's entries are not merged in");
    const gView = await s.inject(`/api/v1/auth/groups/${team}/acl`);
    assert.equal(gView.statusCode, 200);
    assert.equal(gView.json().principalType, 'GROUP');
    assert.ok(gView.json().entries.some((e: { resourceKey: string; effect: string }) => e.resourceKey === '/views' && e.effect === 'ALLOW'));
    assert.equal((await s.inject('/api/v1/auth/groups/00000000-0000-4000-8000-000000000000/acl')).statusCode, 404);
    assert.equal((await s.inject('/api/v1/auth/identities/00000000-0000-4000-8000-000000000000/acl')).statusCode, 404);
    assert.equal((await s.inject('/api/v1/auth/identities/xyz/acl')).statusCode, 400);
  });

  test('acl - bad input is a 400/404 naming the problem, never a 500', async () => {
    const entry = { principalType: 'GROUP', principalId: team, effect: 'ALLOW', permissions: ['publish'] };
    const cases: Array<[unknown, string, number, RegExp]> = [
      [{ resourceType: 'Topik', resourceKey: '/x', entries: [] }, '', 400, /resourceType 'Topik' is not known; known: Server, Topic/],
      [{ resourceType: 'Topic', resourceKey: '', entries: [] }, '', 400, /resourceKey is required/],
      [{ resourceType: 'Topic', resourceKey: '/x', entries: [{ ...entry, permissions: ['fly'] }] }, '', 400, /permissions\[0\] 'fly' is not a known permission/],
      [{ resourceType: 'Topic', resourceKey: '/x', entries: [{ ...entry, permissions: ['view_stats'] }] }, '', 400, /view_stats applies to the Server resource only/],
      [{ resourceType: 'Server', resourceKey: 'x', entries: [{ ...entry, permissions: ['publish'] }] }, '', 400, /publish applies to destinations/],
      [{ resourceType: 'Topic', resourceKey: '/x', entries: [{ ...entry, principalType: 'ROBOT' }] }, '', 400, /must be IDENTITY or GROUP/],
      [{ resourceType: 'Topic', resourceKey: '/x', entries: [{ ...entry, effect: 'MAYBE' }] }, '', 400, /must be ALLOW or DENY/],
      [{ resourceType: 'Topic', resourceKey: '/x', entries: [{ ...entry, principalId: 'nope' }] }, '', 400, /must be a UUID/],
      [{ resourceType: 'Topic', resourceKey: '/x', entries: [{ ...entry, principalId: '99999999-9999-4999-8999-999999999999' }] }, '', 404, /Unknown principal/],
      [{ resourceType: 'Topic', resourceKey: '/x', entries: [entry, { ...entry, effect: 'DENY' }] }, '', 400, /both allowed and denied publish/],
      [{ resourceType: 'Topic', resourceKey: '/x', entries: [] }, '?batchTimeoutMillis=0', 400, /batchTimeoutMillis must be > 0/],
      [{ resourceType: 'Topic', resourceKey: '/x', entries: [] }, '?batchTimeoutMillis=soon', 400, /batchTimeoutMillis/],
      [{ resourceType: 'Topic' }, '', 400, /resourceKey/],
    ];
    for (const [body, q, code, re] of cases) {
      const r = await put(body, q);
      assert.equal(r.statusCode, code, `${JSON.stringify(body)}${q}: ${r.body}`);
      assert.match(r.json().status, re);
    }
    const none = await s.inject({ method: 'PUT', url: '/api/v1/auth/resources/acl' });
    assert.equal(none.statusCode, 400);
    const chk = await check({ permission: 'teleport', resourceType: 'Topic', resourceKey: '/' });
    assert.equal(chk.statusCode, 400);
    assert.match(chk.json().status, /'teleport' is not a known permission/);
    const who = await check({ identityId: 'nobody', resourceType: 'Topic', resourceKey: '/', permission: 'publish' });
    assert.equal(who.statusCode, 404);
    const q = await s.inject('/api/v1/auth/resources/acl?resourceType=Topic');
    assert.equal(q.statusCode, 400);
    assert.match(q.json().status, /resourceKey is required/);
  });

  test('acl - permissions list: every permission with its scope, every resource type', async () => {
    const r = await s.inject('/api/v1/auth/permissions');
    assert.equal(r.statusCode, 200);
    const body = r.json();
    // the specification: permissions and resourceTypes are comma-separated strings; the details are in *Details
    assert.equal(body.permissions.split(',').length, 26);
    assert.equal(body.permissionDetails.find((p: { name: string }) => p.name === 'train_model').server, false);
    assert.deepEqual(body.permissionDetails.find((p: { name: string }) => p.name === 'wildcard_subscription'), { name: 'wildcard_subscription', description: 'Allows wildcard subscriptions', server: true });
    assert.equal(body.permissionDetails.find((p: { name: string }) => p.name === 'publish').server, false);
    assert.deepEqual(body.resourceTypes.split(','), ['Server', 'Topic', 'Queue', 'TemporaryTopic', 'TemporaryQueue', 'Schema', 'Metrics', 'Model']);
  });

  test('acl - ACL changes are audited with who, what and the new entries', async () => {
    const { auditLines } = await import('./helpers.js');
    await put({ resourceType: 'Topic', resourceKey: '/audited', entries: [{ principalType: 'GROUP', principalId: team, effect: 'ALLOW', permissions: ['view'] }] });
    const lines = await auditLines(s, (l) => l.event === 'acl.replaced' && l.resourceKey === '/audited');
    const line = lines.find((l) => l.event === 'acl.replaced' && l.resourceKey === '/audited')!;
    assert.equal(line.by, 'admin');
    assert.equal(line.resourceType, 'Topic');
    assert.deepEqual(line.entries, [{ principalId: team, group: true, allow: ['view'], deny: [] }]);
  });
});
