import { createHash, randomUUID } from 'node:crypto';
import { readdirSync, readFileSync, existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { SqlConnection, SqlDriver } from './sql-driver.js';

/*
 * Applies prisma/migrations as `prisma migrate deploy` does (same table and checksums, so Prisma's own
 * tools agree), because Prisma's schema engine is a binary downloaded outside the npm registry.
 */

export const defaultMigrationsDir = fileURLToPath(new URL('../../prisma/migrations', import.meta.url));

/** How long an instance waits for another one's migrations by default: ten minutes. */
export const DEFAULT_LOCK_TIMEOUT_MS = 10 * 60_000;

/** The advisory lock id Prisma Migrate takes, so that Prisma and this migrator exclude each other. */
const MIGRATION_LOCK_ID = 72707369;
/** How often an instance waiting for another's migrations asks for the lock again. */
const LOCK_POLL_MS = 100;

const BOOKKEEPING_TABLE = `
CREATE TABLE IF NOT EXISTS "_prisma_migrations" (
    "id"                    VARCHAR(36) PRIMARY KEY NOT NULL,
    "checksum"              VARCHAR(64) NOT NULL,
    "finished_at"           TIMESTAMPTZ,
    "migration_name"        VARCHAR(255) NOT NULL,
    "logs"                  TEXT,
    "rolled_back_at"        TIMESTAMPTZ,
    "started_at"            TIMESTAMPTZ NOT NULL DEFAULT now(),
    "applied_steps_count"   INTEGER NOT NULL DEFAULT 0
);`;

export type LocalMigration = { name: string; script: string; checksum: string };

export type MigrationReport = {
  applied: string[];
  alreadyApplied: string[];
  /** Applied migrations whose file changed since (Prisma reports these as modified). */
  modified: string[];
  /** Recorded in the database but absent from the migrations folder. */
  unknown: string[];
};

export class MigrationError extends Error {}

export function checksum(script: string): string {
  return createHash('sha256').update(script, 'utf8').digest('hex');
}

export function readMigrations(dir: string = defaultMigrationsDir): LocalMigration[] {
  if (!existsSync(dir)) throw new MigrationError(`no migrations folder at ${dir}`);
  return readdirSync(dir, { withFileTypes: true })
    .filter((entry) => entry.isDirectory())
    .map((entry) => entry.name)
    .sort()
    .flatMap((name) => {
      const file = path.join(dir, name, 'migration.sql');
      if (!existsSync(file)) return [];
      const script = readFileSync(file, 'utf8');
      return [{ name, script, checksum: checksum(script) }];
    });
}

type AppliedRow = {
  migration_name: string;
  checksum: string;
  finished_at: Date | null;
  rolled_back_at: Date | null;
  logs: string | null;
};

/** Applies pending migrations in order, each in its own transaction, under Prisma's advisory lock. */
export async function migrate(
  sql: SqlDriver,
  migrations: LocalMigration[] = readMigrations(),
  options: { lockTimeoutMs?: number } = {},
): Promise<MigrationReport> {
  const lockTimeoutMs = options.lockTimeoutMs ?? DEFAULT_LOCK_TIMEOUT_MS;
  // A session of its own: neither the wait for the lock nor a long migration is bounded by the
  // requests' time limits; the wait has its own bound (MIGRATION_LOCK_TIMEOUT_MS).
  return sql.withSession(async (connection) => {
    await connection.exec('SET statement_timeout = 0; SET lock_timeout = 0');
    // Polled rather than waited for: a waiting statement holds a snapshot, which a concurrent index
    // build by the lock's holder would wait for (a deadlock).
    const deadline = Date.now() + lockTimeoutMs;
    for (;;) {
      const [row] = await connection.query<{ locked: boolean }>('SELECT pg_try_advisory_lock($1) AS locked', [
        MIGRATION_LOCK_ID,
      ]);
      if (row?.locked) break;
      if (Date.now() >= deadline) {
        throw new MigrationError(
          `another instance held the migration lock for more than ${Math.round(lockTimeoutMs / 1000)} s (MIGRATION_LOCK_TIMEOUT_MS): is a migration still running?`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, Math.min(LOCK_POLL_MS, Math.max(1, deadline - Date.now()))));
    }
    try {
      return await applyPending(connection, migrations);
    } finally {
      await connection.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_ID]);
    }
  });
}

