/**
 * A SIGTERM early in start-up (issue 24 deviation 8, [MQTT-4.1.0-1]): MQTT accepts and acknowledges before the REST
 * API is built, and the signal handlers used to be installed only after it, so a SIGTERM in between ended the process
 * with acknowledged session state unwritten (after the restart CONNACK said session present, the subscription was
 * gone). The broker runs as a child process; a persistent session subscribes as soon as MQTT accepts, SIGTERM
 * follows the SUBACK at once, and after a restart the session and its subscription are both there.
 */
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { removeDir, spawnBroker, tempDir, type BrokerProcess } from '../helpers.js';
import { RawClient } from '../mqtt/helpers.js';

const dirs: string[] = [];
const procs: BrokerProcess[] = [];
const raws: RawClient[] = [];
after(async () => {
  for (const r of raws) r.destroy();
  for (const p of procs) await p.stop('SIGKILL');
  dirs.forEach(removeDir);
});

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((res) => s.listen(0, '127.0.0.1', res));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((res) => s.close(() => res()));
  return port;
}

/** A raw MQTT 3.1.1 connection as soon as the port accepts (retried every few ms for up to 30 s). */
async function openWhenAccepting(port: number): Promise<RawClient> {
  const end = Date.now() + 30000;
  for (;;) {
    try {
      const r = await RawClient.open(port, 4);
      raws.push(r);
      return r;
    } catch (err) {
      if (Date.now() > end) throw err;
      await new Promise((res) => setTimeout(res, 5));
    }
  }
}

/** Attempts at landing the SIGTERM before REST listens (the window is a few hundred ms; most attempts hit it). */
const ATTEMPTS = 6;

describe('SIGTERM during start-up', () => {
  test('process - SIGTERM right after an early SUBACK: clean exit 0, and after the restart the session is present and its subscription delivers [MQTT-4.1.0-1]', async () => {
    let env: Record<string, string> = {};
    let port = 0;
    let inWindow = false;
    for (let attempt = 1; attempt <= ATTEMPTS && !inWindow; attempt++) {
      const data = tempDir();
      dirs.push(data);
      port = await freePort();
      // anonymous: no password hashing before the CONNACK, so the SUBACK comes well before REST listens
      env = { SWITCHYARD_DATA_DIR: data, SWITCHYARD_MQTT_PORT: String(port), SWITCHYARD_ALLOW_ANONYMOUS: 'true' };
      const first = await spawnBroker(env, { waitReady: false });
      procs.push(first);

      const r = await openWhenAccepting(port);
      const ack = await r.connect({ clientId: 'early', clean: false });
      assert.equal(ack.returnCode, 0, JSON.stringify(ack));
      r.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: 'early/t', qos: 1 }] });
      assert.deepEqual((await r.next('suback')).granted, [1]);
      inWindow = !first.stdout().includes('SWITCHYARD_LISTENING');
      first.proc.kill('SIGTERM');
      const code = await first.exited;
      const out = first.stdout() + first.stderr();
      console.log(
        `# attempt ${attempt}: SIGTERM right after the SUBACK (REST ${inWindow ? 'not yet' : 'already'} listening): exit code ${code}, signal ${first.proc.signalCode ?? 'none'}` +
          `, "shutdown requested during start-up" logged: ${out.includes('shutdown requested during start-up')}`,
      );
      assert.equal(code, 0, `a clean shutdown (exit 0), not death by the signal:\n${out.slice(-2000)}`);
      r.destroy();
    }
    assert.ok(inWindow, `the SIGTERM landed before REST listened in one of ${ATTEMPTS} attempts`);

    // the last attempt's data dir: the one whose SIGTERM came during start-up
    const second = await spawnBroker(env);
    procs.push(second);
    const back = await openWhenAccepting(port);
    const ack2 = await back.connect({ clientId: 'early', clean: false });
    assert.equal(ack2.returnCode, 0);
    assert.equal(ack2.sessionPresent, true, 'session present');
    const pub = await openWhenAccepting(port);
    await pub.connect({ clientId: 'publisher', clean: true });
    pub.send({ cmd: 'publish', topic: 'early/t', payload: Buffer.from('after the restart'), qos: 1, messageId: 1 });
    await pub.next('puback');
    const msg = await back.next('publish', 10000);
    assert.equal(msg.topic, 'early/t');
    assert.equal(msg.payload.toString(), 'after the restart', 'the subscription made before the SIGTERM delivers');
    assert.equal(await second.stop(), 0);
  });
});
