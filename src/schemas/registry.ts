/**
 * The schema registry: SchemaConfigDTOs with versions, persisted in the store's `schemas` sublevel (one record per
 * schema uniqueId holding its versions), an in-memory index, and the binding of schemas to destinations.
 *
 * Binding: a schema is added with a `context`, a destination name or an MQTT topic filter (`sensors/+/temp`,
 * `factory/#`). A destination takes the schema whose context is its exact name, else the most recently modified
 * schema whose filter matches it ($-names never bind). The engine keeps the binding per destination (set at
 * creation and re-set on every change here), so publishing to a destination without a schema costs nothing extra.
 * Each bound schema is published retained on `$schema/<destination>` (the SchemaConfigDTO as JSON), so any MQTT
 * client can fetch it; the retained message is cleared when no schema applies any more.
 *
 * Enforcement per destination: `DestinationManager.data[].schemaEnforcement`, else the schema's label
 * `enforcement`, else `DestinationManager.schemaEnforcement` (default `reject`): off, warn (count and log), reject.
 */
import { createHash, randomUUID } from 'node:crypto';
import type { Engine } from '../engine/engine.js';
import type { PayloadSchema } from '../engine/destination.js';
import { topicMatchesFilter, hasWildcard } from '../engine/topic-trie.js';
import { ConflictError, NotFoundError, ValidationError } from '../errors.js';
import type { Store } from '../store/store.js';
import { SchemaCompileError, compileChecker, mediaTypeOf, normaliseFormat, type PayloadChecker, type SchemaFormat } from './formats.js';

export type Enforcement = 'off' | 'warn' | 'reject';
export const ENFORCEMENTS: readonly Enforcement[] = ['off', 'warn', 'reject'];

/** MAPS SchemaConfigDTO (reference 4.7). */
export interface SchemaConfigDTO {
  uniqueId: string;
  versionId: string;
  epoch?: number;
  name: string;
  description?: string;
  documentation?: string;
  labels?: Record<string, string>;
  ancestor?: string;
  format: string;
  schemaUrl?: string;
  schema?: unknown;
  schemaBase64?: string;
  createdAt: string;
  modifiedAt: string;
  notBefore?: string;
  expiresAfter?: string;
}

/** One stored version: the DTO and the context it was added with. */
export interface SchemaVersion {
  config: SchemaConfigDTO;
  context: string;
}

interface SchemaRecord {
  versions: SchemaVersion[];
}

/** Most schemas kept, and versions kept per schema (the oldest version is dropped beyond it). */
export const MAX_SCHEMAS = 10000;
export const MAX_VERSIONS = 16;
const MAX_TEXT = 4096;
export const SCHEMA_TOPIC_PREFIX = '$schema/';

interface Compiled {
  format: SchemaFormat;
  check: PayloadChecker;
}

export interface RegistryOptions {
  store: Store;
  /** Default enforcement (DestinationManager.schemaEnforcement). */
  enforcement: Enforcement;
  /** Per-destination enforcement (DestinationManager.data[].schemaEnforcement). */
  destinationEnforcement?: Map<string, Enforcement>;
  /** Rate-limited warning about non-conforming payloads. */
  warn?: (info: { destination: string; schemaId: string; problem: string }) => void;
  now?: () => number;
}

function str(v: unknown, field: string, max = MAX_TEXT): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw new ValidationError(`Invalid schema: "${field}" must be a string`);
  if (v.length > max) throw new ValidationError(`Invalid schema: "${field}" is longer than ${max} characters`);
  return v;
}

function isoDate(v: unknown, field: string): string | undefined {
  const s = str(v, field, 64);
  if (s === undefined) return undefined;
  const t = Date.parse(s);
  if (Number.isNaN(t)) throw new ValidationError(`Invalid schema: "${field}" is not an ISO-8601 date-time`);
  return new Date(t).toISOString();
}

const ID_RE = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

/** Checks a schema id (path parameter or config field). */
export function validSchemaId(id: string): boolean {
  return ID_RE.test(id);
}

export class SchemaRegistry {
  private readonly records = new Map<string, SchemaRecord>();
  private readonly compiled = new Map<string, Compiled>();
  private readonly bindings = new Map<string, PayloadSchema>();
  private engine: Engine | undefined;
  private readonly now: () => number;

  constructor(private readonly opts: RegistryOptions) {
    this.now = opts.now ?? Date.now;
  }

  /** Reads every stored schema; a record that no longer compiles is skipped (and logged by the caller). */
  async load(onBad?: (id: string, err: unknown) => void): Promise<void> {
    this.records.clear();
    this.compiled.clear();
    for await (const [id, rec] of this.opts.store.entriesJson<SchemaRecord>('schemas')) {
      try {
        if (!Array.isArray(rec.versions) || rec.versions.length === 0) continue;
        for (const v of rec.versions) this.compile(v.config);
        this.records.set(id, rec);
      } catch (err) {
        onBad?.(id, err);
      }
    }
  }

