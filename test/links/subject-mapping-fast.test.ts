/**
 * The topic <-> subject mapping of src/links/subject-mapping.ts converts most topics and subjects with one replaceAll;
 * every topic, filter and subject (fast-check, topics made of the characters that matter: `/`, `.`, `+`, `#`, `*`, `>`,
 * whitespace, letters, non-ASCII) maps exactly as the character-by-character mapping below (the reading before) does,
 * refusals included.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { filterToSubject, subjectToTopicUnchecked, topicToSubject } from '../../src/links/subject-mapping.js';

const ws = (c: number) => c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0c || c === 0x0d || c === 0x00 || c === 0x7f;

function convertRef(topic: string, wildcardsOk: boolean): string {
  if (topic.length === 0) throw new Error('empty');
  const end = topic.length - 1;
  let out = '';
  for (let i = 0; i <= end; i++) {
    const ch = topic[i];
    if (ch === '/') {
      if (i === 0 || out.endsWith('.')) out += '/.';
      else if (i === end || topic[i + 1] === '/') out += './';
      else out += '.';
    } else if (ch === '.') out += '//';
    else if (ch === '+' || ch === '#') {
      if (!wildcardsOk) throw new Error('wildcard');
      out += ch === '+' ? '*' : '>';
    } else {
      if (ws(topic.charCodeAt(i))) throw new Error('whitespace');
      out += ch;
    }
  }
  if (out.endsWith('.')) out += '/';
  return out;
}

const wild = (s: string) => s === '*' || s === '>' || s.startsWith('*.') || s.startsWith('>.') || s.endsWith('.*') || s.endsWith('.>') || s.includes('.*.') || s.includes('.>.');

function topicToSubjectRef(topic: string): string {
  const s = convertRef(topic, false);
  if (wild(s)) throw new Error('wildcard token');
  return s;
}

function filterToSubjectRef(filter: string): string {
  if (wild(convertRef(filter.replaceAll('+', 'a').replaceAll('#', 'a'), false))) throw new Error('wildcard token');
  return convertRef(filter, true);
}

function subjectToTopicRef(subject: string): string {
  const end = subject.length - 1;
  let out = '';
  for (let i = 0; i <= end; i++) {
    const ch = subject[i];
    if (ch === '/') {
      if (i < end) {
        if (subject[i + 1] === '.') {
          out += '/';
          i++;
        } else if (subject[i + 1] === '/') {
          out += '.';
          i++;
        }
      }
    } else if (ch === '.') out += '/';
    else out += ch;
  }
  return out;
}

/** The outcome of f as a comparable value: its result, or that it threw. */
function outcome(f: () => string): string {
  try {
    return `ok:${f()}`;
  } catch {
    return 'refused';
  }
}

test('links - topics, filters and subjects map as the character-by-character mapping does (fast-check)', () => {
  const text = fc.array(fc.constantFrom('/', '/', '.', '+', '#', '*', '>', ' ', '\t', 'a', 'b', 'é', '中'), { maxLength: 12 }).map((cs) => cs.join(''));
  fc.assert(
    fc.property(text, (t) => {
      assert.equal(outcome(() => topicToSubject(t)), outcome(() => topicToSubjectRef(t)), `topic ${JSON.stringify(t)}`);
      assert.equal(outcome(() => filterToSubject(t)), outcome(() => filterToSubjectRef(t)), `filter ${JSON.stringify(t)}`);
      assert.equal(subjectToTopicUnchecked(t), subjectToTopicRef(t), `subject ${JSON.stringify(t)}`);
    }),
    { numRuns: 5000 },
  );
  // the common shapes, by name
  assert.equal(topicToSubject('site/a/temp'), 'site.a.temp');
  assert.equal(subjectToTopicUnchecked('site.a.temp'), 'site/a/temp');
  assert.equal(topicToSubject('site//a/'), 'site./.a./');
});
