import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { fromCallback } from 'xstate';
import { startServer, waitUntil, type TestServer } from '../helpers.js';
import { auditLines } from '../security/helpers.js';

/**
 * Supervision that escalates: a child that crashes repeatedly exhausts its supervisor, which tells the server; the
 * server restarts that subtree after a backoff up to its own budget, then goes degraded; /health and
 * /api/v1/server/status name the failed subtree; the operator's restart (PATCH /api/v1/server) resets it.
 */
describe('escalation', () => {
  let s: TestServer | undefined;
  after(async () => {
    await s?.close();
  });

  test('escalation - a crashing child exhausts its supervisor; the server restarts the subtree, then is degraded; /health names it; PATCH restart resets it', async () => {
    let crashing = true;
    let starts = 0;
    const radio = fromCallback(() => {
      starts++;
      if (crashing) throw new Error('radio does not answer');
    });
    s = await startServer({
      auth: false,
      overrides: { MessageDaemon: { supervisor: { intensity: 2, period: 60000, backoffInitial: 10, backoffMax: 10, escalation: { intensity: 1, period: 60000, backoffInitial: 50, backoffMax: 50 } } } },
      extraChildren: { lora: [{ id: 'lora:radio0', logic: radio }] },
    });

    // first failure: 1 start + 2 restarts; the server resets the subtree once (its budget is 1): 3 more; then it gives up
    await waitUntil(() => s!.rt.state === 'degraded', 10000, 'the server is degraded');
    assert.equal(starts, 6, 'two rounds of a start and two restarts');
    assert.equal(s.rt.failedSubtrees().length, 1);
    assert.deepEqual(
      s.rt.failedSubtrees().map((f) => [f.subtree, f.state]),
      [['lora', 'failed']],
    );

    const health = await s.inject('/health');
    assert.equal(health.body, 'Error');
    assert.equal(health.headers['x-switchyard-failed-subtrees'], 'lora=failed', '/health names the failed subtree');
    const status = (await s.inject('/api/v1/server/status')).json() as Array<{ name: string; status: string; comment: string }>;
    const server = status.find((x) => x.name === 'Server')!;
    assert.equal(server.status, 'ERROR');
    assert.match(server.comment, /degraded: gave up restarting lora/);
    const lora = status.find((x) => x.name === 'Lora')!;
    assert.equal(lora.status, 'ERROR');
    assert.match(lora.comment, /restart budget spent \(2 restarts within 60000 ms\); last crash: lora:radio0: radio does not answer; failed subtree lora: the server gave up/);
    const log = (await s.inject('/api/v1/server/log')).json().logEntries as Array<{ message: string }>;
    assert.ok(log.some((e) => /supervisor lora spent its restart budget; the server restarts it in 50 ms/.test(e.message)), 'the log says the server restarts it');
    assert.ok(log.some((e) => /server is degraded until an operator restart/.test(e.message)), 'the log says it gave up');
    assert.equal((await s.inject('/api/v1/ping')).statusCode, 200, 'everything else keeps serving');

    // the operator fixes the radio and restarts: the failed subtree is reset (supervisor.reset), the server runs again
    crashing = false;
    const r = await s.inject({ method: 'PATCH', url: '/api/v1/server', payload: { state: 'restart' } });
    assert.deepEqual(r.json(), { status: 'Restarting' });
    const escalations: string[] = [];
    s.rt.on('supervisor.escalated', (e) => escalations.push(e.action));
    await waitUntil(() => s!.rt.state === 'running' && starts === 7, 10000, 'the subtree restarted');
    assert.deepEqual(escalations, [], 'the reset subtree runs without escalating again');
    await waitUntil(async () => (await s!.inject('/health')).body === 'Ok', 10000, 'health Ok again');
    assert.equal(s.rt.failedSubtrees().length, 0);
    assert.equal(s.rt.actor('supervisor', 'lora')?.getSnapshot().value, 'running');

    // an escalation while the server runs is in the audit log: the security service writes it from the kernel's
    // event. (Escalations during the boot, as the first ones above, can come before the security service is up.)
    s.rt.startChild('lora', {
      id: 'lora:radio1',
      logic: fromCallback(() => {
        throw new Error('second radio does not answer');
      }),
    });
    const audit = await auditLines(s, (l) => l.event === 'supervisor.escalated' && String(l.error).includes('second radio'));
    const line = audit.find((l) => l.event === 'supervisor.escalated' && String(l.error).includes('second radio'))!;
    assert.equal(line.subtree, 'lora');
    assert.equal(line.action, 'restart', 'the server restarts the subtree (its budget started afresh with the operator restart)');
  });
});
