import type { IncomingMessage, ServerResponse } from 'node:http';
import { createRequestContext, type AppDependencies } from '../context.js';
import type { Dependencies } from '../dependencies.js';
import { EXPORT_PATH, type Exports } from '../rest/export.js';
import {
  ApiError,
  ClientClosedError,
  NotFoundError,
  PayloadTooLargeError,
  RateLimitedError,
  ServiceUnavailableError,
  toApiError,
} from '../errors.js';
import { sendGraphQLError } from '../graphql/http.js';
import type { ExecutionCounts } from '../graphql/compiled.js';
import type { YogaTransport } from '../graphql/yoga.js';
import type { DocumentCache } from '../graphql/documents.js';
import { RATE_LIMIT_KEY_BYTES } from '../ops/memory-budget.js';
import type { MemoryPressure } from '../ops/memory-pressure.js';
import { endRequestSpan, startRequestSpan, traceFields, inSpan, type RequestOutcome } from '../ops/tracing.js';
import { childAccounts } from '../rest/child-accounts.js';
import { creditAnalysis } from '../rest/credit-analysis.js';
import { DOCS_PATHS, OPENAPI_PATH, serveDocs } from '../rest/docs.js';
import { answerRest, READ_ONLY, refusedMethod, sendRestError, type RestOperation } from '../rest/http.js';
import { organizationDetails } from '../rest/organization-details.js';
import { userProfile } from '../rest/user-profile.js';
import { readBody } from './body.js';
import { createCorsPolicy } from './cors.js';
import { Exchange } from '../exchange.js';
import { headChecker } from './request-head.js';

export type App = {
  handle(request: IncomingMessage, response: ServerResponse): void;
  /** Writes what is still buffered (the retrieval counter). */
  close(): Promise<void>;
  /** From now on every answer closes its connection (shutdown is under way). */
  drain(): void;
  deps: AppDependencies;
  graphql: YogaTransport;
  /** GraphQL executions by engine since the start (shared answers served held are none). */
  executions(): ExecutionCounts;
  exports: Pick<Exports, 'running'>;
  pressure: MemoryPressure;
  /** What is known of each GraphQL document text (its parse, validation and plans), bounded in bytes. */
  documents: Pick<DocumentCache, 'size' | 'bytes'>;
  /** The Prometheus text of `GET /metrics`, wherever it is served (see METRICS_PORT). */
  metricsText(): Promise<{ contentType: string; text: string }>;
};

type Route = {
  path: string;
  /** The metric label and log field: a fixed name, never the raw path. */
  label: string;
  /** What the path takes (Allow, preflights); others are refused 405 before the handler runs. */
  methods: string;
  /** The shape of its refusals: GraphQL's error list, or the REST envelope. */
  protocol: 'rest' | 'graphql';
  /** Counted against the rate limits (probes are not). */
  limited: boolean;
  /** How many requests one counts as (1 unless said). */
  cost?: number;
  /** Refused (503) while the heap is at the memory budget's last level: all but probes and metrics. */
  shed: boolean;
  handle(exchange: Exchange): Promise<void> | void;
};

/** What a request the memory budget refuses is told: near the budget, or past the requests in progress it holds. */
const REFUSED = {
  memory: { retryAfter: 5, message: 'The server is low on memory; try again shortly or on another instance.' },
  busy: { retryAfter: 1, message: 'The server is busy; try again shortly or on another instance.' },
} as const;
/**
 * The edge: one route table, CORS policy and set of bounds, and the exchange handed to REST and both
 * GraphQL transports. Every answer is counted and logged once, when it is finished.
 */
