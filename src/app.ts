import { createServer, STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Config } from './config.js';
import { requestIdFrom, type AppDependencies } from './context.js';
import type { Database } from './db/database.js';
import { EntityCache } from './db/entity-cache.js';
import {
  ApiError,
  BadRequestError,
  ClientClosedError,
  HeaderTooLargeError,
  PayloadTooLargeError,
  RateLimitedError,
  ServiceUnavailableError,
  toApiError,
  UriTooLongError,
} from './errors.js';
import { createGraphQLServer, sendGraphQLError } from './graphql/http.js';
import { createGraphQLHandler, type GraphQLHandler } from './graphql/yoga.js';
import type { Logger } from './logger.js';
import { RateLimiter } from './rate-limit.js';
import { createMetrics, methodLabel, routeLabel } from './metrics.js';
import { Readiness } from './readiness.js';
import { errorEnvelope, send, sendError, sendJson, type Observed, type ResponseOptions } from './rest/http.js';
import { ALLOWED_METHODS, handleRest, isRestPath, refusedMethod } from './rest/router.js';
import { isDocsPath, serveDocs } from './rest/docs.js';
import { RetrievalCounter } from './services/retrieval-counter.js';

export type App = {
  handle(request: IncomingMessage, response: ServerResponse): void;
  /** Writes what is still buffered (the retrieval counter). */
  close(): Promise<void>;
  /** From now on every answer closes its connection (shutdown is under way). */
  drain(): void;
  deps: AppDependencies;
  /** Yoga itself, behind /graphql: its fetch entry is Yoga's whole HTTP path. */
  graphql: GraphQLHandler;
  /** The Prometheus text of `GET /metrics`, wherever it is served (see METRICS_PORT). */
  metricsText(): Promise<{ contentType: string; text: string }>;
};

const ALLOWED_REQUEST_HEADERS = 'Authorization, Content-Type, X-Public-Key, X-Request-Id';
const EXPOSED_HEADERS = 'X-Request-Id, WWW-Authenticate, Allow, Retry-After, RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset, RateLimit-Policy';
const GRAPHQL_PATH = '/graphql';
/** Liveness, readiness, and the original health check (readiness with details). */
const PROBE_PATHS = new Set(['/healthz', '/readyz', '/health']);
/** How long a readiness check waits for the database. */
const READINESS_TIMEOUT_MS = 1000;

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

