/**
 * Expected errors, carrying the contract's code and status (decisions §6); every other error is
 * masked. They capture no stack: they are answers, and a flood of bad tokens paid for each one.
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

/** The expected errors whose message may be given: by class name, code, status and default message. */
const EXPECTED = {
  UnauthorizedError: ['UNAUTHORIZED', 401, 'A valid access token is required.'],
  UnauthorizedAccessError: ['UNAUTHORIZED_ACCESS', 401, 'Only parent accounts may use this operation.'],
  AccountInactiveError: ['ACCOUNT_INACTIVE', 403, 'The account is not active.'],
  CreditsDepletedError: [
    'CREDITS_DEPLETED',
    403,
    "The organization's credits are depleted; access for its users is blocked until credits are added.",
  ],
  UserNotFoundError: ['USER_NOT_FOUND', 404, 'The account was not found.'],
  MissingParentPublicKeyError: [
    'MISSING_PARENT_PUBLIC_KEY',
    400,
    'Send an access token in Authorization or a public key in X-Public-Key.',
  ],
  InvalidParentAccountError: [
    'INVALID_PARENT_ACCOUNT',
    400,
    'The public key does not belong to a usable parent account.',
  ],
  InvalidLimitError: ['INVALID_LIMIT', 400, 'limit must be a whole number from 1 to 100.'],
  InvalidPaginationTokenError: [
    'INVALID_PAGINATION_TOKEN',
    400,
    'The pagination token is invalid; start again from the first page.',
  ],
  InvalidSearchError: ['INVALID_SEARCH', 400, 'search must be at most 200 characters.'],
  InvalidMonthsError: ['INVALID_MONTHS', 400, 'months must be a whole number from 1 to 36.'],
  InternalError: ['INTERNAL_ERROR', 500, 'An unexpected error occurred.'],
  PayloadTooLargeError: ['PAYLOAD_TOO_LARGE', 413, 'The request body is too large.'],
  UriTooLongError: ['URI_TOO_LONG', 414, 'The request target (path and query string) is too long.'],
  BadRequestError: ['BAD_REQUEST', 400, 'The request is malformed.'],
  InvalidFormatError: ['INVALID_FORMAT', 400, 'format must be csv or ndjson.'],
} as const;

/** The classes of `EXPECTED`, each named as its key (for the log line). */
function expectedClasses<K extends string>(
  table: Record<K, readonly [string, number, string]>,
): Record<K, new (message?: string) => ApiError> {
  const classes = {} as Record<K, new (message?: string) => ApiError>;
  for (const [name, [code, status, fallback]] of Object.entries(table) as [K, readonly [string, number, string]][]) {
    classes[name] = class extends ApiError {
      constructor(message = fallback) {
        super(code, status, message);
      }
    };
    Object.defineProperty(classes[name], 'name', { value: name });
  }
  return classes;
}

export const {
  UnauthorizedError,
  UnauthorizedAccessError,
  AccountInactiveError,
  CreditsDepletedError,
  UserNotFoundError,
  MissingParentPublicKeyError,
  InvalidParentAccountError,
  InvalidLimitError,
  InvalidPaginationTokenError,
  InvalidSearchError,
  InvalidMonthsError,
  InternalError,
  PayloadTooLargeError,
  UriTooLongError,
  BadRequestError,
  InvalidFormatError,
} = expectedClasses(EXPECTED);

export class InvalidDateFormatError extends ApiError {
  constructor(message: string) {
    super('INVALID_DATE_FORMAT', 400, message);
  }
}

export class ServiceUnavailableError extends ApiError {
  constructor(message = 'The service is temporarily unavailable; try again shortly.', retryAfterSeconds?: number) {
    super('SERVICE_UNAVAILABLE', 503, message, retryAfterSeconds);
  }
}

const UNAVAILABLE_CODES = new Set(
  'ECONNREFUSED ECONNRESET ETIMEDOUT ENOTFOUND EHOSTUNREACH EPIPE 57P01 57P03 57014 53300'.split(' '),
);

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

/** The error a GraphQL error was raised from, unwrapped by shape (more than one graphql-js may be loaded). */
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
