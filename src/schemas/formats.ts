/**
 * Schema formats: each turns a schema config's `schema` into a payload checker, compiled once per schema version.
 * A schema that does not compile throws SchemaCompileError (the REST API answers 400 with its message). A checker
 * never throws: it returns the first problem of a payload as text, or undefined when the payload conforms.
 *
 * | format | `schema` holds | a payload conforms when |
 * |---|---|---|
 * | json | a JSON Schema (draft 2020-12/07, ajv + ajv-formats) | it is UTF-8 JSON valid against the schema |
 * | protobuf | `{proto: "<.proto source>", messageName: "pkg.Msg"}` | it decodes as that message (protobufjs), required fields present |
 * | avro | an Avro schema (avsc) | it is exactly one Avro binary datum of that schema |
 * | xml | `{rootElement?: "name"}` (or nothing) | it is well-formed XML (fast-xml-parser) with that root element |
 * | csv | `{columns: [{name, type: string\|number\|integer\|boolean}], header?: bool, delimiter?: ","}` | every row has the columns, typed |
 * | cbor | optional JSON Schema of the decoded value | it is one well-formed CBOR item (cbor-x) valid against the schema |
 * | messagepack | optional JSON Schema of the decoded value | it is one well-formed MessagePack value (@msgpack/msgpack) valid against the schema |
 * | native | `{type: string\|number\|integer\|boolean}` (default string) | its UTF-8 text reads as that type (MAPS's numeric-string topics) |
 * | raw | `{minLength?, maxLength?}` (or nothing) | its length in bytes is within the bounds |
 *
 * XML is checked for well-formedness and the root element only: no XSD validator is available for Node without a
 * native library, so an XSD in `schema` is refused rather than silently ignored.
 */
import { createRequire } from 'node:module';
import type { Ajv2020 } from 'ajv/dist/2020.js';
import type AjvDraft7 from 'ajv';
import type addFormats from 'ajv-formats';
import type { ValidateFunction, ErrorObject } from 'ajv';
import type avro from 'avsc';
import type protobuf from 'protobufjs';
import type * as fastXmlParser from 'fast-xml-parser';
import type * as cborX from 'cbor-x';
import type * as msgpack from '@msgpack/msgpack';
import { ValidationError } from '../errors.js';
import { linearFormats, linearRegExpEngine } from './patterns.js';
import { cborNestingExceeds, jsonNestingExceeds, msgpackNestingExceeds, valueNestingExceeds } from './depth.js';

// The format libraries are loaded on first use (synchronously, through require: all of them ship CommonJS), not at
// start: together they are several MiB of heap and code an idle broker without schemas never needs.
const requireLazily = createRequire(import.meta.url);
const lib = {
  ajv2020: () => (requireLazily('ajv/dist/2020.js') as { Ajv2020: typeof Ajv2020 }).Ajv2020,
  ajv07: () => requireLazily('ajv') as typeof AjvDraft7,
  addFormats: () => requireLazily('ajv-formats') as typeof addFormats,
  fullFormats: () => (requireLazily('ajv-formats/dist/formats.js') as { fullFormats: Record<string, unknown> }).fullFormats,
  avro: () => requireLazily('avsc') as typeof avro,
  protobuf: () => requireLazily('protobufjs') as typeof protobuf,
  xml: () => requireLazily('fast-xml-parser') as typeof fastXmlParser,
  cbor: () => requireLazily('cbor-x') as typeof cborX,
  msgpack: () => requireLazily('@msgpack/msgpack') as typeof msgpack,
};

export const SCHEMA_FORMATS = ['json', 'protobuf', 'avro', 'xml', 'csv', 'cbor', 'messagepack', 'native', 'raw'] as const;
export type SchemaFormat = (typeof SCHEMA_FORMATS)[number];

/** Other spellings accepted on input (MAPS writes `JSON`, `ProtoBuf`, `msgpack`, ...). */
const ALIASES: Record<string, SchemaFormat> = { msgpack: 'messagepack', proto: 'protobuf', protobuf3: 'protobuf', protobuf2: 'protobuf' };

export function normaliseFormat(format: unknown): SchemaFormat | undefined {
  if (typeof format !== 'string') return undefined;
  const f = format.trim().toLowerCase();
  return (SCHEMA_FORMATS as readonly string[]).includes(f) ? (f as SchemaFormat) : ALIASES[f];
}

