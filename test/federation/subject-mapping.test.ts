/**
 * Topic ↔ subject mapping: the cases of nats-server's own MQTT conversion tests (server/mqtt_test.go,
 * TestMQTTTopicAndSubjectConversion and TestMQTTFilterConversion), plus what has no subject form.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { filterToSubject, SubjectMappingError, subjectToTopic, topicToSubject, tryTopicToSubject } from '../../src/links/subject-mapping.js';

const topics: Array<[string, string]> = [
  ['/', '/./'],
  ['//', '/././'],
  ['///', '/./././'],
  ['////', '/././././'],
  ['foo', 'foo'],
  ['/foo', '/.foo'],
  ['//foo', '/./.foo'],
  ['///foo', '/././.foo'],
  ['///foo/', '/././.foo./'],
  ['///foo//', '/././.foo././'],
  ['///foo///', '/././.foo./././'],
  ['//.foo.//', '/././/foo//././'],
  ['foo/bar', 'foo.bar'],
  ['/foo/bar', '/.foo.bar'],
  ['/foo/bar/', '/.foo.bar./'],
  ['foo/bar/baz', 'foo.bar.baz'],
  ['/foo/bar/baz', '/.foo.bar.baz'],
  ['/foo/bar/baz/', '/.foo.bar.baz./'],
  ['bar/', 'bar./'],
  ['bar//', 'bar././'],
  ['bar///', 'bar./././'],
  ['foo//bar', 'foo./.bar'],
  ['foo///bar', 'foo././.bar'],
  ['foo////bar', 'foo./././.bar'],
  ['.', '//'],
  ['..', '////'],
  ['...', '//////'],
  ['./', '//./'],
  ['.//.', '//././/'],
  ['././.', '//.//.//'],
  ['././/.', '//.//././/'],
  ['.foo', '//foo'],
  ['foo.', 'foo//'],
  ['.foo.', '//foo//'],
  ['foo../bar/', 'foo////.bar./'],
  ['foo../bar/.', 'foo////.bar.//'],
  ['/foo/', '/.foo./'],
  ['./foo/.', '//.foo.//'],
  ['foo.bar/baz', 'foo//bar.baz'],
  // literal '*' / '>' inside a level are plain characters in NATS too
  ['foo*/bar', 'foo*.bar'],
  ['foo>/bar', 'foo>.bar'],
  ['sensors/température', 'sensors.température'],
];

const filters: Array<[string, string]> = [
  ['+', '*'],
  ['/+', '/.*'],
  ['+/', '*./'],
  ['/+/', '/.*./'],
  ['foo/+', 'foo.*'],
  ['foo/+/', 'foo.*./'],
  ['foo/+/bar', 'foo.*.bar'],
  ['foo/+/+', 'foo.*.*'],
  ['foo/+/+/', 'foo.*.*./'],
  ['foo/+/+/bar', 'foo.*.*.bar'],
  ['foo//+', 'foo./.*'],
  ['foo//+/', 'foo./.*./'],
  ['foo//+//', 'foo./.*././'],
  ['foo//+//bar', 'foo./.*./.bar'],
  ['foo///+///bar', 'foo././.*././.bar'],
  ['foo.bar///+///baz', 'foo//bar././.*././.baz'],
  ['#', '>'],
  ['/#', '/.>'],
  ['/foo/#', '/.foo.>'],
  ['foo/#', 'foo.>'],
  ['foo//#', 'foo./.>'],
  ['foo///#', 'foo././.>'],
  ['foo/bar/#', 'foo.bar.>'],
  ['foo/bar.baz/#', 'foo.bar//baz.>'],
  ['foo*/bar', 'foo*.bar'],
  ['foo>/bar', 'foo>.bar'],
];

describe('federation - topic and subject mapping', () => {
  it('federation - topic names map to subjects as nats-server maps them, and back', () => {
    for (const [topic, subject] of topics) {
      assert.equal(topicToSubject(topic), subject, `topic ${JSON.stringify(topic)}`);
      assert.equal(subjectToTopic(subject), topic, `subject ${JSON.stringify(subject)}`);
    }
  });

  it('federation - every mapped subject has only non-empty tokens', () => {
    for (const [topic] of topics) for (const token of topicToSubject(topic).split('.')) assert.ok(token.length > 0, topic);
  });

  it('federation - topic filters map wildcards + and # to * and >', () => {
    for (const [filter, subject] of filters) assert.equal(filterToSubject(filter), subject, `filter ${JSON.stringify(filter)}`);
  });

  it('federation - topics with no subject form are refused', () => {
    for (const bad of ['foo/+', 'foo/#', 'foo bar', 'foo\x7fbar', 'a\tb', 'a\nb', 'a\0b', '', 'foo/*', '>', 'a/>/b', '*/x']) {
      assert.throws(() => topicToSubject(bad), SubjectMappingError, JSON.stringify(bad));
      assert.equal(tryTopicToSubject(bad), undefined);
    }
    for (const bad of ['foo/*/bar', 'foo/>', 'a b/#', '']) assert.throws(() => filterToSubject(bad), SubjectMappingError, JSON.stringify(bad));
  });

  it('federation - a subject from another NATS client that is no MQTT topic name is refused', () => {
    assert.throws(() => subjectToTopic('foo.+'), SubjectMappingError);
    assert.throws(() => subjectToTopic('foo.#.bar'), SubjectMappingError);
    assert.equal(subjectToTopic('plain.nats.subject'), 'plain/nats/subject');
  });
});
