/**
 * Expected errors: one base class carrying the contract's code and HTTP status (decisions §6).
 * Both transports show `code` and `message` of these; every other error is masked.
 *
 * They are answers, not faults, so they capture no stack trace: capturing one was the largest
 * single cost of a child's GraphQL `organization` (its masked secret is decided by a refused
 * scope), and every refused request (a flood of bad tokens among them) paid it. An unexpected
 * error keeps its own stack: `toApiError` wraps it, and the log line carries the original.
 */
export class ApiError extends Error {
  constructor(
    readonly code: string,
    readonly status: number,
    message: string,
    /** When the caller may try again: sent as `Retry-After` (REST) and `retryAfterSeconds` (GraphQL). */
    readonly retryAfterSeconds?: number,
  ) {
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    super(message);
    Error.stackTraceLimit = limit;
    this.name = new.target.name;
  }
}

export class UnauthorizedError extends ApiError {
  constructor(message = 'A valid access token is required.') {
    super('UNAUTHORIZED', 401, message);
  }
}

export class UnauthorizedAccessError extends ApiError {
  constructor(message = 'Only parent accounts may use this operation.') {
    super('UNAUTHORIZED_ACCESS', 401, message);
  }
}

export class AccountInactiveError extends ApiError {
  constructor(message = 'The account is not active.') {
    super('ACCOUNT_INACTIVE', 403, message);
  }
}

export class CreditsDepletedError extends ApiError {
  constructor(
    message = "The organization's credits are depleted; access for its users is blocked until credits are added.",
  ) {
    super('CREDITS_DEPLETED', 403, message);
  }
}

export class UserNotFoundError extends ApiError {
  constructor(message = 'The account was not found.') {
    super('USER_NOT_FOUND', 404, message);
  }
}

export class MissingParentPublicKeyError extends ApiError {
  constructor(message = 'Send an access token in Authorization or a public key in X-Public-Key.') {
    super('MISSING_PARENT_PUBLIC_KEY', 400, message);
  }
}

export class InvalidParentAccountError extends ApiError {
  constructor(message = 'The public key does not belong to a usable parent account.') {
    super('INVALID_PARENT_ACCOUNT', 400, message);
  }
}

export class InvalidDateFormatError extends ApiError {
  constructor(message: string) {
    super('INVALID_DATE_FORMAT', 400, message);
  }
}

export class InvalidLimitError extends ApiError {
  constructor(message = 'limit must be a whole number from 1 to 100.') {
    super('INVALID_LIMIT', 400, message);
  }
}

export class InvalidPaginationTokenError extends ApiError {
  constructor(message = 'The pagination token is invalid; start again from the first page.') {
    super('INVALID_PAGINATION_TOKEN', 400, message);
  }
}

export class InvalidSearchError extends ApiError {
  constructor(message = 'search must be at most 200 characters.') {
    super('INVALID_SEARCH', 400, message);
  }
}

export class InvalidMonthsError extends ApiError {
  constructor(message = 'months must be a whole number from 1 to 36.') {
    super('INVALID_MONTHS', 400, message);
  }
}

export class ServiceUnavailableError extends ApiError {
  constructor(message = 'The service is temporarily unavailable; try again shortly.', retryAfterSeconds?: number) {
    super('SERVICE_UNAVAILABLE', 503, message, retryAfterSeconds);
  }
}

export class InternalError extends ApiError {
  constructor(message = 'An unexpected error occurred.') {
    super('INTERNAL_ERROR', 500, message);
  }
}

const UNAVAILABLE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EHOSTUNREACH',
  'EPIPE',
  '57P01',
  '57P03',
  '57014',
  '53300',
]);

/** True when an error means the database cannot be reached or did not answer in time. */
export function isDatabaseUnavailable(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e && depth < 5; depth++) {
    const err = e as { code?: unknown; message?: unknown; cause?: unknown; name?: unknown };
    if (typeof err.code === 'string' && UNAVAILABLE_CODES.has(err.code)) return true;
    if (err.name === 'PrismaClientInitializationError') return true;
    if (
      typeof err.message === 'string' &&
      /connection terminated|timeout exceeded when trying to connect|Connection terminated|connect ECONNREFUSED|Can't reach database|statement timeout|Query read timeout|DatabaseNotReachable|ConnectionClosed|SocketTimeout/i.test(
        err.message,
      )
    )
      return true;
    e = err.cause;
  }
  return false;
}

/**
 * The error a GraphQL error was raised from: located errors wrap the thrown one, sometimes twice.
 * Unwrapped by shape, since more than one copy of graphql-js may be loaded.
 */
export function innermostError(error: unknown): unknown {
  let original = error;
  while (original instanceof Error && 'originalError' in original && original.originalError instanceof Error)
    original = original.originalError;
  return original;
}

/** The error a client may see: expected errors as they are, database outages as 503, the rest masked. */
export function toApiError(error: unknown): ApiError {
  if (error instanceof ApiError) return error;
  if (isDatabaseUnavailable(error)) return new ServiceUnavailableError();
  return new InternalError();
}

export class PayloadTooLargeError extends ApiError {
  constructor(message = 'The request body is too large.') {
    super('PAYLOAD_TOO_LARGE', 413, message);
  }
}

export class HeaderTooLargeError extends ApiError {
  constructor(message = 'The request headers are too large.') {
    super('REQUEST_HEADER_FIELDS_TOO_LARGE', 431, message);
  }

  static forHeader(name: string): HeaderTooLargeError {
    return new HeaderTooLargeError(
      `The ${name.length > 40 || !/^[A-Za-z0-9-]+$/.test(name) ? 'a' : name} header is too long.`,
    );
  }
}

export class UriTooLongError extends ApiError {
  constructor(message = 'The request target (path and query string) is too long.') {
    super('URI_TOO_LONG', 414, message);
  }
}

/** A request the HTTP layer cannot take as it is (a malformed Host header, an unparsable head). */
export class BadRequestError extends ApiError {
  constructor(message = 'The request is malformed.') {
    super('BAD_REQUEST', 400, message);
  }
}

/** The client went away before its request was read: nobody is left to answer. Not an ApiError. */
export class ClientClosedError extends Error {
  constructor() {
    super('the client closed the connection before its request was read');
    this.name = 'ClientClosedError';
  }
}

export class RateLimitedError extends ApiError {
  constructor(retryAfterSeconds: number, message = `Too many requests; try again in ${retryAfterSeconds} s.`) {
    super('RATE_LIMITED', 429, message, retryAfterSeconds);
  }
}

export class InvalidFormatError extends ApiError {
  constructor(message = 'format must be csv or ndjson.') {
    super('INVALID_FORMAT', 400, message);
  }
}

/** An export is already running for this organization, or the instance runs as many as it allows. */
export class ExportBusyError extends ApiError {
  constructor(message: string) {
    super('EXPORT_BUSY', 429, message);
  }
}

export class MethodNotAllowedError extends ApiError {
  constructor(method: string) {
    super('METHOD_NOT_ALLOWED', 405, `${method} is not allowed here; use GET.`);
  }
}

export class NotFoundError extends ApiError {
  constructor(path: string) {
    super('NOT_FOUND', 404, `No resource at ${path.length > 100 ? `${path.slice(0, 100)}…` : path}.`);
  }
}
