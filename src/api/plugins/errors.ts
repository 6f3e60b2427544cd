import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyBaseLogger, FastifyError, FastifyInstance } from 'fastify';
import { hasZodFastifySchemaValidationErrors, isResponseSerializationError } from 'fastify-type-provider-zod';
import FindMyWay, { type HTTPMethod } from 'find-my-way';
import { BrokerError } from '../../errors.js';
import { MAX_REQUEST_HEAD_BYTES } from '../limits.js';

/**
 * The one error handler: operational errors and validation errors become 4xx `{"status": "..."}` naming the field
 * and the problem; unknown routes are a JSON 404 and a known path with the wrong method a 405 with `Allow`.
 * Anything else is a bug: logged, and answered 500 without details.
 */
function fieldOf(instancePath: string, context: string | undefined): string {
  const where = context === 'querystring' ? 'query' : context === 'params' ? 'path' : context === 'headers' ? 'header' : 'body';
  const path = instancePath.replace(/^\//, '').replace(/\//g, '.');
  return path ? `${where} field '${path}'` : where;
}

/** `log`: the REST logger (the Fastify instance has none: app.ts). */
export function registerErrorHandling(app: FastifyInstance, log: FastifyBaseLogger): void {
  const shadow = FindMyWay();
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    for (const m of methods) {
      try {
        shadow.on(m as HTTPMethod, route.url, () => {});
      } catch {
        /* duplicate registration (HEAD auto-routes) */
      }
    }
  });

  app.setErrorHandler((error: FastifyError, request, reply) => {
    if (hasZodFastifySchemaValidationErrors(error)) {
      const problems = error.validation.map((v) => {
        const params = v.params as { issue?: { message?: string } } | undefined;
        return `${fieldOf(v.instancePath, error.validationContext)}: ${params?.issue?.message ?? v.message}`;
      });
      return reply.code(400).send({ status: `Invalid request: ${problems.join('; ')}` });
    }
    if (error instanceof BrokerError) {
      return reply.code(error.statusCode).send({ status: error.message });
    }
    if (isResponseSerializationError(error)) {
      log.error({ err: error, url: request.url }, 'response did not match its schema');
      return reply.code(500).send({ status: 'Internal server error' });
    }
    const code = error.statusCode ?? 500;
    if (code >= 400 && code < 500) {
      let status = error.message;
      switch (error.code) {
        case 'FST_ERR_CTP_INVALID_JSON_BODY':
        case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
          status = `Malformed JSON body: ${error.message}`;
          break;
        case 'FST_ERR_CTP_EMPTY_JSON_BODY':
          status = 'Request body is required: the Content-Type is application/json but the body is empty';
          break;
        case 'FST_ERR_CTP_BODY_TOO_LARGE':
          status = `Request body is too large: the limit is ${app.initialConfig.bodyLimit} bytes`;
          break;
        case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
          status = `Unsupported Content-Type: ${request.headers['content-type'] ?? 'none'}`;
          break;
        default:
          if (error instanceof SyntaxError) status = `Malformed JSON body: ${error.message}`;
      }
      return reply.code(code).send({ status });
    }
    log.error({ err: error, url: request.url, method: request.method }, 'unhandled error');
    return reply.code(500).send({ status: 'Internal server error' });
  });

  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0];
    const allowed = (['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'] as const).filter((m) => m !== request.method && shadow.find(m, path));
    if (allowed.length && request.method !== 'OPTIONS') {
      return reply
        .code(405)
        .header('allow', allowed.join(', '))
        .send({ status: `Method ${request.method} is not allowed on ${path}; allowed: ${allowed.join(', ')}` });
    }
    return reply.code(404).send({ status: `Not found: ${request.method} ${path}` });
  });
}

/**
 * Errors Node's HTTP parser raises before there is a request (Fastify's `clientErrorHandler`): answered like every
 * other error, `{"status": "..."}` — 431 for headers over the limit, 408 for a request that took too long, 400 for
 * anything the parser could not read — then the connection is closed.
 */
export function clientErrorHandler(err: Error & { code?: string }, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  let code = 400;
  let status = `Malformed HTTP request: ${err.code ?? err.message}`;
  if (err.code === 'HPE_HEADER_OVERFLOW') {
    code = 431;
    status = `Request headers are too large: the limit is ${MAX_REQUEST_HEAD_BYTES} bytes in all, request line included`;
  } else if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    code = 408;
    status = 'The request took too long to arrive';
  }
  const body = JSON.stringify({ status });
  // a request whose response has begun (e.g. a 401 while the body still trickles in) gets nothing more written
  if (socket.writable && (socket as { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent !== true) {
    socket.write(`HTTP/1.1 ${code} ${STATUS_CODES[code]}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\n\r\n${body}`);
  }
  socket.destroy();
}
