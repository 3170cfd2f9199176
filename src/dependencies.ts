import type { Config } from './config.js';
import type { AppDependencies } from './context.js';
import type { Database } from './db/database.js';
import { EntityCache } from './db/entity-cache.js';
import { Replicas } from './db/replicas.js';
import { Searches } from './db/search-reads.js';
import { createEventStreams } from './graphql/event-stream.js';
import { createLeanTransport } from './graphql/lean.js';
import { RegisteredOperations } from './graphql/persisted.js';
import { createGraphQLPipeline } from './graphql/pipeline.js';
import { createYogaTransport } from './graphql/yoga.js';
import { RateLimiter } from './http/rate-limit.js';
import { Readiness } from './http/readiness.js';
import { LiveUpdates } from './live/live-updates.js';
import type { Logger } from './logger.js';
import { createMetrics } from './ops/metrics.js';
import { MemoryPressure } from './ops/memory-pressure.js';
import { createExports } from './rest/export.js';
import { RetrievalCounter } from './services/retrieval-counter.js';

/** How long a readiness check waits for the database. */
const READINESS_TIMEOUT_MS = 1000;

export type DependencyOptions = {
  config: Config;
  database: Database;
  logger: Logger;
  now?: () => Date;
  graphiqlHeaders?: string;
  /** `full`: every GraphQL request through Yoga (the parity test compares the two transports). */
  graphqlTransport?: 'lean' | 'full';
  /** Executions of a document before it runs compiled (tests: 0 always, Infinity never). */
  compileAfter?: number;
  /** The heap in use as the memory pressure reads it (tests drive the levels with their own). */
  memoryUsed?: () => number;
};

/** The process's objects, which the edge (`http/app.ts`) routes requests to. */
export type Dependencies = ReturnType<typeof buildDependencies>;

/** Builds the process's objects, each after what it uses; `close` ends them in the order stated below. */
export function buildDependencies(options: DependencyOptions) {
  const { config, database, logger } = options;
  const metrics = createMetrics();
  const feed = database.changeFeed({
    source: config.changeSource,
    decodeUrl: config.changeDecodeUrl,
    onNotice: (message, fallback) => (fallback ? logger.warn(message) : logger.info(message)),
    onStateChange: (live, error) => {
      metrics.feedState(live);
      if (live) logger.info('listening for database changes; cache in use');
      else logger.warn('database change listener lost; cache bypassed until it is back', { error });
    },
  });
  const now = options.now ?? (() => new Date());
  const clock = () => now().getTime();
  const replicas =
    config.replicaUrls.length > 0 && database.pgPool
      ? new Replicas(config.replicaUrls, database.pgPool, {
          maxLagMs: config.replicaMaxLagMs,
          statementTimeoutMs: config.database.statementTimeoutMs,
          connectTimeoutMs: config.database.connectTimeoutMs,
          poolSize: config.database.poolSize,
        })
      : undefined;
  replicas?.start().catch((error: unknown) => logger.warn('replica check failed', { error }));
  // The searches' connections: pages without parallel workers, counts with them (`boundedReadSettings`).
  const searchBounds = { timeoutMs: config.search.timeoutMs, poolSize: config.search.maxConcurrent };
  const countsOnPrimary = database.boundedReads(searchBounds);
  const pagesOnPrimary = database.boundedReads({ ...searchBounds, serial: true });
  const pagesOnReplicas = replicas?.boundedReader({ ...searchBounds, serial: true }, pagesOnPrimary);
  const searches = new Searches(config.search, pagesOnReplicas ?? pagesOnPrimary, countsOnPrimary, [
    countsOnPrimary,
    pagesOnPrimary,
    ...(pagesOnReplicas ? [pagesOnReplicas] : []),
  ]);
  // The clock the child counts are computed with decides which sign-ins leave them as they were.
  const cache = new EntityCache(feed, config.cache, database.sql, clock);
  const deps: AppDependencies = {
    config,
    database,
    staleReads: replicas?.reader ?? database.sql,
    searches,
    cache,
    retrievals: new RetrievalCounter(database.prisma, (error) => {
      metrics.retrievalWriteFailed();
      logger.warn('retrieval counter write failed; kept for the next attempt', { error });
    }),
    now,
    live: new LiveUpdates(feed, config.live),
  };
  const pipeline = createGraphQLPipeline(deps, logger, { compileAfter: options.compileAfter });
  // One rule for both transports: stored operations, and in the default mode the ones clients register.
  const persisted = {
    persistedOnly: config.persistedOperationsOnly,
    registered: new RegisteredOperations(undefined, config.memory.shares.registrations),
  };
  const yoga = createYogaTransport(pipeline, config, { graphiqlHeaders: options.graphiqlHeaders, persisted });
  const streams =
    options.graphqlTransport === 'full' ? undefined : createEventStreams(pipeline, { stallMs: config.live.stallMs });
  const lean =
    options.graphqlTransport === 'full'
      ? undefined
      : createLeanTransport(pipeline, { graphiql: config.graphiql, persisted, streams });
  const limiter = new RateLimiter(
    config.rateLimit,
    database.pgPool,
    (up, error) => {
      if (up) logger.info('rate-limit store connected; limits are shared');
      else logger.warn('rate-limit store unreachable; this instance limits in memory until it is back', { error });
    },
    config.memory.rateLimitKeys,
  );
  // Near the budget's old generation: the caches shrink, then streams and at last requests are refused.
  const pressure = new MemoryPressure({
    oldGenerationBytes: config.memory.oldGenerationBytes,
    maxRequests: config.memory.maxRequests,
    used: options.memoryUsed,
    shrink: (fraction) => {
      cache.shrinkTo(cache.bytes * fraction);
    },
  });
  if (deps.live) deps.live.admits = () => pressure.admitsStream();
  const readiness = new Readiness(database, READINESS_TIMEOUT_MS, () => pressure.level >= 3);
  const exports = createExports({ ...config.export, maxQueryParameters: config.limits.maxQueryParameters }, logger);

  /**
   * The close order: what produces work, then the retrieval counter's last write, then the caches and
   * their feed. The database is closed by `main.ts`, after this.
   */
  const closing: (() => unknown)[] = [
    () => pressure.close(),
    () => deps.live?.close(),
    () => streams?.close(),
    () => exports.abortAll(),
    () => limiter.close(),
    () => replicas?.close(),
    () => searches.close(),
    () => deps.retrievals.close(),
    () => cache.close(),
    () => feed.close(),
  ];
  return {
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
    close: async () => {
      for (const step of closing) await step();
    },
  };
}
