/**
 * Selector engine: one SQL-92 / JMS message selector language for subscription filters over messages and for
 * every `filter` query parameter of the REST API.
 *
 * The peggy grammar (selector.peggy) builds an AST; this module compiles it once into a tree of closures and
 * caches the result by selector text. Evaluation never throws: anything that cannot be evaluated is UNKNOWN.
 *
 * Semantics:
 * - Three-valued logic: a condition is TRUE, FALSE or UNKNOWN (`null` here). NULL (a missing field, `null`,
 *   `undefined`, NaN) makes a comparison UNKNOWN; NOT UNKNOWN is UNKNOWN; FALSE AND UNKNOWN is FALSE;
 *   TRUE OR UNKNOWN is TRUE. A selector matches only when it evaluates to TRUE. `x = NULL` is always UNKNOWN:
 *   use `x IS NULL`.
 * - Identifiers: `a.b` and `a#b` walk nested objects and Maps; own properties and getters (own or inherited,
 *   below Object.prototype) are fields; methods and Object.prototype members are not. A "quoted name" is one
 *   segment taken literally (`"a.b"` is the key `a.b`).
 * - Bare words: an unquoted identifier standing directly as the right operand of a comparison, as an IN list
 *   item or as a BETWEEN bound, that names no field (resolves to `undefined`) is the string of its own text:
 *   `state = PAUSED` means `state = 'PAUSED'`. On the left side a missing field is NULL as usual.
 * - Values: bigint is read as a number, a Date as its epoch milliseconds. A number compared with a string that
 *   parses as a finite number compares numerically; a boolean compared with the string 'true' / 'false'
 *   (any case) compares as a boolean.
 * - Equality (=, <>, IN) of two strings ignores case, because REST filters compare enum-like fields
 *   (`state = 'started'` matches `Started`). Values of different, non-coercible types are never equal (FALSE,
 *   not UNKNOWN), so `x <> 1` holds for `x = 'abc'`.
 * - Ordering (<, <=, >, >=, BETWEEN): numbers numerically, strings by plain (case-sensitive, UTF-16 code unit)
 *   lexicographic order; other combinations (booleans, mixed non-coercible types) are UNKNOWN.
 * - LIKE ignores case too, for the same reason as equality (`type LIKE 'top%'` matches `Topic`). `%` matches
 *   any sequence, `_` exactly one character; with `ESCAPE 'c'`, `c%`, `c_` and `cc` are literal. LIKE applies to
 *   strings and numbers (read in decimal); any other value is UNKNOWN. LIKE is matched by a hand-written matcher
 *   (compileLike below) in time linear in the value, never by a RegExp, so no pattern can make it backtrack.
 * - Bounds (SELECTOR_LIMITS): text length, AST nodes, nesting depth and LIKE work are checked at compile time and
 *   refused with SelectorSyntaxError (a REST 400), so no selector can make one evaluation expensive.
 * - Arithmetic (+ - * /, unary minus) needs numbers or numeric strings; anything else, a division by zero and
 *   any non-finite result are NULL.
 */
import { SelectorSyntaxError } from '../../errors.js';
import { parse, SyntaxError as ParserSyntaxError, type Expectation } from './selector-parser.js';

export type Predicate = (obj: unknown) => boolean;

export interface CompiledSelector {
  readonly text: string;
  matches: Predicate;
  /** The function calls in the selector with their literal arguments (model functions name their model there). */
  readonly calls: readonly SelectorCall[];
  /**
   * Takes what the selector's functions hold while it is in use (a model function: its model, loaded once and
   * shared); returns the release, to be called once when the use ends (a subscription ends). A no-op when none.
   */
  acquire(): () => void;
}

export interface SelectorCall {
  /** Lower case. */
  readonly name: string;
  /** Per argument its value when it is a literal, else undefined. */
  readonly literals: readonly (SelectorValue | undefined)[];
}

// ---------------------------------------------------------------------------------------------------------
// AST, as built by selector.peggy

