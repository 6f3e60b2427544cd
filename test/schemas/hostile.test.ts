/**
 * Payload schemas against hostile input (issue 20 item 3), on the broker as a child process: real REST and MQTT
 * sockets on 127.0.0.1, the REST ping measured from this process while the broker checks the payload.
 *
 * - A JSON Schema `pattern` of `^(a+)+$` and a payload of 32 a's and `!`: with V8's backtracking engine the broker
 *   stalled 20.6 s (REST), 19.4 s (MQTT 5) and 24.6 s (MQTT 3.1.1 QoS 0). Patterns now run on RE2 (re2js).
 * - A recursive schema and a 120 KB nested payload (JSON, and MessagePack with a JSON Schema) overflowed the
 *   validator's stack: REST 500, MQTT 5 DISCONNECT 0x80 and a stack trace in the log per message. Now: 400 / PUBACK
 *   0x99, the connection stays, at most one WARN line per schema and destination per 10 s, no stack trace.
 * - Patterns RE2 cannot run and `$ref` cycles that never read the payload are refused at registration (400).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import mqtt, { type IClientOptions, type MqttClient } from 'mqtt';
import { removeDir, spawnBroker, tempDir, type BrokerProcess } from '../helpers.js';
import { schemaPost } from './helpers.js';

/** The ping latency bound while a hostile payload is checked: generous for a shared 2-core machine (it was 20 s). */
const PING_BOUND_MS = 1000;
const REDOS = JSON.stringify(`${'a'.repeat(32)}!`);
const DEPTH = 20000;
/** `{"a":{"a":...{}...}}`, 20 000 levels: 120 KB. */
const DEEP_JSON = `${'{"a":'.repeat(DEPTH)}{}${'}'.repeat(DEPTH)}`;
/** The same as MessagePack: 40 000 maps of one entry "a" (fixmap 1, fixstr "a"), 120 KB. */
const DEEP_MSGPACK = Buffer.concat([...Array.from({ length: 2 * DEPTH }, () => Buffer.from([0x81, 0xa1, 0x61])), Buffer.from([0x80])]);
const RECURSIVE = { $defs: { node: { type: 'object', properties: { a: { $ref: '#/$defs/node' } } } }, $ref: '#/$defs/node' };

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((res) => s.listen(0, '127.0.0.1', res));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((res) => s.close(() => res()));
  return port;
}

