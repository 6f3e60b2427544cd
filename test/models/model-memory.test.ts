import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { basicAuth, removeDir, spawnBroker, tempDir, type BrokerProcess } from '../helpers.js';

/**
 * The memory a user can make the broker hold through model functions in selectors, measured on the broker process
 * (RSS from /proc) as the report measured it: 100 REST subscriptions by an ordinary user (group everyone).
 */
const FIELDS = Array.from({ length: 64 }, (_, i) => `f${i}`);
const TOPIC = 'm/a/b/c/d/e/f';
/** 127 distinct filters that all match TOPIC (each level literal or '+', or '#' after a prefix). */
function filters(): string[] {
  const levels = TOPIC.split('/').slice(1);
  const out: string[] = [];
  for (let mask = 0; mask < 64; mask++) out.push(['m', ...levels.map((l, i) => (mask & (1 << i) ? '+' : l))].join('/'));
  for (let k = 0; k < 6; k++) for (let mask = 0; mask < 1 << k; mask++) out.push(['m', ...levels.slice(0, k).map((l, i) => (mask & (1 << i) ? '+' : l)), '#'].join('/'));
  return out;
}
const rssMiB = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;

const dataDir = tempDir();
let b: BrokerProcess;
before(async () => {
  b = await spawnBroker({ SWITCHYARD_DATA_DIR: dataDir });
});
after(async () => {
  await b?.stop();
  removeDir(dataDir);
});

test('models - 100 model-function subscriptions by an ordinary user hold no per-subscription model memory (RSS printed)', async () => {
  const base = `http://127.0.0.1:${b.port}`;
  const json = (auth: Record<string, string>) => ({ ...auth, 'content-type': 'application/json' });
  const made = await fetch(`${base}/api/v1/auth/users`, { method: 'POST', headers: json(b.auth()), body: JSON.stringify({ username: 'mallory', password: 'mallory-password-1' }) });
  assert.equal(made.status, 201, await made.text());
  const mallory = basicAuth('mallory', 'mallory-password-1');
  const subscribe = (destinationName: string, filter: string) =>
    fetch(`${base}/api/v1/messaging/subscribe`, { method: 'POST', headers: json(mallory), body: JSON.stringify({ destinationName, filter, maxDepth: 10 }) });
  const publish = () =>
    fetch(`${base}/api/v1/messaging/publish`, {
      method: 'POST',
      headers: json(mallory),
      body: JSON.stringify({ destinationName: TOPIC, message: { payload: '', dataMap: Object.fromEntries(FIELDS.map((f) => [f, Math.random() * 100])) } }),
    }).then((r) => r.status);
  const fs = filters().slice(0, 100);
  // the base is taken once mallory has been let in once (her first password check starts the hash pool's worker, whose
  // isolate and scrypt's 16 MiB are not what her subscriptions hold) and her topic exists
  assert.equal(await publish(), 200);
  await new Promise((r) => setTimeout(r, 1000));
  const rss0 = rssMiB(b.proc.pid!);

  // the attack: each subscription names 10 new models with 64 fields (trained online from the messages)
  const codes = new Map<number, number>();
  for (let i = 0; i < 100; i++) {
    const calls = Array.from({ length: 10 }, (_, j) => `isolation_forest('m${i}_${j}', ${FIELDS.join(', ')}) > 0.5`).join(' OR ');
    const r = await subscribe(fs[i]!, calls);
    codes.set(r.status, (codes.get(r.status) ?? 0) + 1);
    await r.arrayBuffer();
  }
  for (let k = 0; k < 110; k++) assert.equal(await publish(), 200);
  await new Promise((r) => setTimeout(r, 1000));
  const rssAttack = rssMiB(b.proc.pid!);

  // the use everyone is given: 100 subscriptions calling one model the administrator uploaded (1000 centroids x 64)
  const doc = { format: 'switchyard-model', kind: 'k_means', dims: 64, centroids: Array.from({ length: 1000 }, (_, i) => FIELDS.map((_, j) => i + j / 64)) };
  const form = new FormData();
  form.append('file', new Blob([JSON.stringify(doc)]), 'plant');
  const up = await fetch(`${base}/api/v1/server/models/plant`, { method: 'POST', headers: b.auth(), body: form });
  assert.equal(up.status, 200, await up.text());
  for (let i = 0; i < 100; i++) {
    const r = await subscribe(fs[i]!, `k_means('plant', ${FIELDS.join(', ')}) >= ${i % 13}`);
    assert.equal(r.status, 200, await r.text());
  }
  for (let k = 0; k < 200; k++) assert.equal(await publish(), 200);
  await new Promise((r) => setTimeout(r, 1000));
  const rssUse = rssMiB(b.proc.pid!);
  process.stdout.write(
    `# 100 model-function subscriptions (ordinary user): 1000 new models named: ${[...codes].map(([c, n]) => `${n} x ${c}`).join(', ')}, ` +
      `RSS ${rss0.toFixed(1)} -> ${rssAttack.toFixed(1)} MiB (+${(rssAttack - rss0).toFixed(1)} MiB; was +943 MB); ` +
      `then 100 subscriptions on one 1000x64 k-means model, 200 messages: ${rssUse.toFixed(1)} MiB (+${(rssUse - rssAttack).toFixed(1)} MiB)\n`,
  );
  assert.deepEqual([...codes], [[403, 100]], 'training a new model needs train_model');
  assert.ok(rssAttack - rss0 < 64, `RSS grew ${(rssAttack - rss0).toFixed(1)} MiB`);
  assert.ok(rssUse - rssAttack < 100, `RSS grew ${(rssUse - rssAttack).toFixed(1)} MiB for 100 subscriptions sharing one model`);
});