async function applyPending(connection: SqlConnection, migrations: LocalMigration[]): Promise<MigrationReport> {
  await connection.exec(BOOKKEEPING_TABLE);
  const rows = await connection.query<AppliedRow>(
    'SELECT migration_name, checksum, finished_at, rolled_back_at, logs FROM "_prisma_migrations" ORDER BY started_at',
  );
  const failed = rows.filter((row) => row.finished_at === null && row.rolled_back_at === null);
  if (failed.length > 0) {
    const names = failed.map((row) => row.migration_name).join(', ');
    throw new MigrationError(
      `migration ${names} failed earlier and blocks the others; fix the database, then mark it rolled back (set rolled_back_at) before migrating again`,
    );
  }
  const applied = new Map(rows.filter((row) => row.finished_at !== null).map((row) => [row.migration_name, row]));
  const local = new Set(migrations.map((m) => m.name));
  const report: MigrationReport = {
    applied: [],
    alreadyApplied: [],
    modified: [],
    unknown: [...applied.keys()].filter((name) => !local.has(name)),
  };
  for (const migration of migrations) {
    const done = applied.get(migration.name);
    if (done) {
      report.alreadyApplied.push(migration.name);
      if (done.checksum !== migration.checksum) report.modified.push(migration.name);
      continue;
    }
    await applyOne(connection, migration);
    report.applied.push(migration.name);
  }
  return report;
}

/** A migration that is one `CREATE INDEX CONCURRENTLY` alone, which PostgreSQL refuses inside a transaction. */
function concurrentIndex(script: string): string | undefined {
  const statements = script
    .split('\n')
    .filter((line) => !line.trim().startsWith('--'))
    .join('\n')
    .trim()
    .replace(/;$/, '');
  if (statements.includes(';')) return undefined;
  return /^CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+"([^"]+)"/i.exec(statements)?.[1];
}

async function applyOne(connection: SqlConnection, migration: LocalMigration): Promise<void> {
  const id = randomUUID();
  const index = concurrentIndex(migration.script);
  if (index !== undefined) return applyConcurrently(connection, migration, id, index);
  try {
    await connection.exec('BEGIN');
    // A migration may rewrite a large table: the pool's per-statement limit, meant for requests,
    // does not apply to it.
    await connection.exec('SET LOCAL statement_timeout = 0');
    await connection.exec(migration.script);
    await connection.query(
      `INSERT INTO "_prisma_migrations" (id, checksum, migration_name, started_at, finished_at, applied_steps_count)
       VALUES ($1, $2, $3, now(), now(), 1)`,
      [id, migration.checksum, migration.name],
    );
    await connection.exec('COMMIT');
  } catch (error) {
    await connection.exec('ROLLBACK').catch(() => {});
    throw await recordFailure(connection, migration, id, error);
  }
}

/** `CREATE INDEX CONCURRENTLY` outside a transaction, dropping an invalid index a failed build left. */
async function applyConcurrently(
  connection: SqlConnection,
  migration: LocalMigration,
  id: string,
  index: string,
): Promise<void> {
  const drop = `DROP INDEX CONCURRENTLY IF EXISTS "${index}"`;
  try {
    await connection.exec(drop);
    await connection.exec(migration.script);
    await connection.query(
      `INSERT INTO "_prisma_migrations" (id, checksum, migration_name, started_at, finished_at, applied_steps_count)
       VALUES ($1, $2, $3, now(), now(), 1)`,
      [id, migration.checksum, migration.name],
    );
  } catch (error) {
    await connection.exec(drop).catch(() => {});
    throw await recordFailure(connection, migration, id, error);
  }
}

/** Records a failed migration as Prisma records one, so that both refuse to go on past it. */
async function recordFailure(
  connection: SqlConnection,
  migration: LocalMigration,
  id: string,
  error: unknown,
): Promise<MigrationError> {
  const message = error instanceof Error ? error.message : String(error);
  await connection.query(
    `INSERT INTO "_prisma_migrations" (id, checksum, migration_name, started_at, logs, applied_steps_count)
     VALUES ($1, $2, $3, now(), $4, 0)`,
    [id, migration.checksum, migration.name, message],
  );
  return new MigrationError(`migration ${migration.name} failed: ${message}`);
}
