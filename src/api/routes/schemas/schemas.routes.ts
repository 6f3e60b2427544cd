import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { parseFilterParam, type CompiledSelector } from '../../../engine/selector/selector.js';
import { NotFoundError, ServiceUnavailableError, ValidationError } from '../../../errors.js';
import { SCHEMA_FORMATS, normaliseFormat } from '../../../schemas/formats.js';
import type { SchemaRegistry, SchemaVersion } from '../../../schemas/registry.js';
import { schemaRegistryOf } from '../../../schemas/schemas.service.js';
import type { ApiContext } from '../../context.js';
import { ErrorResponses, StatusResponse } from '../../schemas.js';

export const SchemaConfigDTO = z
  .object({
    uniqueId: z.string(),
    versionId: z.string(),
    epoch: z.number().int().optional(),
    name: z.string(),
    description: z.string().optional(),
    documentation: z.string().optional(),
    labels: z.record(z.string(), z.string()).optional().describe('omitted when empty; label `enforcement` (off, warn, reject) sets the enforcement'),
    ancestor: z.string().optional(),
    format: z.string().describe(`one of ${SCHEMA_FORMATS.join(', ')}`),
    schemaUrl: z.string().optional(),
    schema: z.unknown().optional().describe('the schema itself (a JSON Schema, an Avro schema, {proto, messageName}, ...; see docs/schemas.md)'),
    schemaBase64: z.string().optional(),
    createdAt: z.string(),
    modifiedAt: z.string(),
    notBefore: z.string().optional(),
    expiresAfter: z.string().optional(),
  })
  .meta({ id: 'SchemaConfigDTO' });

const SchemaPostDTO = z
  .object({
    schema: z.string().optional().describe('the schema config (SchemaConfigDTO fields) as a JSON string'),
    context: z.string().optional().describe('scope: the destination name or MQTT topic filter the schema applies to'),
  })
  .meta({ id: 'SchemaPostDTO' });

const Success = { status: 'Success' };
const idParam = z.object({ schemaId: z.string() });

function registryOf(ctx: ApiContext): SchemaRegistry {
  const reg = schemaRegistryOf(ctx.rt);
  if (!reg) throw new ServiceUnavailableError('The schema registry is not running (the server is starting); try again');
  return reg;
}

/** The selector `filter` over a schema's SchemaConfigDTO fields (uniqueId, name, format, versionId, labels, ...) and its context. */
function filterOf(raw: string | undefined): CompiledSelector | undefined {
  try {
    return parseFilterParam(raw);
  } catch (err) {
    throw new ValidationError(`Invalid filter: ${(err as Error).message}`);
  }
}
const selectable = (v: SchemaVersion) => ({ ...v.config, context: v.context });

/** A path segment decoded once more, as MAPS does for context and type ('%252F' -> '/'). */
function decodeAgain(raw: string, what: string): string {
  let v: string;
  try {
    v = decodeURIComponent(raw);
  } catch {
    throw new ValidationError('Invalid context encoding');
  }
  if (v.trim() === '') throw new ValidationError(`${what} is required`);
  return v;
}

/**
 * Schema management (MAPS SchemaQueryApi, reference #73-83), registered when RestApi.enableSchemaManagement.
 * Fixed from MAPS: every answer of a change is a StatusResponse object (MAPS answers DELETE /schemas with the bare
 * JSON string "Success"), an unknown schema's artifact is a JSON 404, a bad filter or body a 400, never a 500.
 */
