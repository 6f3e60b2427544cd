/**
 * Regular expressions from users, run in linear time. A JSON Schema `pattern` / `patternProperties` key is an
 * ECMA-262 regular expression, and V8 runs those by backtracking: `^(a+)+$` against 32 a's and a `!` takes tens of
 * seconds of the one event loop. Here every such pattern is translated to RE2 syntax and run by `re2js` (RE2's
 * automata in JavaScript: time linear in the input, no backtracking). A pattern RE2 cannot run (a backreference, a
 * lookahead or lookbehind) is refused with the reason, so the schema is refused at registration (400), never run.
 *
 * Translation (ECMAScript with the `u` flag, as ajv compiles patterns, to RE2):
 * - `\uXXXX` (a surrogate pair as one code point), `\u{X...}`, `\cX`, `\0` become `\x{...}`;
 * - `.` is `[^\n\r\u2028\u2029]` and `\s` ECMAScript's white space (RE2's `.` and `\s` are narrower), `\S` outside a
 *   class its complement; inside a class `\S` keeps RE2's meaning (ASCII white space only);
 * - `[` inside a class is a literal (RE2 would read `[[:alpha:]]` as a POSIX class); `\b` inside a class is U+0008;
 *   `[]` matches nothing and `[^]` any character;
 * - the pattern must be valid ECMAScript first (checked by parsing it with `new RegExp(p, 'u')`, never executed),
 *   so RE2-only syntax (`(?i)`, `\A`, `\z`, `\Q...\E`) is refused as JSON Schema requires.
 * Everything else (`\d`, `\w`, `\b`, `\p{L}`, classes, counted repetition up to 1000, named groups) means the same
 * in both. Differences left: case folding and `\b` / `\w` are ASCII as with ECMAScript's `u` flag without `i`.
 *
 * Also here: the format checks of `ajv-formats` that run a regular expression on user data, on RE2 too (`url`'s
 * private-address look-aheads as positive alternatives, `hostname` and `duration` with their look-aheads as plain
 * checks): `url` took 174 ms on a 20 000-character string with V8's engine (quadratic).
 */
import { RE2JS } from 're2js';
import { ValidationError } from '../errors.js';

/** ECMAScript white space and line terminators (`\s` of ECMA-262 §22.2.2.9), as RE2 class items. */
const WS = '\\t\\n\\x{0B}\\f\\r \\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}';
const DOT = '[^\\n\\r\\x{2028}\\x{2029}]';

const isHex = (c: string | undefined) => c !== undefined && /^[0-9A-Fa-f]$/.test(c);
const hex4 = (p: string, i: number) => isHex(p[i]) && isHex(p[i + 1]) && isHex(p[i + 2]) && isHex(p[i + 3]);

/** A pattern that cannot be run in linear time, or is not a valid ECMAScript pattern: the message says why. */
export class PatternError extends ValidationError {}

/**
 * ECMAScript (`u` flag) pattern to RE2 syntax. Throws PatternError for what RE2 cannot run (backreferences,
 * lookaround). Linear in the pattern's length.
 */
