import type pg from 'pg';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { spanCounts, tracingActive } from './tracing.js';
import type { ChangeFeed } from '../db/capture/feed.js';
import type { EntityCache } from '../db/entity-cache.js';
import type { MemoryBudget, Share } from './memory-budget.js';

/** What the metrics read when scraped; given as functions, since some are made after the metrics. */
export type MetricSources = {
  cache: () => EntityCache;
  feed: () => ChangeFeed;
  /** PostgreSQL mode: the connection pool (the embedded database has one session, no pool). */
  pool?: pg.Pool;
  unsavedRetrievals: () => number;
  droppedLogLines: () => number;
  /** DATABASE_REPLICA_URL: each replica's state, and the stale-tolerant reads by where they went. */
  replicas?: () => {
    state: { usable: boolean; lagMs: number | undefined }[];
    reads: { replica: number; primary: number };
  };
  /** RATE_LIMIT_STORE=redis: whether the store is connected. */
  rateLimitStoreUp?: () => boolean;
  /** Requests begun (head received) and not yet answered. */
  requestsInFlight: () => number;
  /** The child list's searches: running now, refused at a bound, stopped past their time. */
  searches?: () => { inFlight: number; stats: { refused: number; timedOut: number; delayed: number } };
  /** Open live-update subscriptions, and the answers pushed to them so far. */
  liveSubscriptions: () => number;
  livePushes: () => number;
  liveComputations: () => number;
  exportsRunning: () => number;
  /** GraphQL executions by engine, and documents that did not compile. */
  executions: () => { compiled: number; reference: number; compileFailures: number };
  /** The GraphQL document cache (parses, validations, plans). */
  documents?: () => { size: number; bytes: number };
  /** Automatic persisted queries: documents registered, and offers refused by reason. */
  registrations?: () => { registered: number; unverified: number; overBudget: number };
  /** The memory budget, each share's use, the pressure level and what it refused. */
  memory?: () => MemoryState;
};

export type MemoryState = {
  budget: MemoryBudget;
  level: number;
  heapUsed: number;
  /** Requests admitted and not finished (streams excluded), against `budget.maxRequests`. */
  requestsInProgress: number;
  used: Partial<Record<Share, number>>;
  refusals: { streams: number; requests: number; busy: number; client: number };
};

/** One answered request, as its log line and metrics see it. */
export type AnsweredRequest = {
  /** A fixed route name (the edge's route table), never the raw path. */
  route: string;
  method: string;
  status: number;
  code: string;
  seconds: number;
  /** GraphQL: the operation's root fields (`graphql/observe.ts`). */
  operation?: string;
};

export type Metrics = {
  readonly registry: Registry;
  request(answer: AnsweredRequest): void;
  rateLimited(): void;
  /** The change feed went live (`true`) or was lost; a live after the first is a reconnection. */
  feedState(live: boolean): void;
  retrievalWriteFailed(): void;
  /** Adds the series read from the process's objects when scraped, once they all exist. */
  watch(sources: MetricSources): void;
};

/** Latency buckets in seconds: a cached answer is well under a millisecond, a search tens of them. */
const BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

