/**
 * MQTT topic ↔ NATS subject, the way nats-server maps them for its own MQTT support (NATS documentation, "MQTT /
 * Topics and subjects"), so a Switchyard link and an MQTT client of nats-server see the same subjects:
 *
 * | MQTT topic            | NATS subject        | rule                                                           |
 * |-----------------------|---------------------|----------------------------------------------------------------|
 * | `foo/bar`             | `foo.bar`           | a `/` between two levels is `.`                                |
 * | `/foo`                | `/.foo`             | a leading `/` (an empty first level) is `/.`                   |
 * | `foo/`                | `foo./`             | a `/` before an empty level (trailing or `//`) is `./`         |
 * | `foo//bar`            | `foo./.bar`         | an empty level in the middle                                   |
 * | `foo.bar`             | `foo//bar`          | a `.` inside a level is `//`                                   |
 * | `+` / `#` (filters)   | `*` / `>`           | wildcards                                                      |
 *
 * Precisely, reading the topic left to right: a `/` becomes `/.` when it is the first character or the subject so far
 * ends with `.`; otherwise `./` when it is the last character or the next one is also `/`; otherwise `.`. A `.`
 * becomes `//`. When the subject then ends with `.`, a `/` is appended. The reverse reads the subject: `.` is `/`,
 * `/.` is `/`, `//` is `.`, any other `/` is dropped. No NATS token is ever empty this way.
 *
 * Topics with no subject form are refused (`SubjectMappingError`, the link counts them): an empty topic; whitespace
 * (space, tab, CR, LF, FF), NUL or DEL anywhere (they would break the NATS protocol line; nats-server refuses them
 * too); wildcards in a topic name; and — our addition, which nats-server does not check — a level that is exactly
 * `*` or `>`, because it would be a NATS wildcard (a publish there is refused by JetStream; as a filter it would
 * match more than the MQTT filter means). In the other direction a subject whose topic form would hold `+` or `#`
 * (published by some other NATS client) is not a valid MQTT topic name and is refused the same way.
 */

export class SubjectMappingError extends Error {
  constructor(
    message: string,
    readonly topic: string,
  ) {
    super(message);
    this.name = 'SubjectMappingError';
  }
}

function isWhitespaceOrControl(c: number): boolean {
  // ' ', \t, \n, \f, \r, NUL, DEL
  return c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0c || c === 0x0d || c === 0x00 || c === 0x7f;
}

function hasWildcardToken(subject: string): boolean {
  if (subject === '*' || subject === '>') return true;
  return (
    subject.startsWith('*.') ||
    subject.startsWith('>.') ||
    subject.endsWith('.*') ||
    subject.endsWith('.>') ||
    subject.includes('.*.') ||
    subject.includes('.>.')
  );
}

/**
 * Whether `topic` maps by turning every `/` into `.` alone: non-empty levels, no `.`, `+`, `#`, whitespace or control
 * character (most topics). Such a topic is converted with one replaceAll instead of a string built character by
 * character (a link converts the topic of every message it sends).
 */
function plainTopic(topic: string): boolean {
  const n = topic.length;
  let boundary = true; // at the start or just after a '/': a '/' here would begin an empty level
  for (let i = 0; i < n; i++) {
    const c = topic.charCodeAt(i);
    if (c === 0x2f) {
      if (boundary) return false;
      boundary = true;
      continue;
    }
    if (c === 0x2e || c === 0x2b || c === 0x23 || isWhitespaceOrControl(c)) return false;
    boundary = false;
  }
  return !boundary;
}

function convert(topic: string, wildcardsOk: boolean): string {
  if (topic.length === 0) throw new SubjectMappingError('empty topic has no NATS subject', topic);
  if (plainTopic(topic)) return topic.replaceAll('/', '.');
  const end = topic.length - 1;
  let out = '';
  for (let i = 0; i <= end; i++) {
    const ch = topic[i];
    switch (ch) {
      case '/':
        if (i === 0 || out.endsWith('.')) out += '/.';
        else if (i === end || topic[i + 1] === '/') out += './';
        else out += '.';
        break;
      case '.':
        out += '//';
        break;
      case '+':
      case '#':
        if (!wildcardsOk) throw new SubjectMappingError(`wildcards not allowed in a topic name: ${JSON.stringify(topic)}`, topic);
        out += ch === '+' ? '*' : '>';
        break;
      default:
        if (isWhitespaceOrControl(topic.charCodeAt(i))) {
          throw new SubjectMappingError(`character not supported in a NATS subject: ${JSON.stringify(topic)}`, topic);
        }
        out += ch;
    }
  }
  if (out.endsWith('.')) out += '/';
  return out;
}

/** A topic name (a PUBLISH topic, no wildcards) as a NATS subject; throws SubjectMappingError when it has none. */
export function topicToSubject(topic: string): string {
  const subject = convert(topic, false);
  if (hasWildcardToken(subject)) {
    throw new SubjectMappingError(`a level '*' or '>' would be a NATS wildcard: ${JSON.stringify(topic)}`, topic);
  }
  return subject;
}

/** A topic filter (`+`, `#` allowed) as a NATS subject filter (`*`, `>`); throws SubjectMappingError when it has none. */
export function filterToSubject(filter: string): string {
  // `*` / `>` levels are refused before the MQTT wildcards are turned into them.
  const literal = convert(filter.replaceAll('+', 'a').replaceAll('#', 'a'), false);
  if (hasWildcardToken(literal)) {
    throw new SubjectMappingError(`a level '*' or '>' would be a NATS wildcard: ${JSON.stringify(filter)}`, filter);
  }
  return convert(filter, true);
}

/** topicToSubject without throwing: undefined when the topic has no subject form. */
export function tryTopicToSubject(topic: string): string | undefined {
  try {
    return topicToSubject(topic);
  } catch {
    return undefined;
  }
}

/** A NATS subject as an MQTT topic name (the reverse of topicToSubject; no checks). */
export function subjectToTopicUnchecked(subject: string): string {
  // no escape in it (most subjects): every '.' is a '/', one new string instead of one per character
  if (subject.indexOf('/') < 0) return subject.replaceAll('.', '/');
  const end = subject.length - 1;
  let out = '';
  for (let i = 0; i <= end; i++) {
    const ch = subject[i];
    if (ch === '/') {
      if (i < end) {
        const next = subject[i + 1];
        if (next === '.') {
          out += '/';
          i++;
        } else if (next === '/') {
          out += '.';
          i++;
        }
      }
    } else if (ch === '.') {
      out += '/';
    } else {
      out += ch;
    }
  }
  return out;
}

/** A NATS subject of a received message as an MQTT topic name; throws SubjectMappingError when it is not a valid one. */
export function subjectToTopic(subject: string): string {
  const topic = subjectToTopicUnchecked(subject);
  if (topic.length === 0 || topic.includes('+') || topic.includes('#')) {
    throw new SubjectMappingError(`subject ${JSON.stringify(subject)} is not a valid MQTT topic name`, topic);
  }
  return topic;
}
