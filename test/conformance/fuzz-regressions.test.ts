/**
 * What coverage-guided fuzzing (fuzz/targets.ts, `npm run fuzz`) keeps: every input of the repo corpus
 * (fuzz/corpus/<target>/, seeds and inputs that found new coverage) and every finding (fuzz/findings/) replayed
 * through its target, which throws on anything but MqttProtocolError or on a failed oracle; the findings' own
 * regression tests on the decoders; and the bridge against a hostile peer's SUBACK without return codes (mqtt-packet
 * parses it; where we are the client, src/links/mqtt-transport.ts, it must be refused, not taken as granted).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import mqttPacket from 'mqtt-packet';
import { TARGETS, type TargetName } from '../../fuzz/targets.js';
import { ROOT, startServer, waitUntil, type TestServer } from '../helpers.js';

const CORPUS = join(ROOT, 'fuzz/corpus');
const FINDINGS = join(ROOT, 'fuzz/findings');

describe('fuzz regressions', () => {
  for (const name of Object.keys(TARGETS) as TargetName[]) {
    test(`fuzz - every kept ${name} input (fuzz/corpus/${name}, fuzz/findings/${name}-*) decodes or is refused with MqttProtocolError; the oracles hold`, () => {
      const dir = join(CORPUS, name);
      const files = readdirSync(dir).map((f) => join(dir, f));
      if (existsSync(FINDINGS)) files.push(...readdirSync(FINDINGS).filter((f) => f.startsWith(`${name}-`)).map((f) => join(FINDINGS, f)));
      assert.ok(files.length >= 2, `the ${name} corpus has its seeds`);
      for (const f of files) {
        const bytes = readFileSync(f);
        assert.doesNotThrow(() => TARGETS[name](bytes), `${f} (${bytes.toString('hex').slice(0, 200)})`);
      }
    });
  }
});

/** A "broker" that answers CONNECT with CONNACK 0 and every SUBSCRIBE with a SUBACK that has no return codes. */
async function emptySubackPeer(): Promise<{ port: number; connections: () => number; subscribes: () => number; close: () => Promise<void> }> {
  const sockets = new Set<Socket>();
  let connections = 0;
  let subscribes = 0;
  const srv: Server = createServer((sock) => {
    sockets.add(sock);
    connections++;
    sock.on('close', () => sockets.delete(sock));
    sock.on('error', () => undefined);
    const parser = mqttPacket.parser({ protocolVersion: 5 });
    let version = 4;
    parser.on('error', () => sock.destroy());
    parser.on('packet', (p: mqttPacket.Packet) => {
      if (p.cmd === 'connect') {
        version = (p as mqttPacket.IConnectPacket).protocolVersion ?? 4;
        (parser as unknown as { settings: { protocolVersion: number } }).settings.protocolVersion = version;
        sock.write(mqttPacket.generate({ cmd: 'connack', sessionPresent: false, ...(version === 5 ? { reasonCode: 0 } : { returnCode: 0 }) }, { protocolVersion: version }));
      } else if (p.cmd === 'subscribe') {
        subscribes++;
        const id = (p as mqttPacket.ISubscribePacket).messageId ?? 1;
        // raw bytes: mqtt-packet parses such a SUBACK but throws when asked to generate one
        sock.write(Buffer.from(version === 5 ? [0x90, 0x03, id >> 8, id & 0xff, 0x00] : [0x90, 0x02, id >> 8, id & 0xff]));
      } else if (p.cmd === 'pingreq') sock.write(Buffer.from([0xd0, 0x00]));
    });
    sock.on('data', (d: Buffer) => parser.parse(d));
  });
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  return {
    port: (srv.address() as { port: number }).port,
    connections: () => connections,
    subscribes: () => subscribes,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        srv.close(() => resolve());
      }),
  };
}

describe('bridge - hostile SUBACK', () => {
  let s: TestServer;
  let peer: Awaited<ReturnType<typeof emptySubackPeer>>;
  before(async () => {
    peer = await emptySubackPeer();
    const link = (name: string, version: 4 | 5) => ({
      name,
      url: `mqtt://127.0.0.1:${peer.port}`,
      backoff: { initial: 100, max: 500, jitter: 0 },
      protocolConfigs: [{ type: 'mqtt', protocolVersion: version }],
      linkConfigs: [{ direction: 'pull', localNamespace: `${name}/`, remoteNamespace: 'remote/#', qualityOfService: 1 }],
    });
    s = await startServer({
      overrides: {
        AuthManager: { authenticationEnabled: false, authorisationEnabled: false },
        NetworkConnectionManager: { data: [link('hostile-v311', 4), link('hostile-v5', 5)] },
      },
    });
  });
  after(async () => {
    await s?.close();
    await peer?.close();
  });

  const status = async (name: string) => (await s.inject({ url: `/api/v1/server/integration/${name}/status` })).json() as { state: string; lastError: string; errors: number };

  test('bridge - a peer whose SUBACK has no return codes: the link is never Established, says why, retries with backoff; the broker keeps serving [MQTT-3.9.3-1]', async () => {
    await waitUntil(() => peer.subscribes() >= 6, 30000, 'the links subscribed several times (retrying)');
    for (const name of ['hostile-v311', 'hostile-v5']) {
      const st = await status(name);
      assert.notEqual(st.state, 'Established', `${name}: ${JSON.stringify(st)}`);
      assert.match(st.lastError, /suback|SUBACK/i, `${name}: ${JSON.stringify(st)}`);
      assert.ok(st.errors > 0, `${name}: counted as errors`);
    }
    const health = await s.inject({ url: '/health' });
    assert.equal(health.statusCode, 200);
  });
});
