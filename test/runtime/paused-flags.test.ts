import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { ClassicLevel } from 'classic-level';
import mqtt, { type MqttClient } from 'mqtt';
import { removeDir, startServer, tempDir, waitUntil, type TestServer } from '../helpers.js';

/**
 * The paused flag of a durable subscription (`ps!<subscription key>` in the engine's store) lives exactly as long as
 * the subscription: a real LevelDB data dir, real MQTT clients, the broker restarted in process on the same dir.
 */

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The engine's `ps!` keys (without the sublevel prefix), read from the LevelDB of a stopped broker. */
async function pausedFlags(dataDir: string): Promise<string[]> {
  const db = new ClassicLevel<string, Buffer>(join(dataDir, 'store'), { valueEncoding: 'buffer', keyEncoding: 'utf8' });
  await db.open();
  const out: string[] = [];
  try {
    for await (const key of db.sublevel<string, Buffer>('messages', { valueEncoding: 'buffer', keyEncoding: 'utf8' }).keys({ gte: 'ps!', lt: 'ps"' })) out.push(key);
  } finally {
    await db.close();
  }
  return out;
}

/** Write one `ps!` key into a stopped broker's store. */
async function writeFlag(dataDir: string, key: string): Promise<void> {
  const db = new ClassicLevel<string, Buffer>(join(dataDir, 'store'), { valueEncoding: 'buffer', keyEncoding: 'utf8' });
  await db.open();
  await db.sublevel<string, Buffer>('messages', { valueEncoding: 'buffer', keyEncoding: 'utf8' }).put(key, Buffer.alloc(0));
  await db.close();
}

describe('paused subscription flags', () => {
  const dir = tempDir();
  const clients: MqttClient[] = [];
  let s: TestServer | undefined;
  after(async () => {
    for (const c of clients) c.end(true);
    await s?.close();
    removeDir(dir);
  });
  const start = async () => {
    s = await startServer({ auth: false, dataDir: dir, overrides: { RestApi: { enableCache: false } } });
    const list = (await s.inject('/api/v1/server/interfaces')).json() as Array<{ name: string; port: number }>;
    return list.find((i) => i.name === 'MQTT Interface')!.port;
  };
  const stop = async () => {
    for (const c of clients.splice(0)) c.end(true);
    await s!.close();
    s = undefined;
  };
  const connect = async (port: number, clientId: string, expiry: number) => {
    const c = await mqtt.connectAsync(`mqtt://127.0.0.1:${port}`, { clientId, clean: false, reconnectPeriod: 0, protocolVersion: 5, properties: { sessionExpiryInterval: expiry } });
    clients.push(c);
    return c;
  };
  const pauseOverRest = async (sessionId: string, filter: string) => {
    const key = s!.rt.engine!.subscription(sessionId, filter)!.key;
    const r = await s!.inject({ method: 'PATCH', url: `/api/v1/server/subscriptions/${encodeURIComponent(key)}`, payload: { state: 'paused' } });
    assert.deepEqual([r.statusCode, r.json()], [200, { status: 'Success', state: 'Paused' }]);
  };
  const paused = (sessionId: string, filter: string) => s!.rt.engine!.subscription(sessionId, filter)?.paused;

  test('lifecycle - a paused durable subscription\'s flag goes with its session or subscription, and never pauses a later one of the same key', async () => {
    let port = await start();
    // a session that will expire, paused on a topic filter and on a queue; a lasting one paused on a queue
    const brief = await connect(port, 'pf-brief', 2);
    await brief.subscribeAsync('pf/#', { qos: 1 });
    await brief.subscribeAsync('queue/pf-jobs', { qos: 1 });
    const lasting = await connect(port, 'pf-lasting', 3600);
    await lasting.subscribeAsync('queue/pf-keep', { qos: 1 });
    await pauseOverRest('mqtt:pf-brief', 'pf/#');
    await pauseOverRest('mqtt:pf-brief', 'queue/pf-jobs');
    await pauseOverRest('mqtt:pf-lasting', 'queue/pf-keep');
    await stop();
    assert.deepEqual((await pausedFlags(dir)).sort(), ['ps!mqtt%3Apf-brief|pf/#', 'ps!mqtt%3Apf-brief|queue/pf-jobs', 'ps!mqtt%3Apf-lasting|queue/pf-keep']);
    // a flag whose session ended without the flag's delete reaching the store (a crash in between)
    await writeFlag(dir, 'ps!mqtt%3Apf-gone|pf/gone');

    port = await start();
    assert.equal(paused('mqtt:pf-lasting', 'queue/pf-keep'), true, 'a queue consumer\'s pause survives the restart');
    assert.equal(paused('mqtt:pf-brief', 'pf/#'), true, 'a topic subscription\'s pause survives the restart');
    // the lasting session drops its paused queue subscription; the brief one expires (2 s after it went offline)
    const back = await connect(port, 'pf-lasting', 3600);
    await back.unsubscribeAsync('queue/pf-keep');
    await waitUntil(() => s!.rt.engine!.sessionSubscriptions('mqtt:pf-brief').length === 0, 10000, 'the brief session to expire');
    await stop();
    assert.deepEqual(await pausedFlags(dir), [], 'no paused flag is left in the store');

    // a new subscription of each key is not paused, after a restart as well
    port = await start();
    const again = await connect(port, 'pf-brief', 0);
    await again.subscribeAsync('pf/#', { qos: 1 });
    await again.subscribeAsync('queue/pf-jobs', { qos: 1 });
    const gone = await connect(port, 'pf-gone', 0);
    await gone.subscribeAsync('pf/gone', { qos: 1 });
    const kept = await connect(port, 'pf-lasting', 3600);
    await kept.subscribeAsync('queue/pf-keep', { qos: 1 });
    assert.deepEqual(
      [paused('mqtt:pf-brief', 'pf/#'), paused('mqtt:pf-brief', 'queue/pf-jobs'), paused('mqtt:pf-gone', 'pf/gone'), paused('mqtt:pf-lasting', 'queue/pf-keep')],
      [false, false, false, false],
    );
    const got: string[] = [];
    gone.on('message', (_t, p) => got.push(p.toString()));
    await again.publishAsync('pf/gone', 'delivered', { qos: 1 });
    await waitUntil(() => got.length === 1, 5000, 'the message to the new subscription');
    await pause(50);
    await stop();
    assert.deepEqual(await pausedFlags(dir), []);
  });
});
