import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WorkerSlot, WorkerTimeoutError } from '../../src/worker-slot.js';

/**
 * The worker lifecycle the password hash pool and the model loader share (src/worker-slot.ts): a stuck job ends its
 * thread and fails instead of holding everything queued behind it, a thread that dies fails only its own job, and an
 * idle thread is ended.
 */
const SOURCE = `
const { parentPort } = require('node:worker_threads');
parentPort.on('message', (m) => {
  if (m.op === 'sleep') Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, m.ms); // a job that never yields
  if (m.op === 'exit') process.exit(3);
  parentPort.postMessage({ id: m.id, echo: m.value, threadId: require('node:worker_threads').threadId });
});
`;

test('worker slot - a job longer than timeoutMs ends its worker and fails; the next job runs on a new worker', async () => {
  const slot = new WorkerSlot({ source: SOURCE, name: 'test', timeoutMs: 300 });
  try {
    const first = await slot.run({ op: 'echo', value: 1 });
    assert.equal(first.echo, 1);
    const t0 = Date.now();
    await assert.rejects(slot.run({ op: 'sleep', ms: 60_000 }), (e: unknown) => e instanceof WorkerTimeoutError && /took longer than 300 ms/.test((e as Error).message));
    assert.ok(Date.now() - t0 < 10_000, 'failed at its timeout, not when the job would have ended');
    assert.equal(slot.busy, false);
    const next = await slot.run({ op: 'echo', value: 2 });
    assert.equal(next.echo, 2);
    assert.notEqual(next.threadId, first.threadId, 'a new thread');
  } finally {
    await slot.close();
  }
});

test('worker slot - a worker that exits fails its job with the exit code; the next job gets a new worker', async () => {
  const slot = new WorkerSlot({ source: SOURCE, name: 'test', timeoutMs: 30_000 });
  try {
    await assert.rejects(slot.run({ op: 'exit' }), /exit code 3/);
    assert.equal((await slot.run({ op: 'echo', value: 'again' })).echo, 'again');
    const sleeping = slot.run({ op: 'sleep', ms: 200 });
    await assert.rejects(slot.run({ op: 'echo' }), /busy/, 'one job at a time: the caller queues');
    await sleeping;
  } finally {
    await slot.close();
  }
});

test('worker slot - an idle worker is ended after idleMs and started again by the next job', async () => {
  const slot = new WorkerSlot({ source: SOURCE, name: 'test', timeoutMs: 30_000, idleMs: 200 });
  try {
    const a = await slot.run({ op: 'echo', value: 'a' });
    assert.equal(slot.started, true);
    const end = Date.now() + 5000;
    while (slot.started && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
    assert.equal(slot.started, false, 'ended after 200 ms idle');
    const b = await slot.run({ op: 'echo', value: 'b' });
    assert.equal(b.echo, 'b');
    assert.notEqual(b.threadId, a.threadId);
  } finally {
    await slot.close();
  }
  await assert.rejects(slot.run({ op: 'echo' }), /stopped/);
});
