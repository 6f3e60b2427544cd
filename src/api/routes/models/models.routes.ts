import fastifyMultipart from '@fastify/multipart';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { FastifyRequest } from 'fastify';
import { BrokerError, ForbiddenError, ValidationError } from '../../../errors.js';
import { costMessage } from '../../../models/functions.js';
import { modelFunctionsOf, modelStoreOf } from '../../../models/models.service.js';
import { ModelsDisabledError, checkModelName, type ModelCheck, type ModelStore } from '../../../models/store.js';
import { ANONYMOUS } from '../../../security/types.js';
import type { ApiContext } from '../../context.js';
import { ErrorResponses, StatusResponse } from '../../schemas.js';

const nameParam = z.object({ modelName: z.string() });
const Success = { status: 'Success' };

/**
 * The ML model store (MAPS ModelStoreApi, reference #68-72): upload (multipart/form-data, part `file`, streamed to
 * disk, atomic), download (Content-Disposition: attachment), HEAD, delete, list. Names are validated before any
 * file system call; a name of several path segments (`../../etc/passwd`) is a 400 too, not a 404. With
 * `MessageDaemon.modelStore.enabled: false` every route answers 406 as MAPS does without ML.
 */
export const modelRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  const cfg = ctx.rt.config.MessageDaemon.modelStore;
  // encapsulated in this plugin: only these routes parse multipart bodies
  await app.register(fastifyMultipart, {
    limits: { fileSize: cfg.maxModelSize, files: 1, fields: 16, parts: 17, fieldSize: 65536, headerPairs: 100 },
    throwFileSizeLimit: true,
  });
  const tags = ['ML Model Store'];
  const view = { permission: { permission: 'view_config' as const } };
  const manage = { permission: { permission: 'manage_config' as const } };
  const storeOf = (): ModelStore => {
    const s = modelStoreOf(ctx.rt);
    if (!s) throw new ModelsDisabledError();
    return s;
  };
  /** Creating, replacing or deleting a model also needs train_model on Model <name> (admins hold it on Model *). */
  const requireTrain = (req: FastifyRequest, name: string): void => {
    const principal = req.principal ?? ANONYMOUS;
    if (!ctx.rt.security.isAllowed(principal, 'train_model', 'Model', name)) {
      const message = `Access denied: ${req.method} ${req.routeOptions.url} needs the permission train_model on Model ${name}`;
      ctx.rt.security.audit?.denied({ username: principal.username, method: req.method, permission: 'train_model', resourceType: 'Model', resourceKey: name }, message);
      throw new ForbiddenError(message);
    }
  };
  /** An uploaded Switchyard model is measured in the loader's worker: one too costly to evaluate is refused (400). */
  const costCheck = (name: string): ModelCheck => async (tmp) => {
    const fns = modelFunctionsOf(ctx.rt);
    if (!fns) return;
    let r;
    try {
      r = await fns.loader.load(tmp, fns.maxEvaluationCost);
    } catch (err) {
      throw new ValidationError(`The model could not be checked: ${(err as Error).message}`);
    }
    if (r.type === 'too-costly') throw new ValidationError(costMessage(name, r.kind, r.shape, r.cost, fns.maxEvaluationCost));
  };

  app.get(
    '/api/v1/server/models',
    { config: view, schema: { tags, summary: 'List all models', response: { 200: z.array(z.string()), ...ErrorResponses, 406: StatusResponse } } },
    async () => storeOf().list(),
  );

  // HEAD before GET: Fastify then keeps this one instead of generating one from the GET route
  app.head(
    '/api/v1/server/models/:modelName',
    {
      config: { ...view, swagger: { exposeHeadRoute: true } },
      schema: { tags, summary: 'Check if model exists', description: '200 when it exists, 404 when not; no body.', params: nameParam },
    },
    async (req, reply) => {
      const store = modelStoreOf(ctx.rt);
      if (!store) return reply.code(406).send();
      checkModelName(req.params.modelName);
      const size = await store.size(req.params.modelName);
      if (size === undefined) return reply.code(404).send();
      return reply.code(200).header('content-length', size).header('content-type', 'application/octet-stream').send();
    },
  );

  app.get(
    '/api/v1/server/models/:modelName',
    {
      config: view,
      schema: {
        tags,
        summary: 'Download model',
        description: 'The model bytes (application/octet-stream, Content-Disposition: attachment; filename="<modelName>"), streamed.',
        params: nameParam,
        response: { 200: z.any().describe('model bytes'), ...ErrorResponses, 406: StatusResponse },
      },
    },
    async (req, reply) => {
      const name = checkModelName(req.params.modelName);
      const { stream, size } = await storeOf().open(name);
      return reply.type('application/octet-stream').header('content-disposition', `attachment; filename="${name}"`).header('content-length', size).send(stream);
    },
  );

  app.post(
    '/api/v1/server/models/:modelName',
    {
      config: manage,
      schema: {
        tags,
        summary: 'ML Model upload',
        description:
          'multipart/form-data with the model in the part named `file`; streamed to disk and written atomically (the old model stays until the ' +
          'new one is complete); replaces a model of the same name. Larger than MessageDaemon.modelStore.maxModelSize: 413. Also needs train_model on ' +
          'Model <modelName> (403). A new name beyond maxModels (uploads and trainings under way counted): 409. A Switchyard model too costly to ' +
          'evaluate (maxEvaluationCost): 400. A malformed multipart body (no or wrong boundary, truncated): 400 with the parser\'s reason; nothing is kept.',
        params: nameParam,
        consumes: ['multipart/form-data'],
        response: { 200: StatusResponse, ...ErrorResponses, 406: StatusResponse, 409: StatusResponse, 413: StatusResponse },
      },
    },
    async (req) => {
      const name = checkModelName(req.params.modelName);
      const store = storeOf();
      requireTrain(req, name);
      if (!req.isMultipart()) throw new ValidationError('File must be provided: send multipart/form-data with the model in a part named "file"');
      let written = false;
      try {
        for await (const part of req.parts()) {
          if (part.type !== 'file') continue;
          if (part.fieldname !== 'file' || written) {
            part.file.resume(); // not ours: discard
            continue;
          }
          await store.write(name, part.file, () => part.file.truncated, costCheck(name));
          written = true;
        }
      } catch (err) {
        throw multipartError(err);
      }
      if (!written) throw new ValidationError('File must be provided: no part named "file" in the form');
      return Success;
    },
  );

  app.delete(
    '/api/v1/server/models/:modelName',
    { config: manage, schema: { tags, summary: 'Delete model', params: nameParam, response: { 200: StatusResponse, ...ErrorResponses, 406: StatusResponse } } },
    async (req) => {
      const name = checkModelName(req.params.modelName);
      const store = storeOf();
      requireTrain(req, name);
      await store.delete(name);
      return Success;
    },
  );

  // A model name of several segments ('../../etc/passwd' as sent by a client that does not normalise the path) is
  // refused like any other invalid name, rather than falling through to a 404.
  // (one route per method, with the permission of the named route of that method)
  const invalid = async (): Promise<never> => {
    throw new ValidationError("Invalid model name: a model name is one path segment (no '/')");
  };
  const hidden = { tags, summary: 'Invalid model names (several path segments)', hide: true, response: { 400: StatusResponse, 401: StatusResponse, 403: StatusResponse } };
  app.get('/api/v1/server/models/*', { config: view, schema: hidden }, invalid);
  app.post('/api/v1/server/models/*', { config: manage, schema: hidden }, invalid);
  app.delete('/api/v1/server/models/*', { config: manage, schema: hidden }, invalid);
};

/**
 * An error while reading a multipart upload: the parser's (busboy: "Multipart: Boundary not found", "Unexpected end
 * of multipart data", a boundary longer than it accepts, ...) is the client's fault, a 400 with its reason; limits
 * keep their 4xx; a file system error (it has a syscall) stays what it is. The store has removed its temp file.
 */
function multipartError(err: unknown): unknown {
  if (err instanceof BrokerError) return err;
  const e = err as (Error & { statusCode?: number; syscall?: string }) | undefined;
  if (!(e instanceof Error)) return new ValidationError(`Malformed multipart body: ${String(err)}`);
  if (typeof e.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) return err;
  if (e.syscall !== undefined) return err;
  return new ValidationError(`Malformed multipart body: ${e.message}`, { cause: err });
}
