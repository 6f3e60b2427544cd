/**
 * Destination views (MAPS DestinationManagementApi and DestinationListManagementAPI) as pure functions of the
 * engine's DestinationDTOs; the routes only parse the query and adapt. `$`-prefixed (system) destinations are
 * never shown here, as in MAPS.
 */
import { createHash } from 'node:crypto';
import type { DestinationDTO, DestinationType } from '../../../engine/index.js';
import type { CompiledSelector } from '../../../engine/selector/selector.js';
import { ValidationError } from '../../../errors.js';
import { MAX_TOPIC_BYTES } from '../../../engine/index.js';

export function isSystemDestination(name: string): boolean {
  return name.startsWith('$');
}

// ---------------------------------------------------------------------------------------------------------------
// GET /api/v1/server/destination
// ---------------------------------------------------------------------------------------------------------------

/** sortBy values (MAPS names) and the DestinationDTO field each sorts on. */
export const SORT_KEYS = {
  Name: 'name',
  Published: 'publishedMessages',
  Delivered: 'deliveredMessages',
  Stored: 'storedMessages',
  Pending: 'pendingMessages',
  Delayed: 'delayedMessages',
  Expired: 'expiredMessages',
} as const satisfies Record<string, keyof DestinationDTO>;
export type SortBy = keyof typeof SORT_KEYS;
export const SORT_NAMES = Object.keys(SORT_KEYS) as SortBy[];

/** The canonical sortBy for a case-insensitive input (default Published); ValidationError listing the values. */
export function parseSortBy(raw: string | undefined): SortBy {
  if (raw === undefined) return 'Published';
  const t = raw.trim();
  const found = SORT_NAMES.find((s) => s.toLowerCase() === t.toLowerCase());
  if (found === undefined) {
    throw new ValidationError(`Invalid sortBy "${raw}": use one of ${SORT_NAMES.join(', ')} (case-insensitive)`);
  }
  return found;
}

function byName(a: DestinationDTO, b: DestinationDTO): number {
  return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}

/**
 * Filter, sort and cut: counters sort descending (ties by name), Name ascending (MAPS sorts names descending,
 * which nobody wants in a name column); `size` <= 0 means all.
 */
export function destinationList(all: DestinationDTO[], opts: { selector?: CompiledSelector; sortBy: SortBy; size: number }): DestinationDTO[] {
  const list = all.filter((d) => !isSystemDestination(d.name) && (opts.selector === undefined || opts.selector.matches(d)));
  if (opts.sortBy === 'Name') list.sort(byName);
  else {
    const key = SORT_KEYS[opts.sortBy];
    list.sort((a, b) => (b[key] as number) - (a[key] as number) || byName(a, b));
  }
  return opts.size > 0 ? list.slice(0, opts.size) : list;
}

// ---------------------------------------------------------------------------------------------------------------
// GET /api/v1/server/destination/list
// ---------------------------------------------------------------------------------------------------------------

export const EntryType = {
  FOLDER: 'FOLDER',
  TOPIC: 'TOPIC',
  QUEUE: 'QUEUE',
  TEMP_TOPIC: 'TEMP_TOPIC',
  TEMP_QUEUE: 'TEMP_QUEUE',
} as const;
export type EntryType = (typeof EntryType)[keyof typeof EntryType];
const ENTRY_ORDER: Record<EntryType, number> = { FOLDER: 0, TOPIC: 1, QUEUE: 2, TEMP_TOPIC: 3, TEMP_QUEUE: 4 };

const ENTRY_TYPE_OF: Record<DestinationType, EntryType> = {
  Topic: 'TOPIC',
  Queue: 'QUEUE',
  TemporaryTopic: 'TEMP_TOPIC',
  TemporaryQueue: 'TEMP_QUEUE',
};

export interface DestinationEntry {
  /** One namespace segment ("" for the absolute-root folder). */
  name: string;
  fullPath: string;
  destinationType: EntryType;
  /** Entries a browse of this folder lists; 0 for destinations. */
  childCount: number;
}

export interface DestinationPage {
  totalEntries: number;
  totalPages: number;
  pageNo: number;
  entries: DestinationEntry[];
}

export const PAGE_SIZE_MIN = 10;
export const PAGE_SIZE_MAX = 1000;
const PREFIX_MAX = MAX_TOPIC_BYTES; // a folder of any accepted destination name

/**
 * The browse prefix as MAPS normalises it: trimmed, surrounding double quotes removed, `//` collapsed, trailing
 * `/` removed. '' is the root; '/' the folder holding absolute names (leading '/'). (The query string is already
 * URL-decoded by the router.) ValidationError for wildcards, control characters or absurd lengths.
 */