/** What each series read when scraped says, by name: the registrations in `watch` read as one list. */
const HELP = {
  api_cache_hits_total: 'Entity cache lookups answered from the cache.',
  api_cache_misses_total: 'Entity cache lookups that went to the database.',
  api_cache_evictions_total: 'Entries evicted to stay within the cache bounds.',
  api_cache_refused_total: 'Values read but not kept: the full cache held a key asked for more often (admission).',
  api_cache_announcements_total: 'Database change announcements received by the cache.',
  api_cache_invalidations_total: 'Tags invalidated by the database change announcements.',
  api_cache_shared_reads_total: 'Cache misses that joined a read of the same row already in flight.',
  api_cache_entries: "Entries held by the entity cache, with its ring's records (users' accounts and tokens).",
  api_cache_bytes: 'Estimated bytes held by the entity cache.',
  api_cache_live: '1 while the change feed is live and the cache in use, 0 while it is bypassed.',
  api_graphql_executions_total: 'GraphQL executions by engine: compiled (graphql-jit) or reference (graphql-js).',
  api_graphql_compile_failures_total: 'Query documents that did not compile and run on the reference executor.',
  api_graphql_documents: 'GraphQL document texts known (their parse, validation and plans).',
  api_graphql_documents_bytes: 'Estimated bytes of the GraphQL document cache (bounded at 4 MiB).',
  api_graphql_registrations_total:
    'Automatic persisted queries: documents registered, and offers refused because the caller was not verified (unverified) or its budget was spent (over_budget).',
  api_db_replica_usable:
    'DATABASE_REPLICA_URL: 1 while the replica (numbered in the order configured) takes reads, 0 while it is skipped (lagging, down).',
  api_db_replica_lag_seconds:
    "DATABASE_REPLICA_URL: how old the replica's data is, measured from WAL positions (absent while it cannot be measured).",
  api_db_stale_tolerant_reads_total:
    "Reads that tolerate bounded staleness (the child list's uncached pages), by where they were read.",
  api_memory_budget_bytes:
    'The memory budget (MEMORY_BUDGET_MB, the container limit, or 250 MB) every bound follows from.',
  api_memory_heap_budget_bytes: "The budget's old generation of the heap, against which the pressure level is read.",
  api_memory_heap_used_bytes:
    'The live heap, as the pressure level reads it (what the last full collection kept, or the heap in use if less).',
  api_memory_requests_in_progress:
    "Requests in progress, as the memory budget's working reserve counts them (open streams excluded).",
  api_memory_requests_max: 'The requests in progress the working reserve holds; more are refused 503 (busy).',
  api_memory_pressure_level:
    'Memory pressure: 0 none, 1 caches shrink, 2 new streams refused, 3 requests refused (503).',
  api_memory_share_bytes: "Each structure's share of the memory budget (or its explicit bound).",
  api_memory_share_used_bytes: 'What each structure holds now (estimated bytes; streams as open streams x 10 KiB).',
  api_memory_refusals_total:
    "What the memory budget refused: new streams near it (429), requests near it (503), requests past the bound on requests in progress (busy, 503), and past one client's part of it (client, 429).",
  api_rate_limit_store_up:
    'RATE_LIMIT_STORE=redis: 1 while the shared store is connected, 0 while each instance limits in memory.',
  api_live_subscriptions: 'Open live-update subscriptions (GraphQL over Server-Sent Events) on this instance.',
  api_live_pushes_total: 'Answers pushed to live-update subscriptions.',
  api_live_computations_total:
    'Answers computed for live-update subscriptions after a change that concerns them (pushed, or equal to the last and not sent).',
  api_exports_running: 'Child-list exports being streamed by this instance.',
  api_search_statements_in_flight: 'Child-list search statements running now (at most SEARCH_MAX_CONCURRENT).',
  api_search_refused_total:
    "Searches refused: 429 for an organization over its share (SEARCH_MAX_PER_ORGANIZATION, its part of the time), 503 for the instance's slots taken.",
  api_search_delayed_total:
    'Searches of an organization searching one at a time that waited for its part of the time, then ran.',
  api_search_timeouts_total: 'Search statements stopped at SEARCH_TIMEOUT_MS (answered 503).',
  api_http_requests_in_flight:
    'Requests whose head was received and whose answer is not finished (this scrape included).',
  api_log_lines_dropped_total: 'Log lines lost because the log destination (stderr) failed.',
  api_trace_spans_ended_total:
    'Sampled spans handed to the export queue; those neither exported nor failed are queued or were dropped by the full queue.',
  api_trace_spans_total: 'Sampled spans sent to the OpenTelemetry collector, by outcome (exported, failed).',
  api_retrieval_counter_pending: 'Organization-details retrievals counted but not yet written to the database.',
  api_db_pool_connections: 'Database pool connections by state: in use, idle, and requests waiting for one.',
} satisfies Record<string, string>;

/**
 * Prometheus metrics (`GET /metrics`). Every label takes its value from a fixed set (routes, statuses,
 * error codes, the schema's root fields), never from what a request sent.
 */
