/**
 * Discovery over mDNS, only inside a private network namespace (test/discovery/netns.ts: loopback only, multicast
 * on it): two brokers find each other, an independent client (python3-zeroconf) sees the advertised TXT keys,
 * `stopped` sends the goodbye and the peer drops the entry, the filter works, and the shipped configuration sends
 * nothing.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { adminPasswordOf, basicAuth, removeDir, tempDir, waitUntil } from '../helpers.js';
import { configDir, Netns, PYTHON, ZEROCONF_BROWSE } from './netns.js';

const NETWORK = `NetworkManager:
  data:
    - name: MQTT Interface
      url: tcp://127.0.0.1:0/
      protocolConfigs: [{ type: mqtt }]
      endPointConfig: { discoverable: true }
    - name: MQTT WebSocket Interface
      url: ws://127.0.0.1:0/mqtt
      protocolConfigs: [{ type: mqtt }, { type: ws }]
`;
// d: every interface ("::", the default; here only loopback exists), TTL 10 s
const DISCOVERY = `DiscoveryManager:
  enabled: true
  hostnames: "::"
  ttl: 10
`;

const dirs: string[] = [];
let ns: Netns;
const brokers: Record<string, { key: string; pid: number; port: number; auth: Record<string, string>; name: string }> = {};

const DISCOVERING = {
  DiscoveryManager: { enabled: true, hostnames: 'lo', ttl: 60 },
  NetworkManager: {
    data: [
      { name: 'MQTT Interface', url: 'tcp://127.0.0.1:0/', protocolConfigs: [{ type: 'mqtt' }], endPointConfig: { discoverable: true } },
      { name: 'MQTT WebSocket Interface', url: 'ws://127.0.0.1:0/mqtt', protocolConfigs: [{ type: 'mqtt' }, { type: 'ws' }] },
    ],
  },
};

/** A broker process in the namespace (config folder), or, with `overrides`, one inside the agent's process. */
async function startBroker(label: string, cfg: string | Record<string, Record<string, unknown>>) {
  let data: string;
  let b: { key: string; pid: number; port: number };
  if (typeof cfg === 'string') {
    data = tempDir('switchyard-disc-data-');
    dirs.push(data);
    b = await ns.broker(cfg, data);
  } else {
    const s = await ns.server(cfg);
    data = s.dataDir;
    b = s;
  }
  const auth = basicAuth('admin', adminPasswordOf(data));
  const info = await ns.fetch(`http://127.0.0.1:${b.port}/api/v1/server/details/info`, { headers: auth });
  brokers[label] = { ...b, auth, name: info.body.serverName };
  return brokers[label]!;
}

function discovery(label: string, filter?: string) {
  const b = brokers[label]!;
  const q = filter === undefined ? '' : `?filter=${encodeURIComponent(filter)}`;
  return ns.fetch(`http://127.0.0.1:${b.port}/api/v1/server/discovery${q}`, { headers: b.auth });
}

function patch(label: string, state: string) {
  const b = brokers[label]!;
  return ns.fetch(`http://127.0.0.1:${b.port}/api/v1/server/discovery`, { method: 'PATCH', headers: b.auth, body: { state } });
}

async function names(label: string): Promise<string[]> {
  const r = await discovery(label);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return (r.body as Array<{ serverName: string }>).map((s) => s.serverName);
}

before(async () => {
  ns = await Netns.create();
  // a and b run inside the agent's process; c (the shipped configuration: DiscoveryManager.enabled false) and d
  // (TTL 10 s, killed without a goodbye) are broker processes of their own, for the per-process checks
  const shipped = configDir({});
  const short = configDir({ 'NetworkManager.yaml': NETWORK, 'DiscoveryManager.yaml': DISCOVERY });
  dirs.push(shipped, short);
  await startBroker('a', DISCOVERING);
  await startBroker('b', DISCOVERING);
  await Promise.all([startBroker('c', shipped), startBroker('d', short)]);
});

after(async () => {
  await ns?.close(); // stops the brokers by pid, then the namespace goes with its last process
  for (const d of dirs) removeDir(d);
});

/** Inodes of the UDP sockets bound to port 5353 in the namespace of `pid`, and the socket inodes `pid` holds. */
function mdnsSockets(pid: number): { namespace: Set<string>; mine: Set<string> } {
  const namespace = new Set<string>();
  for (const line of readFileSync(`/proc/${pid}/net/udp`, 'utf8').split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length > 9 && /:14E9$/i.test(f[1]!)) namespace.add(f[9]!);
  }
  const mine = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m) mine.add(m[1]!);
    } catch {
      /* closed meanwhile */
    }
  }
  return { namespace, mine };
}