export const schemaRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  if (!ctx.rt.config.RestApi.enableSchemaManagement) return;
  const tags = ['Schema Management'];
  const view = { permission: { permission: 'view_config' as const } };
  const manage = { permission: { permission: 'manage_config' as const } };

  app.get(
    '/api/v1/server/schemas',
    {
      config: view,
      schema: {
        tags,
        summary: 'Get all schemas',
        description: 'The current version of every schema. filter: selector over SchemaConfigDTO fields (uniqueId, name, format, versionId, ...) and context.',
        querystring: z.object({ filter: z.string().optional() }),
        response: { 200: z.array(SchemaConfigDTO), ...ErrorResponses },
      },
    },
    async (req) => {
      const sel = filterOf(req.query.filter);
      return registryOf(ctx)
        .list()
        .filter((v) => !sel || sel.matches(selectable(v)))
        .map((v) => v.config);
    },
  );

  app.post(
    '/api/v1/server/schemas',
    {
      config: manage,
      schema: {
        tags,
        summary: 'Add new schema',
        description:
          'body.schema: the schema config as a JSON string, e.g. "{\\"format\\":\\"json\\",\\"name\\":\\"temp\\",\\"schema\\":{...}}"; body.context: the ' +
          'destination or topic filter it applies to. A uniqueId already present adds a new version. A schema that does not compile is a 400 saying why.',
        body: SchemaPostDTO.nullish(),
        response: { 200: SchemaConfigDTO, ...ErrorResponses, 409: StatusResponse },
      },
    },
    async (req) => {
      const body = req.body;
      if (body === undefined || body === null) throw new ValidationError('Request body is required');
      if (body.context === undefined || body.context.trim() === '') throw new ValidationError('context is required');
      if (body.schema === undefined || body.schema.trim() === '') throw new ValidationError('schema is required');
      const added = await registryOf(ctx).add(body.schema, body.context.trim());
      ctx.rt.updates.schemaUpdate++;
      return added.config;
    },
  );

  app.delete(
    '/api/v1/server/schemas',
    {
      config: manage,
      schema: {
        tags,
        summary: 'Delete all schemas',
        description: 'Every schema, or those the filter (as for GET) selects. Answers a StatusResponse (MAPS: the bare string "Success").',
        querystring: z.object({ filter: z.string().optional() }),
        response: { 200: StatusResponse, ...ErrorResponses },
      },
    },
    async (req) => {
      const sel = filterOf(req.query.filter);
      const reg = registryOf(ctx);
      const ids = reg
        .list()
        .filter((v) => !sel || sel.matches(selectable(v)))
        .map((v) => v.config.uniqueId);
      if ((await reg.removeMany(ids)) > 0) ctx.rt.updates.schemaUpdate++;
      return Success;
    },
  );

  app.get(
    '/api/v1/server/schemas/formats',
    { config: view, schema: { tags, summary: 'Get supported formats', response: { 200: z.object({ data: z.array(z.string()) }).meta({ id: 'StringListResponse' }), ...ErrorResponses } } },
    async () => ({ data: [...SCHEMA_FORMATS] }),
  );

  app.get(
    '/api/v1/server/schemas/map',
    {
      config: view,
      schema: {
        tags,
        summary: 'Get schema mappings',
        description: '{data: {<context>: [schemaId, ...]}}',
        response: { 200: z.object({ data: z.record(z.string(), z.array(z.string())) }).meta({ id: 'SchemaMapResponse' }), ...ErrorResponses },
      },
    },
    async () => ({ data: registryOf(ctx).mappings() }),
  );

  app.get(
    '/api/v1/server/schemas/link-format',
    {
      config: view,
      schema: {
        tags,
        summary: 'Get link-format configuration',
        description:
          'RFC 6690 CoRE link format (application/link-format): one link per destination with a schema (rt="schema.destination", schema, format, ' +
          'anchor = its $schema/ topic) and one per schema artifact (rt="schema").',
        response: { 200: z.string(), ...ErrorResponses },
      },
    },
    async (_req, reply) => reply.type('application/link-format; charset=utf-8').send(registryOf(ctx).linkFormat()),
  );

  app.get(
    '/api/v1/server/schemas/context/:context',
    {
      config: view,
      schema: {
        tags,
        summary: 'Get schemas by context',
        description: 'The current version of each schema added with this context, each as a JSON string. The context is URL-decoded once more (as MAPS).',
        params: z.object({ context: z.string() }),
        response: { 200: z.array(z.string()), ...ErrorResponses },
      },
    },
    async (req) => {
      const context = decodeAgain(req.params.context, 'context');
      return registryOf(ctx)
        .list()
        .filter((v) => v.context === context)
        .map((v) => JSON.stringify(v.config));
    },
  );

  app.get(
    '/api/v1/server/schemas/type/:type',
    {
      config: view,
      schema: {
        tags,
        summary: 'Get schemas by type',
        description: 'The current version of each schema of this format (any case; msgpack = messagepack), each as a JSON string.',
        params: z.object({ type: z.string() }),
        response: { 200: z.array(z.string()), ...ErrorResponses },
      },
    },
    async (req) => {
      const type = decodeAgain(req.params.type, 'type');
      const format = normaliseFormat(type) ?? type.toLowerCase();
      return registryOf(ctx)
        .list()
        .filter((v) => v.config.format === format)
        .map((v) => JSON.stringify(v.config));
    },
  );

  app.get(
    '/api/v1/server/schemas/impl/:schemaId',
    {
      config: view,
      schema: {
        tags,
        summary: 'Get specific schema definition',
        description:
          "The raw schema artifact with its format's media type (json: application/schema+json, protobuf: application/x-protobuf (the .proto " +
          'source), avro: application/avro+json, xml: application/xml, cbor: application/cddl, messagepack/csv: application/schema+json, ' +
          'native/raw: application/octet-stream). ETag = sha256 of the body; If-None-Match with it answers 304. Cache-Control: public, ' +
          'max-age=31536000 for a versioned schema, else no-cache.',
        params: idParam,
        headers: z.object({ 'if-none-match': z.string().optional() }).passthrough(),
        response: { 200: z.any().describe('the artifact bytes'), 304: z.null().describe('Not Modified'), ...ErrorResponses },
      },
    },
    async (req, reply) => {
      const id = req.params.schemaId;
      const a = id.trim() === '' ? undefined : registryOf(ctx).artifact(id);
      if (!a) throw new NotFoundError(`Schema not found: ${id}`);
      const etag = `"${a.etag}"`;
      reply.header('etag', etag).header('cache-control', a.versioned ? 'public, max-age=31536000' : 'no-cache');
      const inm = req.headers['if-none-match'];
      if (inm !== undefined && inm.split(',').some((t) => t.trim().replace(/^W\//, '') === etag || t.trim() === a.etag || t.trim() === '*')) {
        return reply.code(304).send(undefined as unknown as null); // no body (null would be serialised as "null")
      }
      return reply.type(a.mediaType).header('content-length', a.body.length).send(a.body);
    },
  );

  app.get(
    '/api/v1/server/schemas/:schemaId',
    {
      config: view,
      schema: { tags, summary: 'Get specific schema', params: idParam, response: { 200: SchemaConfigDTO, ...ErrorResponses } },
    },
    async (req) => {
      const id = req.params.schemaId;
      if (id.trim() === '') throw new ValidationError('schemaId is required');
      const v = registryOf(ctx).get(id);
      if (!v) throw new NotFoundError(`Schema not found: ${id}`);
      return v.config;
    },
  );

  app.delete(
    '/api/v1/server/schemas/:schemaId',
    {
      config: manage,
      schema: { tags, summary: 'Delete specific schema', description: 'Every version of it.', params: idParam, response: { 200: StatusResponse, ...ErrorResponses } },
    },
    async (req) => {
      const id = req.params.schemaId;
      if (id.trim() === '') throw new ValidationError('schemaId is required');
      await registryOf(ctx).remove(id);
      ctx.rt.updates.schemaUpdate++;
      return Success;
    },
  );
};