export function normalizePrefix(raw: string | undefined): string {
  let p = (raw ?? '').trim();
  if (p.length >= 2 && p.startsWith('"') && p.endsWith('"')) p = p.slice(1, -1).trim();
  if (p.length > PREFIX_MAX) throw new ValidationError(`prefix is invalid: longer than ${PREFIX_MAX} characters`);
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(p)) throw new ValidationError('prefix is invalid: it contains control characters');
  if (/[+#]/.test(p)) throw new ValidationError(`prefix is invalid: "${p}" contains a wildcard (+ or #); give a namespace path such as a/b`);
  p = p.replace(/\/{2,}/g, '/');
  if (p.length > 1 && p.endsWith('/')) p = p.slice(0, -1);
  return p;
}

/** Path segments of a normalised prefix: '' → [], '/' → [''], '/a/b' → ['', 'a', 'b']. */
function prefixSegments(prefix: string): string[] {
  if (prefix === '') return [];
  if (prefix === '/') return [''];
  return prefix.split('/');
}

function joinPath(segments: string[]): string {
  const p = segments.join('/');
  return p === '' ? '/' : p;
}

interface Level {
  /** child segment → its own level (only for segments that have something below them) */
  folders: Map<string, Level>;
  /** child segment → destination name and type, for destinations ending at this level */
  leaves: Array<{ segment: string; fullPath: string; type: EntryType }>;
}

function newLevel(): Level {
  return { folders: new Map(), leaves: [] };
}

function levelEntryCount(level: Level): number {
  return level.folders.size + level.leaves.length;
}

/**
 * The immediate children of `prefix`, built from the current destinations on every call (MAPS froze the tree per
 * HTTP session). A name that is a destination and also has names below it gives two entries (FOLDER and its
 * type). Sorted by name, then FOLDER, TOPIC, QUEUE, TEMP_TOPIC, TEMP_QUEUE. Returns undefined when a non-root
 * prefix has nothing below it.
 */
export function browseLevel(all: Iterable<{ name: string; type: DestinationType }>, prefix: string): DestinationEntry[] | undefined {
  const base = prefixSegments(prefix);
  const root = newLevel();
  let any = false;
  for (const d of all) {
    if (isSystemDestination(d.name)) continue;
    const segs = d.name.split('/');
    if (segs.length <= base.length) continue;
    let match = true;
    for (let i = 0; i < base.length; i++) {
      if (segs[i] !== base[i]) {
        match = false;
        break;
      }
    }
    if (!match) continue;
    any = true;
    // walk the rest below the prefix; only two levels are needed (children and their child counts)
    const child = segs[base.length]!;
    if (segs.length === base.length + 1) {
      root.leaves.push({ segment: child, fullPath: d.name, type: ENTRY_TYPE_OF[d.type] });
      continue;
    }
    let folder = root.folders.get(child);
    if (folder === undefined) root.folders.set(child, (folder = newLevel()));
    const grandChild = segs[base.length + 1]!;
    if (segs.length === base.length + 2) folder.leaves.push({ segment: grandChild, fullPath: d.name, type: ENTRY_TYPE_OF[d.type] });
    else if (!folder.folders.has(grandChild)) folder.folders.set(grandChild, newLevel());
  }
  if (!any && base.length > 0) return undefined;
  const entries: DestinationEntry[] = [];
  for (const [segment, level] of root.folders) {
    entries.push({ name: segment, fullPath: joinPath([...base, segment]), destinationType: 'FOLDER', childCount: levelEntryCount(level) });
  }
  for (const leaf of root.leaves) entries.push({ name: leaf.segment, fullPath: leaf.fullPath, destinationType: leaf.type, childCount: 0 });
  entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : ENTRY_ORDER[a.destinationType] - ENTRY_ORDER[b.destinationType]));
  return entries;
}

/** One page; totalPages = ceil(total / pageSize) (MAPS: floor + 1, one page too many on exact multiples). */
export function pageOf(entries: DestinationEntry[], pageSize: number, pageNo: number): DestinationPage {
  const start = pageNo * pageSize;
  return {
    totalEntries: entries.length,
    totalPages: Math.ceil(entries.length / pageSize),
    pageNo,
    entries: start < entries.length ? entries.slice(start, start + pageSize) : [],
  };
}

/** A strong ETag over the prefix and the page content. */
export function pageEtag(prefix: string, page: DestinationPage): string {
  const h = createHash('sha1').update(prefix).update('\u0000').update(JSON.stringify(page)).digest('base64url');
  return `"${h}"`;
}

/** True when an If-None-Match header (one tag, `W/` weak tags, a comma list or `*`) names the current ETag. */
export function etagMatches(ifNoneMatch: string | string[] | undefined, etag: string): boolean {
  if (ifNoneMatch === undefined) return false;
  const raw = Array.isArray(ifNoneMatch) ? ifNoneMatch.join(',') : ifNoneMatch;
  const bare = etag.replace(/^"|"$/g, '');
  for (let tag of raw.split(',')) {
    tag = tag.trim();
    if (tag === '*') return true;
    if (tag.startsWith('W/')) tag = tag.slice(2);
    if (tag === etag || tag === bare) return true;
  }
  return false;
}
