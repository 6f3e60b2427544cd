import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import mqtt from 'mqtt';
import { createLogs } from '../../src/log.js';
import { endpointsOf } from '../../src/endpoints/endpoints.service.js';
import { removeDir, startServer, tempDir, waitUntil, type TestServer } from '../helpers.js';

/** The keys of a JSON object's top level, in order, duplicates kept (JSON.parse would hide them). */
export function topLevelKeys(line: string): string[] {
  const keys: string[] = [];
  let depth = 0;
  let expectKey = false;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (c === '"') {
      let j = i + 1;
      while (j < line.length && line[j] !== '"') j += line[j] === '\\' ? 2 : 1;
      if (depth === 1 && expectKey) keys.push(JSON.parse(line.slice(i, j + 1)) as string);
      expectKey = false;
      i = j;
    } else if (c === '{' || c === '[') {
      depth++;
      expectKey = c === '{' && depth === 1;
    } else if (c === '}' || c === ']') depth--;
    else if (c === ',' && depth === 1) expectKey = true;
  }
  return keys;
}

const rawLines = (dir: string, file: string) => readFileSync(join(dir, 'log', file), 'utf8').split('\n').filter(Boolean);
const duplicated = (line: string) => {
  const keys = topLevelKeys(line);
  return new Set(keys).size !== keys.length;
};

describe('log lines', () => {
  const servers: TestServer[] = [];
  const dirs: string[] = [];
  after(async () => {
    for (const s of servers) await s.close();
    dirs.forEach(removeDir);
  });

  test('logs - no JSON line of messaging.log or audit.log carries a key twice (the REST, MQTT and other named loggers included)', async () => {
    const dataDir = tempDir();
    dirs.push(dataDir);
    const s = await startServer({ dataDir, overrides: { MessageDaemon: { logLevel: 'debug' } } });
    servers.push(s);
    // REST (logger 'rest'), MQTT (logger 'mqtt'), audit: a failed and a good login, an MQTT connection
    await s.app.inject({ method: 'POST', url: '/api/v1/login', payload: { username: 'admin', password: 'wrong-password!' } });
    await s.app.inject({ method: 'POST', url: '/api/v1/login', payload: { username: 'admin', password: s.adminPassword } });
    await s.app.inject({ method: 'GET', url: '/api/v1/no/such/route' });
    const port = endpointsOf(s.rt).entries.get('MQTT Interface')!.handle!.port;
    const c = await mqtt.connectAsync(`mqtt://127.0.0.1:${port}`, { clientId: 'dup-check', username: 'admin', password: s.adminPassword, reconnectPeriod: 0 });
    await c.endAsync();
    await waitUntil(() => rawLines(s.dataDir, 'messaging.log').some((l) => l.includes('"name":"mqtt"')), 5000, 'a line of the mqtt logger');
    await s.close();
    servers.splice(servers.indexOf(s), 1);
    const all = [...rawLines(dataDir, 'messaging.log'), ...rawLines(dataDir, 'audit.log')];
    const bad = all.filter(duplicated);
    const named = all.filter((l) => /"name":"(mqtt|rest|schemas|models)"/.test(l));
    console.log(`# ${bad.length} of ${all.length} JSON log lines carry a duplicate key (${named.length} lines from named child loggers)`);
    assert.ok(named.length > 0, 'lines from named child loggers were written');
    assert.deepEqual(bad.slice(0, 3), [], `${bad.length} of ${all.length} lines carry a duplicate key`);
    // the child's name wins: an MQTT line says mqtt, not server
    assert.ok(all.some((l) => JSON.parse(l).name === 'mqtt'));
  });

  test('logs - setLevel changes the level of the root and of child loggers made before it, audit lines in messaging.log follow it', async () => {
    const dir = tempDir();
    dirs.push(dir);
    const logs = createLogs({ dataDir: dir, level: 'info', entriesInMemory: 50, historyDays: 1, stdout: false });
    const child = logs.log.child({ name: 'rest' }).child({ actor: 'endpoint' });
    child.debug('debug before');
    logs.audit.debug({ event: 'login.succeeded' }, 'audit debug before');
    logs.setLevel('debug');
    child.debug('debug after');
    logs.audit.debug({ event: 'login.succeeded' }, 'audit debug after');
    logs.setLevel('warn');
    child.info('info after warn');
    await logs.close();
    const text = readFileSync(join(dir, 'log', 'messaging.log'), 'utf8');
    assert.doesNotMatch(text, /debug before/);
    assert.match(text, /debug after/);
    assert.match(text, /audit debug after/);
    assert.doesNotMatch(text, /audit debug before/);
    assert.doesNotMatch(text, /info after warn/);
    assert.equal(text.split('\n').filter(Boolean).filter(duplicated).length, 0);
    assert.deepEqual(
      logs.monitor.entries().map((e) => e.message.replace(/^\[[^\]]+\] /, '')),
      ['DEBUG debug after (rest) actor=endpoint', 'DEBUG audit debug after (audit) event=login.succeeded'],
    );
  });
});