describe('schemas against hostile payloads', () => {
  const dataDir = tempDir();
  let b: BrokerProcess;
  let mqttPort = 0;
  const clients: MqttClient[] = [];

  const rest = async (method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> => {
    const headers: Record<string, string> = { ...b.auth() };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const r = await fetch(`http://127.0.0.1:${b.port}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await r.text();
    try {
      return { status: r.status, json: JSON.parse(text) };
    } catch {
      return { status: r.status, json: text };
    }
  };
  const addSchema = (config: Record<string, unknown>, context: string) => rest('POST', '/api/v1/server/schemas', schemaPost(config, context));
  const restPublish = (destinationName: string, payload: Buffer) =>
    rest('POST', '/api/v1/messaging/publish', { destinationName, message: { payload: payload.toString('base64') } });
  const connect = (opts: IClientOptions): Promise<MqttClient> =>
    new Promise((resolve, reject) => {
      const c = mqtt.connect(`mqtt://127.0.0.1:${mqttPort}`, { username: 'admin', password: adminPassword(), reconnectPeriod: 0, ...opts });
      clients.push(c);
      c.once('connect', () => resolve(c));
      c.once('error', reject);
    });
  /** admin's password, from its Basic header. */
  const adminPassword = () => Buffer.from(b.auth().authorization.slice('Basic '.length), 'base64').toString().slice('admin:'.length);
  /** Everything the broker logged so far: stdout, stderr and messaging.log. */
  const logs = (): string[] => {
    const file = join(dataDir, 'log', 'messaging.log');
    return [b.stdout(), b.stderr(), existsSync(file) ? readFileSync(file, 'utf8') : ''];
  };

  /**
   * Runs `action` while this process pings GET /api/v1/ping back to back (and for `settleMs` after it, for work the
   * broker does after acknowledging); the slowest ping in ms. A ping that fails counts with its time and in `failures`.
   */
  let failures = 0;
  const pingDuring = async (action: () => Promise<void>, settleMs = 300): Promise<number> => {
    let max = 0;
    let running = true;
    const pinger = (async () => {
      while (running) {
        const t0 = performance.now();
        try {
          const r = await fetch(`http://127.0.0.1:${b.port}/api/v1/ping`);
          await r.arrayBuffer();
          if (!r.ok) failures++;
        } catch {
          failures++; // counted, and its time too
        }
        max = Math.max(max, performance.now() - t0);
        await new Promise((res) => setTimeout(res, 10));
      }
    })();
    await new Promise((res) => setTimeout(res, 50)); // the first ping is in flight
    await action();
    await new Promise((res) => setTimeout(res, settleMs));
    running = false;
    await pinger;
    return Math.round(max);
  };

  before(async () => {
    mqttPort = await freePort();
    b = await spawnBroker({ SWITCHYARD_DATA_DIR: dataDir, SWITCHYARD_MQTT_PORT: String(mqttPort) });
  });
  after(async () => {
    for (const c of clients) c.end(true);
    await b?.stop('SIGKILL');
    removeDir(dataDir);
  });


  test('schemas - a ReDoS pattern (^(a+)+$, 32 a\'s and !) is refused at once through REST, MQTT 5 and MQTT 3.1.1 QoS 0; the REST ping stays responsive', async () => {
    const added = await addSchema({ uniqueId: 'redos', format: 'json', schema: { type: 'string', pattern: '^(a+)+$' } }, 'redos/t');
    assert.equal(added.status, 200, JSON.stringify(added.json));
    const idle = await pingDuring(async () => {});

    let restAnswer: { status: number; json: any } | undefined;
    const viaRest = await pingDuring(async () => {
      restAnswer = await restPublish('redos/t', Buffer.from(REDOS)).catch((err: Error) => ({ status: 0, json: { status: err.message } }));
    });

    const v5 = await connect({ protocolVersion: 5, clientId: 'redos-v5' });
    let code: number | undefined;
    const viaV5 = await pingDuring(async () => {
      await v5.publishAsync('redos/t', REDOS, { qos: 1 }).catch((err: { code?: number }) => (code = err.code));
    });

    const v311 = await connect({ protocolVersion: 4, clientId: 'redos-v311' });
    const viaV311 = await pingDuring(async () => {
      await v311.publishAsync('redos/t', REDOS, { qos: 0 });
      await v311.publishAsync('redos/t', JSON.stringify('aaaa'), { qos: 1 }); // acknowledged after the QoS 0 one was checked
    });

    console.log(`# ReDoS ^(a+)+$ with 32 a's and '!': REST /api/v1/ping max during it: REST publish ${viaRest} ms, MQTT 5 QoS 1 ${viaV5} ms, MQTT 3.1.1 QoS 0 ${viaV311} ms (idle ${idle} ms; ${failures} pings failed)`);
    assert.equal(restAnswer!.status, 400, JSON.stringify(restAnswer!.json));
    assert.match(restAnswer!.json.status, /^Payload does not match the schema of redos\/t: \(root\) must match pattern/);
    assert.equal(code, 0x99, 'PUBACK 0x99 Payload format invalid');
    assert.equal(failures, 0, 'every ping answered');
    for (const [what, ms] of [['REST', viaRest], ['MQTT 5', viaV5], ['MQTT 3.1.1', viaV311]] as const) {
      assert.ok(ms < PING_BOUND_MS, `${what}: the ping took ${ms} ms while the payload was checked`);
    }
    const d = await rest('GET', '/api/v1/server/destination/detail?destinationName=redos%2Ft');
    assert.deepEqual(d.json.schemaValidation, { schemaId: 'redos', enforcement: 'reject', valid: 1, invalid: 3, rejected: 3 });
  });

  for (const [format, context, payload] of [
    ['json', 'deep/json', Buffer.from(DEEP_JSON)],
    ['messagepack', 'deep/msgpack', DEEP_MSGPACK],
  ] as const) {
    test(`schemas - a recursive schema and a 120 KB nested ${format} payload: REST 400, MQTT 5 PUBACK 0x99 on a connection that stays, one WARN line, no stack trace`, async () => {
      assert.ok(payload.length >= 120000, `${format}: ${payload.length} bytes`);
      const added = await addSchema({ uniqueId: `tree-${format}`, format, schema: RECURSIVE }, context);
      assert.equal(added.status, 200, JSON.stringify(added.json));
      const logBefore = logs().map((l) => l.length);

      let answer: { status: number; json: any } | undefined;
      const viaRest = await pingDuring(async () => {
        answer = await restPublish(context, payload).catch((err: Error) => ({ status: 0, json: { status: err.message } }));
      });

      // ten publishes on one MQTT 5 connection (a new one if the broker closed it): what each got
      let v5 = await connect({ protocolVersion: 5, clientId: `deep-${format}` });
      const outcomes: string[] = [];
      const viaV5 = await pingDuring(async () => {
        for (let i = 0; i < 10; i++) {
          if (!v5.connected) v5 = await connect({ protocolVersion: 5, clientId: `deep-${format}` });
          const gone = new Promise<string>((res) => {
            v5.once('disconnect', (p: { reasonCode?: number }) => res(`DISCONNECT 0x${(p.reasonCode ?? 0).toString(16)}`));
            v5.once('close', () => setTimeout(() => res('closed'), 100));
          });
          const acked = v5.publishAsync(context, payload, { qos: 1 }).then(
            () => 'PUBACK 0x0',
            (err: { code?: number }) => `PUBACK 0x${(err.code ?? 0).toString(16)}`,
          );
          outcomes.push(await Promise.race([acked, gone]));
        }
      });
      await new Promise((res) => setTimeout(res, 300)); // the log lines are written
      const logAfter = logs();
      const added_ = logAfter.map((l, i) => l.slice(logBefore[i])).join('\n');
      const stackTraces = added_.split('\n').filter((l) => /Maximum call stack|RangeError|^\s+at [\w.<>]+ \(|\\n\s+at /.test(l)).length;
      const warns = logAfter[2]!.slice(logBefore[2]).split('\n').filter((l) => l.includes(`payload does not match schema tree-${format}`)); // messaging.log
      const summary = [...new Set(outcomes)].map((o) => `${o} x${outcomes.filter((x) => x === o).length}`).join(', ');
      console.log(`# recursive schema, ${payload.length}-byte nested ${format} payload: REST ${answer!.status}, MQTT 5: ${summary}; log lines with a stack trace: ${stackTraces}, schema WARN lines: ${warns.length}; /api/v1/ping max ${viaRest} ms (REST), ${viaV5} ms (MQTT 5)`);

      assert.equal(answer!.status, 400, `${format}: ${JSON.stringify(answer!.json)}`);
      assert.match(answer!.json.status, new RegExp(`^Payload does not match the schema of ${context}: .*nested deeper than 64 levels`));
      assert.deepEqual(outcomes, Array(10).fill('PUBACK 0x99'), `${format}: PUBACK 0x99 for each, on one connection`);
      // the connection is still there: a conforming payload goes through on it
      const ok = format === 'json' ? Buffer.from('{"a":{"a":{}}}') : Buffer.from([0x81, 0xa1, 0x61, 0x80]);
      await v5.publishAsync(context, ok, { qos: 1 });
      assert.ok(v5.connected, `${format}: still connected`);
      assert.ok(viaRest < PING_BOUND_MS && viaV5 < PING_BOUND_MS, `ping ${viaRest} / ${viaV5} ms`);
      assert.equal(stackTraces, 0, `${format}: no stack trace in the log`);
      assert.ok(warns.length >= 1 && warns.length <= 2, `${format}: ${warns.length} WARN lines for 11 refused payloads (rate-limited per schema and destination):\n${warns.join('\n')}`);
    });
  }

  test('schemas - patterns RE2 cannot run and $ref cycles that never read the payload are refused at registration with 400', async () => {
    const cases: Array<[unknown, RegExp]> = [
      [{ type: 'string', pattern: '^(a)\\1$' }, /backreference/],
      [{ type: 'string', pattern: '^(?=a)a+$' }, /lookahead/],
      [{ type: 'string', pattern: '(?<!x)y' }, /lookbehind/],
      [{ type: 'object', patternProperties: { '^(\\w)\\1': { type: 'number' } } }, /backreference/],
      [{ type: 'string', pattern: '(?i)abc' }, /not a valid regular expression/],
      [{ $ref: '#' }, /recurse without end/],
    ];
    for (const [schema, why] of cases) {
      const r = await addSchema({ uniqueId: 'refused', format: 'json', schema }, 'refused/t');
      assert.equal(r.status, 400, JSON.stringify(schema));
      assert.match(r.json.status, /^Invalid schema: /);
      assert.match(r.json.status, why, r.json.status);
    }
    assert.equal((await rest('GET', '/api/v1/server/schemas/refused')).status, 404, 'nothing was stored');
    // what RE2 runs is accepted and means what ECMAScript says
    const ok = await addSchema({ uniqueId: 'accents', format: 'json', schema: { type: 'string', pattern: '^\\u00e9t\\u00e9\\s\\d+$' } }, 'accents/t');
    assert.equal(ok.status, 200, JSON.stringify(ok.json));
    assert.equal((await restPublish('accents/t', Buffer.from('"été\u00a042"'))).status, 200);
    assert.equal((await restPublish('accents/t', Buffer.from('"ete 42"'))).status, 400);
  });
});
