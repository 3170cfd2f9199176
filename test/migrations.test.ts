import { readFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openDatabase } from '../src/db/database.js';
import { MigrationError, defaultMigrationsDir, migrate, readMigrations } from '../src/db/migrator.js';
import { createEmptyDatabase, testMode, type TestDatabase } from './helpers/database.js';

const opened: TestDatabase[] = [];
async function emptyDatabase(): Promise<TestDatabase> {
  const database = await createEmptyDatabase();
  opened.push(database);
  return database;
}
afterEach(async () => {
  while (opened.length) await opened.pop()!.close();
});

async function tables(database: TestDatabase): Promise<string[]> {
  const rows = await database.sql.query<{ table_name: string }>(
    `SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name`,
  );
  return rows.map((row) => row.table_name);
}

describe(`migrations (${testMode})`, () => {
  it('apply cleanly to an empty database, with the bookkeeping Prisma Migrate writes', async () => {
    const database = await emptyDatabase();
    const report = await migrate(database.sql);
    const local = readMigrations();
    expect(report.applied).toEqual(local.map((m) => m.name));
    expect(await tables(database)).toEqual([
      'Account',
      'MonthlyUsage',
      'Organization',
      'PackagePurchase',
      '_prisma_migrations',
      'rate_limit',
    ]);
    const rows = await database.sql.query<{
      migration_name: string;
      checksum: string;
      finished_at: Date | null;
      applied_steps_count: number;
      rolled_back_at: Date | null;
    }>('SELECT * FROM "_prisma_migrations" ORDER BY migration_name');
    expect(rows.map((r) => r.migration_name)).toEqual(local.map((m) => m.name));
    for (const row of rows) {
      const file = readFileSync(path.join(defaultMigrationsDir, row.migration_name, 'migration.sql'));
      // Prisma's checksum: SHA-256 of the migration file, hex.
      expect(row.checksum).toBe(createHash('sha256').update(file).digest('hex'));
      expect(row.finished_at).not.toBeNull();
      expect(row.rolled_back_at).toBeNull();
      expect(row.applied_steps_count).toBe(1);
    }
    const extensions = await database.sql.query<{ extname: string }>('SELECT extname FROM pg_extension');
    expect(extensions.map((e) => e.extname)).toContain('pg_trgm');
  });

  it('a second apply is a no-op', async () => {
    const database = await emptyDatabase();
    await migrate(database.sql);
    const before = await database.sql.query('SELECT * FROM "_prisma_migrations" ORDER BY id');
    const report = await migrate(database.sql);
    expect(report.applied).toEqual([]);
    expect(report.alreadyApplied).toEqual(readMigrations().map((m) => m.name));
    expect(await database.sql.query('SELECT * FROM "_prisma_migrations" ORDER BY id')).toEqual(before);
  });

  it('two instances migrating at once apply each migration exactly once', async () => {
    const database = await emptyDatabase();
    const second = testMode === 'postgres' ? await openDatabase({ url: database.url!, poolSize: 2 }) : database;
    try {
      const reports = await Promise.all([migrate(database.sql), migrate(second.sql)]);
      const appliedTwice = reports.flatMap((r) => r.applied);
      expect(appliedTwice.sort()).toEqual(
        readMigrations()
          .map((m) => m.name)
          .sort(),
      );
      const rows = await database.sql.query<{ n: number }>('SELECT count(*)::int AS n FROM "_prisma_migrations"');
      expect(rows[0]!.n).toBe(readMigrations().length);
    } finally {
      if (second !== database) await second.close();
    }
  });

  it('a failing migration is rolled back, recorded as failed, and blocks later runs', async () => {
    const database = await emptyDatabase();
    const good = readMigrations();
    const broken = [
      ...good,
      {
        name: '29990101000000_broken',
        script: 'CREATE TABLE "Half" (id int);\nSELECT * FROM "NoSuchTable";',
        checksum: 'x'.repeat(64),
      },
    ];
    await expect(migrate(database.sql, broken)).rejects.toThrow(/29990101000000_broken failed/);
    expect(await tables(database)).not.toContain('Half');
    const failed = await database.sql.query<{ finished_at: Date | null; logs: string }>(
      `SELECT finished_at, logs FROM "_prisma_migrations" WHERE migration_name = '29990101000000_broken'`,
    );
    expect(failed).toHaveLength(1);
    expect(failed[0]!.finished_at).toBeNull();
    expect(failed[0]!.logs).toMatch(/NoSuchTable/);
    await expect(migrate(database.sql, good)).rejects.toBeInstanceOf(MigrationError);
  });

  it('runs a migration without the per-statement time limit that requests have (a backfill may be long)', async () => {
    const database = await emptyDatabase();
    const probe = {
      name: '29990101000000_probe',
      script: 'CREATE TABLE "Probe" AS SELECT current_setting(\'statement_timeout\') AS value;',
      checksum: 'p'.repeat(64),
    };
    await migrate(database.sql, [...readMigrations(), probe]);
    expect(await database.sql.query(`SELECT value FROM "Probe"`)).toEqual([{ value: '0' }]);
    // The pool's own connections keep their limit.
    const [limit] = await database.sql.query<{ statement_timeout: string }>('SHOW statement_timeout');
    if (testMode === 'postgres') expect(limit!.statement_timeout).not.toBe('0');
  });

  it('an index built CONCURRENTLY runs outside a transaction and is valid; a failed one leaves no index behind and blocks later runs', async () => {
    const database = await emptyDatabase();
    await migrate(database.sql);
    const valid = (name: string) =>
      database.sql.query<{ valid: boolean }>(
        `SELECT i.indisvalid AS valid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = $1`,
        [name],
      );
    expect(await valid('Account_parentId_search_grams_idx')).toEqual([{ valid: true }]);
    await database.sql.query(
      `INSERT INTO "Account" (id, type, username, email, "publicKey") VALUES ('USR_d1', 'parent', 'same', 'd1@example.com', 'APK_d1'), ('USR_d2', 'parent', 'same', 'd2@example.com', 'APK_d2')`,
    );
    // Two accounts share the username: the unique index fails after PostgreSQL has created it, invalid.
    const unique = {
      name: '29990101000000_unique',
      script: '-- a comment\nCREATE UNIQUE INDEX CONCURRENTLY "Account_username_once" ON "Account"(username);\n',
      checksum: 'u'.repeat(64),
    };
    await expect(migrate(database.sql, [...readMigrations(), unique])).rejects.toThrow(/29990101000000_unique failed/);
    expect(await valid('Account_username_once')).toEqual([]);
    await expect(migrate(database.sql, readMigrations())).rejects.toBeInstanceOf(MigrationError);
  });

  it('reports a migration file changed after it was applied', async () => {
    const database = await emptyDatabase();
    await migrate(database.sql);
    const edited = readMigrations().map((m, i) => (i === 0 ? { ...m, checksum: 'f'.repeat(64) } : m));
    const report = await migrate(database.sql, edited);
    expect(report.modified).toEqual([edited[0]!.name]);
  });
});

// Independent of the database under test (Prisma's diff engine replays the migrations into its own
// in-memory shadow database), so it runs once, in the PGlite pass.