export function createApp(built: Dependencies): App {
  const {
    config,
    database,
    logger,
    metrics,
    feed,
    replicas,
    deps,
    pipeline,
    persisted,
    yoga,
    lean,
    limiter,
    pressure,
    readiness,
    exports,
  } = built;
  let draining = false;
  let inFlight = 0;
  metrics.watch({
    cache: () => deps.cache,
    feed: () => feed,
    pool: database.pgPool,
    unsavedRetrievals: () => deps.retrievals.unsaved,
    droppedLogLines: () => logger.dropped(),
    executions: () => pipeline.executions,
    documents: () => pipeline.documents,
    registrations: () => persisted.registered.stats,
    requestsInFlight: () => inFlight,
    searches: () => deps.searches,
    liveSubscriptions: () => deps.live?.open ?? 0,
    livePushes: () => deps.live?.pushes ?? 0,
    liveComputations: () => deps.live?.computations ?? 0,
    exportsRunning: () => exports.running(),
    memory: () => ({
      budget: config.memory,
      level: pressure.level,
      heapUsed: pressure.heapUsed,
      requestsInProgress: pressure.inProgress,
      used: {
        entityCache: deps.cache.bytes,
        streams: (deps.live?.open ?? 0) * config.memory.streamBytes,
        registrations: persisted.registered.bytes,
        rateLimiter: limiter.memoryKeys * RATE_LIMIT_KEY_BYTES,
      },
      refusals: pressure.refusals,
    }),
    ...(config.rateLimit.store === 'redis' ? { rateLimitStoreUp: () => limiter.storeUp === true } : {}),
    ...(replicas ? { replicas: () => ({ state: replicas.state, reads: replicas.reads }) } : {}),
  });
  const cors = createCorsPolicy(config.corsOrigins);
  const checkHead = headChecker(config.limits);
  const { limits } = config;

  /** A route as the API's are unless it says otherwise: REST, read-only, rate limited, shed near the budget. */
  const at = (path: string, handle: Route['handle'], options: Partial<Route> = {}): Route => ({
    path,
    label: path,
    methods: READ_ONLY,
    protocol: 'rest',
    limited: true,
    shed: true,
    handle,
    ...options,
  });
  const rest = (path: string, operation: RestOperation, shared: { sharedByOrganization?: boolean } = {}) =>
    at(path, (exchange) =>
      answerRest(exchange, operation, createRequestContext(deps, exchange), {
        maxQueryParameters: limits.maxQueryParameters,
        logger,
        ...shared,
      }),
    );
  const probe = (path: string, handle: Route['handle']) => at(path, handle, { limited: false, shed: false });
  const metricsText = async () => ({
    contentType: metrics.registry.contentType,
    text: await metrics.registry.metrics(),
  });

  async function serveGraphQL(exchange: Exchange): Promise<void> {
    const method = exchange.request.method;
    // GET carries the operation in the query string: the same bound as a POSTed body.
    if (exchange.query.length > limits.maxBodyBytes)
      throw new PayloadTooLargeError('The GraphQL request in the query string is too large.');
    const body =
      method === 'GET' || method === 'HEAD' ? undefined : await readBody(exchange.request, limits.maxBodyBytes);
    if (!(lean && (method === 'GET' || method === 'POST') && (await lean(exchange, body))))
      await yoga.serve(exchange, body);
    persisted.registered.settle(exchange.record);
  }

  const routes: Route[] = [
    rest('/auth/user-profile', (context) => userProfile(context)),
    // The same answer for every reader of an organization but its parent by JWT (decisions §3).
    rest('/auth/organization-details', (context) => organizationDetails(context), { sharedByOrganization: true }),
    rest('/auth/child-accounts', (context, parameters) => childAccounts(context, parameters)),
    rest('/parent/credit-analysis', (context) => creditAnalysis(context)),
    // Beside them: the whole child list as a file, rate limited as the many requests it costs.
    at(EXPORT_PATH, (exchange) => exports.handle(exchange, createRequestContext(deps, exchange)), {
      cost: config.export.rateCost,
    }),
    // Every method reaches GraphQL: the transports answer the ones they do not take (405).
    at('/graphql', serveGraphQL, { methods: 'GET, POST', protocol: 'graphql' }),
    // Liveness: the process answers; nothing else is touched.
    probe('/healthz', (exchange) => exchange.sendJson(200, { status: 'ok' })),
    probe('/readyz', async (exchange) => {
      const state = await readiness.state();
      // Replicas are details: without them the primary answers every read, so the instance is ready.
      const details = replicas ? { replicas: replicas.state } : {};
      if (state.ready) return exchange.sendJson(200, { status: 'ready', ...details });
      return exchange.sendJson(503, { status: 'unavailable', reason: state.reason, ...details });
    }),
    // The original health check: readiness, with the database mode, the cache's state and where its changes come from.
    probe('/health', async (exchange) => {
      const state = await readiness.state();
      if (!state.ready)
        return sendRestError(exchange, new ServiceUnavailableError(`The service is not ready: ${state.reason}.`));
      return exchange.sendJson(200, {
        status: 'ok',
        database: database.kind,
        cache: feed.live ? 'live' : 'bypassed',
        changes: feed.source,
      });
    }),
    // Rate limited like the API: a scraper asks every few seconds. METRICS_PORT moves it off the API's port.
    ...(config.metricsPort === undefined
      ? [
          at(
            '/metrics',
            async (exchange) => {
              const { contentType, text } = await metricsText();
              exchange.send(200, contentType, text);
            },
            { shed: false },
          ),
        ]
      : []),
    // The REST description and its reference page; the page's scripts and styles count as the page.
    ...DOCS_PATHS.map((path) => at(path, serveDocs, { label: path === OPENAPI_PATH ? OPENAPI_PATH : '/docs' })),
  ];
  const byPath = new Map(routes.map((route) => [route.path, route]));

  /** Refusals in the route's protocol: GraphQL's error list at /graphql, the REST envelope elsewhere. */
  function refuse(exchange: Exchange, route: Route | undefined, error: ApiError): void {
    if (route?.protocol === 'graphql') return sendGraphQLError(exchange, error);
    return sendRestError(exchange, error);
  }

  async function handle(exchange: Exchange, route: Route | undefined): Promise<void> {
    const { request } = exchange;
    const preflight = request.method === 'OPTIONS' && request.headers['access-control-request-method'] !== undefined;
    const limited = limiter.enabled && route?.limited !== false && !preflight;
    const client = limited || route?.shed ? limiter.clientOf(request) : undefined;
    // Everything but probes and preflights counts against its sender, malformed or not.
    if (limited) {
      const verdict = await limiter.check(client!, route?.cost);
      exchange.addHeaders(verdict.headers);
      if (!verdict.allowed) {
        metrics.rateLimited();
        return refuse(exchange, route, new RateLimitedError(verdict.retryAfterSeconds));
      }
    }
    // Bounded before anything reads them: the request target, the number and size of headers, Host.
    const headProblem = checkHead(request);
    if (headProblem) return refuse(exchange, route, headProblem);
    if (!route) return sendRestError(exchange, new NotFoundError(exchange.path));
    if (preflight) {
      exchange.addHeaders(cors.preflight(exchange.header('origin'), route.methods));
      return exchange.send(204, undefined, '');
    }
    if (route.protocol === 'rest' && refusedMethod(exchange)) return;
    // The memory budget: the bound on requests in progress and a client's part of it, before any work.
    if (route.shed) {
      const clients = client!.keys;
      const refusal = pressure.refusesRequest(clients);
      if (refusal)
        return refuse(
          exchange,
          route,
          refusal === 'client'
            ? new RateLimitedError(1, 'Too many requests of this client are in progress; try again in 1 s.')
            : new ServiceUnavailableError(REFUSED[refusal].message, REFUSED[refusal].retryAfter),
        );
      exchange.countsAsInProgress(() => pressure.finished(clients));
    }
    await route.handle(exchange);
  }

  return {
    deps,
    graphql: yoga,
    executions: () => pipeline.executions,
    exports,
    pressure,
    documents: pipeline.documents,
    metricsText,
    close: () => built.close(),
    drain: () => {
      draining = true;
      // Every open stream completes cleanly now; clients subscribe again on another instance.
      deps.live?.endAll();
      readiness.drain();
    },
    handle(request, response) {
      const started = performance.now();
      const exchange = new Exchange(request, response);
      const route = byPath.get(exchange.path);
      // Undefined when tracing is off: each use below is one branch.
      const span = startRequestSpan(request, exchange.path, route?.label);
      inFlight += 1;
      // A response closes once: `on` keeps no wrapper while a stream stays open.
      response.on('close', () => {
        inFlight -= 1;
        exchange.leavesProgress();
        // Closed before it finished: the client went away (a stream it left, a request it dropped).
        if (span && !response.writableFinished) endRequestSpan(span, outcome(exchange, response.statusCode, true));
      });
      exchange.addHeaders(cors.answer(exchange.header('origin')));
      if (draining) response.setHeader('Connection', 'close');
      response.on('finish', () => {
        const seconds = (performance.now() - started) / 1000;
        const label = route?.label ?? 'other';
        const method = methodLabel(request.method);
        const { code = '', operation, organizationId } = exchange.record;
        // Credentials that were sent but never verified (the request was refused first) are not anonymous.
        const caller =
          exchange.record.caller ??
          (exchange.credentials.authorization || exchange.credentials.publicKey ? 'unverified' : 'anonymous');
        metrics.request({ route: label, method, status: response.statusCode, code, seconds, operation });
        // Read before the span ends (an ended span no longer records).
        const joined = span && traceFields(span);
        if (span) endRequestSpan(span, outcome(exchange, response.statusCode));
        logger.info('request', {
          ...joined,
          requestId: exchange.requestId,
          method,
          route: label,
          status: response.statusCode,
          durationMs: Math.round(seconds * 1e6) / 1e3,
          caller,
          ...(organizationId ? { organizationId } : {}),
          ...(code ? { code } : {}),
          ...(operation ? { operation } : {}),
        });
      });
      inSpan(span, () => handle(exchange, route)).catch((error: unknown) => {
        if (error instanceof ClientClosedError) {
          logger.debug('client closed the connection before its request was read', { requestId: exchange.requestId });
          return response.destroy();
        }
        // The same mapping as the routes: expected errors as they are, outages 503, the rest 500.
        const apiError = toApiError(error);
        if (!(error instanceof ApiError))
          logger.error('unexpected error while handling a request', { error, requestId: exchange.requestId });
        if (response.headersSent) return response.destroy();
        // An unread body (413) is not drained; the connection closes after the answer.
        if (apiError instanceof PayloadTooLargeError) response.setHeader('Connection', 'close');
        // With the CORS and rate-limit headers gathered so far, so that browsers can read it.
        refuse(exchange, route, apiError);
      });
    },
  };
}

/** What a request's server span reports when it ends. */
function outcome(exchange: Exchange, status: number, aborted = false): RequestOutcome {
  const { code, caller, organizationId, cacheLookups } = exchange.record;
  return { status, requestId: exchange.requestId, code, caller, organizationId, cacheLookups, aborted };
}

const METHODS = new Set(['GET', 'HEAD', 'POST', 'OPTIONS']);

/** A method as a label: the ones the API serves, and `other` for anything else. */
function methodLabel(method: string | undefined): string {
  return method !== undefined && METHODS.has(method) ? method : 'other';
}
