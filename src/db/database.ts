import { EventEmitter } from 'node:events';
import { mkdirSync } from 'node:fs';
import { PrismaPg } from '@prisma/adapter-pg';
import pg from 'pg';
import { PrismaClient } from '../generated/prisma/client.js';
import { isDatabaseUnavailable } from '../errors.js';
import { DataDirInUseError, lockDataDir, type DataDirLock } from './data-dir-lock.js';
import { hostname } from 'node:os';
import type { ChangeFeed } from './capture/feed.js';
import { PostgresChangeFeed, type ChangeSourceChoice } from './capture/select.js';
import { SessionChangeFeed } from './capture/triggers.js';
import { EMBEDDED_PORT, startEmbeddedServer, type EmbeddedServer } from './embedded.js';
import type { SqlConnection, SqlDriver } from './sql-driver.js';

/** How long past the statement timeout the client waits for a server that does not answer. */
const CLIENT_TIMEOUT_MARGIN_MS = 1000;
/** The embedded session's client-side bound (the longest `setTimeout` allows): migrations set their own. */
const SESSION_QUERY_TIMEOUT_MS = 2 ** 31 - 1;

export type { SqlConnection, SqlDriver } from './sql-driver.js';

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
  /** Embedded mode: writes the whole database as a tarball (`{ memory: true, snapshot }` loads one). */
  dump?(file: string): Promise<void>;
  /** Opens the database's committed changes, for the caches (see `capture/`). */
  changeFeed(options?: ChangeFeedOptions): ChangeFeed;
  /** Reads with a time bound of their own (searches): `statement_timeout`, or the client's bound on PGlite. */
  boundedReads(options: BoundedReadOptions): BoundedReads;
  /** Embedded mode: where its socket is, for another client of the same database (`psql`, tests). */
  readonly socket?: { host: string; port: number };
  close(): Promise<void>;
}

/** Statements under a time bound of their own, on connections of their own (see `Database.boundedReads`). */
export type BoundedReads = Pick<SqlDriver, 'query'> & { close(): Promise<void> };

/**
 * The settings of the searches' sessions: no sequential scan (every statement names one parent), no
 * JIT, and parallel workers only for counts over about a million children (figures:
 * test/bench/README.md). An `options` parameter in the database URL replaces them.
 */
export const BOUNDED_READ_SETTINGS = '-c enable_seqscan=off -c jit=off -c parallel_setup_cost=20000';

/** `BOUNDED_READ_SETTINGS`, and for a search's pages (`serial`) no parallel workers, which pages gain nothing from. */
export const boundedReadSettings = (serial = false): string =>
  serial ? `${BOUNDED_READ_SETTINGS} -c max_parallel_workers_per_gather=0` : BOUNDED_READ_SETTINGS;

/** What `boundedReads` and `Replicas.boundedReader` are asked for: the bound, the pool's size, no parallel workers. */
export type BoundedReadOptions = { timeoutMs: number; poolSize: number; serial?: boolean };

export type ChangeFeedOptions = {
  onStateChange?: (live: boolean, error?: unknown) => void;
  /** One line for the operator about the source chosen (`fallback`: not the replication stream). */
  onNotice?: (message: string, fallback: boolean) => void;
  /** PostgreSQL: the source of the changes (`auto` by default). */
  source?: ChangeSourceChoice;
  /** PostgreSQL: a 16+ standby of the primary to decode the stream on (CHANGE_DECODE_URL); unset: the primary. */
  decodeUrl?: string;
};

export type DatabaseOptions = (
  | {
      url: string;
      poolSize?: number;
      connectTimeoutMs?: number;
      statementTimeoutMs?: number;
    }
  | {
      /** The embedded database, kept in this folder. */
      dataDir: string;
      /** Who opens the folder, for the refusal another process gets (`the server`, `npm run token`). */
      owner?: string;
      connectTimeoutMs?: number;
      statementTimeoutMs?: number;
      /** Called if the embedded database's thread ends without being closed. */
      onLost?: (error: Error) => void;
      /** Read-only commands: use the database of the process holding the folder, through its socket. */
      alongside?: boolean;
    }
  | {
      /** The embedded database in memory, empty or started from a snapshot (`dump`). */
      memory: true;
      snapshot?: string;
      connectTimeoutMs?: number;
      statementTimeoutMs?: number;
    }
) & { countQueries?: boolean };

