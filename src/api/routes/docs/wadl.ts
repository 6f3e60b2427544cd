import type { RouteOptions } from 'fastify';
import { z } from 'zod';

/** WADL and its XSD grammar, generated from the live route table (never a hand-written file). */

function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

interface Op {
  method: string;
  path: string;
  summary?: string;
  params: Array<{ name: string; style: 'template' | 'query' }>;
  /** The WADL method id, unique in the document: method + path words, path parameters as `By<Name>`. */
  id: string;
  /** The XSD element of the 200 body (`<id>Response`), when the route declares one. */
  responseType?: string;
  route: RouteOptions;
}

function isZod(x: unknown): x is z.ZodType {
  return !!x && typeof x === 'object' && '_zod' in (x as object);
}

function keysOf(schema: unknown): string[] {
  if (!isZod(schema)) return [];
  const def = (schema as unknown as { shape?: Record<string, unknown> }).shape;
  return def ? Object.keys(def) : [];
}

function opName(method: string, url: string): string {
  const base = url
    .split('/')
    .filter((p) => p && p !== 'api' && p !== 'v1')
    .map((p) => (p.startsWith(':') ? `By${p.slice(1).charAt(0).toUpperCase()}${p.slice(2)}` : p))
    .map((p) => p.replace(/[^A-Za-z0-9]/g, ''))
    .map((p) => p.charAt(0).toUpperCase() + p.slice(1))
    .join('');
  return `${method.toLowerCase()}${base || 'Root'}`;
}

export function collectOps(routes: RouteOptions[]): Op[] {
  const ops: Op[] = [];
  for (const r of routes) {
    const methods = (Array.isArray(r.method) ? r.method : [r.method]).filter((m) => m !== 'HEAD');
    const schema = (r.schema ?? {}) as { hide?: boolean; summary?: string; querystring?: unknown; response?: Record<string, unknown> };
    if (schema.hide || r.url.includes('*') || r.url.startsWith('/swagger-ui') || r.url.startsWith('/application.wadl')) continue;
    for (const method of methods) {
      const params = [
        ...[...r.url.matchAll(/:([A-Za-z0-9_]+)/g)].map((m) => ({ name: m[1], style: 'template' as const })),
        ...keysOf(schema.querystring).map((name) => ({ name, style: 'query' as const })),
      ];
      const op: Op = { method, path: r.url.replace(/:([A-Za-z0-9_]+)/g, '{$1}'), summary: schema.summary, params, id: opName(method, r.url), route: r };
      ops.push(op);
    }
  }
  ops.sort((a, b) => a.path.localeCompare(b.path) || a.method.localeCompare(b.method));
  // Two paths that differ only in punctuation would share an id: number the later ones.
  const used = new Map<string, number>();
  for (const op of ops) {
    const n = used.get(op.id) ?? 0;
    used.set(op.id, n + 1);
    if (n > 0) op.id = `${op.id}${n + 1}`;
    const schema = (op.route.schema ?? {}) as { response?: Record<string, unknown> };
    if (schema.response?.['200'] && isZod(schema.response['200'])) op.responseType = `${op.id}Response`;
  }
  return ops;
}

export function buildWadl(routes: RouteOptions[], baseUrl: string): string {
  const byPath = new Map<string, Op[]>();
  for (const op of collectOps(routes)) byPath.set(op.path, [...(byPath.get(op.path) ?? []), op]);
  const lines = [
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>',
    '<application xmlns="http://wadl.dev.java.net/2009/02" xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:sy="urn:switchyard:api">',
    '  <doc title="Switchyard REST API, generated from the route table"/>',
    '  <grammars><include href="application.wadl/xsd0.xsd"/></grammars>',
    `  <resources base="${esc(baseUrl)}">`,
  ];
  for (const [path, ops] of byPath) {
    lines.push(`    <resource path="${esc(path)}">`);
    const templates = new Set(ops.flatMap((o) => o.params.filter((p) => p.style === 'template').map((p) => p.name)));
    for (const t of templates) lines.push(`      <param name="${esc(t)}" style="template" type="xs:string" required="true"/>`);
    for (const op of ops) {
      lines.push(`      <method name="${op.method}" id="${esc(op.id)}">`);
      if (op.summary) lines.push(`        <doc>${esc(op.summary)}</doc>`);
      const qs = op.params.filter((p) => p.style === 'query');
      if (qs.length) {
        lines.push('        <request>');
        for (const q of qs) lines.push(`          <param name="${esc(q.name)}" style="query" type="xs:string"/>`);
        lines.push('        </request>');
      }
      lines.push(`        <response status="200"><representation mediaType="application/json"${op.responseType ? ` element="sy:${op.responseType}"` : ''}/></response>`);
      lines.push('      </method>');
    }
    lines.push('    </resource>');
  }
  lines.push('  </resources>', '</application>');
  return lines.join('\n') + '\n';
}