  // ----------------------------------------------------------------------------------------------------------
  // Queries

  /** The current (latest) version of every schema. */
  list(): SchemaVersion[] {
    return [...this.records.values()].map((r) => r.versions[r.versions.length - 1]!);
  }

  get(id: string): SchemaVersion | undefined {
    const r = this.records.get(id);
    return r?.versions[r.versions.length - 1];
  }

  versions(id: string): SchemaVersion[] {
    return [...(this.records.get(id)?.versions ?? [])];
  }

  get size(): number {
    return this.records.size;
  }

  /** `{context: [schemaId...]}` of the current versions. */
  mappings(): Record<string, string[]> {
    const out: Record<string, string[]> = {};
    for (const v of this.list()) (out[v.context] ??= []).push(v.config.uniqueId);
    return out;
  }

  /** The raw artifact of a schema: bytes, media type and its sha256 (the ETag). */
  artifact(id: string): { body: Buffer; mediaType: string; etag: string; versioned: boolean } | undefined {
    const v = this.get(id);
    if (!v) return undefined;
    const c = v.config;
    const format = normaliseFormat(c.format) ?? 'raw';
    let body: Buffer;
    if (c.schemaBase64 !== undefined) body = Buffer.from(c.schemaBase64, 'base64');
    else if (format === 'protobuf' && c.schema && typeof (c.schema as { proto?: unknown }).proto === 'string') body = Buffer.from((c.schema as { proto: string }).proto, 'utf8');
    else body = Buffer.from(JSON.stringify(c.schema ?? {}), 'utf8');
    const mediaType = c.labels?.mimeType ?? mediaTypeOf(format);
    return { body, mediaType, etag: createHash('sha256').update(body).digest('hex'), versioned: c.versionId !== undefined && c.versionId !== '' };
  }

  // ----------------------------------------------------------------------------------------------------------
  // Changes

