/**
 * Links are bounded like clients (issue 20 item 1): a broker (a child process) whose links point at peers that speak
 * NATS or MQTT badly — one huge message, a protocol line that never ends, a flood of PINGs / PINGRESPs / messages.
 * Measured: the broker's RSS (peak while attacked, and 3 s after the link was stopped) and the slowest `/health`
 * answer during the attack. A peer that breaks a limit is disconnected with the reason in the link's `lastError` and a
 * WARN, and backed off; a flood of ordinary messages is read in bounded turns and /health stays quick.
 */
import assert from 'node:assert/strict';
import { cpSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { CONFIG_DIR, removeDir, spawnBroker, tempDir, waitUntil, type BrokerProcess } from '../helpers.js';
import { healthLatency, hostileMqtt, hostileNats, rssMiB, rssSampler, type HostilePeer } from './hostile-peers.js';

/** RSS growth a single hostile peer may cause, MiB (generous: the attacks measured gigabytes). */
const RSS_BOUND = 64;
/**
 * RSS growth while a peer floods ordinary small messages, MiB: they are taken (about 200 000 a second here) and the
 * V8 heap swings between ~50 and ~155 MiB collecting them (measured in-process, with and without the engine), so the
 * bound is the heap's swing, not a backlog: the link reads no faster than its handlers take messages.
 */
const FLOOD_RSS_BOUND = 256;
/** The slowest /health answer allowed while a peer floods, ms (generous: the flood measured 4.9 s). */
const HEALTH_BOUND = 1000;
const OBSERVE_MS = 5000;

interface Scenario {
  link: string;
  peer: () => Promise<HostilePeer>;
  url: (port: number) => string;
  protocolConfigs?: Array<Record<string, unknown>>;
  qos: 0 | 1;
}

const scenarios: Record<string, Scenario> = {
  'nats-huge': { link: 'nats-huge', peer: () => hostileNats('huge-msg'), url: (p) => `nats://127.0.0.1:${p}`, qos: 1 },
  'nats-line': { link: 'nats-line', peer: () => hostileNats('endless-line', 256 * 1024 * 1024), url: (p) => `nats://127.0.0.1:${p}`, qos: 1 },
  'nats-ping': { link: 'nats-ping', peer: () => hostileNats('ping-flood'), url: (p) => `nats://127.0.0.1:${p}`, qos: 0 },
  'nats-flood': { link: 'nats-flood', peer: () => hostileNats('msg-flood'), url: (p) => `nats://127.0.0.1:${p}`, qos: 0 },
  'mqtt5-huge': { link: 'mqtt5-huge', peer: () => hostileMqtt('huge-publish'), url: (p) => `mqtt://127.0.0.1:${p}`, protocolConfigs: [{ type: 'mqtt', protocolVersion: 5 }], qos: 0 },
  'mqtt4-huge': { link: 'mqtt4-huge', peer: () => hostileMqtt('huge-publish'), url: (p) => `mqtt://127.0.0.1:${p}`, protocolConfigs: [{ type: 'mqtt', protocolVersion: 4 }], qos: 0 },
  'mqtt-pingresp': { link: 'mqtt-pingresp', peer: () => hostileMqtt('pingresp-flood'), url: (p) => `mqtt://127.0.0.1:${p}`, protocolConfigs: [{ type: 'mqtt', protocolVersion: 5 }], qos: 0 },
  'mqtt-flood': { link: 'mqtt-flood', peer: () => hostileMqtt('publish-flood'), url: (p) => `mqtt://127.0.0.1:${p}`, protocolConfigs: [{ type: 'mqtt', protocolVersion: 4 }], qos: 0 },
};

interface Outcome {
  base: number;
  peak: number;
  after: number;
  healthMax: number;
  state: string;
  lastError: string;
  errors: number;
  connections: number;
  warned: boolean;
}

describe('links - hostile peers', () => {
  const dirs: string[] = [];
  const peers: Record<string, HostilePeer> = {};
  let broker: BrokerProcess | undefined;

  before(async () => {
    for (const [k, sc] of Object.entries(scenarios)) peers[k] = await sc.peer();
    const cfg = tempDir('switchyard-cfg-');
    const data = tempDir();
    dirs.push(cfg, data);
    cpSync(CONFIG_DIR, cfg, { recursive: true });
    writeFileSync(join(cfg, 'AuthManager.yaml'), 'AuthManager:\n  authenticationEnabled: false\n');
    const links = Object.entries(scenarios).map(([k, sc]) => ({
      name: sc.link,
      url: sc.url(peers[k]!.port),
      autoStart: false,
      protocolConfigs: sc.protocolConfigs ?? [],
      linkConfigs: [{ direction: 'pull', localNamespace: `in/${sc.link}/`, remoteNamespace: 'hostile/#', qualityOfService: sc.qos }],
    }));
    writeFileSync(
      join(cfg, 'NetworkConnectionManager.yaml'),
      `NetworkConnectionManager: ${JSON.stringify({ data: links, globalConfig: { backoff: { initial: 200, max: 2000, jitter: 0 }, connectTimeout: 3000 } })}\n`,
    );
    broker = await spawnBroker({ SWITCHYARD_DATA_DIR: data, SWITCHYARD_CONFIG_DIR: cfg });
  });

  after(async () => {
    await broker?.stop('SIGKILL');
    for (const p of Object.values(peers)) await p.close();
    dirs.forEach(removeDir);
  });

  const api = (path: string, init?: RequestInit) => fetch(`http://127.0.0.1:${broker!.port}${path}`, init);
  const control = async (link: string, state: string) => {
    const r = await api(`/api/v1/server/integration/${link}`, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ state }) });
    assert.equal(r.status, 200, await r.text());
  };
  const status = async (link: string) => (await (await api(`/api/v1/server/integration/${link}/status`)).json()) as { state: string; lastError: string; errors: number };

  async function run(key: string): Promise<Outcome> {
    const sc = scenarios[key]!;
    const peer = peers[key]!;
    const pid = broker!.proc.pid!;
    const base = rssMiB(pid);
    const logBefore = broker!.stdout().length;
    const sampler = rssSampler(pid);
    await control(sc.link, 'started');
    await waitUntil(() => peer.bytesSent > 0, 30000, `${key}: the attack started`);
    const health = await healthLatency(broker!.port, OBSERVE_MS);
    const st = await status(sc.link);
    await control(sc.link, 'stopped');
    const peak = sampler.stop();
    await new Promise((r) => setTimeout(r, 3000));
    const afterRss = rssMiB(pid);
    const logs = broker!.stdout().slice(logBefore);
    const o: Outcome = {
      base,
      peak,
      after: afterRss,
      healthMax: health.max,
      state: st.state,
      lastError: st.lastError,
      errors: st.errors,
      connections: peer.connections,
      warned: /WARN.*broke a limit of the link/.test(logs),
    };
    console.log(
      `# ${key}: RSS ${base.toFixed(0)} MiB -> peak ${peak.toFixed(0)} MiB (+${(peak - base).toFixed(0)}), ${afterRss.toFixed(0)} MiB 3 s after stop; /health max ${health.max.toFixed(0)} ms over ${health.count} requests; link ${st.state}, errors ${st.errors}, ${peer.connections} connections, ${(peer.bytesSent / 1048576).toFixed(1)} MiB sent by the peer; lastError ${JSON.stringify(st.lastError)}`,
    );
    return o;
  }

  it('links - a NATS "server" that sends one 60 MB message is refused at its header (server max_payload), disconnected and backed off; RSS stays bounded', async () => {
    const o = await run('nats-huge');
    assert.ok(o.peak - o.base < RSS_BOUND, `RSS grew ${(o.peak - o.base).toFixed(0)} MiB`);
    assert.notEqual(o.state, 'Established');
    assert.match(o.lastError, /message of 62914560 bytes \(the limit is 1048576, the server's max_payload\)/);
    assert.ok(o.errors > 0, 'counted as errors');
    assert.ok(o.warned, 'a WARN names the peer and the reason');
    assert.ok(o.connections <= 6, `backed off (${o.connections} connections in ${OBSERVE_MS / 1000} s)`);
  });

  it('links - a NATS "server" whose protocol line never ends is cut at 64 KiB; RSS stays bounded', async () => {
    const o = await run('nats-line');
    assert.ok(o.peak - o.base < RSS_BOUND, `RSS grew ${(o.peak - o.base).toFixed(0)} MiB`);
    assert.notEqual(o.state, 'Established');
    assert.match(o.lastError, /protocol line longer than 65536 bytes/);
  });

  it('links - a NATS "server" that floods PINGs is disconnected as a flood; /health stays quick', async () => {
    const o = await run('nats-ping');
    assert.ok(o.healthMax < HEALTH_BOUND, `/health max ${o.healthMax.toFixed(0)} ms`);
    assert.ok(o.peak - o.base < RSS_BOUND, `RSS grew ${(o.peak - o.base).toFixed(0)} MiB`);
    assert.match(o.lastError, /PINGs within 10 s/);
  });

  it('links - a NATS "server" that floods small messages is read in bounded turns: /health stays quick, RSS bounded', async () => {
    const o = await run('nats-flood');
    assert.ok(o.healthMax < HEALTH_BOUND, `/health max ${o.healthMax.toFixed(0)} ms`);
    assert.ok(o.peak - o.base < FLOOD_RSS_BOUND, `RSS grew ${(o.peak - o.base).toFixed(0)} MiB`);
    assert.equal(o.state, 'Established', 'ordinary messages, however many, are no misbehaviour');
  });

  it('links - an MQTT 5 peer that announces a 256 MB PUBLISH is refused at its fixed header; RSS stays bounded', async () => {
    const o = await run('mqtt5-huge');
    assert.ok(o.peak - o.base < RSS_BOUND, `RSS grew ${(o.peak - o.base).toFixed(0)} MiB`);
    assert.notEqual(o.state, 'Established');
    assert.match(o.lastError, /PUBLISH packet of 268435460 bytes \(the limit is 10485760/);
    assert.ok(o.errors > 0);
    assert.ok(o.warned, 'a WARN names the peer and the reason');
  });

  it('links - an MQTT 3.1.1 peer that announces a 256 MB PUBLISH is refused the same way', async () => {
    const o = await run('mqtt4-huge');
    assert.ok(o.peak - o.base < RSS_BOUND, `RSS grew ${(o.peak - o.base).toFixed(0)} MiB`);
    assert.match(o.lastError, /PUBLISH packet of 268435460 bytes/);
  });

  it('links - an MQTT peer that floods PINGRESPs is disconnected as a flood; /health stays quick', async () => {
    const o = await run('mqtt-pingresp');
    assert.ok(o.healthMax < HEALTH_BOUND, `/health max ${o.healthMax.toFixed(0)} ms`);
    assert.ok(o.peak - o.base < RSS_BOUND, `RSS grew ${(o.peak - o.base).toFixed(0)} MiB`);
    assert.match(o.lastError, /PINGRESPs within 10 s/);
  });

  it('links - an MQTT peer that floods small PUBLISHes is read in bounded turns: /health stays quick, RSS bounded', async () => {
    const o = await run('mqtt-flood');
    assert.ok(o.healthMax < HEALTH_BOUND, `/health max ${o.healthMax.toFixed(0)} ms`);
    assert.ok(o.peak - o.base < FLOOD_RSS_BOUND, `RSS grew ${(o.peak - o.base).toFixed(0)} MiB`);
    assert.equal(o.state, 'Established', 'ordinary messages, however many, are no misbehaviour');
  });
});
