import { existsSync, readFileSync } from 'node:fs';
import { parseEnv } from 'node:util';
import proxyAddr from 'proxy-addr';
import { z } from 'zod';
import { CACHE_DEFAULTS } from './db/entity-cache.js';
import { SAMPLERS, type TracingSettings } from './ops/tracing-settings.js';
import { memoryBudget, processMemoryFacts, type MemoryBudget, type MemoryFacts } from './ops/memory-budget.js';

/** A switch: undefined when unset, for one whose default depends on other settings. */
const optionalBool = z
  .enum(['true', 'false', '1', '0', 'yes', 'no', 'on', 'off'])
  .optional()
  .transform((v) => (v === undefined ? undefined : ['true', '1', 'yes', 'on'].includes(v)));
const bool = (fallback: boolean) => optionalBool.transform((v) => v ?? fallback);

const optionalString = z
  .string()
  .optional()
  .transform((v) => (v === undefined || v.trim() === '' ? undefined : v.trim()));
const url = (pattern: RegExp, message: string) => optionalString.pipe(z.string().regex(pattern, message).optional());

/** The longest delay Node's timers take (2^31 - 1 ms); a longer one fires after 1 ms. */
const MAX_TIMER_MS = 2_147_483_647;
const MAX_TIMER_SECONDS = Math.floor(MAX_TIMER_MS / 1000);

/** A whole number in decimal digits within its bounds (`1e3`, `0x10`, `10.0` are refused); empty is unset. */
const integer = (min: number, max: number) =>
  z.preprocess(
    (v) => (typeof v === 'string' ? (v.trim() === '' ? undefined : v.trim()) : v),
    z
      .string()
      .regex(/^\d{1,16}$/, 'must be a whole number in decimal digits')
      .transform(Number)
      .pipe(z.number().min(min, `must be at least ${min}`).max(max, `must be at most ${max}`))
      .optional(),
  );
const withDefault = (schema: ReturnType<typeof integer>, fallback: number) => schema.transform((v) => v ?? fallback);

/** OTLP over HTTP; gRPC would need another exporter and its native dependencies. */
const otlpProtocol = z
  .enum(['http/protobuf', 'http/json'], {
    message: "must be http/protobuf or http/json (gRPC is not supported: point it at the collector's HTTP port, 4318)",
  })
  .optional();