  /**
   * Adds a schema (or a new version of an existing uniqueId) from SchemaPostDTO: `schema` is the config JSON as
   * a string, `context` its scope. Throws ValidationError / SchemaCompileError (400) saying why.
   */
  async add(schemaText: string, context: string): Promise<SchemaVersion> {
    if (context.length > 65535) throw new ValidationError('context is too long');
    let raw: unknown;
    try {
      raw = JSON.parse(schemaText);
    } catch (err) {
      throw new ValidationError(`Invalid schema: the schema config is not JSON: ${(err as Error).message}`);
    }
    if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new ValidationError('Invalid schema: the schema config must be a JSON object');
    const cfg = raw as Record<string, unknown>;
    const format = normaliseFormat(cfg.format);
    if (format === undefined) throw new ValidationError(`Invalid schema: "format" must be one of json, protobuf, avro, xml, csv, cbor, messagepack, native, raw; got ${JSON.stringify(cfg.format ?? null)}`);
    const uniqueId = str(cfg.uniqueId, 'uniqueId', 128) ?? randomUUID();
    if (!validSchemaId(uniqueId)) throw new ValidationError('Invalid schema: "uniqueId" must be 1-128 characters of letters, digits, ".", "_", ":" and "-"');
    let labels: Record<string, string> | undefined;
    if (cfg.labels !== undefined && cfg.labels !== null) {
      if (typeof cfg.labels !== 'object' || Array.isArray(cfg.labels)) throw new ValidationError('Invalid schema: "labels" must be an object of strings');
      labels = {};
      for (const [k, v] of Object.entries(cfg.labels as Record<string, unknown>)) {
        if (typeof v !== 'string' || k.length > 256 || v.length > MAX_TEXT) throw new ValidationError(`Invalid schema: label "${k.slice(0, 64)}" must be a string`);
        labels[k] = v;
      }
      if (Object.keys(labels).length === 0) labels = undefined;
    }
    if (labels?.enforcement !== undefined && !ENFORCEMENTS.includes(labels.enforcement as Enforcement)) {
      throw new ValidationError(`Invalid schema: label "enforcement" must be off, warn or reject; got "${labels.enforcement}"`);
    }
    let schema = cfg.schema;
    const schemaBase64 = str(cfg.schemaBase64, 'schemaBase64', 4 * 1024 * 1024);
    if (typeof schema === 'string') {
      // a JSON document given as a string (or a .proto source)
      if (format === 'protobuf') schema = { proto: schema, messageName: cfg.messageName ?? labels?.messageName };
      else {
        try {
          schema = JSON.parse(schema);
        } catch {
          throw new SchemaCompileError('Invalid schema: "schema" is a string that is not JSON');
        }
      }
    }
    if ((schema === undefined || schema === null) && schemaBase64 !== undefined) {
      const text = Buffer.from(schemaBase64, 'base64').toString('utf8');
      if (format === 'protobuf') schema = { proto: text, messageName: cfg.messageName ?? labels?.messageName };
      else {
        try {
          schema = JSON.parse(text);
        } catch {
          throw new SchemaCompileError('Invalid schema: "schemaBase64" does not hold JSON');
        }
      }
    }
    const check = compileChecker(format, schema); // throws SchemaCompileError: the 400 says why
    const existing = this.records.get(uniqueId);
    if (!existing && this.records.size >= MAX_SCHEMAS) throw new ConflictError(`The registry holds its maximum of ${MAX_SCHEMAS} schemas; delete some first`);
    const prev = existing?.versions[existing.versions.length - 1];
    let versionId = str(cfg.versionId, 'versionId', 64);
    if (versionId === undefined || versionId === '') {
      const n = prev ? Number.parseInt(prev.config.versionId, 10) : 0;
      versionId = String(Number.isFinite(n) ? n + 1 : (existing?.versions.length ?? 0) + 1);
    }
    const nowIso = new Date(this.now()).toISOString();
    const config: SchemaConfigDTO = {
      uniqueId,
      versionId,
      ...(typeof cfg.epoch === 'number' && Number.isFinite(cfg.epoch) ? { epoch: Math.trunc(cfg.epoch) } : {}),
      name: str(cfg.name, 'name', 256) ?? prev?.config.name ?? uniqueId,
      ...optional('description', str(cfg.description, 'description')),
      ...optional('documentation', str(cfg.documentation, 'documentation')),
      ...(labels ? { labels } : {}),
      ...optional('ancestor', str(cfg.ancestor, 'ancestor', 128) ?? prev?.config.uniqueId),
      format,
      ...optional('schemaUrl', str(cfg.schemaUrl, 'schemaUrl', 2048)),
      ...(schema !== undefined ? { schema } : {}),
      ...optional('schemaBase64', schemaBase64),
      createdAt: existing?.versions[0]?.config.createdAt ?? nowIso,
      modifiedAt: nowIso,
      ...optional('notBefore', isoDate(cfg.notBefore, 'notBefore')),
      ...optional('expiresAfter', isoDate(cfg.expiresAfter, 'expiresAfter')),
    };
    if (config.ancestor === uniqueId && !prev) delete config.ancestor;
    const version: SchemaVersion = { config, context };
    const versions = (existing?.versions ?? []).filter((v) => v.config.versionId !== versionId);
    versions.push(version);
    while (versions.length > MAX_VERSIONS) versions.shift();
    const before = this.boundNames();
    await this.opts.store.putJson('schemas', uniqueId, { versions } satisfies SchemaRecord);
    this.records.set(uniqueId, { versions });
    this.compiled.set(`${uniqueId}@${versionId}`, { format, check });
    this.rebind(before);
    return version;
  }

  /** Deletes one schema (every version). */
  async remove(id: string): Promise<void> {
    if (!this.records.has(id)) throw new NotFoundError(`Schema not found: ${id}`);
    await this.removeMany([id]);
  }

  /** Deletes these schemas; returns how many were deleted. */
  async removeMany(ids: string[]): Promise<number> {
    const present = ids.filter((id) => this.records.has(id));
    if (present.length === 0) return 0;
    const before = this.boundNames();
    await this.opts.store.sublevel('schemas').batch(present.map((key) => ({ type: 'del' as const, key })));
    for (const id of present) {
      for (const v of this.records.get(id)!.versions) this.compiled.delete(`${id}@${v.config.versionId}`);
      this.records.delete(id);
    }
    this.rebind(before);
    return present.length;
  }

  // ----------------------------------------------------------------------------------------------------------
  // Binding

  private compile(config: SchemaConfigDTO): Compiled {
    const key = `${config.uniqueId}@${config.versionId}`;
    let c = this.compiled.get(key);
    if (!c) {
      const format = normaliseFormat(config.format);
      if (format === undefined) throw new SchemaCompileError(`unknown format ${config.format}`);
      c = { format, check: compileChecker(format, config.schema) };
      this.compiled.set(key, c);
    }
    return c;
  }

  /** The current version that applies to a destination name, if any. */
  schemaFor(name: string): SchemaVersion | undefined {
    if (name.startsWith('$')) return undefined;
    let best: SchemaVersion | undefined;
    for (const v of this.list()) {
      if (v.context === name) return v;
      if (hasWildcard(v.context) && topicMatchesFilterSafe(v.context, name) && (!best || v.config.modifiedAt >= best.config.modifiedAt)) best = v;
    }
    return best;
  }

  private enforcementFor(name: string, v: SchemaVersion): Enforcement {
    return this.opts.destinationEnforcement?.get(name) ?? (v.config.labels?.enforcement as Enforcement | undefined) ?? this.opts.enforcement;
  }

