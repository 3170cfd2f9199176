import type { IncomingMessage, ServerResponse } from 'node:http';
import { SecretCache } from './auth/secret-cache.js';
import type { Config } from './config.js';
import { requestIdFrom, type AppDependencies } from './context.js';
import type { Database } from './db/database.js';
import { ServiceUnavailableError } from './errors.js';
import { createGraphQLHandler } from './graphql/yoga.js';
import type { Logger } from './logger.js';
import { sendError, sendJson, type ResponseOptions } from './rest/http.js';
import { ALLOWED_METHODS, handleRest, isRestPath } from './rest/router.js';
import { RetrievalCounter } from './services/retrieval-counter.js';

export type App = {
  handle(request: IncomingMessage, response: ServerResponse): void;
  /** Writes what is still buffered (the retrieval counter). */
  close(): Promise<void>;
  deps: AppDependencies;
};

const ALLOWED_REQUEST_HEADERS = 'Authorization, Content-Type, X-Public-Key, X-Request-Id';

/** CORS for browser callers; no cookies are involved, so credentials are never allowed. */
function corsHeaders(config: Config, origin: string | undefined): Record<string, string> {
  if (!origin) return {};
  if (config.corsOrigins === '*') return { 'Access-Control-Allow-Origin': '*', 'Access-Control-Expose-Headers': 'X-Request-Id, WWW-Authenticate, Allow' };
  if (!config.corsOrigins.includes(origin)) return { Vary: 'Origin' };
  return { 'Access-Control-Allow-Origin': origin, Vary: 'Origin', 'Access-Control-Expose-Headers': 'X-Request-Id, WWW-Authenticate, Allow' };
}

/** The request handler: /graphql to Yoga, the REST paths to rest/, /health; the envelope for the rest. */
export function createApp(options: { config: Config; database: Database; logger: Logger; now?: () => Date }): App {
  const { config, database, logger } = options;
  const deps: AppDependencies = {
    config,
    database,
    secrets: new SecretCache(database.prisma),
    retrievals: new RetrievalCounter(database.prisma, (error) =>
      logger.warn('retrieval counter write failed; kept for the next attempt', { error }),
    ),
    now: options.now ?? (() => new Date()),
  };
  const graphql = createGraphQLHandler(deps, logger);
  return {
    deps,
    close: () => deps.retrievals.close(),
    handle(request, response) {
      const requestId = requestIdFrom(request.headers['x-request-id'] as string | undefined);
      const url = new URL(request.url ?? '/', 'http://localhost');
      const origin = request.headers.origin;
      const cors = corsHeaders(config, typeof origin === 'string' ? origin : undefined);
      const responseOptions: ResponseOptions = { requestId, headers: cors };
      response.on('finish', () => {
        logger.info('request', { requestId, method: request.method, path: url.pathname, status: response.statusCode });
      });
      if (url.pathname === '/graphql') {
        response.setHeader('X-Request-Id', requestId);
        void graphql.handle(request, response, { requestId });
        return;
      }
      if (request.method === 'OPTIONS' && request.headers['access-control-request-method'] && (isRestPath(url.pathname) || url.pathname === '/health')) {
        response.writeHead(204, {
          ...cors,
          'Access-Control-Allow-Methods': ALLOWED_METHODS,
          'Access-Control-Allow-Headers': ALLOWED_REQUEST_HEADERS,
          'Access-Control-Max-Age': '600',
          'X-Request-Id': requestId,
        });
        response.end();
        return;
      }
      if (url.pathname === '/health') {
        database.sql
          .query('SELECT 1 AS ok')
          .then(() => sendJson(response, 200, { status: 'ok', database: database.kind }, responseOptions))
          .catch(() => sendError(response, new ServiceUnavailableError(), responseOptions));
        return;
      }
      void handleRest(request, response, url, deps, logger, responseOptions);
    },
  };
}