export function toRe2Syntax(pattern: string): string {
  let out = '';
  let inClass = false;
  let classStart = false; // just after `[` or `[^`
  const n = pattern.length;
  const refuse = (what: string): never => {
    throw new PatternError(`the pattern ${JSON.stringify(clipPattern(pattern))} uses ${what}, which the linear-time engine (RE2) cannot run`);
  };
  for (let i = 0; i < n; i++) {
    const c = pattern[i]!;
    if (c === '\\') {
      const e = pattern[i + 1];
      if (e === undefined) return refuse('a trailing backslash');
      i++;
      switch (e) {
        case 'u': {
          if (pattern[i + 1] === '{') {
            const close = pattern.indexOf('}', i + 2);
            const digits = close < 0 ? '' : pattern.slice(i + 2, close);
            if (!/^[0-9A-Fa-f]{1,6}$/.test(digits)) return refuse('a malformed \\u{...} escape');
            out += `\\x{${digits}}`;
            i = close;
          } else if (hex4(pattern, i + 1)) {
            let cp = Number.parseInt(pattern.slice(i + 1, i + 5), 16);
            i += 4;
            // a surrogate pair written as two escapes is one code point (with the u flag)
            if (cp >= 0xd800 && cp <= 0xdbff && pattern[i + 1] === '\\' && pattern[i + 2] === 'u' && hex4(pattern, i + 3)) {
              const lo = Number.parseInt(pattern.slice(i + 3, i + 7), 16);
              if (lo >= 0xdc00 && lo <= 0xdfff) {
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                i += 6;
              }
            }
            out += `\\x{${cp.toString(16)}}`;
          } else return refuse('a malformed \\u escape');
          break;
        }
        case 'c': {
          const l = pattern[i + 1];
          if (l === undefined || !/^[A-Za-z]$/.test(l)) return refuse('a malformed \\c escape');
          out += `\\x{${(l.charCodeAt(0) % 32).toString(16)}}`;
          i++;
          break;
        }
        case '0':
          out += '\\x{0}';
          break;
        case '1':
        case '2':
        case '3':
        case '4':
        case '5':
        case '6':
        case '7':
        case '8':
        case '9':
          if (inClass) return refuse('an octal escape');
          return refuse(`a backreference (\\${e})`);
        case 'k':
          return refuse('a named backreference (\\k<...>)');
        case 's':
          out += inClass ? WS : `[${WS}]`;
          break;
        case 'S':
          out += inClass ? '\\S' : `[^${WS}]`;
          break;
        case 'b':
          out += inClass ? '\\x{8}' : '\\b';
          break;
        case 'p':
        case 'P': {
          // \p{Script=Greek}, \p{gc=Lu}: RE2 names the script or category alone
          const close = pattern[i + 1] === '{' ? pattern.indexOf('}', i + 2) : -1;
          if (close < 0) return refuse('a malformed \\p escape');
          const body = pattern.slice(i + 2, close).replace(/^(?:Script|sc|Script_Extensions|scx|General_Category|gc)=/, '');
          out += `\\${e}{${body}}`;
          i = close;
          break;
        }
        default:
          out += `\\${e}`;
      }
      classStart = false;
      continue;
    }
    if (inClass) {
      if (c === ']' && classStart) {
        // `[]` matches nothing, `[^]` anything (ECMAScript); RE2 would read this `]` as a literal
        const negated = out.endsWith('[^');
        out = out.slice(0, negated ? -2 : -1) + (negated ? '[\\x{0}-\\x{10FFFF}]' : '[^\\x{0}-\\x{10FFFF}]');
        inClass = false;
      } else if (c === ']') {
        out += ']';
        inClass = false;
      } else if (c === '[') out += '\\[';
      else out += c;
      classStart = false;
      continue;
    }
    if (c === '[') {
      const negated = pattern[i + 1] === '^';
      out += negated ? '[^' : '[';
      if (negated) i++;
      inClass = true;
      classStart = true;
      continue;
    }
    if (c === '.') {
      out += DOT;
      continue;
    }
    if (c === '(' && pattern[i + 1] === '?') {
      const a = pattern[i + 2];
      const b = pattern[i + 3];
      if (a === '=' || a === '!') return refuse('a lookahead ((?= or (?!)');
      if (a === '<' && (b === '=' || b === '!')) return refuse('a lookbehind ((?<= or (?<!)');
    }
    out += c;
  }
  return out;
}

function clipPattern(p: string): string {
  return p.length > 80 ? `${p.slice(0, 80)}...` : p;
}

/** What ajv needs of a regular expression (its RegExpLike): `test`, and a `toString` that tells patterns apart. */
export interface LinearRegExp {
  test(s: string): boolean;
  toString(): string;
}

const cache = new Map<string, LinearRegExp>();
const CACHE_MAX = 4096;

/**
 * Compiles a JSON Schema pattern for linear-time matching; throws PatternError (a 400 at registration) when it is
 * not valid ECMAScript or cannot run on RE2. Compiled patterns are shared (at most CACHE_MAX kept).
 */
export function compilePattern(pattern: string): LinearRegExp {
  let rx = cache.get(pattern);
  if (rx) return rx;
  try {
    // JSON Schema patterns are ECMA-262: parsed here to refuse what ECMAScript refuses, never executed
    new RegExp(pattern, 'u'); // eslint-disable-line no-new
  } catch (err) {
    throw new PatternError(`the pattern ${JSON.stringify(clipPattern(pattern))} is not a valid regular expression: ${(err as Error).message}`);
  }
  const syntax = toRe2Syntax(pattern);
  let re: RE2JS;
  try {
    re = RE2JS.compile(syntax);
  } catch (err) {
    throw new PatternError(`the pattern ${JSON.stringify(clipPattern(pattern))} cannot run on the linear-time engine (RE2): ${(err as Error).message}`);
  }
  const key = `re2:/${pattern}/u`;
  rx = { test: (s: string) => re.test(s), toString: () => key };
  if (cache.size >= CACHE_MAX) cache.clear();
  cache.set(pattern, rx);
  return rx;
}