  /** The PayloadSchema the engine keeps for a destination (one object per schema version and enforcement). */
  resolve(name: string): PayloadSchema | undefined {
    const v = this.schemaFor(name);
    if (!v) return undefined;
    const enforcement = this.enforcementFor(name, v);
    const key = `${v.config.uniqueId}@${v.config.versionId}#${enforcement}`;
    let p = this.bindings.get(key);
    if (!p) {
      const compiled = this.compile(v.config);
      const schemaId = v.config.uniqueId;
      p = { schemaId, enforcement, check: compiled.check, violated: (destination, problem) => this.violated(destination, schemaId, problem) };
      this.bindings.set(key, p);
    }
    return p;
  }

  private violated(destination: string, schemaId: string, problem: string): void {
    this.opts.warn?.({ destination, schemaId, problem });
  }

  /** Attaches the registry to a (new) engine: binds every destination and publishes the `$schema/` topics. */
  attach(engine: Engine | undefined): void {
    this.engine = engine;
    this.bindings.clear();
    if (!engine) return;
    engine.setSchemaResolver((name) => this.resolve(name));
    this.publishSchemaTopics(this.boundNames());
  }

  /** Destination names a `$schema/` topic is kept for: bound existing destinations and literal contexts. */
  private boundNames(): Set<string> {
    const out = new Set<string>();
    for (const v of this.list()) if (!hasWildcard(v.context) && !v.context.startsWith('$') && v.context !== '') out.add(v.context);
    for (const name of this.engine?.destinationNames() ?? []) if (!name.startsWith('$') && this.schemaFor(name)) out.add(name);
    return out;
  }

  private rebind(before: Set<string>): void {
    this.bindings.clear();
    const engine = this.engine;
    if (!engine) return;
    engine.setSchemaResolver((name) => this.resolve(name));
    const names = this.boundNames();
    for (const n of before) names.add(n);
    this.publishSchemaTopics(names);
  }

  /** A destination was created: publish its `$schema/` topic when a schema applies. */
  destinationCreated(name: string): void {
    if (name.startsWith('$') || !this.engine) return;
    if (this.schemaFor(name)) queueMicrotask(() => this.publishSchemaTopics(new Set([name]))); // not inside the publish that created it
  }

  /** Publishes (or clears) `$schema/<name>` retained for each name. */
  private publishSchemaTopics(names: Set<string>): void {
    const engine = this.engine;
    if (!engine) return;
    for (const name of names) {
      const topic = SCHEMA_TOPIC_PREFIX + name;
      const v = this.schemaFor(name);
      try {
        if (v) {
          const payload = Buffer.from(JSON.stringify(v.config));
          const cur = engine.retained(topic);
          if (cur && cur.payload.equals(payload)) continue;
          void engine.publish(topic, { payload, retain: true, contentType: 'application/json', qos: 1 }).catch(() => {});
        } else if (engine.retained(topic)) {
          void engine.publish(topic, { payload: Buffer.alloc(0), retain: true, qos: 1 }).catch(() => {});
        }
      } catch {
        /* a name that is not a valid topic: no $schema topic */
      }
    }
  }

  /** RFC 6690 CoRE link format: each destination with a schema and each schema's artifact. */
  linkFormat(): string {
    const links: string[] = [];
    const q = (s: string) => `"${s.replace(/["\\]/g, (c) => `\\${c}`)}"`;
    const uri = (p: string) => encodeURI(p).replace(/[<>,;"]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
    for (const name of [...this.boundNames()].sort()) {
      const v = this.schemaFor(name);
      if (!v) continue;
      links.push(`<${uri(name.startsWith('/') ? name : `/${name}`)}>;rt="schema.destination";schema=${q(v.config.uniqueId)};format=${q(v.config.format)};anchor=${q(`${SCHEMA_TOPIC_PREFIX}${name}`)}`);
    }
    for (const v of this.list().sort((a, b) => a.config.uniqueId.localeCompare(b.config.uniqueId))) {
      const format = normaliseFormat(v.config.format) ?? 'raw';
      links.push(`</api/v1/server/schemas/impl/${uri(v.config.uniqueId)}>;rt="schema";title=${q(v.config.name)};type=${q(v.config.labels?.mimeType ?? mediaTypeOf(format))};context=${q(v.context)};version=${q(v.config.versionId)}`);
    }
    return links.join(',');
  }
}

function optional<K extends string, V>(key: K, value: V | undefined): { [P in K]?: V } {
  return (value === undefined ? {} : { [key]: value }) as { [P in K]?: V };
}

function topicMatchesFilterSafe(filter: string, name: string): boolean {
  try {
    return topicMatchesFilter(filter, name);
  } catch {
    return false;
  }
}