const environment = z.object({
  NODE_ENV: z.enum(['development', 'production', 'test']).default('development'),
  PORT: withDefault(integer(0, 65535), 4000),
  METRICS_PORT: integer(0, 65535),
  HOST: z.string().min(1).default('0.0.0.0'),
  DATABASE_URL: url(/^postgres(ql)?:\/\//, 'must be a postgres:// or postgresql:// URL'),
  /** Streaming replicas for reads that tolerate bounded staleness: one URL, or several separated by commas. */
  DATABASE_REPLICA_URL: optionalString.pipe(
    z
      .string()
      .refine(
        (text) => text.split(',').every((url) => /^postgres(ql)?:\/\//.test(url.trim())),
        'must be postgres:// or postgresql:// URLs, separated by commas',
      )
      .optional(),
  ),
  REPLICA_MAX_LAG_MS: withDefault(integer(0, 3_600_000), 1000),
  /** Where the caches learn of committed changes on PostgreSQL: the replication stream when available. */
  CHANGE_SOURCE: z.enum(['auto', 'logical', 'triggers']).default('auto'),
  /** The PostgreSQL 16+ standby of DATABASE_URL the change stream is decoded on; unset, the primary. */
  CHANGE_DECODE_URL: z
    .string()
    .refine(
      (url) => /^postgres(ql)?:\/\//.test(url.trim()),
      'must be a postgres:// or postgresql:// URL (a standby of DATABASE_URL)',
    )
    .optional(),
  DATA_DIR: z.string().min(1).default('./data'),
  MIGRATE_ON_START: bool(true),
  MIGRATION_LOCK_TIMEOUT_MS: withDefault(integer(1000, MAX_TIMER_MS), 600_000),
  /** Unset: on with NODE_ENV=development only. */
  SEED_DEMO_ON_START: optionalBool,
  DATABASE_POOL_SIZE: withDefault(integer(1, 500), 10),
  DATABASE_CONNECT_TIMEOUT_MS: withDefault(integer(100, MAX_TIMER_MS), 1500),
  DATABASE_STATEMENT_TIMEOUT_MS: withDefault(integer(100, MAX_TIMER_MS), 5000),
  SEARCH_TIMEOUT_MS: withDefault(integer(1, MAX_TIMER_MS), 3000),
  /** One at a time by default: on a database of two cores, more left the other requests half the machine. */
  SEARCH_MAX_CONCURRENT: withDefault(integer(1, 500), 1),
  SEARCH_MAX_PER_ORGANIZATION: withDefault(integer(1, 500), 2),
  /** 20 % by default: the figures are in `src/db/README.md`, "Searches". */
  SEARCH_MAX_TIME_PERCENT: withDefault(integer(1, 100), 20),
  JWT_ISSUER: optionalString,
  JWT_AUDIENCE: optionalString,
  PAGINATION_SECRET: optionalString.pipe(z.string().min(32, 'must be at least 32 characters').optional()),
  CORS_ORIGINS: z.string().default('*'),
  INTROSPECTION: optionalBool,
  JWT_MAX_AGE_SECONDS: integer(1, 315_360_000),
  JWT_MAX_LIFETIME_SECONDS: withDefault(integer(60, 315_360_000), 86_400),
  MAX_TOKEN_BYTES: withDefault(integer(512, 65_536), 4096),
  MAX_BODY_BYTES: withDefault(integer(1024, 104_857_600), 100_000),
  MAX_HEADER_BYTES: withDefault(integer(256, 1_048_576), 8192),
  MAX_URL_BYTES: withDefault(integer(256, 1_048_576), 8192),
  MAX_HEAD_BYTES: withDefault(integer(4096, 1_048_576), 32_768),
  MAX_HEADER_COUNT: withDefault(integer(10, 1000), 100),
  MAX_QUERY_PARAMETERS: withDefault(integer(10, 10_000), 100),
  RATE_LIMIT_PER_ADDRESS: withDefault(integer(0, 1_000_000_000), 600),
  RATE_LIMIT_PER_CREDENTIAL: withDefault(integer(0, 1_000_000_000), 300),
  RATE_LIMIT_WINDOW_SECONDS: withDefault(integer(1, MAX_TIMER_SECONDS), 60),
  RATE_LIMIT_STORE: z.enum(['memory', 'postgres', 'redis']).default('memory'),
  REDIS_URL: url(/^rediss?:\/\//, 'must be a redis:// or rediss:// URL'),
  TRUST_PROXY: z
    .string()
    .optional()
    .transform((value, context) => {
      const text = value?.trim() ?? '';
      if (['', 'false', '0', 'no', 'off'].includes(text)) return undefined;
      if (/^\d+$/.test(text)) {
        if (Number(text) <= 100) return Number(text);
        context.addIssue({ code: 'custom', message: 'a hop count must be at most 100' });
        return z.NEVER;
      }
      if (['true', 'yes', 'on'].includes(text)) {
        context.addIssue({
          code: 'custom',
          message: 'name the proxies to trust: a hop count (1) or their addresses or subnets (loopback, 10.0.0.0/8)',
        });
        return z.NEVER;
      }
      const entries = text
        .split(',')
        .map((entry) => entry.trim())
        .filter(Boolean);
      try {
        proxyAddr.compile(entries);
      } catch (error) {
        context.addIssue({ code: 'custom', message: (error as Error).message });
        return z.NEVER;
      }
      return entries;
    }),
  SHUTDOWN_TIMEOUT_MS: withDefault(integer(100, MAX_TIMER_MS), 10_000),
  SHUTDOWN_DELAY_MS: withDefault(integer(0, MAX_TIMER_MS), 3000),
  LIVE_MIN_INTERVAL_MS: withDefault(integer(0, MAX_TIMER_MS), 1000),
  LIVE_MAX_PER_CREDENTIAL: withDefault(integer(1, 1_000), 5),
  LIVE_MAX_PER_ORGANIZATION: withDefault(integer(1, 1_000_000), 200),
  /** Unset: as many as the memory budget's share for streams holds. */
  LIVE_MAX_STREAMS: integer(1, 1_000_000),
  LIVE_STALL_MS: withDefault(integer(1000, MAX_TIMER_MS), 60_000),
  EXPORT_MAX_CONCURRENT: withDefault(integer(1, 64), 2),
  EXPORT_STALL_MS: withDefault(integer(1000, MAX_TIMER_MS), 30_000),
  EXPORT_RATE_COST: withDefault(integer(1, 1_000_000), 30),
  CACHE_MAX_ENTRIES: withDefault(integer(0, 100_000_000), CACHE_DEFAULTS.maxEntries),
  /** Unset: the memory budget's share for the entity cache. */
  CACHE_MAX_BYTES: integer(0, 1_099_511_627_776),
  CACHE_TTL_SECONDS: withDefault(integer(1, MAX_TIMER_SECONDS), CACHE_DEFAULTS.ttlMs / 1000),
  /** The process's memory (resident), from which every bound follows; unset: the container's limit, else 250 MB. */
  MEMORY_BUDGET_MB: integer(64, 1_048_576),
  GRAPHIQL: optionalBool,
  LOG_LEVEL: z.enum(['debug', 'info', 'warn', 'error', 'silent']).default('info'),
  LOG_FORMAT: z.enum(['auto', 'json', 'pretty']).default('auto'),
  GRAPHQL_PERSISTED_ONLY: bool(false),
  // OpenTelemetry's own variables: checked here so that a typo fails the start instead of sampling
  // everything or exporting nowhere.
  OTEL_SDK_DISABLED: bool(false),
  OTEL_TRACES_EXPORTER: optionalString.pipe(
    z
      .enum(['otlp', 'none'], { message: 'must be otlp or none (this server exports traces over OTLP only)' })
      .optional(),
  ),
  OTEL_EXPORTER_OTLP_ENDPOINT: url(/^https?:\/\//, 'must be an http:// or https:// URL'),
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: url(/^https?:\/\//, 'must be an http:// or https:// URL'),
  OTEL_EXPORTER_OTLP_PROTOCOL: optionalString.pipe(otlpProtocol),
  OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: optionalString.pipe(otlpProtocol),
  OTEL_TRACES_SAMPLER: optionalString.pipe(
    z.enum(SAMPLERS, { message: `must be one of ${SAMPLERS.join(', ')}` }).optional(),
  ),
  OTEL_TRACES_SAMPLER_ARG: optionalString.pipe(
    z
      .string()
      .regex(/^(?:0|1|0?\.\d+|1\.0*)$/, 'must be a probability between 0 and 1 (0.1 samples one trace in ten)')
      .optional(),
  ),
});

/** The settings as the code reads them. */
export type Config = ReturnType<typeof loadConfig>;

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  ${p}`).join('\n')}`);
  }
}

/** Parses the environment once; every invalid setting is reported on its own line. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env, facts: MemoryFacts = processMemoryFacts()) {
  const parsed = environment.safeParse(env);
  if (!parsed.success) {
    throw new ConfigError(parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`));
  }
  const e = parsed.data;
  const conflicts: [boolean, string][] = [
    [
      e.RATE_LIMIT_STORE === 'postgres' && !e.DATABASE_URL,
      'RATE_LIMIT_STORE: postgres needs DATABASE_URL (the embedded database serves one process)',
    ],
    [
      !!e.DATABASE_REPLICA_URL && !e.DATABASE_URL,
      'DATABASE_REPLICA_URL: replicas need DATABASE_URL, their primary (the embedded database has none)',
    ],
    [
      !!e.CHANGE_DECODE_URL && !e.DATABASE_URL,
      'CHANGE_DECODE_URL: a standby to decode on needs DATABASE_URL, its primary (the embedded database has no stream)',
    ],
    [e.RATE_LIMIT_STORE === 'redis' && !e.REDIS_URL, 'RATE_LIMIT_STORE: redis needs REDIS_URL (redis://host:6379)'],
    [
      !!e.METRICS_PORT && e.METRICS_PORT === e.PORT,
      'METRICS_PORT: must differ from PORT (unset it to serve /metrics on the API port)',
    ],
    [
      e.SHUTDOWN_DELAY_MS >= e.SHUTDOWN_TIMEOUT_MS,
      'SHUTDOWN_DELAY_MS: must be shorter than SHUTDOWN_TIMEOUT_MS (the delay is part of the shutdown)',
    ],
  ];
  const problems = conflicts.filter(([conflict]) => conflict).map(([, problem]) => problem);
  if (problems.length > 0) throw new ConfigError(problems);
  const tracing: TracingSettings = {
    enabled:
      !e.OTEL_SDK_DISABLED &&
      e.OTEL_TRACES_EXPORTER !== 'none' &&
      (e.OTEL_EXPORTER_OTLP_ENDPOINT !== undefined || e.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT !== undefined),
    protocol: e.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? e.OTEL_EXPORTER_OTLP_PROTOCOL ?? 'http/protobuf',
    sampler: e.OTEL_TRACES_SAMPLER ?? 'parentbased_always_on',
    ratio: e.OTEL_TRACES_SAMPLER_ARG === undefined ? 1 : Number(e.OTEL_TRACES_SAMPLER_ARG),
  };
  let memory: MemoryBudget;
  try {
    memory = memoryBudget(
      e.MEMORY_BUDGET_MB,
      {
        cacheMaxBytes: e.CACHE_MAX_BYTES,
        maxStreams: e.LIVE_MAX_STREAMS,
        traced: tracing.enabled,
      },
      facts,
    );
  } catch (error) {
    throw new ConfigError([`MEMORY_BUDGET_MB: ${(error as Error).message}`]);
  }
  return {
    memory,
    tracing,
    env: e.NODE_ENV,
    port: e.PORT,
    metricsPort: e.METRICS_PORT,
    host: e.HOST,
    databaseUrl: e.DATABASE_URL,
    dataDir: e.DATA_DIR,
    migrateOnStart: e.MIGRATE_ON_START,
    migrationLockTimeoutMs: e.MIGRATION_LOCK_TIMEOUT_MS,
    seedDemoOnStart: e.SEED_DEMO_ON_START ?? e.NODE_ENV === 'development',
    database: {
      poolSize: e.DATABASE_POOL_SIZE,
      connectTimeoutMs: e.DATABASE_CONNECT_TIMEOUT_MS,
      statementTimeoutMs: e.DATABASE_STATEMENT_TIMEOUT_MS,
    },
    search: {
      timeoutMs: e.SEARCH_TIMEOUT_MS,
      maxConcurrent: e.SEARCH_MAX_CONCURRENT,
      maxPerOrganization: e.SEARCH_MAX_PER_ORGANIZATION,
      maxTimePercent: e.SEARCH_MAX_TIME_PERCENT,
    },
    replicaUrls: e.DATABASE_REPLICA_URL
      ? e.DATABASE_REPLICA_URL.split(',')
          .map((url) => url.trim())
          .filter(Boolean)
      : [],
    replicaMaxLagMs: e.REPLICA_MAX_LAG_MS,
    changeSource: e.CHANGE_SOURCE,
    changeDecodeUrl: e.CHANGE_DECODE_URL?.trim(),
    jwt: { issuer: e.JWT_ISSUER, audience: e.JWT_AUDIENCE },
    paginationSecret: e.PAGINATION_SECRET,
    graphiql: e.GRAPHIQL ?? e.NODE_ENV !== 'production',
    logLevel: e.LOG_LEVEL,
    logFormat: e.LOG_FORMAT,
    persistedOperationsOnly: e.GRAPHQL_PERSISTED_ONLY,
    introspection: e.INTROSPECTION ?? e.GRAPHIQL ?? e.NODE_ENV !== 'production',
    jwtMaxAgeSeconds: e.JWT_MAX_AGE_SECONDS,
    jwtMaxLifetimeSeconds: e.JWT_MAX_LIFETIME_SECONDS,
    limits: {
      maxBodyBytes: e.MAX_BODY_BYTES,
      maxHeaderBytes: e.MAX_HEADER_BYTES,
      maxUrlBytes: e.MAX_URL_BYTES,
      maxHeadBytes: e.MAX_HEAD_BYTES,
      maxHeaderCount: e.MAX_HEADER_COUNT,
      maxQueryParameters: e.MAX_QUERY_PARAMETERS,
      maxTokenBytes: e.MAX_TOKEN_BYTES,
    },
    rateLimit: {
      perAddress: e.RATE_LIMIT_PER_ADDRESS,
      perCredential: e.RATE_LIMIT_PER_CREDENTIAL,
      windowSeconds: e.RATE_LIMIT_WINDOW_SECONDS,
      store: e.RATE_LIMIT_STORE,
      redisUrl: e.REDIS_URL,
      trustProxy: e.TRUST_PROXY,
    },
    shutdownTimeoutMs: e.SHUTDOWN_TIMEOUT_MS,
    shutdownDelayMs: e.SHUTDOWN_DELAY_MS,
    live: {
      minIntervalMs: e.LIVE_MIN_INTERVAL_MS,
      maxPerCredential: e.LIVE_MAX_PER_CREDENTIAL,
      maxPerOrganization: e.LIVE_MAX_PER_ORGANIZATION,
      maxTotal: memory.maxStreams,
      stallMs: e.LIVE_STALL_MS,
    },
    export: { maxConcurrent: e.EXPORT_MAX_CONCURRENT, stallMs: e.EXPORT_STALL_MS, rateCost: e.EXPORT_RATE_COST },
    cache: {
      maxEntries: e.CACHE_MAX_ENTRIES,
      maxBytes: memory.shares.entityCache,
      recordBytes: memory.recordBytes,
      ttlMs: e.CACHE_TTL_SECONDS * 1000,
    },
    corsOrigins:
      e.CORS_ORIGINS.trim() === '*'
        ? ('*' as const)
        : e.CORS_ORIGINS.split(',')
            .map((o) => o.trim())
            .filter(Boolean),
  };
}

/** Development only: `.env`'s settings for the variables the environment leaves unset; returns the names it set. */
export function loadDotEnv(env: NodeJS.ProcessEnv = process.env, file = '.env'): string[] {
  if (env.NODE_ENV === 'production' || !existsSync(file)) return [];
  const set: string[] = [];
  for (const [name, value] of Object.entries(parseEnv(readFileSync(file, 'utf8')))) {
    if (env[name] !== undefined) continue;
    env[name] = value;
    set.push(name);
  }
  return set;
}

/** What `npm run config` prints: the effective settings, secrets masked. */
export function describeConfig(config: Config): Record<string, unknown> {
  const mask = (value: string | undefined) => (value === undefined ? undefined : '********');
  /** A URL with its password masked (all of it, if it does not parse). */
  const maskUrl = (text: string | undefined) => {
    if (text === undefined) return undefined;
    try {
      const url = new URL(text);
      if (url.password) url.password = '********';
      return url.toString();
    } catch {
      return '********';
    }
  };
  return {
    ...config,
    databaseUrl: maskUrl(config.databaseUrl),
    replicaUrls: config.replicaUrls.map((url) => maskUrl(url)),
    changeDecodeUrl: maskUrl(config.changeDecodeUrl),
    paginationSecret: mask(config.paginationSecret),
    rateLimit: { ...config.rateLimit, redisUrl: maskUrl(config.rateLimit.redisUrl) },
  };
}

/** For commands: print the problems and exit non-zero instead of a stack trace. */
export function loadConfigOrExit(env: NodeJS.ProcessEnv = process.env): Config {
  try {
    loadDotEnv(env);
    return loadConfig(env);
  } catch (error) {
    if (error instanceof ConfigError) {
      for (const problem of error.problems) console.error(`config: ${problem}`);
      process.exit(2);
    }
    throw error;
  }
}
