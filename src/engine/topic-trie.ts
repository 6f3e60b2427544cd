/**
 * MQTT topic names and filters: validation, `$share/<group>/<filter>` parsing, a subscription trie (filters →
 * values, matched against a concrete topic) and a topic tree (concrete topics → values, matched against a filter;
 * used for retained messages).
 *
 * Matching walks only the branches that can match: at each level the exact child, the `+` child and the `#`
 * values of the node. A publish splits its topic once (the engine caches the split on the destination).
 */
import { ValidationError } from '../errors.js';

const SLASH = '/';
const DOLLAR = 36; // '$'
const SHARE_PREFIX = '$share/';

/** MQTT limit on the UTF-8 length of a topic name or filter. */
export const MAX_TOPIC_BYTES = 65535;

export function splitTopic(topic: string): string[] {
  return topic.split(SLASH);
}

export function hasWildcard(s: string): boolean {
  return s.includes('+') || s.includes('#');
}

/** A topic name to publish to: non-empty, no wildcards, no NUL [MQTT-4.7.3-1], [MQTT-3.3.2-2], [MQTT-4.7.3-2]. */
export function validateTopicName(name: string): void {
  if (typeof name !== 'string' || name.length === 0) {
    throw new ValidationError('topic name must not be empty [MQTT-4.7.3-1]');
  }
  if (name.includes('\u0000')) throw new ValidationError(`topic name "${printable(name)}" contains a NUL character [MQTT-4.7.3-2]`);
  const plus = name.indexOf('+');
  const hash = name.indexOf('#');
  if (plus >= 0 || hash >= 0) {
    const at = plus >= 0 && (hash < 0 || plus < hash) ? plus : hash;
    throw new ValidationError(
      `topic name "${name}" contains the wildcard '${name[at]}' at position ${at}; wildcards are only allowed in subscription filters [MQTT-3.3.2-2]`,
    );
  }
  if (name.length > MAX_TOPIC_BYTES / 3 && Buffer.byteLength(name) > MAX_TOPIC_BYTES) {
    throw new ValidationError(`topic name is longer than ${MAX_TOPIC_BYTES} bytes [MQTT-4.7.3-3]`);
  }
}

export interface SharedFilter {
  group: string;
  filter: string;
}

/** `$share/<group>/<filter>` → `{ group, filter }`; anything else → null. Does not validate. */
export function parseSharedFilter(filter: string): SharedFilter | null {
  if (!filter.startsWith(SHARE_PREFIX)) return null;
  const slash = filter.indexOf(SLASH, SHARE_PREFIX.length);
  if (slash < 0) return { group: filter.slice(SHARE_PREFIX.length), filter: '' };
  return { group: filter.slice(SHARE_PREFIX.length, slash), filter: filter.slice(slash + 1) };
}

/**
 * A subscription filter: non-empty, no NUL, `#` only as the whole last level, `+` only as a whole level
 * [MQTT-4.7.1-1], [MQTT-4.7.1-2]; a shared filter needs a non-empty group without `/`, `+`, `#` and a valid
 * filter after it [MQTT-4.8.2-1], [MQTT-4.8.2-2].
 */
export function validateTopicFilter(filter: string): void {
  if (typeof filter !== 'string' || filter.length === 0) {
    throw new ValidationError('topic filter must not be empty [MQTT-4.7.3-1]');
  }
  const shared = parseSharedFilter(filter);
  if (shared !== null) {
    if (shared.group.length === 0) {
      throw new ValidationError(`shared subscription "${filter}" has an empty share name [MQTT-4.8.2-1]`);
    }
    if (shared.group.includes('+') || shared.group.includes('#')) {
      throw new ValidationError(`share name "${shared.group}" must not contain '+' or '#' [MQTT-4.8.2-2]`);
    }
    if (shared.filter.length === 0) {
      throw new ValidationError(`shared subscription "${filter}" has no topic filter after the share name [MQTT-4.8.2-1]`);
    }
    validatePlainFilter(shared.filter);
    return;
  }
  validatePlainFilter(filter);
}

