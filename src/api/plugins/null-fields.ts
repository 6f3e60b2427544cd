import type { FastifySchemaCompiler } from 'fastify';
import type { z } from 'zod';

/**
 * Null means absent: an explicit `null` in an optional field of a request body is treated as if the field were
 * left out (Java clients serialise unset fields as null: login `sessionId`, message `contentType`, ACL `explain`,
 * endpoint `backlog`, ...; the specification says "integer or null"). Done once for every route: when a route is
 * compiled its zod body schema is compiled into a plan of the optional fields (at any depth of nested objects and
 * arrays of objects) that do not accept null themselves, and the body's validator deletes those keys when they hold
 * null before zod parses it, so defaults apply and handlers never see null. It is part of the validator (not a
 * preValidation hook, as before): a hook on every route with a body cost each request a hook run. Fields that accept null (`.nullish()`) and free-form values
 * (`dataMap` entries, `z.unknown()`) are left alone. The OpenAPI document shows the same rule: `nullOptionalFields`
 * adds `null` to every optional request-body property.
 */
type Plan = { kind: 'object'; strip: string[]; children: Array<[string, Plan]> } | { kind: 'array'; element: Plan };

type AnySchema = z.ZodType & { _zod: { def: Record<string, unknown> & { type: string }; optin?: string } };

function defOf(s: AnySchema) {
  return s._zod.def;
}

/** Looks through wrappers to the structural schema (object, array, ...) a value is parsed by. */
function structural(s: AnySchema): AnySchema {
  for (let i = 0; i < 32; i++) {
    const d = defOf(s);
    if (d.type === 'optional' || d.type === 'nullable' || d.type === 'default' || d.type === 'prefault' || d.type === 'readonly' || d.type === 'catch' || d.type === 'nonoptional') {
      s = d.innerType as AnySchema;
    } else if (d.type === 'pipe') {
      s = d.in as AnySchema;
    } else if (d.type === 'lazy') {
      return s; // recursive schemas are not walked
    } else {
      return s;
    }
  }
  return s;
}

function acceptsNull(s: AnySchema): boolean {
  try {
    return s.safeParse(null).success;
  } catch {
    return true; // a refinement that cannot take null: leave the value to validation
  }
}

function compile(schema: AnySchema, depth = 0): Plan | undefined {
  if (depth > 16) return undefined;
  const s = structural(schema);
  const d = defOf(s);
  if (d.type === 'array') {
    const element = compile(d.element as AnySchema, depth + 1);
    return element ? { kind: 'array', element } : undefined;
  }
  if (d.type !== 'object') return undefined;
  const strip: string[] = [];
  const children: Array<[string, Plan]> = [];
  for (const [key, field] of Object.entries(d.shape as Record<string, AnySchema>)) {
    if (field._zod.optin !== undefined && !acceptsNull(field)) strip.push(key);
    const child = compile(field, depth + 1);
    if (child) children.push([key, child]);
  }
  return strip.length || children.length ? { kind: 'object', strip, children } : undefined;
}

function apply(plan: Plan, value: unknown): void {
  if (value === null || typeof value !== 'object') return;
  if (plan.kind === 'array') {
    if (Array.isArray(value)) for (const v of value) apply(plan.element, v);
    return;
  }
  if (Array.isArray(value)) return;
  const o = value as Record<string, unknown>;
  for (const k of plan.strip) if (o[k] === null) delete o[k];
  for (const [k, child] of plan.children) {
    const v = o[k];
    if (v !== null && typeof v === 'object') apply(child, v);
  }
}

/** The plan for a body schema (exported for tests); undefined when it has no optional field to clean. */
export function nullFieldPlan(schema: unknown): Plan | undefined {
  if (schema === null || typeof schema !== 'object' || !('_zod' in schema)) return undefined;
  return compile(schema as AnySchema);
}

/**
 * The validator compiler of every route: `base` (zod's), with a body's null-as-absent plan applied to the body before
 * it validates. Set with `app.setValidatorCompiler`; a route with a validator of its own builds on it
 * (routes/messaging/publish-body.ts).
 */
export function nullAwareCompiler<T>(base: FastifySchemaCompiler<T>): FastifySchemaCompiler<T> {
  return (route) => {
    const validate = base(route);
    const plan = route.httpPart === 'body' ? nullFieldPlan(route.schema) : undefined;
    if (!plan) return validate;
    return (data: unknown) => {
      apply(plan, data);
      return validate(data);
    };
  };
}

type Json = Record<string, unknown>;

function allowsNull(p: Json): boolean {
  if (p.type === 'null' || (Array.isArray(p.type) && p.type.includes('null'))) return true;
  if (Object.keys(p).length === 0) return true; // any value
  for (const k of ['anyOf', 'oneOf'] as const) if (Array.isArray(p[k]) && (p[k] as Json[]).some(allowsNull)) return true;
  return false;
}

function nullableOptionals(node: unknown, depth = 0): void {
  if (depth > 32 || node === null || typeof node !== 'object') return;
  const n = node as Json;
  for (const k of ['anyOf', 'oneOf', 'allOf'] as const) if (Array.isArray(n[k])) for (const x of n[k] as unknown[]) nullableOptionals(x, depth + 1);
  if (n.items) nullableOptionals(n.items, depth + 1);
  const props = n.properties as Record<string, Json> | undefined;
  if (!props || typeof props !== 'object') return;
  const required = new Set(Array.isArray(n.required) ? (n.required as string[]) : []);
  for (const [k, p] of Object.entries(props)) {
    nullableOptionals(p, depth + 1);
    if (!required.has(k) && !allowsNull(p)) {
      const { description, default: dflt, ...rest } = p;
      props[k] = { anyOf: [rest, { type: 'null' }], ...(description !== undefined ? { description } : {}), ...(dflt !== undefined ? { default: dflt } : {}) };
    }
  }
}

/**
 * OpenAPI: every optional property of a request body (inline, or in a `...Input` component) also allows null,
 * matching what the server accepts.
 */
export function nullOptionalFields(doc: Json): Json {
  const comps = (doc.components as Json | undefined)?.schemas as Record<string, unknown> | undefined;
  if (comps) for (const [name, c] of Object.entries(comps)) if (name.endsWith('Input')) nullableOptionals(c);
  for (const item of Object.values((doc.paths ?? {}) as Record<string, Record<string, Json>>)) {
    for (const op of Object.values(item)) {
      const content = (op?.requestBody as Json | undefined)?.content as Record<string, Json> | undefined;
      if (content) for (const media of Object.values(content)) nullableOptionals(media.schema);
    }
  }
  return doc;
}