type ComparisonOperator = '=' | '<>' | '<' | '<=' | '>' | '>=';
type ArithmeticOperator = '+' | '-' | '*' | '/';

type Node =
  | { readonly type: 'or' | 'and'; readonly left: Node; readonly right: Node }
  | { readonly type: 'not'; readonly operand: Node }
  | { readonly type: 'compare'; readonly op: ComparisonOperator; readonly left: Node; readonly right: Node }
  | { readonly type: 'between'; readonly negated: boolean; readonly value: Node; readonly low: Node; readonly high: Node }
  | { readonly type: 'in'; readonly negated: boolean; readonly value: Node; readonly items: readonly Node[] }
  | { readonly type: 'like'; readonly negated: boolean; readonly value: Node; readonly pattern: string; readonly escape: string | null }
  | { readonly type: 'isNull'; readonly negated: boolean; readonly value: Node }
  | { readonly type: 'arithmetic'; readonly op: ArithmeticOperator; readonly left: Node; readonly right: Node }
  | { readonly type: 'negate'; readonly operand: Node }
  | { readonly type: 'literal'; readonly value: string | number | boolean | null }
  | { readonly type: 'identifier'; readonly path: readonly string[]; readonly text: string; readonly quoted: boolean }
  | { readonly type: 'call'; readonly name: string; readonly args: readonly Node[]; readonly location: { offset: number; line: number; column: number } };

type IdentifierNode = Extract<Node, { type: 'identifier' }>;

// ---------------------------------------------------------------------------------------------------------
// Values

/** Stands for any value the language cannot compare (functions, symbols). Objects and arrays stay as they are. */
const OPAQUE: object = Object.freeze({});

/** A normalised value: `null` is SQL NULL. Objects (arrays, plain objects) are opaque. */
type Value = null | number | string | boolean | object;
/** A three-valued truth value: `null` is UNKNOWN. */
type Truth = boolean | null;

type ValueFn = (obj: unknown) => Value;
type TruthFn = (obj: unknown) => Truth;

function normalize(raw: unknown): Value {
  switch (typeof raw) {
    case 'undefined':
      return null;
    case 'number':
      return Number.isNaN(raw) ? null : raw;
    case 'string':
    case 'boolean':
      return raw;
    case 'bigint':
      return Number(raw);
    case 'object': {
      if (raw === null) return null;
      if (raw instanceof Date) {
        const time = raw.getTime();
        return Number.isNaN(time) ? null : time;
      }
      return raw;
    }
    default:
      return OPAQUE;
  }
}

/** A string as a number when it is one (`' 42 '`, `'1e3'`, `'0x1F'`), else `null`. */
function numericString(text: string): number | null {
  if (text.trim() === '') return null;
  const n = Number(text);
  return Number.isFinite(n) ? n : null;
}

/** 'true' / 'false' in any case as a boolean, else `null`. */
function booleanString(text: string): boolean | null {
  const lower = text.trim().toLowerCase();
  return lower === 'true' ? true : lower === 'false' ? false : null;
}

function sameText(a: string, b: string): boolean {
  return a === b || a.toLowerCase() === b.toLowerCase();
}

/** Equality: UNKNOWN with a NULL, FALSE across types that do not coerce. */
function equals(a: Value, b: Value): Truth {
  if (a === null || b === null) return null;
  switch (typeof a) {
    case 'number':
      if (typeof b === 'number') return a === b;
      return typeof b === 'string' ? numericString(b) === a : false;
    case 'string':
      if (typeof b === 'string') return sameText(a, b);
      if (typeof b === 'number') return numericString(a) === b;
      return typeof b === 'boolean' ? booleanString(a) === b : false;
    case 'boolean':
      if (typeof b === 'boolean') return a === b;
      return typeof b === 'string' ? booleanString(b) === a : false;
    default:
      return false;
  }
}

