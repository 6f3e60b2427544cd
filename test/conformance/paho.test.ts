/**
 * An independent client: a slice of MQTT conformance driven by Debian's python3-paho-mqtt (1.6.1), whose parser and
 * state machine share no code with ours or with mqtt.js, against a Switchyard broker listening on a random port of
 * 127.0.0.1. Each scenario runs ./paho_client.py in a python3 process that prints what paho observed as JSON; the
 * assertions are here. Scenarios: connect (3.1.1 and 5; and MQTT 3.1, protocol level 3), QoS 1 and QoS 2 flows,
 * retained messages, wills, session resume (clean session 0 / Session Expiry Interval), topic aliases (MQTT 5).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { ROOT, startServer, type TestServer } from '../helpers.js';
import { mqttPort } from '../mqtt/helpers.js';

const PYTHON = '/usr/bin/python3';
const SCRIPT = join(ROOT, 'test/conformance/paho_client.py');

interface Msg {
  topic: string;
  payload: string;
  qos: number;
  retain: boolean;
}
interface Connack {
  rc: number;
  sessionPresent: boolean;
  properties: Record<string, unknown>;
}
type Observed = Record<string, any>;

describe('paho-python', () => {
  let s: TestServer;
  let port = 0;
  const running = new Set<ChildProcess>();

  before(async () => {
    // as the Paho suites meet a broker: authentication on, anonymous clients allowed
    s = await startServer({ overrides: { AuthManager: { allowAnonymous: true } } });
    port = await mqttPort(s);
  });
  after(async () => {
    for (const p of running) if (p.exitCode === null && p.signalCode === null) process.kill(p.pid!, 'SIGKILL');
    await s.close();
  });

  /** Runs one scenario of paho_client.py; resolves with what paho observed. */
  const paho = (scenario: string): Promise<Observed> =>
    new Promise((resolve, reject) => {
      const p = spawn(PYTHON, [SCRIPT, String(port), scenario], { stdio: ['ignore', 'pipe', 'pipe'] });
      running.add(p);
      let out = '';
      let err = '';
      p.stdout!.on('data', (d) => (out += d));
      p.stderr!.on('data', (d) => (err += d));
      const timer = setTimeout(() => process.kill(p.pid!, 'SIGKILL'), 60_000);
      p.on('exit', (code, signal) => {
        clearTimeout(timer);
        running.delete(p);
        const line = out.trim().split('\n').at(-1) ?? '';
        try {
          const r = JSON.parse(line) as Observed;
          if (r.error) reject(new Error(`paho ${scenario}: ${r.error}\n${r.trace}\n${err}`));
          else resolve(r);
        } catch {
          reject(new Error(`paho ${scenario} exited ${code ?? signal} without a result:\n${out}\n${err}`));
        }
      });
    });

  const payloads = (ms: Msg[]) => ms.map((m) => m.payload);

  test('paho-python - CONNECT 3.1.1: CONNACK 0 without session present for a clean session; an empty client id is accepted [MQTT-3.2.2-1, MQTT-3.1.3-7]', async () => {
    const r = await paho('connect-311');
    assert.deepEqual([r.connack.rc, r.connack.sessionPresent], [0, false]);
    assert.deepEqual([r.emptyClientId.rc, r.emptyClientId.sessionPresent], [0, false]);
  });

  test('paho-python - CONNECT 5: reason 0x00, no session present; an empty client id gets an Assigned Client Identifier [MQTT-3.2.2-16]', async () => {
    const r = await paho('connect-5');
    const first = r.connack as Connack;
    assert.deepEqual([first.rc, first.sessionPresent], [0, false]);
    const empty = r.emptyClientId as Connack;
    assert.equal(empty.rc, 0);
    assert.equal(typeof empty.properties.AssignedClientIdentifier, 'string');
    assert.ok((empty.properties.AssignedClientIdentifier as string).length > 0);
  });

  test('paho-python - MQTT 3.1 (protocol level 3): CONNACK 0, a QoS 1 round trip, a clean session 0 session resumed with its queued messages, no session-present bit (3.1 has none)', async () => {
    const r = await paho('connect-31');
    assert.deepEqual([r.first.rc, r.first.sessionPresent], [0, false]);
    assert.deepEqual(r.granted, [1]);
    assert.equal(r.own, true);
    assert.deepEqual(r.ownMessage, [{ topic: 'paho/v31', payload: 'own', qos: 1, retain: false }]);
    assert.deepEqual([r.resumed.rc, r.resumed.sessionPresent], [0, false], 'the CONNACK of 3.1 has no session-present bit');
    assert.deepEqual(payloads(r.queued), ['queued0', 'queued1'], 'the session was resumed all the same');
  });

  for (const v of ['311', '5'] as const) {
    for (const qos of [1, 2] as const) {
      test(`paho-python - QoS ${qos} flow (${v === '5' ? 'MQTT 5' : '3.1.1'}): SUBACK grants ${qos}, every publish completes its ${qos === 1 ? 'PUBACK' : 'PUBREC/PUBREL/PUBCOMP'} exchange, the subscriber gets each message once, in order, at QoS ${qos} [MQTT-4.3.${qos + 1}-1, MQTT-4.6.0-2]`, async () => {
        const r = await paho(`qos${qos}-${v}`);
        assert.deepEqual(r.granted, [qos]);
        assert.deepEqual(r.completed, [true, true, true, true, true]);
        assert.deepEqual(payloads(r.received), ['m0', 'm1', 'm2', 'm3', 'm4']);
        assert.ok((r.received as Msg[]).every((m) => m.qos === qos && !m.retain));
      });
    }
  }

  for (const v of ['311', '5'] as const) {
    test(`paho-python - retained (${v === '5' ? 'MQTT 5' : '3.1.1'}): a new subscriber gets the retained message with RETAIN 1; an empty retained payload removes it and reaches the live subscriber with RETAIN 0 [MQTT-3.3.1-6, MQTT-3.3.1-9, MQTT-3.3.1-10]`, async () => {
      const r = await paho(`retained-${v}`);
      assert.equal(r.stored, true);
      assert.deepEqual(r.first, [{ topic: `paho/retained/${v}`, payload: 'kept', qos: 1, retain: true }]);
      assert.equal(r.cleared, true);
      assert.deepEqual(r.live, [{ topic: `paho/retained/${v}`, payload: '', qos: 1, retain: false }]);
      assert.deepEqual(r.afterClear, [], 'nothing retained after the empty retained message');
    });

    test(`paho-python - will (${v === '5' ? 'MQTT 5' : '3.1.1'}): a dropped connection publishes it; a normal DISCONNECT${v === '5' ? ' (E0 00 and E0 01 00, the short forms paho sends)' : ''} does not [MQTT-3.1.2-8, MQTT-3.1.2-10, MQTT-3.14.4-3]`, async () => {
      const r = await paho(`will-${v}`);
      assert.deepEqual(r.onDrop, [{ topic: `paho/will/${v}/dropped`, payload: 'gone', qos: 1, retain: false }]);
      assert.deepEqual(r.afterNormal, [], 'no will after a normal disconnect');
    });

    test(`paho-python - session resume (${v === '5' ? 'MQTT 5, Clean Start 0 and Session Expiry Interval 300' : '3.1.1, clean session 0'}): the reconnect says session present and gets the QoS 1 messages sent while away; a clean session discards it [MQTT-3.2.2-2, MQTT-3.2.2-3, MQTT-3.1.2-4]`, async () => {
      const r = await paho(`session-${v}`);
      assert.deepEqual([r.first.rc, r.first.sessionPresent], [0, false]);
      assert.deepEqual([r.resumed.rc, r.resumed.sessionPresent], [0, true]);
      assert.deepEqual(payloads(r.queued), ['queued0', 'queued1', 'queued2']);
      assert.ok((r.queued as Msg[]).every((m) => m.qos === 1));
      assert.deepEqual([r.cleaned.rc, r.cleaned.sessionPresent], [0, false]);
      if (v === '5') {
        assert.equal(r.zeroExpiry.sessionPresent, false, 'Session Expiry Interval 0: the session ended with the connection [MQTT-3.1.2-23]');
        assert.deepEqual(r.zeroExpiryQueued, []);
        assert.equal(r.afterExpiry.sessionPresent, false, 'a 1 s session is gone 3 s after the disconnect');
      }
    });
  }

  test('paho-python - topic aliases (MQTT 5): an alias set with a topic stands for it, may be remapped; a client that announces no Topic Alias Maximum gets full topic names; an alias above the maximum is DISCONNECT 0x94, an unknown one 0x82 [MQTT-3.3.2-9, MQTT-3.3.2-11, MQTT-3.3.2-12]', async () => {
    const r = await paho('topic-alias-5');
    const max = r.connack.properties.TopicAliasMaximum as number;
    assert.ok(max >= 1, `the broker accepts topic aliases (Topic Alias Maximum ${max})`);
    assert.deepEqual(r.sent, [true, true, true, true]);
    assert.deepEqual(
      (r.received as Msg[]).map((m) => [m.topic, m.payload]),
      [
        ['paho/alias/a', 'a1'],
        ['paho/alias/a', 'a2'],
        ['paho/alias/b', 'b1'],
        ['paho/alias/b', 'b2'],
      ],
    );
    assert.equal(r.overMaximum, 0x94, 'Topic Alias invalid');
    assert.equal(r.unknownAlias, 0x82, 'Protocol Error');
    assert.deepEqual(r.leaked, [], 'the refused publishes were not delivered');
  });
});