function xsdType(schema: Record<string, unknown>, indent: string): string[] {
  const t = schema.type;
  if (t === 'object' && schema.properties) {
    const out = [`${indent}<xs:complexType><xs:sequence>`];
    for (const [name, sub] of Object.entries(schema.properties as Record<string, Record<string, unknown>>)) {
      const isArray = sub.type === 'array';
      const item = isArray ? ((sub.items as Record<string, unknown>) ?? {}) : sub;
      const occurs = isArray ? ' minOccurs="0" maxOccurs="unbounded"' : ' minOccurs="0"';
      const simple = simpleType(item);
      if (simple) out.push(`${indent}  <xs:element name="${esc(name)}" type="${simple}"${occurs}/>`);
      else {
        out.push(`${indent}  <xs:element name="${esc(name)}"${occurs}>`);
        out.push(...xsdType(item, indent + '    '));
        out.push(`${indent}  </xs:element>`);
      }
    }
    out.push(`${indent}</xs:sequence></xs:complexType>`);
    return out;
  }
  return [`${indent}<xs:complexType><xs:sequence><xs:any minOccurs="0" maxOccurs="unbounded" processContents="lax"/></xs:sequence></xs:complexType>`];
}

function simpleType(s: Record<string, unknown>): string | undefined {
  switch (s.type) {
    case 'string':
      return 'xs:string';
    case 'integer':
      return 'xs:long';
    case 'number':
      return 'xs:double';
    case 'boolean':
      return 'xs:boolean';
    default:
      return undefined;
  }
}

/** The XSD of every JSON response body, one element per operation. */
export function buildXsd(routes: RouteOptions[]): string {
  const lines = [
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>',
    '<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema" targetNamespace="urn:switchyard:api" elementFormDefault="qualified">',
  ];
  for (const op of collectOps(routes)) {
    const resp = ((op.route.schema ?? {}) as { response?: Record<string, unknown> }).response?.['200'];
    if (!op.responseType || !isZod(resp)) continue;
    let json: Record<string, unknown>;
    try {
      json = z.toJSONSchema(resp, { io: 'output', unrepresentable: 'any', cycles: 'ref' }) as Record<string, unknown>;
    } catch {
      json = {};
    }
    const simple = simpleType(json);
    if (simple) lines.push(`  <xs:element name="${op.responseType}" type="${simple}"/>`);
    else if (json.type === 'array') {
      lines.push(`  <xs:element name="${op.responseType}"><xs:complexType><xs:sequence>`);
      const item = (json.items as Record<string, unknown>) ?? {};
      const s = simpleType(item);
      if (s) lines.push(`    <xs:element name="item" type="${s}" minOccurs="0" maxOccurs="unbounded"/>`);
      else {
        lines.push('    <xs:element name="item" minOccurs="0" maxOccurs="unbounded">');
        lines.push(...xsdType(item, '      '));
        lines.push('    </xs:element>');
      }
      lines.push('  </xs:sequence></xs:complexType></xs:element>');
    } else {
      lines.push(`  <xs:element name="${op.responseType}">`);
      lines.push(...xsdType(json, '    '));
      lines.push('  </xs:element>');
    }
  }
  lines.push('</xs:schema>');
  return lines.join('\n') + '\n';
}
