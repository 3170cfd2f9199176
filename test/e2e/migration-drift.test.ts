import { mkdtempSync, mkdirSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { diffMigrationsToSchema } from '../../src/cli/migration-diff.js';
import { defaultMigrationsDir, readMigrations } from '../../src/db/migrator.js';

/*
 * The drift check behind `npm run db:diff`: Prisma's CLI replays the migrations into a shadow
 * database of its own and compares the result with schema.prisma. It runs Prisma's CLI as a
 * process and needs neither tier's database.
 */
describe('schema.prisma and the migrations', () => {
  it('agree: replaying every migration yields exactly the schema (no drift)', () => {
    const result = diffMigrationsToSchema();
    expect(result.sql).toBe('');
    expect(result.drift).toBe(false);
  });

  it('a schema change without its migration is reported as drift', () => {
    const schema = readFileSync(path.join(defaultMigrationsDir, '..', 'schema.prisma'), 'utf8').replace(
      /model MonthlyUsage \{/,
      'model MonthlyUsage {\n  note String?',
    );
    const result = diffMigrationsToSchema({ schema });
    expect(result.drift).toBe(true);
    expect(result.sql).toMatch(/ALTER TABLE "MonthlyUsage" ADD COLUMN\s+"note" TEXT/);
  });

  it('a migration the schema does not describe is reported as drift', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'migrations-'));
    try {
      for (const m of readMigrations()) {
        mkdirSync(path.join(dir, m.name));
        writeFileSync(path.join(dir, m.name, 'migration.sql'), m.script);
      }
      mkdirSync(path.join(dir, '29990101000000_extra'));
      writeFileSync(
        path.join(dir, '29990101000000_extra', 'migration.sql'),
        'CREATE INDEX "extra_idx" ON "Account"("email");',
      );
      writeFileSync(path.join(dir, 'migration_lock.toml'), 'provider = "postgresql"\n');
      const result = diffMigrationsToSchema({ migrations: dir });
      expect(result.drift).toBe(true);
      expect(result.sql).toMatch(/DROP INDEX "extra_idx"/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
