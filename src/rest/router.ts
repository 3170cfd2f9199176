import type { IncomingMessage, ServerResponse } from 'node:http';
import { createRequestContext, type AppDependencies, type RequestContext } from '../context.js';
import { ApiError, toApiError } from '../errors.js';
import type { Logger } from '../logger.js';
import { childAccounts } from './child-accounts.js';
import { creditAnalysis } from './credit-analysis.js';
import { header, queryParameters, sendError, sendJson, type ResponseOptions } from './http.js';
import { organizationDetails } from './organization-details.js';
import { userProfile } from './user-profile.js';

type Route = (context: RequestContext, parameters: Map<string, string[]>) => Promise<unknown>;

/** The four documented GET paths (api-spec, Endpoints). */
const ROUTES: Record<string, Route> = {
  '/auth/user-profile': (context) => userProfile(context),
  '/auth/organization-details': (context) => organizationDetails(context),
  '/auth/child-accounts': (context, parameters) => childAccounts(context, parameters),
  '/parent/credit-analysis': (context) => creditAnalysis(context),
};

export const ALLOWED_METHODS = 'GET, HEAD';

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

/**
 * Everything but GET and HEAD is answered 405 `METHOD_NOT_ALLOWED` with `Allow: GET, HEAD`
 * (decisions §6), here; returns whether it was.
 */
export function refusedMethod(request: IncomingMessage, response: ServerResponse, responseOptions: ResponseOptions): boolean {
  const method = request.method ?? 'GET';
  if (method === 'GET' || method === 'HEAD') return false;
  sendError(response, new MethodNotAllowedError(method), { ...responseOptions, headers: { ...responseOptions.headers, Allow: ALLOWED_METHODS } });
  return true;
}

/** Only the paths exactly as documented: no decoding, no dot segments, no doubled or back slashes. */
export function isRestPath(path: string): boolean {
  return Object.hasOwn(ROUTES, path);
}

/**
 * Parses the request, authenticates, calls the one service, shapes the envelope. Nothing else.
 * `path` and `query` are the request target as sent (split at the first `?`), not normalised: a
 * proxy that allows or denies by path sees the path that is served.
 */
export async function handleRest(
  request: IncomingMessage,
  response: ServerResponse,
  target: { path: string; query: string },
  deps: AppDependencies,
  logger: Logger,
  responseOptions: ResponseOptions,
): Promise<void> {
  const route = isRestPath(target.path) ? ROUTES[target.path] : undefined;
  if (!route) return sendError(response, new NotFoundError(target.path), responseOptions);
  if (refusedMethod(request, response, responseOptions)) return;
  const context = createRequestContext(
    deps,
    { authorization: header(request, 'authorization'), publicKey: header(request, 'x-public-key') },
    responseOptions.requestId,
    responseOptions.observed,
  );
  try {
    const body = await route(context, queryParameters(target.query, deps.config.limits.maxQueryParameters));
    sendJson(response, 200, body, { ...responseOptions, noStore: true });
  } catch (error) {
    const apiError = toApiError(error);
    if (!(error instanceof ApiError)) {
      logger.error('unexpected error in a REST route', { error, path: target.path, requestId: responseOptions.requestId, code: apiError.code });
    }
    sendError(response, apiError, {
      ...responseOptions,
      noStore: true,
      headers: { ...responseOptions.headers, ...(apiError.status === 401 ? { 'WWW-Authenticate': 'Bearer' } : {}) },
    });
  }
}