/** Ordering: negative, zero or positive; `null` (UNKNOWN) for a NULL or types that do not order together. */
function order(a: Value, b: Value): number | null {
  if (a === null || b === null) return null;
  let x: number | string | null;
  let y: number | string | null;
  if (typeof a === 'string' && typeof b === 'string') {
    x = a;
    y = b;
  } else if (typeof a === 'number' || typeof b === 'number') {
    x = typeof a === 'number' ? a : typeof a === 'string' ? numericString(a) : null;
    y = typeof b === 'number' ? b : typeof b === 'string' ? numericString(b) : null;
    if (x === null || y === null) return null;
  } else {
    return null;
  }
  return x < y ? -1 : x > y ? 1 : 0;
}

function toArithmetic(value: Value): number | null {
  if (typeof value === 'number') return value;
  if (typeof value === 'string') return numericString(value);
  return null;
}

function finiteOrNull(n: number): number | null {
  return Number.isFinite(n) ? n : null;
}

/** A value in a condition: booleans (and 'true' / 'false') are themselves, anything else is UNKNOWN. */
function toTruth(value: Value): Truth {
  if (typeof value === 'boolean') return value;
  if (typeof value === 'string') return booleanString(value);
  return null;
}

function not3(t: Truth): Truth {
  return t === null ? null : !t;
}

// ---------------------------------------------------------------------------------------------------------
// Identifier resolution

/** A field of `target`: a Map entry, an own property, or a getter (or non-method data) inherited below Object.prototype. */
function field(target: unknown, key: string): unknown {
  if (target === null || (typeof target !== 'object' && typeof target !== 'function')) return undefined;
  try {
    if (target instanceof Map) return target.get(key);
    if (Object.hasOwn(target, key)) return (target as Record<string, unknown>)[key];
    for (let proto = Object.getPrototypeOf(target); proto !== null && proto !== Object.prototype; proto = Object.getPrototypeOf(proto)) {
      const descriptor = Object.getOwnPropertyDescriptor(proto, key);
      if (descriptor === undefined) continue;
      if (descriptor.get !== undefined) return descriptor.get.call(target);
      return typeof descriptor.value === 'function' ? undefined : descriptor.value;
    }
  } catch {
    // A throwing getter or proxy trap: the field is missing.
  }
  return undefined;
}

/** The raw value at `path`; `undefined` when some step is missing (a `null` on the way is missing too). */
function resolve(obj: unknown, path: readonly string[]): unknown {
  let current = obj;
  for (let i = 0; i < path.length; i++) {
    if (current === null || current === undefined) return undefined;
    current = field(current, path[i]!);
  }
  return current;
}

// ---------------------------------------------------------------------------------------------------------
// Functions (model functions and others, registered from outside the engine)

/** The value a selector function receives and returns: null is SQL NULL (unknown). */
export type SelectorValue = null | number | string | boolean | object;

/**
 * A function callable from selectors as `name(arg, ...)`. `bind` runs once when a selector is compiled, with the
 * arguments that are literals (undefined for the others), and may throw a message for a 400 (wrong arity, not a
 * string model name); the function it returns runs at every evaluation with every argument's value. It must be
 * cheap and must not throw (a throw counts as unknown); it returns null when it cannot answer.
 */
export interface SelectorFunction {
  bind(literals: readonly (SelectorValue | undefined)[]): (args: readonly SelectorValue[]) => SelectorValue;
  /** Optional: takes what one use of this call holds (see CompiledSelector.acquire); returns its release. */
  acquire?(literals: readonly (SelectorValue | undefined)[]): () => void;
}

const functions = new Map<string, SelectorFunction>();
/** The calls of the selector being compiled (compile() collects them for CompiledSelector.calls). */
let compiledCalls: SelectorCall[] | undefined;
let compiledAcquirers: Array<() => () => void> | undefined;

/** Registers (or replaces) a selector function; names are case-insensitive. Clears the compiled-selector cache. */
export function registerSelectorFunction(name: string, fn: SelectorFunction): void {
  functions.set(name.toLowerCase(), fn);
  cache.clear();
}

