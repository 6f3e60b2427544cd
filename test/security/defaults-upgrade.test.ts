import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SecurityManager } from '../../src/security/service.js';
import { removeDir, startServer, tempDir, type TestServer } from '../helpers.js';
import { auditLines, createUser, groupId } from './helpers.js';

/** A store made by an older version (MAPS defaults: everyone has view_stats; no operators group) is upgraded once. */
test('defaults - an older store is upgraded once: everyone loses view_stats and purge_server, operators is made; later boots change nothing', async () => {
  const dataDir = tempDir();
  let s: TestServer | undefined = await startServer({ dataDir });
  try {
    // make the store look like an older version's: the MAPS grant, no operators group, no defaults record
    const sm = s.rt.security as SecurityManager;
    const everyone = sm.identities.groupByGroupName('everyone')!;
    await sm.acl.grant('Server', s.rt.serverName, everyone.uniqueId, true, 'ALLOW', ['view_stats', 'purge_server']);
    await sm.deleteGroup(undefined, sm.identities.groupByGroupName('operators')!.uniqueId);
    await s.rt.store.del('instance', 'security-defaults');
    const old = await createUser(s, 'old-user', 'old-user-password-1');
    assert.equal((await s.app.inject({ url: '/api/v1/server/log', headers: old.auth })).statusCode, 200, 'the old default: everyone reads the server log');
    await s.close();

    s = await startServer({ dataDir });
    assert.equal((await s.app.inject({ url: '/api/v1/server/log', headers: old.auth })).statusCode, 403, 'after the upgrade: not any more');
    const server = (await s.inject(`/api/v1/auth/resources/acl?resourceType=Server&resourceKey=${s.rt.serverName}`)).json().entries as Array<{ principalId: string; permissions: string[] }>;
    const everyoneId = await groupId(s, 'everyone');
    const mine = server.find((e) => e.principalId === everyoneId)!;
    assert.deepEqual([...mine.permissions].sort(), ['connect', 'create_destination', 'list_destinations', 'persistent_session', 'wildcard_subscription']);
    const operators = await groupId(s, 'operators');
    assert.equal((await s.inject({ method: 'POST', url: `/api/v1/auth/groups/${operators}/${old.uuid}` })).statusCode, 200);
    assert.equal((await s.app.inject({ url: '/api/v1/server/log', headers: old.auth })).statusCode, 200, 'operators read it');
    await auditLines(s, (l) => l.event === 'security.defaults_upgraded');

    // an administrator gives everyone view_stats back: the next boot leaves that alone
    const sm2 = s.rt.security as SecurityManager;
    await sm2.acl.grant('Server', s.rt.serverName, everyoneId, true, 'ALLOW', ['view_stats']);
    await s.close();
    s = await startServer({ dataDir });
    const later = await createUser(s, 'later-user', 'later-user-password-1');
    assert.equal((await s.app.inject({ url: '/api/v1/server/log', headers: later.auth })).statusCode, 200, 'upgraded once only');
  } finally {
    await s?.close();
    removeDir(dataDir);
  }
});
