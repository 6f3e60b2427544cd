import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { IClientOptions } from 'mqtt';
import { endpointsOf } from '../../src/endpoints/endpoints.service.js';
import { basicAuth, startServer, waitUntil, type TestServer } from '../helpers.js';
import { b64 } from '../rest-client.js';
import { auditLines, createUser, groupId, login, mqttClients } from './helpers.js';

/**
 * No permission grants more than its holder has: every holder × administrative action, with the answer a user
 * sees. Holders are users created over REST (so in `everyone`) with extra Server permissions on their own identity
 * entry; `admin` is the first-boot full administrator.
 */
describe('privileges', () => {
  let s: TestServer;
  let url: string;
  const mq = mqttClients(() => url);
  let groups: Record<'admins' | 'everyone' | 'operators', string>;
  let n = 0;

  before(async () => {
    s = await startServer({
      overrides: { NetworkManager: { data: [{ name: 'mqtt-priv', url: 'tcp://127.0.0.1:0/', protocolConfigs: [{ type: 'mqtt' }] }] } },
    });
    await waitUntil(() => !!endpointsOf(s.rt).entries.get('mqtt-priv')?.handle, 10000, 'MQTT endpoint listening');
    url = `mqtt://127.0.0.1:${endpointsOf(s.rt).entries.get('mqtt-priv')!.handle!.port}`;
    groups = { admins: await groupId(s, 'admins'), everyone: await groupId(s, 'everyone'), operators: await groupId(s, 'operators') };
    // a resource everyone is denied: lifting that deny is a grant
    await s.inject({ method: 'PUT', url: '/api/v1/auth/resources/acl', payload: { resourceType: 'Topic', resourceKey: 'secret', entries: [{ principalType: 'GROUP', principalId: groups.everyone, effect: 'DENY', permissions: ['subscribe'] }] } });
  });
  after(async () => {
    mq.endAll();
    await s.close();
  });

  const serverAcl = async () => (await s.inject(`/api/v1/auth/resources/acl?resourceType=Server&resourceKey=${s.rt.serverName}`)).json().entries as Array<Record<string, unknown>>;
  const grantServer = async (uuid: string, permissions: string[]) => {
    const entries = [...(await serverAcl()), { principalType: 'IDENTITY', principalId: uuid, effect: 'ALLOW', permissions }];
    const r = await s.inject({ method: 'PUT', url: '/api/v1/auth/resources/acl', payload: { resourceType: 'Server', resourceKey: s.rt.serverName, entries } });
    assert.equal(r.statusCode, 200, r.body);
  };

  type Holder = 'manage_authentication' | 'manage_authorization' | 'both' | 'both+view_stats' | 'view_stats' | 'everyone' | 'admin';
  const holderPerms: Record<Exclude<Holder, 'admin'>, string[]> = {
    manage_authentication: ['manage_authentication', 'rest_api_access'],
    manage_authorization: ['manage_authorization', 'rest_api_access'],
    both: ['manage_authentication', 'manage_authorization'],
    'both+view_stats': ['manage_authentication', 'manage_authorization', 'view_stats'],
    view_stats: ['view_stats'],
    everyone: [],
  };
  const holders = new Map<Holder, { uuid: string; auth: { authorization: string } }>();
  async function holder(h: Holder) {
    if (h === 'admin') return { uuid: (await s.inject('/api/v1/session')).json().uniqueId as string, auth: s.auth };
    let x = holders.get(h);
    if (!x) {
      const u = await createUser(s, `holder-${h.replace(/[^a-z]/g, '-')}`, 'holder-password-1');
      if (holderPerms[h].length) await grantServer(u.uuid, holderPerms[h]);
      x = { uuid: u.uuid, auth: u.auth };
      holders.set(h, x);
    }
    return x;
  }

  /** Each action gets fresh victims: an ordinary user and a second full administrator. */
  const actions: Record<string, (me: { uuid: string; auth: { authorization: string } }) => Promise<number>> = {
    'add self to admins': async (me) => (await s.app.inject({ method: 'POST', url: `/api/v1/auth/groups/${groups.admins}/${me.uuid}`, headers: me.auth })).statusCode,
    'add a user to operators': async (me) => {
      const v = await createUser(s, `victim-${++n}`, 'victim-password-1');
      return (await s.app.inject({ method: 'POST', url: `/api/v1/auth/groups/${groups.operators}/${v.uuid}`, headers: me.auth })).statusCode;
    },
    'create a user': async (me) => (await s.app.inject({ method: 'POST', url: '/api/v1/auth/users', headers: me.auth, payload: { username: `made-${++n}`, password: 'made-password-12' } })).statusCode,
    "set an administrator's password": async (me) => {
      const root = await createUser(s, `root-${++n}`, 'root-password-12', [groups.admins]);
      return (await s.app.inject({ method: 'PUT', url: `/api/v1/auth/users/${root.uuid}/password`, headers: me.auth, payload: { newPassword: 'taken-over-pass-1' } })).statusCode;
    },
    "set an ordinary user's password": async (me) => {
      const v = await createUser(s, `victim-${++n}`, 'victim-password-1');
      return (await s.app.inject({ method: 'PUT', url: `/api/v1/auth/users/${v.uuid}/password`, headers: me.auth, payload: { newPassword: 'taken-over-pass-1' } })).statusCode;
    },
    'grant self view_config': async (me) => {
      const entries = [...(await serverAcl()), { principalType: 'IDENTITY', principalId: me.uuid, effect: 'ALLOW', permissions: ['view_config'] }];
      return (await s.app.inject({ method: 'PUT', url: '/api/v1/auth/resources/acl', headers: me.auth, payload: { resourceType: 'Server', resourceKey: s.rt.serverName, entries } })).statusCode;
    },
    'grant a user view_stats': async (me) => {
      const v = await createUser(s, `victim-${++n}`, 'victim-password-1');
      const entries = [...(await serverAcl()), { principalType: 'IDENTITY', principalId: v.uuid, effect: 'ALLOW', permissions: ['view_stats'] }];
      return (await s.app.inject({ method: 'PUT', url: '/api/v1/auth/resources/acl', headers: me.auth, payload: { resourceType: 'Server', resourceKey: s.rt.serverName, entries } })).statusCode;
    },
    "lift everyone's deny on secret": async (me) => {
      const r = (await s.app.inject({ method: 'PUT', url: '/api/v1/auth/resources/acl', headers: me.auth, payload: { resourceType: 'Topic', resourceKey: 'secret', entries: [] } })).statusCode;
      if (r === 200) await s.inject({ method: 'PUT', url: '/api/v1/auth/resources/acl', payload: { resourceType: 'Topic', resourceKey: 'secret', entries: [{ principalType: 'GROUP', principalId: groups.everyone, effect: 'DENY', permissions: ['subscribe'] }] } });
      return r;
    },
    'delete an administrator': async (me) => {
      const root = await createUser(s, `root-${++n}`, 'root-password-12', [groups.admins]);
      return (await s.app.inject({ method: 'DELETE', url: `/api/v1/auth/users/${root.uuid}`, headers: me.auth })).statusCode;
    },
    'remove an administrator from admins': async (me) => {
      const root = await createUser(s, `root-${++n}`, 'root-password-12', [groups.admins]);
      return (await s.app.inject({ method: 'DELETE', url: `/api/v1/auth/groups/${groups.admins}/${root.uuid}`, headers: me.auth })).statusCode;
    },
    'delete an ordinary user': async (me) => {
      const v = await createUser(s, `victim-${++n}`, 'victim-password-1');
      return (await s.app.inject({ method: 'DELETE', url: `/api/v1/auth/users/${v.uuid}`, headers: me.auth })).statusCode;
    },
  };

  // expected status per holder, in the order of `actions`
  const matrix: Record<Holder, number[]> = {
    //                       admins ops  create adminPw userPw selfCfg grantVS lift delAdm rmAdm delUser
    manage_authentication: [403, 403, 201, 403, 403, 403, 403, 403, 403, 403, 204],
    manage_authorization: [403, 403, 403, 403, 403, 403, 403, 403, 403, 403, 403],
    both: [403, 403, 201, 403, 403, 403, 403, 403, 403, 403, 204],
    'both+view_stats': [403, 200, 201, 403, 403, 403, 200, 403, 403, 403, 204],
    view_stats: [403, 403, 403, 403, 403, 403, 403, 403, 403, 403, 403],
    everyone: [403, 403, 403, 403, 403, 403, 403, 403, 403, 403, 403],
    admin: [200, 200, 201, 204, 204, 200, 200, 200, 204, 200, 204],
  };

  test('privileges - the matrix: holder x administrative action', async () => {
    const names = Object.keys(actions);
    const failures: string[] = [];
    for (const [h, expected] of Object.entries(matrix) as Array<[Holder, number[]]>) {
      const me = await holder(h);
      for (let i = 0; i < names.length; i++) {
        const got = await actions[names[i]!]!(me);
        if (got !== expected[i]) failures.push(`${h} / ${names[i]}: expected ${expected[i]}, got ${got}`);
      }
    }
    assert.deepEqual(failures, []);
    // none of the refused actions changed anything: the holders are still where they were
    const mine = (await s.inject(`/api/v1/auth/users/${(await holder('both')).uuid}`)).json();
    assert.deepEqual(mine.groupList.map((g: { name: string }) => g.name), ['everyone']);
  });

  test('privileges - a refused escalation answers 403 naming what the caller lacks, and is audited', async () => {
    const me = await holder('manage_authentication');
    const r = await s.app.inject({ method: 'POST', url: `/api/v1/auth/groups/${groups.admins}/${me.uuid}`, headers: me.auth });
    assert.equal(r.statusCode, 403);
    assert.match(r.json().status, /adding holder-manage-authentication to group admins would hand out .* does not hold itself: .*on Server/);
    await auditLines(s, (l) => l.event === 'access.denied' && l.action === 'adding holder-manage-authentication to group admins');
    const pw = await s.app.inject({ method: 'PUT', url: `/api/v1/auth/users/${(await holder('admin')).uuid}/password`, headers: me.auth, payload: { newPassword: 'taken-over-pass-1' } });
    assert.equal(pw.statusCode, 403);
    assert.match(pw.json().status, /only a full administrator/);
    assert.equal((await s.inject('/api/v1/session')).statusCode, 200, "admin's password is unchanged");
  });

  test('defaults - an ordinary user gets 403 on the server log, the actor tree and the connection list; operators get them', async () => {
    const u = await createUser(s, 'plain-user', 'plain-password-1');
    for (const path of ['/api/v1/server/log', '/api/v1/server/actors', '/api/v1/server/connections']) {
      const r = await s.app.inject({ url: path, headers: u.auth });
      assert.equal(r.statusCode, 403, path);
      assert.match(r.json().status, /view_stats/);
    }
    const op = await createUser(s, 'an-operator', 'operator-password-1', [groups.operators]);
    for (const path of ['/api/v1/server/log', '/api/v1/server/actors', '/api/v1/server/connections']) {
      assert.equal((await s.app.inject({ url: path, headers: op.auth })).statusCode, 200, `${path} for operators`);
    }
  });

  test('defaults - a user created over REST logs in, connects over MQTT, changes its own password and cannot change another\'s', async () => {
    const created = await s.inject({ method: 'POST', url: '/api/v1/auth/users', payload: { username: 'newbie', password: 'newbie-password-1' } });
    assert.equal(created.statusCode, 201);
    const uuid = created.json().uniqueId as string;
    const user = (await s.inject(`/api/v1/auth/users/${uuid}`)).json();
    assert.deepEqual(user.groupList.map((g: { name: string }) => g.name), ['everyone'], 'a new user joins everyone');
    const li = await login(s, 'newbie', 'newbie-password-1');
    assert.equal(li.statusCode, 200, li.body);
    const session = await s.app.inject({ url: '/api/v1/session', headers: basicAuth('newbie', 'newbie-password-1') });
    assert.equal(session.statusCode, 200);
    const opts: IClientOptions = { protocolVersion: 5, username: 'newbie', password: 'newbie-password-1' };
    const { c, connack } = await mq.connect(opts);
    assert.equal(connack.reasonCode ?? 0, 0);
    assert.deepEqual(await mq.subAck(c, ['newbie/+'], 1), [1]);
    await c.endAsync();
    const other = await createUser(s, 'other-user', 'other-password-1');
    const theirs = await s.app.inject({ method: 'PUT', url: `/api/v1/auth/users/${other.uuid}/password`, headers: basicAuth('newbie', 'newbie-password-1'), payload: { newPassword: 'taken-over-pass-1', currentPassword: 'other-password-1' } });
    assert.equal(theirs.statusCode, 403);
    assert.equal((await s.app.inject({ url: '/api/v1/session', headers: other.auth })).statusCode, 200, "the other user's password is unchanged");
    const own = await s.app.inject({ method: 'PUT', url: `/api/v1/auth/users/${uuid}/password`, headers: basicAuth('newbie', 'newbie-password-1'), payload: { newPassword: 'newbie-password-2', currentPassword: 'newbie-password-1' } });
    assert.equal(own.statusCode, 204, own.body);
    assert.equal((await login(s, 'newbie', 'newbie-password-2')).statusCode, 200);
    await mq.connect({ ...opts, password: 'newbie-password-2' }).then(({ c: c2 }) => c2.endAsync());
  });

  test('$SYS - REST publish to $SYS/... is refused with 403 for users and admin alike, nothing is delivered or retained; MQTT refuses it too', async () => {
    const u = await createUser(s, 'sys-spoofer', 'spoofer-password-1');
    const { c: watcher } = await mq.connect({ protocolVersion: 5, username: 'admin', password: s.adminPassword });
    const got: string[] = [];
    watcher.on('message', (t, p) => got.push(`${t}=${p.toString()}`));
    await watcher.subscribeAsync('$SYS/broker/fake', { qos: 1 });
    for (const auth of [u.auth, s.auth]) {
      const r = await s.app.inject({ method: 'POST', url: '/api/v1/messaging/publish', headers: auth, payload: { destinationName: '$SYS/broker/fake', message: { payload: b64('spoofed') }, retain: true } });
      assert.equal(r.statusCode, 403, r.body);
      assert.match(r.json().status, /\$SYS topic; only the server publishes there/);
    }
    const version = await s.app.inject({ method: 'POST', url: '/api/v1/messaging/publish', headers: u.auth, payload: { destinationName: '$SYS/broker/version', message: { payload: b64('9.9.9') }, retain: true } });
    assert.equal(version.statusCode, 403);
    // over MQTT: a QoS 1 publish is acknowledged with 0x87 Not authorized, and nobody gets it
    const { c: spoofer } = await mq.connect({ protocolVersion: 5, username: 'sys-spoofer', password: 'spoofer-password-1' });
    await assert.rejects(spoofer.publishAsync('$SYS/broker/fake', 'mqtt-spoofed', { qos: 1, retain: true }), (err: Error & { code?: number }) => {
      assert.equal(err.code, 0x87);
      return true;
    });
    await spoofer.endAsync();
    // a later subscriber finds nothing retained, and the watcher got nothing
    const ping = await s.inject({ method: 'POST', url: '/api/v1/messaging/publish', payload: { destinationName: 'sys-test/ping', message: { payload: b64('ping') } } });
    assert.equal(ping.statusCode, 200);
    assert.equal(s.rt.engine!.retained('$SYS/broker/fake'), undefined);
    assert.notEqual(s.rt.engine!.retained('$SYS/broker/version')?.payload.toString(), '9.9.9');
    assert.deepEqual(got, []);
    await watcher.endAsync();
  });
});