/** Names of the registered selector functions. */
export function selectorFunctionNames(): string[] {
  return [...functions.keys()].sort();
}

function compileCall(node: Extract<Node, { type: 'call' }>): ValueFn {
  const fn = functions.get(node.name.toLowerCase());
  const loc = node.location;
  const at = `at position ${loc.offset} (line ${loc.line}, column ${loc.column})`;
  if (fn === undefined) {
    const known = selectorFunctionNames();
    throw new SelectorSyntaxError(`Invalid selector ${at}: unknown function '${node.name}'${known.length ? ` (known: ${known.join(', ')})` : ''}`, loc);
  }
  let impl: (args: readonly SelectorValue[]) => SelectorValue;
  const literals = node.args.map((a) => (a.type === 'literal' ? a.value : undefined));
  compiledCalls?.push({ name: node.name.toLowerCase(), literals });
  if (fn.acquire !== undefined) compiledAcquirers?.push(() => fn.acquire!(literals));
  try {
    impl = fn.bind(literals);
  } catch (err) {
    throw new SelectorSyntaxError(`Invalid selector ${at}: ${node.name}(): ${(err as Error).message}`, loc);
  }
  const args = node.args.map((a) => compileValue(a));
  const n = args.length;
  return (obj) => {
    const values = new Array<SelectorValue>(n);
    for (let i = 0; i < n; i++) values[i] = args[i]!(obj);
    try {
      return normalize(impl(values));
    } catch {
      return null;
    }
  };
}

// ---------------------------------------------------------------------------------------------------------
// Compilation into closures

function compileIdentifier(node: IdentifierNode, bareWord: boolean): ValueFn {
  const { path, text } = node;
  if (bareWord && !node.quoted) {
    return (obj) => {
      const raw = resolve(obj, path);
      return raw === undefined ? text : normalize(raw);
    };
  }
  if (path.length === 1) {
    const key = path[0]!;
    return (obj) => normalize(field(obj, key));
  }
  return (obj) => normalize(resolve(obj, path));
}

/** An operand where a bare word that names no field reads as its own text. */
function compileOperand(node: Node): ValueFn {
  return node.type === 'identifier' ? compileIdentifier(node, true) : compileValue(node);
}

function compileValue(node: Node): ValueFn {
  switch (node.type) {
    case 'literal': {
      const value = node.value;
      return () => value;
    }
    case 'identifier':
      return compileIdentifier(node, false);
    case 'negate': {
      const operand = compileValue(node.operand);
      return (obj) => {
        const n = toArithmetic(operand(obj));
        return n === null ? null : -n;
      };
    }
    case 'arithmetic':
      return compileArithmetic(node.op, compileValue(node.left), compileValue(node.right));
    case 'call':
      return compileCall(node);
    default:
      // A condition used as a value, as in `(a > 1) = TRUE`: TRUE, FALSE or NULL.
      return compileCondition(node);
  }
}

function compileArithmetic(op: ArithmeticOperator, left: ValueFn, right: ValueFn): ValueFn {
  const apply = ARITHMETIC[op];
  return (obj) => {
    const a = toArithmetic(left(obj));
    if (a === null) return null;
    const b = toArithmetic(right(obj));
    return b === null ? null : apply(a, b);
  };
}

const ARITHMETIC: Record<ArithmeticOperator, (a: number, b: number) => number | null> = {
  '+': (a, b) => finiteOrNull(a + b),
  '-': (a, b) => finiteOrNull(a - b),
  '*': (a, b) => finiteOrNull(a * b),
  '/': (a, b) => (b === 0 ? null : finiteOrNull(a / b)),
};

const COMPARISON: Record<ComparisonOperator, (a: Value, b: Value) => Truth> = {
  '=': equals,
  '<>': (a, b) => not3(equals(a, b)),
  '<': (a, b) => {
    const c = order(a, b);
    return c === null ? null : c < 0;
  },
  '<=': (a, b) => {
    const c = order(a, b);
    return c === null ? null : c <= 0;
  },
  '>': (a, b) => {
    const c = order(a, b);
    return c === null ? null : c > 0;
  },
  '>=': (a, b) => {
    const c = order(a, b);
    return c === null ? null : c >= 0;
  },
};