/**
 * ajv's `code.regExp` option: `(pattern, flags) => RegExpLike` with a `code` string (used only by standalone code
 * generation, which Switchyard does not use). ajv calls it when it compiles a schema, so a pattern RE2 cannot run
 * makes the schema fail to compile (SchemaCompileError, 400).
 */
export const linearRegExpEngine = Object.assign((pattern: string, _flags: string): LinearRegExp => compilePattern(pattern), {
  code: 'require("switchyard/schemas/patterns").linearRegExpEngine',
});

// ---------------------------------------------------------------------------------------------------------------
// ajv-formats on RE2

type FormatValidate = RegExp | ((s: string) => boolean) | { validate: unknown; compare?: unknown } | true | { type: string; validate: unknown };

/** An ECMAScript RegExp of a format (flags i, u only) on RE2. */
function re2Of(rx: RegExp): RE2JS {
  return RE2JS.compile(toRe2Syntax(rx.source), rx.ignoreCase ? RE2JS.CASE_INSENSITIVE : 0);
}

// `url` (dperini's regex as ajv-formats writes it) with its three look-aheads excluding private IPv4 addresses
// written as the allowed first octets and, for 169/172/192, the allowed second octets.
const O2 = '(?:1?\\d{1,2}|2[0-4]\\d|25[0-5])';
const O4 = '(?:[1-9]\\d?|1\\d\\d|2[0-4]\\d|25[0-4])';
const PUBLIC_FIRST = '(?:[1-9]|1[1-9]|[2-9]\\d|1[01]\\d|12[0-689]|1[3-5]\\d|16[0-8]|17[013-9]|18\\d|19[013-9]|2[01]\\d|22[0-3])';
const NOT_254 = '(?:\\d{1,2}|1\\d\\d|2[0-4]\\d|25[0-35])';
const NOT_168 = '(?:\\d{1,2}|1[0-57-9]\\d|16[0-79]|2[0-4]\\d|25[0-5])';
const NOT_16_31 = '(?:\\d|0\\d|1[0-5]|3[2-9]|[4-9]\\d|1\\d\\d|2[0-4]\\d|25[0-5])';
const PUBLIC_IPV4 = `(?:${PUBLIC_FIRST}\\.${O2}|169\\.${NOT_254}|192\\.${NOT_168}|172\\.${NOT_16_31})\\.${O2}\\.${O4}`;
const HOST_CHAR = '[a-z0-9\\x{00a1}-\\x{ffff}]';
const URL_RE2 =
  `^(?:https?|ftp)://(?:\\S+(?::\\S*)?@)?(?:${PUBLIC_IPV4}|(?:(?:${HOST_CHAR}+-)*${HOST_CHAR}+)(?:\\.(?:${HOST_CHAR}+-)*${HOST_CHAR}+)*(?:\\.(?:[a-z\\x{00a1}-\\x{ffff}]{2,})))` +
  '(?::\\d{2,5})?(?:/[^\\s]*)?$';

/**
 * ajv-formats' full formats with every regular expression that reads user data on RE2. Formats whose check is a
 * function over fixed, linear regular expressions (date, time, date-time, uri, byte, regex, ...) are kept.
 */
export function linearFormats(full: Record<string, FormatValidate>): Record<string, FormatValidate> {
  const out: Record<string, FormatValidate> = { ...full };
  for (const [name, f] of Object.entries(full)) {
    if (!(f instanceof RegExp)) continue;
    if (name === 'url') {
      const re = RE2JS.compile(URL_RE2, RE2JS.CASE_INSENSITIVE);
      out[name] = (s: string) => re.test(s);
    } else if (name === 'hostname') {
      // (?=.{1,253}\.?$) is a length check
      const re = re2Of(new RegExp(f.source.replace('(?=.{1,253}\\.?$)', ''), f.flags));
      out[name] = (s: string) => (s.length <= 253 || (s.length === 254 && s.endsWith('.'))) && re.test(s);
    } else if (name === 'duration') {
      // (?!$) after P: not empty; (?=\d) after T: a digit follows
      const re = re2Of(new RegExp(f.source.replace('(?!$)', '').replace('(?=\\d)', ''), f.flags));
      out[name] = (s: string) => {
        if (s === 'P' || !re.test(s)) return false;
        const t = s.indexOf('T');
        return t < 0 || (s.charCodeAt(t + 1) >= 48 && s.charCodeAt(t + 1) <= 57);
      };
    } else {
      const re = re2Of(f);
      out[name] = (s: string) => re.test(s);
    }
  }
  return out;
}
