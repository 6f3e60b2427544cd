import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CONFIG_DIR, removeDir, spawnBroker, tempDir, type BrokerProcess } from '../helpers.js';

const dirs: string[] = [];
const procs: BrokerProcess[] = [];
after(async () => {
  for (const p of procs) await p.stop('SIGKILL');
  dirs.forEach(removeDir);
});

/** The shipped config with REST authentication off: this test is about durability, not security. */
function openConfig(): string {
  const d = tempDir('switchyard-cfg-');
  dirs.push(d);
  cpSync(CONFIG_DIR, d, { recursive: true });
  writeFileSync(join(d, 'AuthManager.yaml'), 'AuthManager:\n  authenticationEnabled: false\n  authorisationEnabled: false\n');
  return d;
}

class Caller {
  cookie = '';
  constructor(private readonly base: string) {}
  async post(path: string, body: unknown): Promise<Response> {
    const r = await fetch(`${this.base}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(this.cookie ? { cookie: this.cookie } : {}) },
      body: JSON.stringify(body),
    });
    const set = r.headers.getSetCookie().map((c) => c.split(';')[0]);
    if (set.length) this.cookie = set.join('; ');
    return r;
  }
}

describe('crash safety', () => {
  test('crash - every queue and retained message acknowledged over REST survives SIGKILL', async () => {
    const data = tempDir();
    dirs.push(data);
    const env = { SWITCHYARD_DATA_DIR: data, SWITCHYARD_CONFIG_DIR: openConfig() };
    const first = await spawnBroker(env);
    procs.push(first);
    const pub = new Caller(`http://127.0.0.1:${first.port}`);

    const queued: string[] = [];
    const publishQueue = async (worker: number) => {
      for (let i = 0; i < 25; i++) {
        const text = `job-${worker}-${i}`;
        const r = await pub.post('/api/v1/messaging/publish', {
          destinationName: 'queue/crash',
          message: { payload: Buffer.from(text).toString('base64'), priority: i % 11, qualityOfService: 1 },
        });
        assert.equal(r.status, 200);
        queued.push(text);
      }
    };
    const retained = new Map<string, string>();
    const publishRetained = async () => {
      for (const version of ['v1', 'v2']) {
        for (let i = 0; i < 10; i++) {
          const topic = `crash/retained/${i}`;
          const r = await pub.post('/api/v1/messaging/publish', {
            destinationName: topic,
            message: { payload: Buffer.from(`${topic}=${version}`).toString('base64') },
            retain: true,
          });
          assert.equal(r.status, 200);
          retained.set(topic, `${topic}=${version}`);
        }
      }
    };
    // Concurrent publishers, so acknowledgements come out of group commits of several messages.
    await Promise.all([0, 1, 2, 3, 4, 5, 6, 7].map(publishQueue).concat([publishRetained()]));
    first.proc.kill('SIGKILL');
    assert.equal(await first.exited, null, 'killed, not exited');

    const second = await spawnBroker(env);
    procs.push(second);
    const sub = new Caller(`http://127.0.0.1:${second.port}`);
    assert.equal((await sub.post('/api/v1/messaging/subscribe', { destinationName: 'queue/crash', maxDepth: 1000 })).status, 200);
    assert.equal((await sub.post('/api/v1/messaging/subscribe', { destinationName: 'crash/retained/+', maxDepth: 1000, retainMessage: true })).status, 200);
    const got: string[] = [];
    const priorities: number[] = [];
    for (let round = 0; round < 20 && got.length < queued.length; round++) {
      const r = await sub.post('/api/v1/messaging/consume', { destination: 'queue/crash', depth: 1000 });
      const msgs = (await r.json()).consumedMessages as Array<{ payload: string; priority: number }>;
      for (const m of msgs) {
        got.push(Buffer.from(m.payload, 'base64').toString());
        priorities.push(m.priority);
      }
    }
    assert.equal(got.length, queued.length, 'no acknowledged queue message lost, none duplicated');
    assert.deepEqual([...got].sort(), [...queued].sort());
    assert.deepEqual(priorities, [...priorities].sort((a, b) => b - a), 'recovered queue keeps priority order');

    const r = await sub.post('/api/v1/messaging/consume', { destination: 'crash/retained/+', depth: 1000 });
    const ret = ((await r.json()).consumedMessages as Array<{ payload: string }>).map((m) => Buffer.from(m.payload, 'base64').toString());
    assert.deepEqual(ret.sort(), [...retained.values()].sort(), 'the latest retained message of every topic');
    await second.stop();
  });
});