function negatedIf(negated: boolean, fn: TruthFn): TruthFn {
  return negated ? (obj) => not3(fn(obj)) : fn;
}

function compileCondition(node: Node): TruthFn {
  switch (node.type) {
    case 'or': {
      // A chain `a OR b OR c` (left-deep in the AST) is evaluated as a list: no recursion per operand.
      const operands = chainOperands(node).map(compileCondition);
      return (obj) => {
        let unknown = false;
        for (const operand of operands) {
          const t = operand(obj);
          if (t === true) return true;
          if (t === null) unknown = true;
        }
        return unknown ? null : false;
      };
    }
    case 'and': {
      const operands = chainOperands(node).map(compileCondition);
      return (obj) => {
        let unknown = false;
        for (const operand of operands) {
          const t = operand(obj);
          if (t === false) return false;
          if (t === null) unknown = true;
        }
        return unknown ? null : true;
      };
    }
    case 'not': {
      const operand = compileCondition(node.operand);
      return (obj) => not3(operand(obj));
    }
    case 'compare': {
      const compare = COMPARISON[node.op];
      const left = compileValue(node.left);
      const right = compileOperand(node.right);
      return (obj) => compare(left(obj), right(obj));
    }
    case 'between': {
      const value = compileValue(node.value);
      const low = compileOperand(node.low);
      const high = compileOperand(node.high);
      return negatedIf(node.negated, (obj) => {
        const v = value(obj);
        const above = order(v, low(obj));
        if (above !== null && above < 0) return false;
        const below = order(v, high(obj));
        if (below !== null && below > 0) return false;
        return above === null || below === null ? null : true;
      });
    }
    case 'in': {
      const value = compileValue(node.value);
      const items = node.items.map(compileOperand);
      return negatedIf(node.negated, (obj) => {
        const v = value(obj);
        if (v === null) return null;
        let unknown = false;
        for (const item of items) {
          const eq = equals(v, item(obj));
          if (eq === true) return true;
          if (eq === null) unknown = true;
        }
        return unknown ? null : false;
      });
    }
    case 'like': {
      const value = compileValue(node.value);
      const like = compileLike(node.pattern, node.escape);
      return negatedIf(node.negated, (obj) => {
        const v = value(obj);
        if (typeof v === 'string') return like(v);
        if (typeof v === 'number') return like(String(v));
        return null;
      });
    }
    case 'isNull': {
      const value = compileValue(node.value);
      return node.negated ? (obj) => value(obj) !== null : (obj) => value(obj) === null;
    }
    default: {
      // A value used as a condition: `schemaSupport`, `TRUE`, `flags.enabled AND x > 1`.
      const value = compileValue(node);
      return (obj) => toTruth(value(obj));
    }
  }
}

/** The operands of a chain of one operator (`a OR b OR c`), in order, without recursion along the chain. */
function chainOperands(node: Extract<Node, { type: 'or' | 'and' }>): Node[] {
  const right: Node[] = [];
  let current: Node = node;
  while (current.type === node.type) {
    const link = current as Extract<Node, { type: 'or' | 'and' }>;
    right.push(link.right);
    current = link.left;
  }
  right.push(current);
  return right.reverse();
}

// ---------------------------------------------------------------------------------------------------------
// LIKE: a hand-written matcher, linear in the value (no RegExp, no backtracking)
//
// The pattern is split at `%` into segments of literal characters and `_` (one code point). The first segment
// must match at the start of the value and the last at its end; a segment between two `%` is found at its
// leftmost place after the previous one. Taking the leftmost place never loses a match (any later place leaves
// less room for the rest), so no choice is ever undone. A segment without `_` is found with Knuth-Morris-Pratt
// (O(value + segment)); one with `_` by direct comparison at each place (O(value x segment)), which is why the
// total length of such inner segments counts against MAX_LIKE_WORK below.
// Case is ignored per code point (the simple case folding of /…/iu); `_` is one code point, as `.` with /u.