test('discovery - two brokers in one namespace find each other over mDNS within seconds', async () => {
  const t0 = Date.now();
  await waitUntil(async () => (await names('a')).includes(brokers.b!.name) && (await names('b')).includes(brokers.a!.name), 15000, 'both brokers listed');
  console.log(`# found each other ${Date.now() - t0} ms after both were up`);
  const list = (await discovery('a')).body as any[];
  assert.ok(!list.some((s) => s.serverName === brokers.a!.name), 'a broker does not list itself');
  const b = list.find((s) => s.serverName === brokers.b!.name);
  assert.equal(b.systemTopicPrefix, '$SYS');
  assert.equal(b.schemaSupport, true);
  assert.equal(b.schemaPrefix, '$schema/');
  assert.match(b.version, /^\d+\.\d+\.\d+/);
  assert.match(b.buildDate, /^\d{4}-\d{2}-\d{2}$/);
  assert.deepEqual(b.via, ['mdns']);
  assert.equal(b.services.restApi.port, brokers.b!.port);
  assert.equal(b.services.restApi.protocol, 'http');
  assert.ok(b.services.restApi.addresses.includes('127.0.0.1'), JSON.stringify(b.services.restApi));
  // the discoverable endpoint is advertised with its bound port; the other one is not
  await waitUntil(async () => ((await discovery('a')).body as any[]).some((s) => s.serverName === brokers.b!.name && s.services['MQTT Interface']), 10000, 'endpoint record');
  const again = ((await discovery('a')).body as any[]).find((s) => s.serverName === brokers.b!.name);
  const mqtt = again.services['MQTT Interface'];
  assert.equal(mqtt.protocol, 'mqtt');
  assert.equal(mqtt.transport, 'tcp');
  const ifaces = await ns.fetch(`http://127.0.0.1:${brokers.b!.port}/api/v1/server/interfaces`, { headers: brokers.b!.auth });
  const bound = (ifaces.body as any[]).find((i) => i.name === 'MQTT Interface').port;
  assert.equal(mqtt.port, bound);
  assert.equal(again.services['MQTT WebSocket Interface'], undefined, 'not discoverable: not advertised');
});

test('discovery - an independent mDNS client (python3-zeroconf) sees _maps._tcp with the MAPS TXT keys', async () => {
  const r = await ns.exec([PYTHON, '-c', ZEROCONF_BROWSE, '4', '_maps._tcp.local.'], 30000);
  assert.equal(r.code, 0, r.stderr);
  const found = JSON.parse(r.stdout) as Record<string, { port: number; txt: Record<string, string> } | null>;
  const mine = Object.values(found).find((s) => s?.txt['server name'] === brokers.b!.name);
  assert.ok(mine, `zeroconf saw: ${r.stdout}`);
  assert.equal(mine.port, brokers.b!.port);
  for (const key of ['server name', 'schema support', 'schema prefix', 'version', 'date', 'restApi', 'protocol', 'system topics']) assert.ok(key in mine.txt, `TXT key ${key} in ${JSON.stringify(mine.txt)}`);
  assert.equal(mine.txt.restApi, 'true');
  assert.equal(mine.txt.protocol, 'http');
  assert.equal(mine.txt['schema support'], 'true');
  const endpoints = await ns.exec([PYTHON, '-c', ZEROCONF_BROWSE, '3', '_mqtt._tcp.local.'], 30000);
  const mq = Object.values(JSON.parse(endpoints.stdout) as Record<string, { port: number; txt: Record<string, string> }>).find((s) => s?.txt['server name'] === brokers.b!.name);
  assert.ok(mq, endpoints.stdout);
  assert.equal(mq.txt.endpoint, 'MQTT Interface');
});

test('discovery - the filter selects discovered servers (MAPS example), a bad filter is 400 Invalid filter', async () => {
  const hit = await discovery('a', 'schemaSupport = TRUE OR systemTopicPrefix IS NOT NULL');
  assert.equal(hit.status, 200);
  assert.ok((hit.body as any[]).some((s) => s.serverName === brokers.b!.name));
  const byName = await discovery('a', `serverName = '${brokers.b!.name}'`);
  assert.deepEqual((byName.body as any[]).map((s) => s.serverName), [brokers.b!.name]);
  const none = await discovery('a', "schemaSupport = FALSE AND version IS NULL");
  assert.deepEqual(none.body, []);
  const bad = await discovery('a', 'schemaSupport = = TRUE');
  assert.equal(bad.status, 400);
  assert.match(bad.body.status, /^Invalid filter/);
});

