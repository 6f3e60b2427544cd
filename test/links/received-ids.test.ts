/**
 * The memory of a receiving link (src/links/received-ids.ts) on a real engine and LevelDB: an id's record is written in
 * the same store batch as the message published with it, the ids come back after a restart of the broker, the stored
 * records form a ring of `capacity` slots, and the in-memory ring forgets the oldest id.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { IdRing, StoredReceivedIds } from '../../src/links/received-ids.js';
import { removeDir, startServer, tempDir } from '../helpers.js';

test('links - received ids are written with their messages, per consumer, come back after a restart, and take at most capacity records', async () => {
  const dir = tempDir();
  try {
    let s = await startServer({ auth: false, dataDir: dir });
    const engine = s.rt.engine!;
    const ids = await StoredReceivedIds.load(engine, 'srv-fed-1', 100);
    const other = await StoredReceivedIds.load(engine, 'srv-fed-2', 100);
    for (let i = 0; i < 150; i++) {
      const p = engine.publish(`in/${i % 3}`, { payload: Buffer.from(String(i)), qos: 1, retain: false });
      ids.record(`m-${i}`); // the same synchronous step: the same batch
      await p;
      ids.remember(`m-${i}`);
    }
    other.record('x-1');
    await engine.flush();
    assert.ok(ids.has('m-149') && ids.has('m-50') && !ids.has('m-49'));
    let records = 0;
    for await (const _ of engine.stateEntries('link-ids!srv-fed-1!')) records++;
    assert.equal(records, 100, 'a ring of 100 slots');
    await s.close();

    s = await startServer({ auth: false, dataDir: dir });
    const again = await StoredReceivedIds.load(s.rt.engine!, 'srv-fed-1', 100);
    assert.ok(again.has('m-149') && again.has('m-50'), 'the recent ids are back');
    assert.equal(again.has('m-49'), false, 'the oldest are forgotten');
    assert.equal(again.size, 100);
    const theOther = await StoredReceivedIds.load(s.rt.engine!, 'srv-fed-2', 100);
    assert.deepEqual([theOther.has('x-1'), theOther.has('m-149')], [true, false], 'per consumer');
    // after a restart, numbering goes on: a new id takes the oldest slot
    again.record('m-150');
    await s.rt.engine!.flush();
    await s.close();
    s = await startServer({ auth: false, dataDir: dir });
    const third = await StoredReceivedIds.load(s.rt.engine!, 'srv-fed-1', 100);
    assert.deepEqual([third.has('m-150'), third.has('m-50'), third.has('m-51')], [true, false, true]);
    await s.close();
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
