import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import mqtt from 'mqtt';
import { endpointsOf } from '../../src/endpoints/endpoints.service.js';
import { ROOT, startServer, type TestServer } from '../helpers.js';

/** Prometheus exposition: what a scraper sees, checked by Prometheus' own promtool (Debian package prometheus). */
describe('metrics', () => {
  let s: TestServer;
  before(async () => {
    s = await startServer({ overrides: { RestApi: { metricsTopDestinations: 2 } } });
  });
  after(async () => s?.close());

  test('metrics - /metrics is open by default, passes promtool check metrics, has per-endpoint and top-N destination series and no user, client id or address', async () => {
    const port = endpointsOf(s.rt).entries.get('MQTT Interface')!.handle!.port;
    const c = await mqtt.connectAsync(`mqtt://127.0.0.1:${port}`, { clientId: 'client-id-7f3a', username: 'admin', password: s.adminPassword, reconnectPeriod: 0 });
    for (const [topic, n] of [['metrics/a', 3], ['metrics/b', 2], ['metrics/c', 1]] as const) for (let i = 0; i < n; i++) await c.publishAsync(topic, 'x', { qos: 1 });
    const r = await s.app.inject({ url: '/metrics' }); // no credentials
    await c.endAsync();
    assert.equal(r.statusCode, 200);
    assert.match(String(r.headers['content-type']), /^text\/plain; version=0.0.4/);
    const text = r.body;

    const check = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    assert.equal(check.error, undefined, 'promtool is installed (Debian package prometheus; .ci/run installs it)');
    assert.equal(check.status, 0, `promtool check metrics:\n${check.stdout}${check.stderr}`);

    assert.match(text, /^# TYPE switchyard_messages_published_total counter$/m);
    assert.match(text, /^switchyard_messages_published_total [1-9]\d*$/m);
    assert.match(text, /^switchyard_endpoint_up\{endpoint="MQTT Interface"\} 1$/m);
    assert.match(text, /^switchyard_endpoint_messages_received_total\{endpoint="MQTT Interface"\} [1-9]\d*$/m);
    assert.match(text, /^switchyard_destination_messages_published_total\{destination="metrics\/a",type="Topic"\} 3$/m);
    assert.match(text, /^switchyard_destination_messages_published_total\{destination="metrics\/b",type="Topic"\} 2$/m);
    assert.doesNotMatch(text, /destination="metrics\/c"/, 'only the top 2 destinations');
    assert.doesNotMatch(text, /destination="\$SYS/);
    assert.match(text, /^switchyard_ready 1$/m);
    for (const secret of ['client-id-7f3a', 'admin', '127.0.0.1', s.adminPassword]) assert.equal(text.includes(secret), false, `no ${secret} in the metrics`);
    for (const line of text.split('\n').filter((l) => l.startsWith('# TYPE ') && l.endsWith(' gauge'))) assert.doesNotMatch(line, /_total gauge$/, line);
  });

  test('metrics - every metric a query of the Grafana dashboard names is on /metrics (link series included, declared before any link exists)', async () => {
    const text = (await s.app.inject({ url: '/metrics' })).body;
    const declared = new Set([...text.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]));
    const dashboard = JSON.parse(readFileSync(join(ROOT, 'docker/grafana-dashboard.json'), 'utf8')) as { panels: Array<{ title: string; targets?: Array<{ expr: string }> }> };
    const queried: Array<{ panel: string; metric: string }> = [];
    for (const p of dashboard.panels) for (const t of p.targets ?? []) for (const m of t.expr.match(/switchyard_[a-z0-9_]+/g) ?? []) queried.push({ panel: p.title, metric: m });
    assert.ok(queried.length >= 20, `the dashboard's queries were read (${queried.length})`);
    assert.ok(queried.some((q) => q.metric.startsWith('switchyard_link_')), 'the links panel is checked too');
    const missing = queried.filter((q) => !declared.has(q.metric));
    assert.deepEqual(missing, [], `dashboard queries of metrics /metrics does not have: ${missing.map((q) => `${q.metric} (panel "${q.panel}")`).join(', ')}`);
  });

  test('metrics - RestApi.metricsAuthentication: true requires credentials and view_stats', async () => {
    const locked = await startServer({ overrides: { RestApi: { metricsAuthentication: true } } });
    try {
      assert.equal((await locked.app.inject({ url: '/metrics' })).statusCode, 401);
      assert.equal((await locked.inject({ url: '/metrics' })).statusCode, 200);
    } finally {
      await locked.close();
    }
  });
});
