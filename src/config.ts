import { z } from 'zod';

const bool = (fallback: boolean) =>
  z
    .enum(['true', 'false', '1', '0', 'yes', 'no', 'on', 'off'])
    .optional()
    .transform((v) => (v === undefined ? fallback : ['true', '1', 'yes', 'on'].includes(v)));

const optionalString = z
  .string()
  .optional()
  .transform((v) => (v === undefined || v.trim() === '' ? undefined : v.trim()));

const environment = z.object({
  NODE_ENV: z.enum(['development', 'production', 'test']).default('development'),
  PORT: z.coerce.number().int().min(0).max(65535).default(4000),
  HOST: z.string().min(1).default('0.0.0.0'),
  DATABASE_URL: optionalString.pipe(
    z
      .string()
      .regex(/^postgres(ql)?:\/\//, 'must be a postgres:// or postgresql:// URL')
      .optional(),
  ),
  DATA_DIR: z.string().min(1).default('./data'),
  MIGRATE_ON_START: bool(true),
  SEED_DEMO_ON_START: bool(true),
  DATABASE_POOL_SIZE: z.coerce.number().int().min(1).max(500).default(10),
  DATABASE_CONNECT_TIMEOUT_MS: z.coerce.number().int().min(100).default(1500),
  DATABASE_STATEMENT_TIMEOUT_MS: z.coerce.number().int().min(100).default(5000),
  JWT_ISSUER: optionalString,
  JWT_AUDIENCE: optionalString,
  PAGINATION_SECRET: optionalString.pipe(z.string().min(32, 'must be at least 32 characters').optional()),
  CORS_ORIGINS: z.string().default('*'),
  INTROSPECTION: z.enum(['true', 'false', '1', '0', 'yes', 'no', 'on', 'off']).optional(),
  JWT_MAX_AGE_SECONDS: z.coerce.number().int().min(1).optional(),
  MAX_BODY_BYTES: z.coerce.number().int().min(1024).default(100_000),
  MAX_HEADER_BYTES: z.coerce.number().int().min(256).default(8192),
  RATE_LIMIT_PER_ADDRESS: z.coerce.number().int().min(0).default(600),
  RATE_LIMIT_PER_CREDENTIAL: z.coerce.number().int().min(0).default(300),
  RATE_LIMIT_WINDOW_SECONDS: z.coerce.number().int().min(1).default(60),
  RATE_LIMIT_STORE: z.enum(['memory', 'postgres']).default('memory'),
  TRUST_PROXY: bool(false),
  SHUTDOWN_TIMEOUT_MS: z.coerce.number().int().min(100).default(10_000),
  CACHE_MAX_ENTRIES: z.coerce.number().int().min(0).default(20_000),
  CACHE_TTL_SECONDS: z.coerce.number().int().min(1).default(600),
  GRAPHIQL: z.enum(['true', 'false', '1', '0', 'yes', 'no', 'on', 'off']).optional(),
  LOG_LEVEL: z.enum(['debug', 'info', 'warn', 'error', 'silent']).default('info'),
});

export type Config = {
  env: 'development' | 'production' | 'test';
  port: number;
  host: string;
  /** Unset: the embedded PGlite database in `dataDir`. */
  databaseUrl: string | undefined;
  dataDir: string;
  migrateOnStart: boolean;
  seedDemoOnStart: boolean;
  database: { poolSize: number; connectTimeoutMs: number; statementTimeoutMs: number };
  jwt: { issuer: string | undefined; audience: string | undefined };
  /** Key for page tokens; unset: derived per organization from its signing secret. */
  paginationSecret: string | undefined;
  /** GraphiQL and introspection; default on except in production. */
  graphiql: boolean;
  /** Origins browsers may call from: `*` (any) or an explicit list. */
  corsOrigins: '*' | string[];
  /** Introspection; default follows GraphiQL. */
  introspection: boolean;
  /** Refuse tokens issued longer ago than this (unset: only `exp` counts). */
  jwtMaxAgeSeconds: number | undefined;
  limits: { maxBodyBytes: number; maxHeaderBytes: number };
  rateLimit: {
    perAddress: number;
    perCredential: number;
    windowSeconds: number;
    store: 'memory' | 'postgres';
    trustProxy: boolean;
  };
  shutdownTimeoutMs: number;
  /** The entity cache (0 entries: no cache). */
  cache: { maxEntries: number; ttlMs: number };
  logLevel: 'debug' | 'info' | 'warn' | 'error' | 'silent';
};

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  ${p}`).join('\n')}`);
  }
}

