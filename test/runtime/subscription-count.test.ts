import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import mqtt, { type MqttClient } from 'mqtt';
import { removeDir, startServer, tempDir, waitUntil, type TestServer } from '../helpers.js';

/**
 * The number of subscription actors (durable subscriptions, online or hibernating) as the actor list, the actor
 * tree and the server status show it: right after subscribe, unsubscribe, a session's expiry and a restart, and read
 * from a counter the engine keeps, not by walking the subscriptions. Real MQTT clients, a real LevelDB data dir.
 */
describe('subscription actor count', () => {
  const dir = tempDir();
  const clients: MqttClient[] = [];
  let s: TestServer | undefined;
  after(async () => {
    for (const c of clients) c.end(true);
    await s?.close();
    removeDir(dir);
  });
  const start = async () => {
    s = await startServer({ auth: false, dataDir: dir, overrides: { RestApi: { enableCache: false }, MessageDaemon: { enableSystemTopics: false } } });
    const list = (await s.inject('/api/v1/server/interfaces')).json() as Array<{ name: string; port: number }>;
    return list.find((i) => i.name === 'MQTT Interface')!.port;
  };
  const connect = async (port: number, clientId: string, expiry: number, clean = false) => {
    const c = await mqtt.connectAsync(`mqtt://127.0.0.1:${port}`, { clientId, clean, reconnectPeriod: 0, protocolVersion: 5, properties: { sessionExpiryInterval: expiry } });
    clients.push(c);
    return c;
  };
  /** The count as the three views show it: the list's total, the supervisor's childCount, the status comment. */
  const counts = async () => {
    const list = (await s!.inject('/api/v1/server/actors?kind=subscription&limit=1')).json() as { total: number };
    const sup = ((await s!.inject('/api/v1/server/actors?kind=supervisor&prefix=supervisor:subscriptions')).json() as { items: Array<{ childCount: number }> }).items[0]!;
    const status = ((await s!.inject('/api/v1/server/status')).json() as Array<{ name: string; comment: string }>).find((x) => x.name === 'Subscriptions')!;
    return [list.total, sup.childCount, Number(/^(\d+) running/.exec(status.comment)?.[1])];
  };

  test('actors - the subscription count follows subscribe, unsubscribe, session expiry and a restart, without a walk over the subscriptions', async () => {
    let port = await start();
    assert.deepEqual(await counts(), [0, 0, 0]);
    const lasting = await connect(port, 'cnt-lasting', 3600);
    await lasting.subscribeAsync(['cnt/a', 'cnt/b/#', 'queue/cnt'], { qos: 1 });
    const clean = await connect(port, 'cnt-clean', 0, true);
    await clean.subscribeAsync(['cnt/a', 'cnt/c'], { qos: 1 }); // not durable: no actor
    assert.deepEqual(await counts(), [3, 3, 3]);
    const brief = await connect(port, 'cnt-brief', 1);
    await brief.subscribeAsync(['cnt/a', '$share/g/cnt/d'], { qos: 1 });
    await lasting.subscribeAsync('cnt/a', { qos: 0 }); // the same filter again: the same subscription
    assert.deepEqual(await counts(), [5, 5, 5]);
    await lasting.unsubscribeAsync('cnt/b/#');
    await lasting.unsubscribeAsync('cnt/none'); // nothing to unsubscribe
    assert.deepEqual(await counts(), [4, 4, 4]);

    // a status request and the list's total read the engine's counter: no walk over 2 000 subscriptions
    const e = s!.rt.engine!;
    for (let i = 0; i < 2000; i++) e.subscribe({ sessionId: `cnt-bulk-${i}`, filter: 'cnt/bulk', sink: { kind: 'pull' } });
    let walks = 0;
    const each = e.eachDurableSubscription.bind(e);
    e.eachDurableSubscription = () => {
      walks++;
      return each();
    };
    assert.equal(((await s!.inject('/api/v1/server/status')).json() as Array<{ name: string; comment: string }>).find((x) => x.name === 'Subscriptions')!.comment, '4 running (0 active)');
    assert.equal(walks, 0, 'the status counted without walking the subscriptions');
    for (let i = 0; i < 2000; i++) e.closeSession(`cnt-bulk-${i}`);

    await brief.endAsync();
    await waitUntil(async () => (await counts())[0] === 2, 10000, 'the brief session to expire');
    assert.deepEqual(await counts(), [2, 2, 2]);
    for (const c of clients.splice(0)) c.end(true);
    await s!.close();

    port = await start();
    assert.deepEqual(await counts(), [2, 2, 2], 'the restored (hibernated) subscriptions of the lasting session');
    const back = await connect(port, 'cnt-lasting', 0, true); // clean start: the session and its subscriptions end
    await back.endAsync();
    assert.deepEqual(await counts(), [0, 0, 0]);
  });
});
