import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, inject } from 'vitest';
import { openDatabase, type Database } from '../../src/db/database.js';

export type TestDatabase = Database & {
  /** PostgreSQL mode: the URL of this file's own database (for commands run as child processes). */
  url?: string;
};

export const testMode: 'pglite' | 'postgres' = process.env.TEST_DATABASE_URL ? 'postgres' : 'pglite';

/** An empty database with no migrations applied (for the migration tests). */
export async function createEmptyDatabase(): Promise<TestDatabase> {
  return createDatabase(false);
}

/** A fresh migrated database of its own. */
export async function createTestDatabase(): Promise<TestDatabase> {
  return createDatabase(true);
}

async function createDatabase(migrated: boolean): Promise<TestDatabase> {
  if (testMode === 'pglite') {
    return openDatabase({
      memory: true,
      snapshot: migrated ? inject('pgliteSnapshot') : undefined,
      countQueries: true,
    });
  }
  const serverUrl = inject('postgresUrl');
  const prefixed = `${inject('postgresPrefix')}${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  try {
    await admin.query(
      migrated ? `CREATE DATABASE ${prefixed} TEMPLATE ${inject('postgresTemplate')}` : `CREATE DATABASE ${prefixed}`,
    );
  } finally {
    await admin.end();
  }
  const url = new URL(serverUrl);
  url.pathname = `/${prefixed}`;
  const database = await openDatabase({ url: url.toString(), poolSize: 5, countQueries: true });
  return {
    ...database,
    url: url.toString(),
    close: async () => {
      await database.close();
      const dropper = new pg.Client({ connectionString: serverUrl });
      await dropper.connect();
      try {
        await dropWithSlots(dropper, prefixed);
      } finally {
        await dropper.end();
      }
    },
  };
}

/**
 * Drops a test database. A server stopped just before may still hold its temporary replication
 * slot for a moment (its walsender ends after the client has gone), and FORCE does not remove
 * slots: their sessions are ended, and the drop tried again, for up to 10 s.
 */
async function dropWithSlots(client: pg.Client, name: string): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    await client.query(
      `SELECT CASE WHEN active THEN pg_terminate_backend(active_pid) ELSE pg_drop_replication_slot(slot_name) IS NULL END FROM pg_replication_slots WHERE database = $1`,
      [name],
    );
    try {
      await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      return;
    } catch (error) {
      if (attempt >= 100 || !/replication slot/.test((error as Error).message)) throw error;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

/**
 * A test's seed statement (a bulk insert, ANALYZE), in a session of its own without the requests'
 * time bound: on shared cores a large insert can take longer than a request's query may.
 */
export async function seedSql(database: Pick<Database, 'sql'>, text: string, params: unknown[] = []): Promise<void> {
  await database.sql.withSession((session) => session.query(text, params));
}

/** This file's own migrated database, opened before its tests and dropped after them. */
export function useTestDatabase(): () => TestDatabase {
  let database: TestDatabase | undefined;
  beforeAll(async () => {
    database = await createTestDatabase();
  });
  afterAll(async () => {
    await database?.close();
  });
  return () => {
    if (!database) throw new Error('the test database is opened in beforeAll');
    return database;
  };
}

/**
 * Another service writing this file's database: a connection of its own (on PGlite, a second
 * client of the embedded database's socket, as `psql` would be), opened before the file's tests
 * and closed after them.
 */
export function useOutsideWriter(database: () => TestDatabase): (sql: string, params?: unknown[]) => Promise<void> {
  let client: pg.Client | undefined;
  beforeAll(async () => {
    const { url, socket } = database();
    client = url
      ? new pg.Client({ connectionString: url })
      : new pg.Client({ host: socket!.host, port: socket!.port, user: 'postgres', database: 'postgres' });
    await client.connect();
  });
  afterAll(async () => {
    await client?.end();
  });
  return async (sql, params) => {
    await client!.query(sql, params);
  };
}

let shared: Promise<TestDatabase> | undefined;

/**
 * The database of a file that tests one surface (`rest.test.ts`, `graphql.test.ts`): every
 * describe block of the file reads and writes the same migrated copy, each test with the
 * organizations it builds. The file closes it after its last test (`closeSharedDatabase`).
 */
export function useSharedDatabase(): () => TestDatabase {
  let database: TestDatabase | undefined;
  beforeAll(async () => {
    shared ??= createTestDatabase();
    database = await shared;
  });
  return () => {
    if (!database) throw new Error('the shared database is opened in beforeAll');
    return database;
  };
}

export async function closeSharedDatabase(): Promise<void> {
  const closing = shared;
  shared = undefined;
  await (await closing)?.close();
}