test('discovery - PATCH: paused is 400 Unknown action; stopped sends the goodbye and the peer drops the entry; started comes back', async () => {
  for (const state of ['paused', 'resumed', 'restart']) {
    const r = await patch('b', state);
    assert.equal(r.status, 400);
    assert.match(r.body.status, /^Unknown action/);
  }
  assert.deepEqual((await patch('b', 'STARTED')).body, { status: 'No change' });
  await waitUntil(async () => (await names('a')).includes(brokers.b!.name), 15000, 'b listed on a');
  const stop = await patch('b', 'Stopped');
  assert.deepEqual(stop.body, { status: 'Success' });
  // the goodbye (TTL 0) arrives at once; the records' TTL (60 s) is much longer than this wait
  await waitUntil(async () => !(await names('a')).includes(brokers.b!.name), 5000, 'b dropped by a after its goodbye');
  assert.deepEqual(await names('b'), [], 'a stopped manager lists nothing');
  const zc = await ns.exec([PYTHON, '-c', ZEROCONF_BROWSE, '3', '_maps._tcp.local.'], 30000);
  assert.ok(!Object.values(JSON.parse(zc.stdout) as Record<string, any>).some((s) => s?.txt['server name'] === brokers.b!.name), zc.stdout);
  assert.deepEqual((await patch('b', 'stopped')).body, { status: 'No change' });
  assert.deepEqual((await patch('b', 'started')).body, { status: 'Success' });
  await waitUntil(async () => (await names('a')).includes(brokers.b!.name) && (await names('b')).includes(brokers.a!.name), 15000, 'found again');
});

test('discovery - the shipped configuration sends nothing: no mDNS socket, nothing for a browser to see, PATCH is 404', async () => {
  const c = brokers.c!;
  await waitUntil(async () => (await names('a')).includes(brokers.b!.name), 15000, 'a and b advertise meanwhile');
  // the check can fail: a and b hold 5353 sockets in this namespace; c holds none
  const { namespace, mine } = mdnsSockets(c.pid);
  assert.ok(namespace.size > 0, 'the discovering brokers have mDNS sockets');
  assert.ok(mine.size > 0, 'c has sockets (REST, MQTT)');
  assert.deepEqual([...namespace].filter((i) => mine.has(i)), [], 'c opened no UDP 5353 socket');
  const ss = await ns.exec(['ss', '-uanp']);
  assert.ok(ss.stdout.includes(`pid=${brokers.a!.pid},`), ss.stdout);
  assert.ok(!ss.stdout.includes(`pid=${c.pid},`), ss.stdout);
  const zc = await ns.exec([PYTHON, '-c', ZEROCONF_BROWSE, '3', '_maps._tcp.local.'], 30000);
  assert.equal(zc.code, 0, zc.stderr);
  const seen = Object.values(JSON.parse(zc.stdout) as Record<string, any>).map((s) => s?.txt['server name']);
  assert.ok(seen.includes(brokers.a!.name), zc.stdout);
  assert.ok(!seen.includes(c.name), zc.stdout);
  assert.ok(!(await names('a')).includes(c.name));
  assert.deepEqual(await names('c'), []);
  const start = await patch('c', 'started');
  assert.equal(start.status, 404);
  assert.match(start.body.status, /^Discovery manager is not configured/);
});

test('discovery - a peer that vanishes without a goodbye (SIGKILL) is dropped once its records\' TTL has passed', async () => {
  const d = brokers.d!;
  await waitUntil(async () => (await names('a')).includes(d.name), 15000, 'd listed on a');
  // d is heard again and again while it lives: a re-queries at 40 % of the shortest TTL (10 s)
  await new Promise((r) => setTimeout(r, 12000));
  assert.ok((await names('a')).includes(d.name), 'still listed after one TTL while alive');
  await ns.stopBroker(d.key, 'SIGKILL');
  const t0 = Date.now();
  await waitUntil(async () => !(await names('a')).includes(d.name), 30000, 'd dropped after its TTL');
  console.log(`# killed peer dropped ${Date.now() - t0} ms after the kill (record TTL 10 s)`);
  assert.ok((await names('a')).includes(brokers.b!.name), 'b (alive) stays');
});
