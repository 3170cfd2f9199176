import type { IncomingMessage, ServerResponse } from 'node:http';
import { SecretCache } from './auth/secret-cache.js';
import type { Config } from './config.js';
import { requestIdFrom, type AppDependencies } from './context.js';
import type { Database } from './db/database.js';
import { createGraphQLHandler } from './graphql/yoga.js';
import type { Logger } from './logger.js';
import { RetrievalCounter } from './services/retrieval-counter.js';

export type App = {
  handle(request: IncomingMessage, response: ServerResponse): void;
  /** Writes what is still buffered (the retrieval counter). */
  close(): Promise<void>;
  deps: AppDependencies;
};

function sendJson(response: ServerResponse, status: number, body: unknown, requestId: string): void {
  const payload = JSON.stringify(body);
  response.writeHead(status, {
    'Content-Type': 'application/json; charset=utf-8',
    'Content-Length': Buffer.byteLength(payload),
    'X-Request-Id': requestId,
  });
  response.end(payload);
}

/** The request handler: /graphql to Yoga, /health, and the contract's error envelope for the rest. */
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
      if (url.pathname === '/graphql') {
        response.setHeader('X-Request-Id', requestId);
        void graphql.handle(request, response, { requestId });
        return;
      }
      if (url.pathname === '/health') {
        database.sql
          .query('SELECT 1 AS ok')
          .then(() => sendJson(response, 200, { status: 'ok', database: database.kind }, requestId))
          .catch(() =>
            sendJson(response, 503, { success: false, error: { code: 'SERVICE_UNAVAILABLE', message: 'The database is unreachable.' } }, requestId),
          );
        return;
      }
      sendJson(response, 404, { success: false, error: { code: 'NOT_FOUND', message: `No resource at ${url.pathname}.` } }, requestId);
    },
  };
}