export function createMetrics(): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  /** A series read when scraped: named `_total`, a counter mirroring its owner's total; with `label`, one a value. */
  const scraped = (
    name: keyof typeof HELP,
    read: () => number | Record<string, number | undefined>,
    label?: string,
  ) => {
    const each = (set: (labels: Record<string, string>, value: number) => void) => {
      const value = read();
      if (typeof value === 'number') set({}, value);
      else for (const [key, total] of Object.entries(value)) set({ [label!]: key }, total ?? 0);
    };
    const options = { name, help: HELP[name], labelNames: label === undefined ? [] : [label], registers: [registry] };
    if (name.endsWith('_total'))
      new Counter({
        ...options,
        collect() {
          this.reset();
          each((labels, value) => this.inc(labels, value));
        },
      });
    else
      new Gauge({
        ...options,
        collect() {
          this.reset();
          each((labels, value) => this.set(labels, value));
        },
      });
  };
  const requests = new Counter({
    name: 'api_http_requests_total',
    help: 'Answered requests by route, method, status and error code ("" when none).',
    labelNames: ['route', 'method', 'status', 'code'],
    registers: [registry],
  });
  const latency = new Histogram({
    name: 'api_http_request_duration_seconds',
    help: 'Time from the request to the end of its answer, by route.',
    labelNames: ['route'],
    buckets: BUCKETS,
    registers: [registry],
  });
  const operations = new Histogram({
    name: 'api_graphql_operation_duration_seconds',
    help: 'GraphQL requests that executed, by the root fields they selected (sorted, without aliases).',
    labelNames: ['operation'],
    buckets: BUCKETS,
    registers: [registry],
  });
  const refusals = new Counter({
    name: 'api_rate_limited_total',
    help: 'Requests refused by the rate limiter (429).',
    registers: [registry],
  });
  const reconnects = new Counter({
    name: 'api_change_feed_reconnects_total',
    help: 'Times the change feed came back after being lost.',
    registers: [registry],
  });
  const retrievalFailures = new Counter({
    name: 'api_retrieval_counter_write_failures_total',
    help: 'Failed writes of the retrieval counter (their increments are kept for the next attempt).',
    registers: [registry],
  });
  let everLive = false;
  return {
    registry,
    request(answer) {
      requests.inc({ route: answer.route, method: answer.method, status: String(answer.status), code: answer.code });
      latency.observe({ route: answer.route }, answer.seconds);
      if (answer.operation !== undefined) operations.observe({ operation: answer.operation }, answer.seconds);
    },
    rateLimited: () => refusals.inc(),
    feedState(live) {
      if (live && everLive) reconnects.inc();
      if (live) everLive = true;
    },
    retrievalWriteFailed: () => retrievalFailures.inc(),
    watch(sources) {
      const { cache, executions, documents, registrations, replicas, memory, searches, pool } = sources;
      scraped('api_cache_hits_total', () => cache().stats.hits);
      scraped('api_cache_misses_total', () => cache().stats.misses);
      scraped('api_cache_evictions_total', () => cache().stats.evictions);
      scraped('api_cache_refused_total', () => cache().stats.refused);
      scraped('api_cache_announcements_total', () => cache().stats.announcements);
      scraped('api_cache_invalidations_total', () => cache().stats.invalidations);
      scraped('api_cache_shared_reads_total', () => cache().stats.sharedReads);
      scraped('api_cache_entries', () => cache().size);
      scraped('api_cache_bytes', () => cache().bytes);
      scraped('api_cache_live', () => (sources.feed().live ? 1 : 0));
      const engines = () => {
        const { compiled, reference } = executions();
        return { compiled, reference };
      };
      scraped('api_graphql_executions_total', engines, 'engine');
      scraped('api_graphql_compile_failures_total', () => executions().compileFailures);
      if (documents) {
        scraped('api_graphql_documents', () => documents().size);
        scraped('api_graphql_documents_bytes', () => documents().bytes);
      }
      if (registrations) {
        const outcomes = () => {
          const { registered, unverified, overBudget } = registrations();
          return { registered, unverified, over_budget: overBudget };
        };
        scraped('api_graphql_registrations_total', outcomes, 'outcome');
      }
      if (replicas) {
        const byReplica = (value: (member: { usable: boolean; lagMs?: number }) => number | undefined) => () => {
          const values: Record<string, number> = {};
          replicas().state.forEach((member, i) => {
            const known = value(member);
            if (known !== undefined) values[String(i + 1)] = known;
          });
          return values;
        };
        scraped(
          'api_db_replica_usable',
          byReplica((member) => (member.usable ? 1 : 0)),
          'replica',
        );
        const lag = byReplica((member) => (member.lagMs === undefined ? undefined : member.lagMs / 1000));
        scraped('api_db_replica_lag_seconds', lag, 'replica');
        scraped('api_db_stale_tolerant_reads_total', () => replicas().reads, 'target');
      }
      if (memory) {
        scraped('api_memory_budget_bytes', () => memory().budget.budgetBytes);
        scraped('api_memory_heap_budget_bytes', () => memory().budget.oldGenerationBytes);
        scraped('api_memory_heap_used_bytes', () => memory().heapUsed);
        scraped('api_memory_requests_in_progress', () => memory().requestsInProgress);
        scraped('api_memory_requests_max', () => memory().budget.maxRequests);
        scraped('api_memory_pressure_level', () => memory().level);
        scraped('api_memory_share_bytes', () => memory().budget.shares, 'share');
        scraped('api_memory_share_used_bytes', () => memory().used, 'share');
        scraped('api_memory_refusals_total', () => memory().refusals, 'kind');
      }
      const storeUp = sources.rateLimitStoreUp;
      if (storeUp) scraped('api_rate_limit_store_up', () => (storeUp() ? 1 : 0));
      scraped('api_live_subscriptions', sources.liveSubscriptions);
      scraped('api_live_pushes_total', sources.livePushes);
      scraped('api_live_computations_total', sources.liveComputations);
      scraped('api_exports_running', sources.exportsRunning);
      if (searches) {
        scraped('api_search_statements_in_flight', () => searches().inFlight);
        scraped('api_search_refused_total', () => searches().stats.refused);
        scraped('api_search_delayed_total', () => searches().stats.delayed);
        scraped('api_search_timeouts_total', () => searches().stats.timedOut);
      }
      scraped('api_http_requests_in_flight', sources.requestsInFlight);
      scraped('api_log_lines_dropped_total', sources.droppedLogLines);
      if (tracingActive()) {
        scraped('api_trace_spans_ended_total', () => spanCounts.ended);
        scraped(
          'api_trace_spans_total',
          () => ({ exported: spanCounts.exported, failed: spanCounts.failed }),
          'outcome',
        );
      }
      scraped('api_retrieval_counter_pending', sources.unsavedRetrievals);
      if (pool) {
        const states = () => ({
          in_use: pool.totalCount - pool.idleCount,
          idle: pool.idleCount,
          waiting: pool.waitingCount,
        });
        scraped('api_db_pool_connections', states, 'state');
      }
    },
  };
}