/** One pattern position: a folded code point, or ANY for `_`. */
const ANY = null;
type PatternChar = string | typeof ANY;

interface LikePlan {
  /** No `%`: the value must have exactly these positions. */
  readonly exact: boolean;
  readonly first: readonly PatternChar[];
  readonly middle: readonly { readonly chars: readonly PatternChar[]; readonly failure: Int32Array | null }[];
  readonly last: readonly PatternChar[];
  /** Comparisons per value code point beyond the linear scan: total length of inner segments holding `_`. */
  readonly work: number;
}

const foldCache = new Map<string, string>();

/** The case fold of one code point: lower case of its upper case when both stay one code point ('ſ' -> 's'). */
function fold(ch: string): string {
  const code = ch.charCodeAt(0);
  if (code < 0x80) return code >= 0x41 && code <= 0x5a ? String.fromCharCode(code + 32) : ch;
  let folded = foldCache.get(ch);
  if (folded === undefined) {
    const upper = ch.toUpperCase();
    const viaUpper = [...upper].length === 1 ? upper.toLowerCase() : '';
    const lower = ch.toLowerCase();
    folded = [...viaUpper].length === 1 ? viaUpper : [...lower].length === 1 ? lower : ch;
    if (foldCache.size < 4096) foldCache.set(ch, folded);
  }
  return folded;
}

// eslint-disable-next-line no-control-regex
const ASCII_ONLY = /^[\x00-\x7f]*$/;

/**
 * A value as folded code points, indexable: an all-ASCII string is lower-cased as a whole (index = code
 * point); anything else becomes an array of folded code points.
 */
function foldValue(value: string): string | readonly string[] {
  if (ASCII_ONLY.test(value)) return value.toLowerCase();
  const out: string[] = [];
  for (const ch of value) out.push(fold(ch));
  return out;
}

function kmpFailure(chars: readonly PatternChar[]): Int32Array {
  const failure = new Int32Array(chars.length);
  let k = 0;
  for (let i = 1; i < chars.length; i++) {
    while (k > 0 && chars[i] !== chars[k]) k = failure[k - 1]!;
    if (chars[i] === chars[k]) k++;
    failure[i] = k;
  }
  return failure;
}

function planLike(pattern: string, escape: string | null): LikePlan {
  const segments: PatternChar[][] = [[]];
  let escaping = false;
  for (const ch of pattern) {
    const current = segments[segments.length - 1]!;
    if (escaping) {
      current.push(fold(ch));
      escaping = false;
    } else if (ch === escape) {
      escaping = true;
    } else if (ch === '%') {
      segments.push([]);
    } else {
      current.push(ch === '_' ? ANY : fold(ch));
    }
  }
  const exact = segments.length === 1;
  const middle = segments.slice(1, -1).filter((s) => s.length > 0);
  let work = 0;
  const plannedMiddle = middle.map((chars) => {
    const wild = chars.includes(ANY);
    if (wild) work += chars.length;
    return { chars, failure: wild ? null : kmpFailure(chars) };
  });
  return { exact, first: segments[0]!, middle: plannedMiddle, last: exact ? [] : segments[segments.length - 1]!, work };
}

function matchesAt(text: string | readonly string[], at: number, chars: readonly PatternChar[]): boolean {
  for (let j = 0; j < chars.length; j++) {
    const c = chars[j]!;
    if (c !== ANY && text[at + j] !== c) return false;
  }
  return true;
}

/** The leftmost place in text[from, to) where the segment matches, or -1. */
function find(text: string | readonly string[], from: number, to: number, chars: readonly PatternChar[], failure: Int32Array | null): number {
  const m = chars.length;
  if (failure === null) {
    for (let i = from; i + m <= to; i++) if (matchesAt(text, i, chars)) return i;
    return -1;
  }
  let k = 0;
  for (let i = from; i < to; i++) {
    const c = text[i];
    while (k > 0 && c !== chars[k]) k = failure[k - 1]!;
    if (c === chars[k]) k++;
    if (k === m) return i - m + 1;
  }
  return -1;
}