/** The media type of a format's raw artifact (GET /api/v1/server/schemas/impl/{id}), as MAPS names them. */
export function mediaTypeOf(format: SchemaFormat): string {
  switch (format) {
    case 'json':
      return 'application/schema+json';
    case 'protobuf':
      return 'application/x-protobuf';
    case 'avro':
      return 'application/avro+json';
    case 'xml':
      return 'application/xml';
    case 'cbor':
      return 'application/cddl';
    case 'messagepack':
    case 'csv':
      return 'application/schema+json';
    default:
      return 'application/octet-stream';
  }
}

/** A schema's `schema` does not compile: the message says why. */
export class SchemaCompileError extends ValidationError {}

/** Checks one payload; never throws. */
export type PayloadChecker = (payload: Buffer) => string | undefined;

const MAX_PROBLEM = 300;
const clip = (s: string) => (s.length > MAX_PROBLEM ? `${s.slice(0, MAX_PROBLEM)}...` : s);

/**
 * Deepest nesting (arrays and objects) of a payload checked against a JSON Schema (json, and the decoded value of
 * cbor and messagepack): deeper payloads are refused before the validator runs, which recurses per level (a
 * recursive schema and a 120 KB nested payload overflowed its stack: a 500 and a stack trace per message).
 */
export const MAX_PAYLOAD_DEPTH = 64;

// One ajv per draft, shared: compiled validators are kept by the registry per schema version, not by ajv's cache.
// Patterns (`pattern`, `patternProperties`) and the formats' regular expressions run on RE2 (./patterns.ts).
let ajv2020: Ajv2020 | undefined;
let ajv07: AjvDraft7.default | undefined;
function withLinearFormats<T extends Ajv2020 | AjvDraft7.default>(ajv: T): T {
  lib.addFormats().default(ajv as never);
  for (const [name, f] of Object.entries(linearFormats(lib.fullFormats() as never))) ajv.addFormat(name, f as never);
  return ajv;
}
function ajvFor(schema: Record<string, unknown>): Ajv2020 | AjvDraft7.default {
  const draft = typeof schema.$schema === 'string' ? schema.$schema : '';
  const opts = { strict: false, allErrors: false, addUsedSchema: false, code: { regExp: linearRegExpEngine } };
  if (/draft-0[467]/.test(draft)) return (ajv07 ??= withLinearFormats(new (lib.ajv07().default)(opts)));
  return (ajv2020 ??= withLinearFormats(new (lib.ajv2020())(opts)));
}

const TOO_DEEP = `nested deeper than ${MAX_PAYLOAD_DEPTH} levels (the limit for payloads checked against a schema)`;

/** The problem of a checker that threw (a stack overflow in a decoder or validator): text, never a stack trace. */
const isStackOverflow = (err: unknown): boolean => err instanceof RangeError && /call stack/i.test(err.message);

function thrownProblem(err: unknown): string {
  if (isStackOverflow(err)) return 'nested too deeply to check (the schema or the payload recurses beyond the validator\'s stack)';
  return clip(`the payload could not be checked: ${(err as Error)?.message ?? String(err)}`);
}

function firstAjvError(errors: ErrorObject[] | null | undefined): string {
  const e = errors?.[0];
  if (!e) return 'does not match the schema';
  const at = e.instancePath === '' ? '(root)' : e.instancePath;
  const extra = e.keyword === 'additionalProperties' ? ` '${String((e.params as { additionalProperty?: string }).additionalProperty)}'` : '';
  return clip(`${at} ${e.message ?? e.keyword}${extra}`);
}

let compiledSchemas = 0;

/** Compiles a JSON Schema (object or boolean) into a value validator. */
function compileJsonSchema(schema: unknown, what: string): ValidateFunction {
  if (typeof schema !== 'boolean' && (schema === null || typeof schema !== 'object' || Array.isArray(schema))) {
    throw new SchemaCompileError(`Invalid schema: ${what} must be a JSON Schema object`);
  }
  try {
    const s = typeof schema === 'boolean' ? schema : { ...(schema as Record<string, unknown>) };
    // ids would collide across versions in the shared ajv: each compiled schema gets its own, so `$ref: "#"`
    // (a recursive schema) resolves against it
    if (typeof s === 'object') s.$id = `urn:switchyard:schema:${++compiledSchemas}`;
    const ajv = typeof s === 'boolean' ? ajvFor({}) : ajvFor(s);
    const validate = ajv.compile(s as never) as ValidateFunction;
    // the shared ajv keeps every schema it compiled (keyed by the object, and by $id): the validator no longer
    // needs it, and each registration or version would otherwise stay in memory for good
    if (typeof s === 'object') ajv.removeSchema(s as never);
    return validate;
  } catch (err) {
    throw new SchemaCompileError(`Invalid schema: ${what} does not compile: ${clip((err as Error).message)}`);
  }
}

