/**
 * Operational errors. Every failure a caller can cause is a BrokerError subclass with an HTTP status code;
 * the one Fastify error handler maps them to `{"status": message}`. Programming errors stay plain Errors.
 */
export class BrokerError extends Error {
  readonly statusCode: number;
  constructor(message: string, statusCode = 400, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.statusCode = statusCode;
  }
}

/** 400: the request is malformed or names something in a wrong way. */
export class ValidationError extends BrokerError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, 400, options);
  }
}

/** 401: no valid principal. */
export class UnauthenticatedError extends BrokerError {
  constructor(message = 'User not authenticated') {
    super(message, 401);
  }
}

/** 403: a principal without the permission, or a refused token. */
export class ForbiddenError extends BrokerError {
  constructor(message = 'Access denied') {
    super(message, 403);
  }
}

/** 404: the named thing does not exist. */
export class NotFoundError extends BrokerError {
  constructor(message: string) {
    super(message, 404);
  }
}

/** 409: the request makes no sense in the current state. */
export class ConflictError extends BrokerError {
  constructor(message: string) {
    super(message, 409);
  }
}

/**
 * 503: the part of the server the request needs is not running (booting, restarting, stopping, or an actor that has
 * not settled yet); asking again later can succeed. The one answer for "not running" everywhere.
 */
export class ServiceUnavailableError extends BrokerError {
  constructor(message: string) {
    super(message, 503);
  }
}

/** 413: too large. */
export class PayloadTooLargeError extends BrokerError {
  constructor(message: string) {
    super(message, 413);
  }
}

/** 429: flow control refused the request (a queue is full); retry later. */
export class QuotaExceededError extends BrokerError {
  constructor(message: string) {
    super(message, 429);
  }
}

/** A selector (filter) that does not parse. `offset` is zero-based, `line`/`column` one-based. */
export class SelectorSyntaxError extends ValidationError {
  readonly offset: number;
  readonly line: number;
  readonly column: number;
  constructor(message: string, location: { offset: number; line: number; column: number }, options?: { cause?: unknown }) {
    super(message, options);
    this.offset = location.offset;
    this.line = location.line;
    this.column = location.column;
  }
}

/** Start-up configuration error: names the file, the key and what was expected. */
export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}