function validatePlainFilter(filter: string): void {
  if (filter.includes('\u0000')) throw new ValidationError(`topic filter "${printable(filter)}" contains a NUL character [MQTT-4.7.3-2]`);
  if (filter.length > MAX_TOPIC_BYTES / 3 && Buffer.byteLength(filter) > MAX_TOPIC_BYTES) {
    throw new ValidationError(`topic filter is longer than ${MAX_TOPIC_BYTES} bytes [MQTT-4.7.3-3]`);
  }
  if (!hasWildcard(filter)) return;
  const levels = splitTopic(filter);
  for (let i = 0; i < levels.length; i++) {
    const level = levels[i]!;
    if (level.includes('#')) {
      if (level !== '#') {
        throw new ValidationError(`topic filter "${filter}": '#' must occupy a whole level, found "${level}" at level ${i + 1} [MQTT-4.7.1-2]`);
      }
      if (i !== levels.length - 1) {
        throw new ValidationError(`topic filter "${filter}": '#' must be the last level, found at level ${i + 1} of ${levels.length} [MQTT-4.7.1-2]`);
      }
    } else if (level.includes('+') && level !== '+') {
      throw new ValidationError(`topic filter "${filter}": '+' must occupy a whole level, found "${level}" at level ${i + 1} [MQTT-4.7.1-3]`);
    }
  }
}

function printable(s: string): string {
  return s.replace(/\u0000/g, '\\0');
}

/** Does a (non-shared) filter match a topic? For one-off checks; the trie is the fast path. */
export function topicMatchesFilter(filter: string, topic: string): boolean {
  const f = splitTopic(filter);
  const t = splitTopic(topic);
  if (topic.charCodeAt(0) === DOLLAR && (f[0] === '+' || f[0] === '#')) return false; // [MQTT-4.7.2-1]
  for (let i = 0; i < f.length; i++) {
    const level = f[i]!;
    if (level === '#') return true; // also matches the parent level [MQTT-4.7.1-2]
    if (i >= t.length) return false;
    if (level !== '+' && level !== t[i]) return false;
  }
  return f.length === t.length;
}

// ---------------------------------------------------------------------------------------------------------------
// Subscription trie: filters → values
// ---------------------------------------------------------------------------------------------------------------

class TrieNode<T> {
  children: Map<string, TrieNode<T>> | undefined = undefined;
  plus: TrieNode<T> | undefined = undefined;
  /** Values whose filter ends with `#` right below this node (they match this level and everything under it). */
  hash: Set<T> | undefined = undefined;
  /** Values whose filter ends exactly at this node. */
  values: Set<T> | undefined = undefined;

  isEmpty(): boolean {
    return (
      (this.children === undefined || this.children.size === 0) &&
      this.plus === undefined &&
      (this.hash === undefined || this.hash.size === 0) &&
      (this.values === undefined || this.values.size === 0)
    );
  }
}

export class TopicTrie<T> {
  private readonly root = new TrieNode<T>();
  private count = 0;

  /** Number of (filter, value) entries. */
  get size(): number {
    return this.count;
  }

  /** Add a value under a plain (non-`$share`) filter. The filter must be valid. */
  add(filter: string, value: T): void {
    const levels = splitTopic(filter);
    let node = this.root;
    const last = levels.length - 1;
    for (let i = 0; i <= last; i++) {
      const level = levels[i]!;
      if (level === '#') {
        const set = (node.hash ??= new Set());
        if (!set.has(value)) {
          set.add(value);
          this.count++;
        }
        return;
      }
      if (level === '+') {
        node = node.plus ??= new TrieNode<T>();
      } else {
        const children = (node.children ??= new Map());
        let next = children.get(level);
        if (next === undefined) {
          next = new TrieNode<T>();
          children.set(level, next);
        }
        node = next;
      }
    }
    const set = (node.values ??= new Set());
    if (!set.has(value)) {
      set.add(value);
      this.count++;
    }
  }

  /** Remove a value from a filter; prunes empty branches. Returns whether it was there. */
  remove(filter: string, value: T): boolean {
    const levels = splitTopic(filter);
    const path: TrieNode<T>[] = [this.root];
    let node = this.root;
    let removed = false;
    for (let i = 0; i < levels.length; i++) {
      const level = levels[i]!;
      if (level === '#') {
        removed = node.hash?.delete(value) ?? false;
        break;
      }
      const next = level === '+' ? node.plus : node.children?.get(level);
      if (next === undefined) return false;
      node = next;
      path.push(node);
      if (i === levels.length - 1) removed = node.values?.delete(value) ?? false;
    }
    if (!removed) return false;
    this.count--;
    // prune from the deepest node up
    for (let i = path.length - 1; i > 0; i--) {
      const child = path[i]!;
      if (!child.isEmpty()) break;
      const parent = path[i - 1]!;
      const level = levels[i - 1]!;
      if (level === '+') parent.plus = undefined;
      else parent.children!.delete(level);
    }
    return true;
  }

