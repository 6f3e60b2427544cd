/**
 * The memory of a receiving link (src/links/received-ids.ts) on a real LevelDB: the ids survive a reopen of the store
 * (a broker restart), the stored records are trimmed to the capacity, and the in-memory ring forgets the oldest id.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { IdRing, StoredReceivedIds } from '../../src/links/received-ids.js';
import { Store } from '../../src/store/store.js';
import { removeDir, tempDir } from '../helpers.js';

test('links - received ids are stored per consumer and come back after the store is reopened; older records are trimmed', async () => {
  const dir = tempDir();
  try {
    let store = await Store.open(dir);
    const errors: Error[] = [];
    const ids = await StoredReceivedIds.load(store.sublevel('links'), 'srv-fed-1', (e) => errors.push(e), 100);
    const other = await StoredReceivedIds.load(store.sublevel('links'), 'srv-fed-2', (e) => errors.push(e), 100);
    for (let batch = 0; batch < 5; batch++) {
      for (let i = 0; i < 30; i++) ids.remember(`m-${batch * 30 + i}`);
      await ids.persist();
    }
    other.remember('x-1');
    await other.persist();
    assert.ok(ids.has('m-149') && ids.has('m-50'));
    await store.close();

    store = await Store.open(dir);
    const again = await StoredReceivedIds.load(store.sublevel('links'), 'srv-fed-1', (e) => errors.push(e), 100);
    // 150 ids in batches of 30, capacity 100: the records that hold the last 100 ids are kept (4 records, 120 ids),
    // and the last 100 of them are remembered
    assert.ok(again.has('m-149') && again.has('m-50'), 'the recent ids are back');
    assert.equal(again.has('m-49'), false, 'the oldest are forgotten');
    assert.equal(again.size, 100);
    assert.equal(again.has('x-1'), false, 'per consumer');
    let records = 0;
    for await (const [k] of store.sublevel('links').iterator({ gte: 'ids:srv-fed-1:', lt: 'ids:srv-fed-1:\uffff' })) records += k ? 1 : 0;
    assert.equal(records, 4);
    assert.deepEqual(errors, []);
    await store.close();
  } finally {
    removeDir(dir);
  }
});

test('links - the in-memory ring of received ids holds the last N and forgets the oldest', () => {
  const r = new IdRing(3);
  for (const id of ['a', 'b', 'c']) assert.equal(r.add(id), true);
  assert.equal(r.add('b'), false);
  r.add('d');
  assert.deepEqual(['a', 'b', 'c', 'd'].map((x) => r.has(x)), [false, true, true, true]);
  assert.equal(r.size, 3);
});
