import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ValidationError } from '../../src/errors.js';
import {
  TopicTree,
  TopicTrie,
  parseSharedFilter,
  splitTopic,
  topicMatchesFilter,
  validateTopicFilter,
  validateTopicName,
} from '../../src/engine/topic-trie.js';

// [filter, topic, matches]
const TABLE: Array<[string, string, boolean]> = [
  ['a/b/c', 'a/b/c', true],
  ['a/b/c', 'a/b', false],
  ['a/b', 'a/b/c', false],
  ['a/+/c', 'a/b/c', true],
  ['a/+/c', 'a/b/d', false],
  ['a/+', 'a/b', true],
  ['a/+', 'a/b/c', false],
  ['a/+', 'a/', true], // + matches an empty level
  ['+/+', '/finance', true],
  ['/+', '/finance', true],
  ['+', '/finance', false],
  ['+', 'finance', true],
  ['a/#', 'a', true], // [MQTT-4.7.1-2] # also matches the parent level
  ['a/#', 'a/b', true],
  ['a/#', 'a/b/c/d', true],
  ['a/#', 'ab', false],
  ['a/b/#', 'a', false],
  ['#', 'a/b/c', true],
  ['#', '/', true],
  ['+/#', 'a', true],
  ['+/+/#', 'a', false],
  ['sport/tennis/+', 'sport/tennis/player1', true],
  ['sport/tennis/+', 'sport/tennis/player1/ranking', false],
  ['sport/+', 'sport', false],
  ['sport/+', 'sport/', true],
  // [MQTT-4.7.2-1] filters starting with a wildcard do not match $-topics
  ['#', '$SYS/broker/uptime', false],
  ['+/broker/uptime', '$SYS/broker/uptime', false],
  ['+/#', '$SYS/x', false],
  ['$SYS/#', '$SYS/broker/uptime', true],
  ['$SYS/+/uptime', '$SYS/broker/uptime', true],
  ['$SYS', '$SYS', true],
  ['a/$x/#', 'a/$x/y', true],
  ['a/+/y', 'a/$x/y', true], // only the first level is special
  ['A/b', 'a/b', false], // case sensitive
];

test('engine - wildcard matching table (trie and one-off matcher agree)', () => {
  const trie = new TopicTrie<string>();
  for (const [filter] of TABLE) trie.add(filter, filter);
  for (const [filter, topic, expected] of TABLE) {
    const got = trie.match(splitTopic(topic), []).includes(filter);
    assert.equal(got, expected, `trie: filter "${filter}" vs topic "${topic}"`);
    assert.equal(topicMatchesFilter(filter, topic), expected, `matcher: filter "${filter}" vs topic "${topic}"`);
  }
});

test('engine - trie returns each matching value once and prunes on remove', () => {
  const trie = new TopicTrie<number>();
  trie.add('a/+/c', 1);
  trie.add('a/#', 2);
  trie.add('a/b/c', 3);
  trie.add('a/b/c', 4);
  trie.add('#', 5);
  assert.deepEqual(trie.matchTopic('a/b/c').sort(), [1, 2, 3, 4, 5]);
  assert.equal(trie.size, 5);
  assert.equal(trie.remove('a/b/c', 3), true);
  assert.equal(trie.remove('a/b/c', 3), false);
  assert.equal(trie.remove('a/#', 2), true);
  assert.equal(trie.remove('x/y', 1), false);
  assert.deepEqual(trie.matchTopic('a/b/c').sort(), [1, 4, 5]);
  trie.remove('a/+/c', 1);
  trie.remove('a/b/c', 4);
  trie.remove('#', 5);
  assert.equal(trie.size, 0);
  assert.deepEqual(trie.matchTopic('a/b/c'), []);
});

test('engine - trie matching with 100 000 subscriptions finds exactly the matching ones', () => {
  const trie = new TopicTrie<number>();
  let id = 0;
  for (let i = 0; i < 1000; i++) {
    for (let j = 0; j < 100; j++) trie.add(`site/${i}/sensor/${j}`, id++);
  }
  trie.add('site/+/sensor/7', -1);
  trie.add('site/42/#', -2);
  assert.equal(trie.size, 100_002);
  const got = trie.matchTopic('site/42/sensor/7').sort((a, b) => a - b);
  assert.deepEqual(got, [-2, -1, 42 * 100 + 7]);
  assert.deepEqual(trie.matchTopic('site/43/sensor/100'), []);
});

test('engine - retained topic tree matched by filters, honouring $ topics', () => {
  const tree = new TopicTree<string>();
  for (const t of ['a', 'a/b', 'a/b/c', 'a/x/c', 'b', '$SYS/uptime', '/lead']) tree.set(t, t);
  const m = (f: string): string[] => tree.match(f, []).sort();
  assert.deepEqual(m('a/#'), ['a', 'a/b', 'a/b/c', 'a/x/c']);
  assert.deepEqual(m('a/+/c'), ['a/b/c', 'a/x/c']);
  assert.deepEqual(m('#'), ['/lead', 'a', 'a/b', 'a/b/c', 'a/x/c', 'b']);
  assert.deepEqual(m('+'), ['a', 'b']);
  assert.deepEqual(m('$SYS/#'), ['$SYS/uptime']);
  assert.deepEqual(m('a/b'), ['a/b']);
  assert.equal(tree.delete('a/b'), true);
  assert.deepEqual(m('a/#'), ['a', 'a/b/c', 'a/x/c']);
  assert.equal(tree.size, 6);
});

test('engine - topic name validation errors', () => {
  for (const [name, fragment] of [
    ['', 'must not be empty'],
    ['a/+/b', "wildcard '+'"],
    ['a/#', "wildcard '#'"],
    ['a\u0000b', 'NUL'],
  ] as const) {
    assert.throws(
      () => validateTopicName(name),
      (err: unknown) => err instanceof ValidationError && err.statusCode === 400 && err.message.includes(fragment),
      `topic name ${JSON.stringify(name)}`,
    );
  }
  validateTopicName('a/b/c');
  validateTopicName('/');
  validateTopicName('$SYS/x');
});

test('engine - topic filter validation errors', () => {
  for (const [filter, fragment] of [
    ['', 'must not be empty'],
    ['a/#/b', "'#' must be the last level"],
    ['a/b#', "'#' must occupy a whole level"],
    ['a/+b', "'+' must occupy a whole level"],
    ['a+/b', "'+' must occupy a whole level"],
    ['a/\u0000', 'NUL'],
    ['$share//a', 'empty share name'],
    ['$share/g', 'no topic filter'],
    ['$share/g/', 'no topic filter'],
    ['$share/g+/a', "must not contain '+' or '#'"],
    ['$share/g/a/#/b', "'#' must be the last level"],
  ] as const) {
    assert.throws(
      () => validateTopicFilter(filter),
      (err: unknown) => err instanceof ValidationError && err.message.includes(fragment),
      `filter ${JSON.stringify(filter)}`,
    );
  }
  for (const ok of ['#', '+', 'a/+/#', '+/+', '/#', '$share/g/#', '$share/g/a/+', 'a/b']) validateTopicFilter(ok);
  assert.deepEqual(parseSharedFilter('$share/grp/a/+/c'), { group: 'grp', filter: 'a/+/c' });
  assert.equal(parseSharedFilter('a/b'), null);
});