  /**
   * Append every value whose filter matches the topic (given as its levels) to `out`. Filters starting with a
   * wildcard do not match topics starting with `$` [MQTT-4.7.2-1].
   */
  match(levels: readonly string[], out: T[]): T[] {
    const root = this.root;
    const dollar = levels.length > 0 && levels[0]!.charCodeAt(0) === DOLLAR;
    if (!dollar && root.hash !== undefined) for (const v of root.hash) out.push(v);
    const exact = root.children?.get(levels[0]!);
    if (exact !== undefined) walk(exact, levels, 1, out);
    if (!dollar && root.plus !== undefined) walk(root.plus, levels, 1, out);
    return out;
  }

  matchTopic(topic: string): T[] {
    return this.match(splitTopic(topic), []);
  }
}

function walk<T>(node: TrieNode<T>, levels: readonly string[], i: number, out: T[]): void {
  const hash = node.hash;
  if (hash !== undefined) for (const v of hash) out.push(v); // '#' also matches the parent level
  if (i === levels.length) {
    const values = node.values;
    if (values !== undefined) for (const v of values) out.push(v);
    return;
  }
  const children = node.children;
  if (children !== undefined) {
    const exact = children.get(levels[i]!);
    if (exact !== undefined) walk(exact, levels, i + 1, out);
  }
  if (node.plus !== undefined) walk(node.plus, levels, i + 1, out);
}

// ---------------------------------------------------------------------------------------------------------------
// Topic tree: concrete topics → values, matched by a filter (retained messages on subscribe)
// ---------------------------------------------------------------------------------------------------------------

class TreeNode<T> {
  children: Map<string, TreeNode<T>> | undefined = undefined;
  value: T | undefined = undefined;
}

export class TopicTree<T> {
  private readonly root = new TreeNode<T>();
  private count = 0;

  get size(): number {
    return this.count;
  }

  set(topic: string, value: T): void {
    let node = this.root;
    for (const level of splitTopic(topic)) {
      const children = (node.children ??= new Map());
      let next = children.get(level);
      if (next === undefined) {
        next = new TreeNode<T>();
        children.set(level, next);
      }
      node = next;
    }
    if (node.value === undefined) this.count++;
    node.value = value;
  }

  get(topic: string): T | undefined {
    let node: TreeNode<T> | undefined = this.root;
    for (const level of splitTopic(topic)) {
      node = node.children?.get(level);
      if (node === undefined) return undefined;
    }
    return node.value;
  }

  delete(topic: string): boolean {
    const levels = splitTopic(topic);
    const path: TreeNode<T>[] = [this.root];
    let node: TreeNode<T> | undefined = this.root;
    for (const level of levels) {
      node = node.children?.get(level);
      if (node === undefined) return false;
      path.push(node);
    }
    if (node.value === undefined) return false;
    node.value = undefined;
    this.count--;
    for (let i = path.length - 1; i > 0; i--) {
      const n = path[i]!;
      if (n.value !== undefined || (n.children !== undefined && n.children.size > 0)) break;
      path[i - 1]!.children!.delete(levels[i - 1]!);
    }
    return true;
  }

  /** Append the values of every topic matching a (plain, valid) filter to `out`. */
  match(filter: string, out: T[]): T[] {
    matchTree(this.root, splitTopic(filter), 0, out);
    return out;
  }
}

function matchTree<T>(node: TreeNode<T>, f: readonly string[], i: number, out: T[]): void {
  if (i === f.length) {
    if (node.value !== undefined) out.push(node.value);
    return;
  }
  const level = f[i]!;
  if (level === '#') {
    if (node.value !== undefined && i > 0) out.push(node.value); // parent level
    collectAll(node, i === 0, out);
    return;
  }
  if (level === '+') {
    if (node.children === undefined) return;
    for (const [name, child] of node.children) {
      if (i === 0 && name.charCodeAt(0) === DOLLAR) continue; // [MQTT-4.7.2-1]
      matchTree(child, f, i + 1, out);
    }
    return;
  }
  const child = node.children?.get(level);
  if (child !== undefined) matchTree(child, f, i + 1, out);
}

function collectAll<T>(node: TreeNode<T>, atRoot: boolean, out: T[]): void {
  if (node.children === undefined) return;
  for (const [name, child] of node.children) {
    if (atRoot && name.charCodeAt(0) === DOLLAR) continue; // [MQTT-4.7.2-1]
    if (child.value !== undefined) out.push(child.value);
    collectAll(child, false, out);
  }
}
