import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import mqtt from 'mqtt';
import { createLogs } from '../../src/log.js';
import { endpointsOf } from '../../src/endpoints/endpoints.service.js';
import { removeDir, startServer, tempDir, waitUntil, type TestServer } from '../helpers.js';

const lines = (dir: string, file: string) =>
  readFileSync(join(dir, 'log', file), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Record<string, unknown>);

describe('logs', () => {
  const servers: TestServer[] = [];
  const dirs: string[] = [];
  after(async () => {
    for (const s of servers) await s.close();
    dirs.forEach(removeDir);
  });

  test('logs - failed logins are WARN in audit.log and messaging.log; successful ones only in audit.log at INFO level; at DEBUG a connection line has client id, address and protocol', async () => {
    const s = await startServer({ overrides: { MessageDaemon: { logLevel: 'info' } } });
    servers.push(s);
    const bad = await s.app.inject({ method: 'POST', url: '/api/v1/login', payload: { username: 'admin', password: 'not-the-password' } });
    assert.equal(bad.statusCode, 401);
    const good = await s.app.inject({ method: 'POST', url: '/api/v1/login', payload: { username: 'admin', password: s.adminPassword } });
    assert.equal(good.statusCode, 200);
    await waitUntil(() => lines(s.dataDir, 'messaging.log').some((l) => l.event === 'login.failed'), 5000, 'login.failed in messaging.log');
    await waitUntil(() => lines(s.dataDir, 'audit.log').some((l) => l.event === 'login.succeeded'), 5000, 'login.succeeded in audit.log');
    const failed = lines(s.dataDir, 'audit.log').find((l) => l.event === 'login.failed')!;
    assert.equal(failed.level, 40, 'WARN');
    assert.equal(lines(s.dataDir, 'messaging.log').find((l) => l.event === 'login.failed')!.level, 40);
    assert.equal(lines(s.dataDir, 'messaging.log').some((l) => l.event === 'login.succeeded'), false, 'no line per login at INFO');

    const d = await startServer({ overrides: { MessageDaemon: { logLevel: 'debug' } } });
    servers.push(d);
    const port = endpointsOf(d.rt).entries.get('MQTT Interface')!.handle!.port;
    const c = await mqtt.connectAsync(`mqtt://127.0.0.1:${port}`, { clientId: 'logged-client', username: 'admin', password: d.adminPassword, reconnectPeriod: 0, protocolVersion: 5 });
    await c.endAsync();
    await waitUntil(() => lines(d.dataDir, 'messaging.log').some((l) => l.msg === 'MQTT client connected'), 5000, 'connection line');
    const conn = lines(d.dataDir, 'messaging.log').find((l) => l.msg === 'MQTT client connected')!;
    assert.equal(conn.level, 20, 'DEBUG');
    assert.equal(conn.clientId, 'logged-client');
    assert.equal(conn.protocol, 'MQTT 5');
    assert.match(String(conn.address), /^127\.0\.0\.1:\d+$/);
    // the in-memory log view gets the same records (no re-parsing)
    const view = (await d.inject('/api/v1/server/log')).json() as Array<{ message: string }> | { data?: Array<{ message: string }> };
    assert.ok(JSON.stringify(view).includes('MQTT client connected'));
  });

  test('logs - a log file is rotated when it reaches MessageDaemon.logMaxSize, not only daily', async () => {
    const dir = tempDir();
    dirs.push(dir);
    const logs = createLogs({ dataDir: dir, level: 'info', entriesInMemory: 10, historyDays: 3, maxSize: '10K', stdout: false });
    for (let i = 0; i < 400; i++) logs.log.info({ i, pad: 'x'.repeat(100) }, 'filler line');
    await new Promise((r) => setTimeout(r, 300));
    for (let i = 0; i < 50; i++) logs.log.info({ i }, 'after');
    await logs.close();
    await waitUntil(() => readdirSync(join(dir, 'log')).filter((f) => f.endsWith('-messaging.log.gz')).length >= 1, 5000, 'a rotated file');
    const rotated = readdirSync(join(dir, 'log')).filter((f) => f.endsWith('-messaging.log.gz'));
    assert.ok(rotated.length <= 3, `at most historyDays rotated files: ${rotated.join(', ')}`);
  });
});