function runLike(plan: LikePlan, value: string): boolean {
  const text = foldValue(value);
  const n = text.length;
  const { first, last } = plan;
  if (plan.exact) return n === first.length && matchesAt(text, 0, first);
  if (first.length + last.length > n) return false;
  if (!matchesAt(text, 0, first) || !matchesAt(text, n - last.length, last)) return false;
  let at = first.length;
  const end = n - last.length;
  for (const segment of plan.middle) {
    const found = find(text, at, end, segment.chars, segment.failure);
    if (found < 0) return false;
    at = found + segment.chars.length;
  }
  return true;
}

/** `%` any sequence, `_` one code point, `escape` makes the next character literal; whole value, ignoring case. */
export function compileLike(pattern: string, escape: string | null = null): (value: string) => boolean {
  const plan = planLike(pattern, escape);
  return (value) => runLike(plan, value);
}

// ---------------------------------------------------------------------------------------------------------
// Parsing and errors

const START = { offset: 0, line: 1, column: 1 } as const;

function describeExpected(expected: readonly Expectation[]): Expectation[] {
  // peggy folds single-character alternatives into a class ([*/]); list them as the characters they are.
  return expected.flatMap((e): Expectation[] =>
    e.type === 'class' && !e.inverted && e.parts.every((p) => typeof p === 'string')
      ? e.parts.map((text) => ({ type: 'literal', text: text as string, ignoreCase: false }))
      : [e],
  );
}

function syntaxError(error: ParserSyntaxError): SelectorSyntaxError {
  const { offset, line, column } = error.location.start;
  let detail: string;
  if (Array.isArray(error.expected)) {
    detail = ParserSyntaxError.buildMessage(describeExpected(error.expected), error.found);
    detail = detail.charAt(0).toLowerCase() + detail.slice(1);
  } else {
    detail = error.message; // raised by the grammar itself (unterminated string, bad ESCAPE, ...)
  }
  return new SelectorSyntaxError(
    `Invalid selector at position ${offset} (line ${line}, column ${column}): ${detail}`,
    { offset, line, column },
    { cause: error },
  );
}

/**
 * Bounds on a selector, checked before it is used: its text, its AST (nodes, and nesting depth where a chain of
 * one operator such as `a OR b OR c` counts as one level), and the extra work of its LIKE patterns (`_` inside a
 * segment between two `%`: comparisons per character of the value). With these bounds one evaluation costs at
 * most about (maxNodes + maxLikeWork) steps per character of the values it reads. Refused with 400.
 */
export const SELECTOR_LIMITS = Object.freeze({
  maxLength: 16_384,
  maxNodes: 5_000,
  maxDepth: 256,
  maxLikeWork: 1_000,
});

interface Measure {
  nodes: number;
  depth: number;
  likeWork: number;
}

/** Counts nodes, depth and LIKE work; stops descending once a bound is passed. */
function measure(root: Node): Measure {
  const m: Measure = { nodes: 0, depth: 0, likeWork: 0 };
  const stack: { node: Node; depth: number }[] = [{ node: root, depth: 1 }];
  while (stack.length > 0 && m.nodes <= SELECTOR_LIMITS.maxNodes && m.depth <= SELECTOR_LIMITS.maxDepth) {
    const { node, depth } = stack.pop()!;
    m.nodes++;
    if (depth > m.depth) m.depth = depth;
    const push = (child: Node, d = depth + 1): void => void stack.push({ node: child, depth: d });
    switch (node.type) {
      case 'or':
      case 'and':
        // same-operator links of a chain stay at the chain's level
        push(node.left, node.left.type === node.type ? depth : depth + 1);
        push(node.right, node.right.type === node.type ? depth : depth + 1);
        break;
      case 'not':
      case 'negate':
        push(node.operand);
        break;
      case 'compare':
      case 'arithmetic':
        push(node.left);
        push(node.right);
        break;
      case 'between':
        push(node.value);
        push(node.low);
        push(node.high);
        break;
      case 'in':
        push(node.value);
        for (const item of node.items) push(item);
        break;
      case 'like':
        push(node.value);
        m.likeWork += planLike(node.pattern, node.escape).work;
        break;
      case 'isNull':
        push(node.value);
        break;
      case 'call':
        for (const arg of node.args) push(arg);
        break;
      default:
        break;
    }
  }
  return m;
}