function createClient(adapter: PrismaPg, countQueries: boolean | undefined) {
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

/** Opens the process's database: PostgreSQL given a URL, else the embedded PGlite (on its own thread). */
export async function openDatabase(options: DatabaseOptions): Promise<Database> {
  if ('url' in options)
    return openPool({
      ...options,
      kind: 'postgres',
      location: redactUrl(options.url),
      connection: { connectionString: options.url },
    });
  if ('memory' in options) {
    const server = await startEmbeddedServer({ snapshot: options.snapshot });
    return openEmbedded(server, 'memory', options);
  }
  mkdirSync(options.dataDir, { recursive: true });
  let lock: DataDirLock;
  try {
    lock = await lockDataDir(options.dataDir, options.owner ?? 'another process');
  } catch (error) {
    const owner = error instanceof DataDirInUseError && error.owner.host === hostname() ? error.owner : undefined;
    if (!options.alongside || !owner?.socketDir) throw error;
    return openPool({
      ...options,
      kind: 'pglite',
      location: `${options.dataDir} (through ${owner.what}, pid ${owner.pid})`,
      poolSize: 1,
      connection: { host: owner.socketDir, port: EMBEDDED_PORT, user: 'postgres', database: 'postgres' },
    });
  }
  const { release } = lock;
  try {
    const server = await startEmbeddedServer({ dataDir: options.dataDir }, options.onLost);
    lock.advertise(server.socketDir);
    const database = await openEmbedded(server, options.dataDir, options);
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
  } catch (error) {
    release();
    throw error;
  }
}

async function openEmbedded(
  server: EmbeddedServer,
  location: string,
  options: { connectTimeoutMs?: number; statementTimeoutMs?: number; countQueries?: boolean },
): Promise<Database> {
  const database = openPool({
    ...options,
    kind: 'pglite',
    location,
    // PGlite is one session: the pool holds one connection, and callers queue for it (within
    // the connect timeout) as they would for a busy PostgreSQL pool.
    poolSize: 1,
    connection: { host: server.socketDir, port: server.port, user: 'postgres', database: 'postgres' },
    announcements: server.announcements,
    flushAnnouncements: () => server.flushAnnouncements(),
  });
  return {
    ...database,
    socket: { host: server.socketDir, port: server.port },
    dump: (file) => server.dump(file),
    close: async () => {
      try {
        await database.close();
      } finally {
        await server.stop();
      }
    },
  };
}

type PoolOptions = {
  kind: Database['kind'];
  location: string;
  connection: pg.ClientConfig;
  poolSize?: number;
  connectTimeoutMs?: number;
  statementTimeoutMs?: number;
  countQueries?: boolean;
  /** Embedded: the session's announcements, whichever client's statement made them (`embedded.ts`). */
  announcements?: EventEmitter;
  flushAnnouncements?: () => Promise<void>;
};

/**
 * A pool whose statements PostgreSQL stops at `statementTimeoutMs`; the client gives up a margin later
 * (a server that stops answering), and PGlite has only the client's bound.
 */
export function boundedPool(
  connection: pg.PoolConfig,
  options: {
    max: number;
    connectTimeoutMs: number;
    statementTimeoutMs: number;
    idleTimeoutMs?: number;
    applicationName?: string;
    /** Its sessions' settings (`-c name=value`), after the connection's own `options`. */
    settings?: string;
  },
): pg.Pool {
  const pool = new pg.Pool({
    ...connection,
    ...(options.settings ? { options: [connection.options, options.settings].filter(Boolean).join(' ') } : {}),
    max: options.max,
    connectionTimeoutMillis: options.connectTimeoutMs,
    statement_timeout: options.statementTimeoutMs,
    query_timeout: options.statementTimeoutMs + CLIENT_TIMEOUT_MARGIN_MS,
    idleTimeoutMillis: options.idleTimeoutMs ?? 30_000,
    ...(options.applicationName ? { application_name: options.applicationName } : {}),
  });
  // An idle client that loses its server emits here; without a listener the process would exit.
  pool.on('error', () => {});
  return pool;
}

function openPool(options: PoolOptions): Database {
  const statementTimeoutMs = options.statementTimeoutMs ?? 5000;
  const connectTimeoutMs = options.connectTimeoutMs ?? 2000;
  const embedded = options.kind === 'pglite';
  // The embedded database's one connection stays open: its closing is how a lost answer shows.
  const pool = boundedPool(options.connection, {
    max: options.poolSize ?? 10,
    connectTimeoutMs,
    statementTimeoutMs,
    idleTimeoutMs: embedded ? 0 : undefined,
  });
  const { prisma, queries } = createClient(new PrismaPg(pool), options.countQueries);
  const onClient = (client: pg.PoolClient | pg.Pool | pg.Client, queryTimeoutMs?: number): SqlConnection => {
    // `query_timeout` per query overrides the pool's (pg reads it; its typings omit it).
    const config = (text: string, values?: unknown[]): pg.QueryConfig =>
      (queryTimeoutMs ? { text, values, query_timeout: queryTimeoutMs } : { text, values }) as pg.QueryConfig;
    return {
      exec: async (script) => {
        await client.query(config(script));
      },
      query: async <T extends Record<string, unknown>>(text: string, params: unknown[] = []) =>
        (await client.query<T>(config(text, params))).rows,
    };
  };
  const onPool = onClient(pool);
  const withConnection = async <T>(
    work: (connection: SqlConnection) => Promise<T>,
    queryTimeoutMs?: number,
  ): Promise<T> => {
    const client = await pool.connect();
    let failure: Error | undefined;
    try {
      return await work(onClient(client, queryTimeoutMs));
    } catch (error) {
      // A connection whose query timed out may still be busy with it: not handed out again.
      if (isDatabaseUnavailable(error)) failure = error instanceof Error ? error : new Error(String(error));
      throw error;
    } finally {
      client.release(failure);
    }
  };
  const sql: SqlDriver = {
    kind: options.kind,
    exec: onPool.exec,
    query: options.countQueries ? countingQuery(onPool.query, queries) : onPool.query,
    withConnection: (work) => withConnection(work),
    withSession: embedded
      ? // One session only: the pool's connection, without the requests' time bound.
        (work) => withConnection(work, SESSION_QUERY_TIMEOUT_MS)
      : async (work) => {
          const client = new pg.Client({ ...options.connection, connectionTimeoutMillis: connectTimeoutMs });
          client.on('error', () => {});
          await client.connect();
          try {
            return await work(onClient(client));
          } finally {
            await client.end().catch(() => {});
          }
        },
  };
  return {
    kind: options.kind,
    location: options.location,
    prisma,
    queries,
    // Shared state across instances (rate-limit counters) only where there can be several.
    ...(embedded ? {} : { pgPool: pool }),
    changeFeed: (feedOptions = {}) =>
      embedded
        ? new SessionChangeFeed(sql, options.announcements ?? new EventEmitter(), options.flushAnnouncements)
        : new PostgresChangeFeed({
            connection: options.connection,
            connectTimeoutMs,
            sql,
            choice: feedOptions.source,
            ...feedOptions,
            decodeFrom: feedOptions.decodeUrl ? { connectionString: feedOptions.decodeUrl } : undefined,
          }),
    sql,
    boundedReads: ({ timeoutMs, poolSize, serial }) => {
      if (embedded) return { query: onClient(pool, timeoutMs).query, close: async () => {} };
      const bounded = boundedPool(options.connection, {
        max: poolSize,
        connectTimeoutMs,
        statementTimeoutMs: timeoutMs,
        settings: boundedReadSettings(serial),
      });
      return {
        query: async (text, params) => (await bounded.query(text, params)).rows,
        close: () => bounded.end().catch(() => {}),
      };
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
