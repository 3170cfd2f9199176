import { mkdirSync } from 'node:fs';
import { PGlite } from '@electric-sql/pglite';
import { pg_trgm } from '@electric-sql/pglite/contrib/pg_trgm';
import { PrismaPg } from '@prisma/adapter-pg';
import { PrismaPGlite } from 'pglite-prisma-adapter';
import pg from 'pg';
import { PrismaClient } from '../generated/prisma/client.js';
import { isDatabaseUnavailable } from '../errors.js';
import { lockDataDir } from './data-dir-lock.js';
import { PgliteChangeFeed, PostgresChangeFeed, type ChangeFeed } from './change-feed.js';

/** How long past the statement timeout the client waits for a server that does not answer. */
const CLIENT_TIMEOUT_MARGIN_MS = 1000;

/**
 * Plain SQL beside Prisma: migrations, locks, bulk loads, and the child list's hand-tuned keyset
 * and counting queries (the one hot path that always reaches the database).
 */
export interface SqlDriver {
  readonly kind: 'pglite' | 'postgres';
  /** Runs a script of one or more statements, without parameters. */
  exec(script: string): Promise<void>;
  query<T extends Record<string, unknown>>(text: string, params?: unknown[]): Promise<T[]>;
  /** Runs `work` on one dedicated connection (session locks, explicit transactions). */
  withConnection<T>(work: (connection: SqlConnection) => Promise<T>): Promise<T>;
  /**
   * Runs `work` on a connection of its own, outside the pool and without the requests' time
   * limits (statement and client-side query timeouts): migrations, which may wait for another
   * instance's lock and rewrite large tables. The caller sets the bounds it needs.
   */
  withSession<T>(work: (connection: SqlConnection) => Promise<T>): Promise<T>;
}

export interface SqlConnection {
  exec(script: string): Promise<void>;
  query<T extends Record<string, unknown>>(text: string, params?: unknown[]): Promise<T[]>;
}

export interface Database {
  readonly kind: 'pglite' | 'postgres';
  readonly prisma: PrismaClient;
  readonly sql: SqlDriver;
  /** Where the data lives, for log lines: a folder, `memory`, or the server URL without its password. */
  readonly location: string;
  /** Counts Prisma's statements when opened with `countQueries` (tests guarding against N+1). */
  readonly queries: { count: number };
  /** PostgreSQL mode: the pool under Prisma (shared rate-limit counters use it). */
  readonly pgPool?: pg.Pool;
  /** Opens a listener for the change announcements of the database's triggers. */
  changeFeed(options?: { onStateChange?: (live: boolean, error?: unknown) => void }): ChangeFeed;
  close(): Promise<void>;
}

export type DatabaseOptions = (
  | {
      url: string;
      poolSize?: number;
      connectTimeoutMs?: number;
      statementTimeoutMs?: number;
    }
  | {
      dataDir: string;
      /** Who opens the folder, for the refusal another process gets (`the server`, `npm run token`). */
      owner?: string;
    }
  | { pglite: PGlite }
) & { countQueries?: boolean };

function createClient(adapter: PrismaPg | PrismaPGlite, countQueries: boolean | undefined) {
  const queries = { count: 0 };
  if (!countQueries) return { prisma: new PrismaClient({ adapter }), queries };
  const prisma = new PrismaClient({ adapter, log: [{ emit: 'event', level: 'query' }] });
  prisma.$on('query', () => {
    queries.count += 1;
  });
  return { prisma: prisma as unknown as PrismaClient, queries };
}

/** Counts plain SQL statements alongside Prisma's (tests guarding against N+1). */
function countingQuery(query: SqlConnection['query'], queries: { count: number }): SqlConnection['query'] {
  return (text, params) => {
    queries.count += 1;
    return query(text, params);
  };
}

export const pgliteExtensions = { pg_trgm };

/** Opens the one database of the process: a PostgreSQL server when given a URL, PGlite otherwise. */
export async function openDatabase(options: DatabaseOptions): Promise<Database> {
  if ('url' in options) return openPostgres(options);
  if ('pglite' in options) {
    await options.pglite.waitReady;
    return openPglite(options.pglite, 'memory', options.countQueries);
  }
  mkdirSync(options.dataDir, { recursive: true });
  const release = lockDataDir(options.dataDir, options.owner ?? 'another process');
  let pglite: PGlite;
  try {
    pglite = new PGlite(options.dataDir, { extensions: pgliteExtensions });
    await pglite.waitReady;
  } catch (error) {
    release();
    throw error;
  }
  const database = openPglite(pglite, options.dataDir, options.countQueries);
  return {
    ...database,
    close: async () => {
      try {
        await database.close();
      } finally {
        release();
      }
    },
  };
}