/** Values a schema is tried on at registration: one that recurses on them without reading the payload is refused. */
const PROBES: unknown[] = [null, true, 0, '', [], {}];

/** `depthChecked`: the caller has bounded the value's nesting already (json: on the text, before parsing). */
function valueChecker(schema: unknown, what: string, depthChecked = false): ((value: unknown) => string | undefined) | undefined {
  if (schema === undefined || schema === null || (typeof schema === 'object' && !Array.isArray(schema) && Object.keys(schema).length === 0)) return undefined;
  const validate = compileJsonSchema(schema, what);
  for (const probe of PROBES) {
    try {
      validate(probe);
    } catch (err) {
      // e.g. {"$ref": "#"}: a $ref cycle that never descends into the payload overflows on every message
      throw new SchemaCompileError(`Invalid schema: ${what} cannot be evaluated: ${isStackOverflow(err) ? 'its references recurse without end' : clip((err as Error).message)}`);
    }
  }
  return (value) => {
    if (!depthChecked && valueNestingExceeds(value, MAX_PAYLOAD_DEPTH)) return TOO_DEEP;
    try {
      return validate(value) ? undefined : firstAjvError(validate.errors);
    } catch (err) {
      return thrownProblem(err);
    }
  };
}

/** A checker that never throws: whatever a decoder or validator throws becomes the payload's problem. */
function guarded(check: PayloadChecker): PayloadChecker {
  return (payload) => {
    try {
      return check(payload);
    } catch (err) {
      return thrownProblem(err);
    }
  };
}

function objectOf(schema: unknown, what: string): Record<string, unknown> {
  if (schema === undefined || schema === null) return {};
  if (typeof schema !== 'object' || Array.isArray(schema)) throw new SchemaCompileError(`Invalid schema: ${what} must be an object`);
  return schema as Record<string, unknown>;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });
function text(payload: Buffer): string | undefined {
  try {
    return utf8.decode(payload);
  } catch {
    return undefined;
  }
}

type ScalarType = 'string' | 'number' | 'integer' | 'boolean';
const SCALARS: readonly ScalarType[] = ['string', 'number', 'integer', 'boolean'];
function scalarProblem(value: string, type: ScalarType): string | undefined {
  const v = value.trim();
  switch (type) {
    case 'number':
      return v !== '' && Number.isFinite(Number(v)) ? undefined : `'${clip(value)}' is not a number`;
    case 'integer':
      return /^[+-]?\d+$/.test(v) ? undefined : `'${clip(value)}' is not an integer`;
    case 'boolean':
      return /^(true|false)$/i.test(v) ? undefined : `'${clip(value)}' is not true or false`;
    default:
      return undefined;
  }
}

/** Splits CSV text into rows of fields (RFC 4180 quoting: "a ""b""" is a "b"). */
function parseCsv(src: string, delimiter: string): string[][] | string {
  const rows: string[][] = [];
  let row: string[] = [];
  let field = '';
  let i = 0;
  let quoted = false;
  let fieldStart = true;
  while (i < src.length) {
    const c = src[i]!;
    if (quoted) {
      if (c === '"') {
        if (src[i + 1] === '"') {
          field += '"';
          i += 2;
          continue;
        }
        quoted = false;
        i++;
        continue;
      }
      field += c;
      i++;
      continue;
    }
    if (c === '"' && fieldStart) {
      quoted = true;
      fieldStart = false;
      i++;
      continue;
    }
    if (c === delimiter) {
      row.push(field);
      field = '';
      fieldStart = true;
      i++;
      continue;
    }
    if (c === '\r' || c === '\n') {
      row.push(field);
      rows.push(row);
      row = [];
      field = '';
      fieldStart = true;
      i += c === '\r' && src[i + 1] === '\n' ? 2 : 1;
      continue;
    }
    if (c === '"') return `row ${rows.length + 1}: a quote inside an unquoted field`;
    field += c;
    fieldStart = false;
    i++;
  }
  if (quoted) return `row ${rows.length + 1}: unterminated quoted field`;
  if (field !== '' || row.length > 0) {
    row.push(field);
    rows.push(row);
  }
  return rows;
}

