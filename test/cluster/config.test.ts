/**
 * The Cluster section: validated like every section, off by default (a single broker has no cluster at all).
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { ClusterSchema } from '../../src/cluster/config.js';
import { removeDir, spawnBroker, startServer, tempDir } from '../helpers.js';

const dirs: string[] = [];
after(() => dirs.forEach(removeDir));

test('cluster config - defaults: off, 3 replicas, a 15 s lease with 3 s heartbeats', () => {
  const c = ClusterSchema.parse({});
  assert.equal(c.enabled, false);
  assert.equal(c.replicas, 3);
  assert.equal(c.leaseSeconds, 15);
  assert.equal(c.heartbeatSeconds, 3);
  assert.equal(c.nodeId, undefined);
});

test('cluster config - refuses a heartbeat not shorter than the lease, replicas outside 1..5, bad names and URLs', () => {
  const bad: Array<[Record<string, unknown>, RegExp]> = [
    [{ heartbeatSeconds: 15, leaseSeconds: 15 }, /heartbeatSeconds must be less than leaseSeconds/],
    [{ replicas: 0 }, /replicas: 1 to 5/],
    [{ replicas: 6 }, /replicas: 1 to 5/],
    [{ nodeId: 'a.b' }, /nodeId: letters, digits/],
    [{ clusterName: 'has space' }, /clusterName: letters, digits/],
    [{ servers: ['http://x:4222'] }, /a NATS server URL/],
    [{ enabled: true, servers: [] }, /at least one NATS server/],
    [{ leaseSecs: 3 }, /unrecognized|Unrecognized/],
  ];
  for (const [value, message] of bad) {
    const r = ClusterSchema.safeParse(value);
    assert.equal(r.success, false, JSON.stringify(value));
    assert.match(r.error!.issues.map((i) => i.message).join('; '), message, JSON.stringify(value));
  }
});

test('cluster config - a broker with a bad Cluster section stops at start with exit code 2 naming the key', async () => {
  const configDir = tempDir('switchyard-cl-config-');
  const dataDir = tempDir('switchyard-cl-data-');
  dirs.push(configDir, dataDir);
  writeFileSync(join(configDir, 'Cluster.yaml'), 'Cluster:\n  enabled: true\n  leaseSeconds: 2\n  heartbeatSeconds: 5\n');
  const b = await spawnBroker({ SWITCHYARD_DATA_DIR: dataDir, SWITCHYARD_CONFIG_DIR: configDir }, { waitReady: false });
  assert.equal(await b.exited, 2);
  assert.match(b.stderr(), /section 'Cluster', key 'heartbeatSeconds': heartbeatSeconds must be less than leaseSeconds/);
});

test('cluster config - off by default: no cluster line in the status, GET /api/v1/server/cluster says so, ready', async () => {
  const s = await startServer({ auth: false });
  try {
    const r = await s.inject({ method: 'GET', url: '/api/v1/server/cluster' });
    assert.equal(r.statusCode, 200);
    assert.deepEqual(r.json(), { enabled: false });
    const status = (await s.inject({ method: 'GET', url: '/api/v1/server/status' })).json() as Array<{ name: string }>;
    assert.equal(status.some((l) => l.name === 'Cluster'), false);
    const ready = await s.inject({ method: 'GET', url: '/readyz' });
    assert.equal(ready.statusCode, 200);
    assert.deepEqual(ready.json(), { status: 'Ready' });
  } finally {
    await s.close();
  }
});