function openPglite(pglite: PGlite, location: string, countQueries: boolean | undefined): Database {
  const connection: SqlConnection = {
    exec: async (script) => {
      await pglite.exec(script);
    },
    query: async <T extends Record<string, unknown>>(text: string, params: unknown[] = []) =>
      (await pglite.query<T>(text, params)).rows,
  };
  const { prisma, queries } = createClient(new PrismaPGlite(pglite), countQueries);
  const counted = countQueries ? countingQuery(connection.query, queries) : connection.query;
  // PGlite is a single connection: session state (advisory locks, BEGIN) is shared by every
  // caller, so dedicated use of it is handed out one caller at a time.
  let queue: Promise<unknown> = Promise.resolve();
  const withConnection = <T>(work: (c: SqlConnection) => Promise<T>): Promise<T> => {
    const turn = queue.then(() => work(connection));
    queue = turn.catch(() => {});
    return turn;
  };
  return {
    kind: 'pglite',
    location,
    prisma,
    queries,
    sql: { kind: 'pglite', exec: connection.exec, query: counted, withConnection, withSession: withConnection },
    changeFeed: () => new PgliteChangeFeed(pglite),
    close: async () => {
      await prisma.$disconnect();
      if (!pglite.closed) await pglite.close();
    },
  };
}

function openPostgres(options: {
  url: string;
  poolSize?: number;
  connectTimeoutMs?: number;
  statementTimeoutMs?: number;
  countQueries?: boolean;
}): Database {
  const statementTimeoutMs = options.statementTimeoutMs ?? 5000;
  const pool = new pg.Pool({
    connectionString: options.url,
    max: options.poolSize ?? 10,
    connectionTimeoutMillis: options.connectTimeoutMs ?? 2000,
    statement_timeout: statementTimeoutMs,
    // The server enforces statement_timeout only while it runs: a server that stops answering
    // (frozen, or a network path that drops packets) is bounded here, by the client. A query
    // that times out this way fails with its connection, which the pool then discards.
    query_timeout: statementTimeoutMs + CLIENT_TIMEOUT_MARGIN_MS,
    idleTimeoutMillis: 30_000,
  });
  // An idle client that loses its server emits here; without a listener the process would exit.
  pool.on('error', () => {});
  const { prisma, queries } = createClient(new PrismaPg(pool), options.countQueries);
  const onClient = (client: pg.PoolClient | pg.Pool | pg.Client): SqlConnection => ({
    exec: async (script) => {
      await client.query(script);
    },
    query: async <T extends Record<string, unknown>>(text: string, params: unknown[] = []) =>
      (await client.query<T>(text, params)).rows,
  });
  const onPool = onClient(pool);
  return {
    kind: 'postgres',
    location: redactUrl(options.url),
    prisma,
    queries,
    pgPool: pool,
    changeFeed: (feedOptions) =>
      new PostgresChangeFeed({ url: options.url, connectTimeoutMs: options.connectTimeoutMs, ...feedOptions }),
    sql: {
      kind: 'postgres',
      exec: onPool.exec,
      query: options.countQueries ? countingQuery(onPool.query, queries) : onPool.query,
      withConnection: async (work) => {
        const client = await pool.connect();
        let failure: Error | undefined;
        try {
          return await work(onClient(client));
        } catch (error) {
          // A connection whose query timed out may still be busy with it: not handed out again.
          if (isDatabaseUnavailable(error)) failure = error instanceof Error ? error : new Error(String(error));
          throw error;
        } finally {
          client.release(failure);
        }
      },
      withSession: async (work) => {
        const client = new pg.Client({ connectionString: options.url, connectionTimeoutMillis: options.connectTimeoutMs ?? 2000 });
        client.on('error', () => {});
        await client.connect();
        try {
          return await work(onClient(client));
        } finally {
          await client.end().catch(() => {});
        }
      },
    },
    close: async () => {
      await prisma.$disconnect();
      await pool.end();
    },
  };
}

export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return 'postgres://(unparseable url)';
  }
}