/** A Host header as RFC 9110 has it: a host name, an IPv4 address or a bracketed IPv6 one, and an optional port. */
function isValidHost(host: string): boolean {
  if (host.length === 0 || host.length > 255 || /[\s/?#@\\%]/.test(host)) return false;
  try {
    return new URL(`http://${host}`).host !== '';
  } catch {
    return false;
  }
}

/** The request target as sent, split at the first `?` (origin form; anything else has no route). */
function requestTarget(rawUrl: string): { path: string; query: string } {
  const at = rawUrl.indexOf('?');
  return at === -1 ? { path: rawUrl, query: '' } : { path: rawUrl.slice(0, at), query: rawUrl.slice(at + 1) };
}

/** The handler's view of a request while it is answered: who asked, and how to answer it. */
type Exchange = {
  request: IncomingMessage;
  response: ServerResponse;
  target: { path: string; query: string };
  options: ResponseOptions;
};

/** The request handler: /graphql to Yoga, the REST paths to rest/, /health; the envelope for the rest. */
export function createApp(options: { config: Config; database: Database; logger: Logger; now?: () => Date; graphiqlHeaders?: string }): App {
  const { config, database, logger } = options;
  const metrics = createMetrics({
    cache: () => deps.cache,
    feed: () => feed,
    pool: database.pgPool,
    unsavedRetrievals: () => deps.retrievals.unsaved,
  });
  const feed = database.changeFeed({
    onStateChange: (live, error) => {
      metrics.feedState(live);
      if (live) logger.info('listening for database changes; cache in use');
      else logger.warn('database change listener lost; cache bypassed until it is back', { error });
    },
  });
  const now = options.now ?? (() => new Date());
  const deps: AppDependencies = {
    config,
    database,
    // The clock the child counts are computed with decides which sign-ins leave them as they were.
    cache: new EntityCache(feed, { ...config.cache, now: () => now().getTime() }),
    retrievals: new RetrievalCounter(database.prisma, (error) => {
      metrics.retrievalWriteFailed();
      logger.warn('retrieval counter write failed; kept for the next attempt', { error });
    }),
    now,
  };
  const graphql = createGraphQLHandler(deps, logger, { graphiqlHeaders: options.graphiqlHeaders });
  const serveGraphQL = createGraphQLServer(graphql, config.limits.maxBodyBytes);
  const limiter = new RateLimiter(config.rateLimit, database.pgPool);
  const readiness = new Readiness(database, READINESS_TIMEOUT_MS);
  const { limits } = config;
  let draining = false;

  /** Refusals in the caller's protocol: GraphQL's error list at /graphql, the REST envelope elsewhere. */
  function refuse(exchange: Exchange, error: ApiError): void {
    if (exchange.target.path === GRAPHQL_PATH) return sendGraphQLError(exchange.response, error, exchange.options);
    return sendError(exchange.response, error, exchange.options);
  }

  async function handle(exchange: Exchange) {
    const { request, response, target, options: responseOptions } = exchange;
    const preflight = request.method === 'OPTIONS' && request.headers['access-control-request-method'] !== undefined;
    // Probes and preflights are not limited; everything else counts against its sender, malformed or not.
    if (!PROBE_PATHS.has(target.path) && !preflight) {
      const verdict = await limiter.check(request);
      responseOptions.headers = { ...responseOptions.headers, ...verdict.headers };
      if (!verdict.allowed) {
        metrics.rateLimited();
        return refuse(exchange, new RateLimitedError(verdict.retryAfterSeconds));
      }
    }
    // Bounded before anything reads them: the request target, the number and size of headers.
    if ((request.url ?? '').length > limits.maxUrlBytes) return refuse(exchange, new UriTooLongError());
    if (request.rawHeaders.length / 2 > limits.maxHeaderCount) return refuse(exchange, new HeaderTooLargeError('The request has too many header fields.'));
    const tooLong = oversizedHeader(request, limits.maxHeaderBytes);
    if (tooLong) return refuse(exchange, HeaderTooLargeError.forHeader(tooLong));
    const host = request.headers.host;
    if (host !== undefined && !isValidHost(host)) return refuse(exchange, new BadRequestError('The Host header is malformed.'));
    if (preflight && (isRestPath(target.path) || PROBE_PATHS.has(target.path) || isDocsPath(target.path))) {
      response.writeHead(204, {
        ...responseOptions.headers,
        'Access-Control-Allow-Methods': ALLOWED_METHODS,
        'Access-Control-Allow-Headers': ALLOWED_REQUEST_HEADERS,
        'Access-Control-Max-Age': '600',
        'X-Request-Id': responseOptions.requestId,
      });
      response.end();
      return;
    }
    // Liveness: the process answers; nothing else is touched.
    if (target.path === '/healthz') return sendJson(response, 200, { status: 'ok' }, responseOptions);
    if (target.path === '/readyz') {
      const state = await readiness.state();
      if (state.ready) return sendJson(response, 200, { status: 'ready' }, responseOptions);
      return sendJson(response, 503, { status: 'unavailable', reason: state.reason }, responseOptions);
    }
    // Rate limited like the API: a scraper asks every few seconds.
    // Unless METRICS_PORT moves it off the API's port (a 404 here then).
    if (target.path === '/metrics' && config.metricsPort === undefined) {
      return send(response, 200, metrics.registry.contentType, await metrics.registry.metrics(), responseOptions);
    }
    // The original health check: readiness, with the database mode and the cache's state.
    if (target.path === '/health') {
      const state = await readiness.state();
      if (!state.ready) return sendError(response, new ServiceUnavailableError(`The service is not ready: ${state.reason}.`), responseOptions);
      return sendJson(response, 200, { status: 'ok', database: database.kind, cache: feed.live ? 'live' : 'bypassed' }, responseOptions);
    }
    if (isDocsPath(target.path)) return serveDocs(request, response, target.path, responseOptions);
    if (target.path === GRAPHQL_PATH) return serveGraphQL(request, response, new URL(request.url!, 'http://localhost'), responseOptions);
    return handleRest(request, response, target, deps, logger, responseOptions);
  }

  return {
    deps,
    graphql,
    metricsText: async () => ({ contentType: metrics.registry.contentType, text: await metrics.registry.metrics() }),
    close: async () => {
      await deps.retrievals.close();
      deps.cache.close();
      await feed.close();
    },
    drain: () => {
      draining = true;
      readiness.drain();
    },
    handle(request, response) {
      const started = performance.now();
      const requestId = requestIdFrom(request.headers['x-request-id'] as string | undefined);
      const origin = request.headers.origin;
      const observed: Observed = {};
      const exchange: Exchange = {
        request,
        response,
        target: requestTarget(request.url ?? '/'),
        options: { requestId, observed, headers: corsHeaders(config, typeof origin === 'string' ? origin : undefined) },
      };
      if (draining) response.setHeader('Connection', 'close');
      response.on('finish', () => {
        const seconds = (performance.now() - started) / 1000;
        const route = routeLabel(exchange.target.path);
        const method = methodLabel(request.method);
        const { code = '', operation, caller = 'anonymous', organizationId } = observed;
        metrics.request({ route, method, status: response.statusCode, code, seconds, operation });
        logger.info('request', {
          requestId,
          method,
          route,
          status: response.statusCode,
          durationMs: Math.round(seconds * 1e6) / 1e3,
          caller,
          ...(organizationId ? { organizationId } : {}),
          ...(code ? { code } : {}),
          ...(operation ? { operation } : {}),
        });
      });
      handle(exchange).catch((error: unknown) => {
        if (error instanceof ClientClosedError) {
          logger.debug('client closed the connection before its request was read', { requestId });
          return response.destroy();
        }
        // The same mapping as the routes: expected errors as they are, outages 503, the rest 500.
        const apiError = toApiError(error);
        if (!(error instanceof ApiError)) logger.error('unexpected error while handling a request', { error, requestId });
        if (response.headersSent) return response.destroy();
        // An unread body (413) is not drained; the connection closes after the answer.
        if (apiError instanceof PayloadTooLargeError) response.setHeader('Connection', 'close');
        // With the CORS and rate-limit headers gathered so far, so that browsers can read it.
        refuse(exchange, apiError);
      });
    },
  };
}

const DRAIN_AFTER_REFUSAL_BYTES = 4 * 1024 * 1024;
const DRAIN_AFTER_REFUSAL_MS = 2000;

/** Answers a request that Node's parser refused, in the envelope, and closes the connection. */
function refuseUnparsable(error: NodeJS.ErrnoException & { rawPacket?: Buffer }, socket: Duplex, limits: Config['limits'], answered: boolean): void {
  // As Node's own handler: only on a connection with no answer under way (it would be corrupted).
  if (error.code === 'ECONNRESET' || !socket.writable || answered) {
    socket.destroy();
    return;
  }
  let apiError: ApiError;
  if (error.code === 'HPE_HEADER_OVERFLOW') {
    // The request line is the first line of the head: too long when no line ends within the bound.
    const lineEnd = error.rawPacket?.indexOf(0x0a) ?? -1;
    apiError = lineEnd === -1 || lineEnd > limits.maxUrlBytes + 16 ? new UriTooLongError() : new HeaderTooLargeError();
  } else if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    apiError = new ApiError('REQUEST_TIMEOUT', 408, 'The request was not received in time.');
  } else {
    apiError = new BadRequestError();
  }
  const body = JSON.stringify(errorEnvelope(apiError));
  // What the client is still sending is read and dropped for a moment, so that the answer reaches
  // it instead of a reset; then the connection goes, whatever is left.
  let drained = 0;
  socket.on('data', (chunk: Buffer) => {
    drained += chunk.length;
    if (drained > DRAIN_AFTER_REFUSAL_BYTES) socket.destroy();
  });
  setTimeout(() => socket.destroy(), DRAIN_AFTER_REFUSAL_MS).unref();
  socket.resume();
  socket.end(
    `HTTP/1.1 ${apiError.status} ${STATUS_CODES[apiError.status]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}

/**
 * METRICS_PORT: a server of its own answering `GET /metrics` (404 for anything else, 503 until
 * the app is ready), so that the metrics are not exposed with the API. Not rate limited.
 */
export function createMetricsServer(app: () => App | undefined): Server {
  return createServer((request, response) => {
    const path = (request.url ?? '/').split('?')[0];
    const requestId = requestIdFrom(request.headers['x-request-id'] as string | undefined);
    if (path !== '/metrics') return sendError(response, new ApiError('NOT_FOUND', 404, 'Only /metrics is served on this port.'), { requestId });
    if (refusedMethod(request, response, { requestId })) return;
    const current = app();
    if (!current) return sendError(response, new ServiceUnavailableError('The service is starting; try again shortly.'), { requestId });
    current.metricsText().then(
      ({ contentType, text }) => send(response, 200, contentType, text, { requestId }),
      () => sendError(response, new ApiError('INTERNAL_ERROR', 500, 'The metrics could not be collected.'), { requestId }),
    );
  });
}

/** The HTTP server, with a way to close the connections that have no request under way. */
export type HttpServer = Server & {
  /**
   * Closes every connection that is not being answered: idle keep-alive ones, and ones that
   * opened but never completed a request head (a slow or stalled client). For shutdown.
   */
  closeWaitingConnections(): void;
};

/**
 * The HTTP server around a request handler (the app, or a stand-in while it starts). The whole
 * request head (request line and headers) is bounded by MAX_HEAD_BYTES and MAX_HEADER_COUNT;
 * within it, the target by MAX_URL_BYTES (414), each header by MAX_HEADER_BYTES and a bearer
 * token by MAX_TOKEN_BYTES.
 */
export function createHttpServer(limits: Config['limits'], handle: (request: IncomingMessage, response: ServerResponse) => void): HttpServer {
  const connections = new Set<Duplex>();
  /** Connections with an answer under way. */
  const answering = new WeakSet<Duplex>();
  /** Connections whose unparsable request was answered. */
  const refused = new WeakSet<Duplex>();
  const server = createServer({ maxHeaderSize: limits.maxHeadBytes }, (request, response) => {
    const socket = request.socket;
    answering.add(socket);
    response.on('close', () => answering.delete(socket));
    handle(request, response);
  });
  server.on('connection', (socket: Duplex) => {
    connections.add(socket);
    socket.on('close', () => connections.delete(socket));
  });
  // One more than allowed is kept, so that a request with too many can be told apart and refused.
  server.maxHeadersCount = limits.maxHeaderCount + 1;
  server.on('clientError', (error, socket) => {
    // Node reports the parser's error again for every further chunk: answered once.
    if (refused.has(socket)) return;
    refused.add(socket);
    refuseUnparsable(error, socket, limits, answering.has(socket));
  });
  server.headersTimeout = 20_000;
  server.requestTimeout = 30_000;
  server.keepAliveTimeout = 5_000;
  return Object.assign(server, {
    closeWaitingConnections() {
      for (const socket of connections) if (!answering.has(socket)) socket.destroy();
    },
  });
}