function limitError(message: string): SelectorSyntaxError {
  return new SelectorSyntaxError(message, START);
}

function compile(text: string): CompiledSelector {
  const L = SELECTOR_LIMITS;
  if (text.length > L.maxLength) {
    throw limitError(`Selector is too long: ${text.length} characters (limit ${L.maxLength})`);
  }
  let condition: TruthFn;
  const calls: SelectorCall[] = [];
  const acquirers: Array<() => () => void> = [];
  try {
    const ast = parse(text) as Node;
    const m = measure(ast);
    if (m.nodes > L.maxNodes) throw limitError(`Selector is too large: more than ${L.maxNodes} terms`);
    if (m.depth > L.maxDepth) throw limitError(`Selector is too deeply nested: more than ${L.maxDepth} levels`);
    if (m.likeWork > L.maxLikeWork) {
      throw limitError(
        `Selector is too costly to evaluate: its LIKE patterns have ${m.likeWork} characters in '_'-holding parts between two '%' (limit ${L.maxLikeWork})`,
      );
    }
    compiledCalls = calls;
    compiledAcquirers = acquirers;
    condition = compileCondition(ast);
  } catch (error) {
    if (error instanceof SelectorSyntaxError) throw error;
    if (error instanceof ParserSyntaxError) throw syntaxError(error);
    // The recursive-descent parser (or the compiler) ran out of stack.
    if (error instanceof RangeError) {
      throw new SelectorSyntaxError('Invalid selector: too deeply nested', START, { cause: error });
    }
    throw error;
  } finally {
    compiledCalls = undefined;
    compiledAcquirers = undefined;
  }
  const matches: Predicate = (obj) => {
    try {
      return condition(obj) === true;
    } catch {
      return false;
    }
  };
  const acquire =
    acquirers.length === 0
      ? () => () => {}
      : () => {
          const releases = acquirers.map((a) => a());
          let done = false;
          return () => {
            if (done) return;
            done = true;
            for (const r of releases) r();
          };
        };
  return Object.freeze({ text, matches, calls: Object.freeze(calls), acquire });
}

// ---------------------------------------------------------------------------------------------------------
// Public API with an LRU cache

const CACHE_LIMIT = 500;
const cache = new Map<string, CompiledSelector>();

/**
 * Compiles a selector (cached by its text). Throws SelectorSyntaxError for a blank or malformed selector,
 * naming the zero-based offset, the one-based line and column, and what was expected.
 */
export function compileSelector(text: string): CompiledSelector {
  if (typeof text !== 'string' || text.trim() === '') {
    throw new SelectorSyntaxError('Selector must not be blank', START);
  }
  const cached = cache.get(text);
  if (cached !== undefined) {
    cache.delete(text); // most recently used goes last
    cache.set(text, cached);
    return cached;
  }
  const compiled = compile(text);
  cache.set(text, compiled);
  if (cache.size > CACHE_LIMIT) cache.delete(cache.keys().next().value!);
  return compiled;
}

/** A REST `filter` query parameter: absent -> undefined; blank -> SelectorSyntaxError; else compiled. */
export function parseFilterParam(filter: string | undefined): CompiledSelector | undefined {
  if (filter === undefined) return undefined;
  if (filter.trim() === '') throw new SelectorSyntaxError('Filter must not be blank', START);
  return compileSelector(filter);
}