/** Parses the environment once; every invalid setting is reported on its own line. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const parsed = environment.safeParse(env);
  if (parsed.success && parsed.data.RATE_LIMIT_STORE === 'postgres' && !parsed.data.DATABASE_URL) {
    throw new ConfigError(['RATE_LIMIT_STORE: postgres needs DATABASE_URL (the embedded database serves one process)']);
  }
  if (!parsed.success) {
    throw new ConfigError(
      parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`),
    );
  }
  const e = parsed.data;
  return {
    env: e.NODE_ENV,
    port: e.PORT,
    host: e.HOST,
    databaseUrl: e.DATABASE_URL,
    dataDir: e.DATA_DIR,
    migrateOnStart: e.MIGRATE_ON_START,
    seedDemoOnStart: e.SEED_DEMO_ON_START,
    database: {
      poolSize: e.DATABASE_POOL_SIZE,
      connectTimeoutMs: e.DATABASE_CONNECT_TIMEOUT_MS,
      statementTimeoutMs: e.DATABASE_STATEMENT_TIMEOUT_MS,
    },
    jwt: { issuer: e.JWT_ISSUER, audience: e.JWT_AUDIENCE },
    paginationSecret: e.PAGINATION_SECRET,
    graphiql: e.GRAPHIQL === undefined ? e.NODE_ENV !== 'production' : ['true', '1', 'yes', 'on'].includes(e.GRAPHIQL),
    logLevel: e.LOG_LEVEL,
    introspection:
      e.INTROSPECTION === undefined
        ? e.GRAPHIQL === undefined
          ? e.NODE_ENV !== 'production'
          : ['true', '1', 'yes', 'on'].includes(e.GRAPHIQL)
        : ['true', '1', 'yes', 'on'].includes(e.INTROSPECTION),
    jwtMaxAgeSeconds: e.JWT_MAX_AGE_SECONDS,
    limits: { maxBodyBytes: e.MAX_BODY_BYTES, maxHeaderBytes: e.MAX_HEADER_BYTES },
    rateLimit: {
      perAddress: e.RATE_LIMIT_PER_ADDRESS,
      perCredential: e.RATE_LIMIT_PER_CREDENTIAL,
      windowSeconds: e.RATE_LIMIT_WINDOW_SECONDS,
      store: e.RATE_LIMIT_STORE,
      trustProxy: e.TRUST_PROXY,
    },
    shutdownTimeoutMs: e.SHUTDOWN_TIMEOUT_MS,
    cache: { maxEntries: e.CACHE_MAX_ENTRIES, ttlMs: e.CACHE_TTL_SECONDS * 1000 },
    corsOrigins: e.CORS_ORIGINS.trim() === '*' ? '*' : e.CORS_ORIGINS.split(',').map((o) => o.trim()).filter(Boolean),
  };
}

/** For commands: print the problems and exit non-zero instead of a stack trace. */
export function loadConfigOrExit(env: NodeJS.ProcessEnv = process.env): Config {
  try {
    return loadConfig(env);
  } catch (error) {
    if (error instanceof ConfigError) {
      for (const problem of error.problems) console.error(`config: ${problem}`);
      process.exit(2);
    }
    throw error;
  }
}