/**
 * Compiles the checker of one schema version. `schema` is SchemaConfigDTO.schema; `schemaBase64` its base64 form
 * (used when `schema` is absent: a .proto source, an Avro schema, a JSON Schema).
 */
export function compileChecker(format: SchemaFormat, schema: unknown): PayloadChecker {
  return guarded(compileUnguarded(format, schema));
}

function compileUnguarded(format: SchemaFormat, schema: unknown): PayloadChecker {
  switch (format) {
    case 'json': {
      if (schema === undefined || schema === null) throw new SchemaCompileError('Invalid schema: a json schema needs a JSON Schema in "schema"');
      const check = valueChecker(schema, 'the JSON Schema', true) ?? (() => undefined);
      return (payload) => {
        const t = text(payload);
        if (t === undefined) return 'the payload is not UTF-8';
        if (jsonNestingExceeds(t, MAX_PAYLOAD_DEPTH)) return TOO_DEEP;
        let value: unknown;
        try {
          value = JSON.parse(t);
        } catch (err) {
          return clip(`the payload is not JSON: ${(err as Error).message}`);
        }
        return check(value);
      };
    }
    case 'protobuf': {
      const s = objectOf(schema, 'a protobuf schema');
      const proto = s.proto ?? s.definition;
      const messageName = s.messageName;
      if (typeof proto !== 'string' || proto.trim() === '') throw new SchemaCompileError('Invalid schema: a protobuf schema needs "proto" (the .proto source)');
      if (typeof messageName !== 'string' || messageName.trim() === '') throw new SchemaCompileError('Invalid schema: a protobuf schema needs "messageName"');
      let type: protobuf.Type;
      try {
        const root = lib.protobuf().parse(proto, { keepCase: true }).root;
        root.resolveAll();
        type = root.lookupType(messageName);
      } catch (err) {
        throw new SchemaCompileError(`Invalid schema: the .proto does not compile: ${clip((err as Error).message)}`);
      }
      return (payload) => {
        try {
          type.decode(payload);
          return undefined;
        } catch (err) {
          if (isStackOverflow(err)) return `not a ${messageName} message: ${TOO_DEEP}`;
          return clip(`not a ${messageName} message: ${(err as Error).message}`);
        }
      };
    }
    case 'avro': {
      if (schema === undefined || schema === null) throw new SchemaCompileError('Invalid schema: an avro schema needs the Avro schema in "schema"');
      let type: avro.Type;
      try {
        type = lib.avro().Type.forSchema(schema as avro.Schema);
      } catch (err) {
        throw new SchemaCompileError(`Invalid schema: the Avro schema does not compile: ${clip((err as Error).message)}`);
      }
      return (payload) => {
        try {
          const { offset } = type.decode(payload, 0);
          if (offset < 0) return `truncated Avro datum (${payload.length} bytes)`;
          if (offset !== payload.length) return `${payload.length - offset} bytes after the Avro datum`;
          return undefined;
        } catch (err) {
          if (isStackOverflow(err)) return `not an Avro datum of this schema: nested too deeply to decode`;
          return clip(`not an Avro datum of this schema: ${(err as Error).message}`);
        }
      };
    }
    case 'xml': {
      const s = objectOf(schema, 'an xml schema');
      if (s.xsd !== undefined) throw new SchemaCompileError('Invalid schema: XSD validation is not supported; xml schemas check well-formedness and "rootElement"');
      const root = s.rootElement;
      if (root !== undefined && (typeof root !== 'string' || root === '')) throw new SchemaCompileError('Invalid schema: "rootElement" must be a non-empty string');
      const { XMLParser, XMLValidator } = lib.xml();
      const parser = new XMLParser({ ignoreAttributes: true, processEntities: false, ignoreDeclaration: true, ignorePiTags: true });
      return (payload) => {
        const t = text(payload);
        if (t === undefined) return 'the payload is not UTF-8';
        const r = XMLValidator.validate(t);
        if (r !== true) return clip(`not well-formed XML: line ${r.err.line}: ${r.err.msg}`);
        if (root !== undefined) {
          let doc: Record<string, unknown>;
          try {
            doc = parser.parse(t) as Record<string, unknown>;
          } catch (err) {
            return clip(`not well-formed XML: ${(err as Error).message}`);
          }
          const names = Object.keys(doc).filter((k) => k !== '#text');
          if (names.length !== 1 || names[0] !== root) return `the root element is <${names[0] ?? ''}>, expected <${root}>`;
        }
        return undefined;
      };
    }
    case 'csv': {
      const s = objectOf(schema, 'a csv schema');
      const cols = s.columns;
      if (!Array.isArray(cols) || cols.length === 0) throw new SchemaCompileError('Invalid schema: a csv schema needs "columns": [{name, type}]');
      const columns = cols.map((c, i) => {
        const col = typeof c === 'string' ? { name: c, type: 'string' } : (c as { name?: unknown; type?: unknown });
        if (!col || typeof col.name !== 'string') throw new SchemaCompileError(`Invalid schema: columns[${i}] needs a name`);
        const type = col.type ?? 'string';
        if (!SCALARS.includes(type as ScalarType)) throw new SchemaCompileError(`Invalid schema: columns[${i}].type must be one of ${SCALARS.join(', ')}`);
        return { name: col.name, type: type as ScalarType };
      });
      const delimiter = s.delimiter ?? ',';
      if (typeof delimiter !== 'string' || delimiter.length !== 1 || delimiter === '"' || delimiter === '\n') throw new SchemaCompileError('Invalid schema: "delimiter" must be one character');
      const header = s.header === true;
      return (payload) => {
        const t = text(payload);
        if (t === undefined) return 'the payload is not UTF-8';
        const rows = parseCsv(t, delimiter);
        if (typeof rows === 'string') return rows;
        if (rows.length === 0 || (header && rows.length === 1)) return 'no data rows';
        for (let r = 0; r < rows.length; r++) {
          const row = rows[r]!;
          if (row.length !== columns.length) return `row ${r + 1} has ${row.length} fields, expected ${columns.length}`;
          if (header && r === 0) {
            for (let c = 0; c < columns.length; c++) if (row[c]!.trim() !== columns[c]!.name) return `header field ${c + 1} is '${clip(row[c]!)}', expected '${columns[c]!.name}'`;
            continue;
          }
          for (let c = 0; c < columns.length; c++) {
            const p = scalarProblem(row[c]!, columns[c]!.type);
            if (p !== undefined) return `row ${r + 1}, column ${columns[c]!.name}: ${p}`;
          }
        }
        return undefined;
      };
    }
    case 'cbor':
    case 'messagepack': {
      const check = valueChecker(schema, 'the JSON Schema of the decoded value', true);
      const decode: (b: Buffer) => unknown = format === 'cbor' ? lib.cbor().decode : lib.msgpack().decode;
      const tooDeep = format === 'cbor' ? cborNestingExceeds : msgpackNestingExceeds;
      return (payload) => {
        if (payload.length === 0) return `an empty payload is not ${format === 'cbor' ? 'CBOR' : 'MessagePack'}`;
        if (tooDeep(payload, MAX_PAYLOAD_DEPTH)) return TOO_DEEP; // before decoding: both decoders recurse or slow down per level
        let value: unknown;
        try {
          value = decode(payload);
        } catch (err) {
          if (isStackOverflow(err)) return `not decodable as ${format === 'cbor' ? 'CBOR' : 'MessagePack'}: ${TOO_DEEP}`;
          return clip(`not well-formed ${format === 'cbor' ? 'CBOR' : 'MessagePack'}: ${(err as Error).message}`);
        }
        return check?.(value);
      };
    }
    case 'native': {
      const s = objectOf(schema, 'a native schema');
      const type = s.type ?? 'string';
      if (!SCALARS.includes(type as ScalarType)) throw new SchemaCompileError(`Invalid schema: a native schema's "type" must be one of ${SCALARS.join(', ')}`);
      return (payload) => {
        const t = text(payload);
        if (t === undefined) return 'the payload is not UTF-8';
        return scalarProblem(t, type as ScalarType);
      };
    }
    case 'raw': {
      const s = objectOf(schema, 'a raw schema');
      const min = s.minLength ?? 0;
      const max = s.maxLength ?? Number.MAX_SAFE_INTEGER;
      if (typeof min !== 'number' || typeof max !== 'number' || !Number.isInteger(min) || !Number.isInteger(max) || min < 0 || max < min) {
        throw new SchemaCompileError('Invalid schema: minLength and maxLength must be integers with 0 <= minLength <= maxLength');
      }
      return (payload) => (payload.length < min ? `${payload.length} bytes, at least ${min} expected` : payload.length > max ? `${payload.length} bytes, at most ${max} allowed` : undefined);
    }
  }
}
