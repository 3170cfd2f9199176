import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Config } from './config.js';
import { requestIdFrom, type AppDependencies } from './context.js';
import type { Database } from './db/database.js';
import { EntityCache } from './db/entity-cache.js';
import { ApiError, HeaderTooLargeError, PayloadTooLargeError, RateLimitedError, ServiceUnavailableError, toApiError } from './errors.js';
import { createGraphQLServer } from './graphql/http.js';
import { createGraphQLHandler } from './graphql/yoga.js';
import type { Logger } from './logger.js';
import { RateLimiter } from './rate-limit.js';
import { sendError, sendJson, type ResponseOptions } from './rest/http.js';
import { ALLOWED_METHODS, handleRest, isRestPath } from './rest/router.js';
import { RetrievalCounter } from './services/retrieval-counter.js';

export type App = {
  handle(request: IncomingMessage, response: ServerResponse): void;
  /** Writes what is still buffered (the retrieval counter). */
  close(): Promise<void>;
  /** From now on every answer closes its connection (shutdown is under way). */
  drain(): void;
  deps: AppDependencies;
};

const ALLOWED_REQUEST_HEADERS = 'Authorization, Content-Type, X-Public-Key, X-Request-Id';
const EXPOSED_HEADERS = 'X-Request-Id, WWW-Authenticate, Allow, Retry-After, RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset, RateLimit-Policy';
/** Bearer tokens may be long (they are refused as tokens past 8 KiB); the node parser must let them reach us. */
const MAX_AUTHORIZATION_BYTES = 2 * 1024 * 1024;

/** CORS for browser callers; no cookies are involved, so credentials are never allowed. */
function corsHeaders(config: Config, origin: string | undefined): Record<string, string> {
  if (!origin) return {};
  if (config.corsOrigins === '*') return { 'Access-Control-Allow-Origin': '*', 'Access-Control-Expose-Headers': EXPOSED_HEADERS };
  if (!config.corsOrigins.includes(origin)) return { Vary: 'Origin' };
  return { 'Access-Control-Allow-Origin': origin, Vary: 'Origin', 'Access-Control-Expose-Headers': EXPOSED_HEADERS };
}

/** The first header value longer than allowed (Authorization is judged by the token check). */
function oversizedHeader(request: IncomingMessage, maxBytes: number): string | undefined {
  for (let i = 0; i < request.rawHeaders.length; i += 2) {
    const name = request.rawHeaders[i]!;
    if (name.toLowerCase() === 'authorization') continue;
    if (Buffer.byteLength(request.rawHeaders[i + 1]!) > maxBytes) return name;
  }
  return undefined;
}

/** The request handler: /graphql to Yoga, the REST paths to rest/, /health; the envelope for the rest. */
export function createApp(options: { config: Config; database: Database; logger: Logger; now?: () => Date }): App {
  const { config, database, logger } = options;
  const feed = database.changeFeed({
    onStateChange: (live, error) =>
      live
        ? logger.info('listening for database changes; cache in use')
        : logger.warn('database change listener lost; cache bypassed until it is back', { error }),
  });
  const deps: AppDependencies = {
    config,
    database,
    cache: new EntityCache(feed, config.cache),
    retrievals: new RetrievalCounter(database.prisma, (error) =>
      logger.warn('retrieval counter write failed; kept for the next attempt', { error }),
    ),
    now: options.now ?? (() => new Date()),
  };
  const serveGraphQL = createGraphQLServer(createGraphQLHandler(deps, logger), config.limits.maxBodyBytes);
  const limiter = new RateLimiter(config.rateLimit, database.pgPool);
  let draining = false;

  async function handle(request: IncomingMessage, response: ServerResponse, requestId: string) {
    const url = new URL(request.url ?? '/', `http://${request.headers.host && /^[A-Za-z0-9.:[\]-]{1,255}$/.test(request.headers.host) ? request.headers.host : 'localhost'}`);
    const origin = request.headers.origin;
    const responseOptions: ResponseOptions = { requestId, headers: corsHeaders(config, typeof origin === 'string' ? origin : undefined) };
    if (draining) response.setHeader('Connection', 'close');
    response.on('finish', () => {
      logger.info('request', { requestId, method: request.method, path: url.pathname, status: response.statusCode });
    });
    const tooLong = oversizedHeader(request, config.limits.maxHeaderBytes);
    if (tooLong) return sendError(response, new HeaderTooLargeError(tooLong), responseOptions);
    if (request.method === 'OPTIONS' && request.headers['access-control-request-method'] && (isRestPath(url.pathname) || url.pathname === '/health')) {
      response.writeHead(204, {
        ...responseOptions.headers,
        'Access-Control-Allow-Methods': ALLOWED_METHODS,
        'Access-Control-Allow-Headers': ALLOWED_REQUEST_HEADERS,
        'Access-Control-Max-Age': '600',
        'X-Request-Id': requestId,
      });
      response.end();
      return;
    }
    if (url.pathname === '/health') {
      return database.sql
        .query('SELECT 1 AS ok')
        .then(() =>
          sendJson(response, 200, { status: 'ok', database: database.kind, cache: feed.live ? 'live' : 'bypassed' }, responseOptions),
        )
        .catch(() => sendError(response, new ServiceUnavailableError(), responseOptions));
    }
    const verdict = await limiter.check(request);
    responseOptions.headers = { ...responseOptions.headers, ...verdict.headers };
    if (!verdict.allowed) return sendError(response, new RateLimitedError(verdict.retryAfterSeconds), responseOptions);
    if (url.pathname === '/graphql') return serveGraphQL(request, response, url, responseOptions);
    return handleRest(request, response, url, deps, logger, responseOptions);
  }

  return {
    deps,
    close: async () => {
      await deps.retrievals.close();
      deps.cache.close();
      await feed.close();
    },
    drain: () => {
      draining = true;
    },
    handle(request, response) {
      const requestId = requestIdFrom(request.headers['x-request-id'] as string | undefined);
      handle(request, response, requestId).catch((error: unknown) => {
        // The same mapping as the routes: expected errors as they are, outages 503, the rest 500.
        const apiError = toApiError(error);
        if (!(error instanceof ApiError)) logger.error('unexpected error while handling a request', { error, requestId });
        if (response.headersSent) return response.destroy();
        // An unread body (413) is not drained; the connection closes after the answer.
        if (apiError instanceof PayloadTooLargeError) response.setHeader('Connection', 'close');
        sendError(response, apiError, { requestId });
      });
    },
  };
}

/** The HTTP server around the app, with the header-size room that long tokens need. */
export function createHttpServer(app: App): Server {
  const server = createServer({ maxHeaderSize: MAX_AUTHORIZATION_BYTES }, (request, response) => app.handle(request, response));
  server.headersTimeout = 20_000;
  server.requestTimeout = 30_000;
  server.keepAliveTimeout = 5_000;
  return server;
}
