import { helpIfAsked } from './help.js';
import { loadConfigOrExit } from '../config.js';
import { migrate } from '../db/migrator.js';
import { openConfiguredDatabaseOrExit } from '../db/setup.js';

helpIfAsked(`usage: npm run db:migrate

Applies the migrations in prisma/migrations that the database lacks, as prisma migrate deploy
does (same bookkeeping table and checksums), waiting for another instance's migrations at most
MIGRATION_LOCK_TIMEOUT_MS. Uses DATABASE_URL, or the embedded database in DATA_DIR.`);
const config = loadConfigOrExit();
const database = await openConfiguredDatabaseOrExit(config, 'npm run db:migrate');
try {
  const report = await migrate(database.sql, undefined, { lockTimeoutMs: config.migrationLockTimeoutMs });
  for (const name of report.applied) console.log(`applied   ${name}`);
  for (const name of report.modified) console.warn(`warning: ${name} was changed after it was applied`);
  for (const name of report.unknown) console.warn(`warning: ${name} is applied but not in prisma/migrations`);
  console.log(
    report.applied.length === 0
      ? `${database.location}: up to date (${report.alreadyApplied.length} migrations)`
      : `${database.location}: applied ${report.applied.length}, ${report.alreadyApplied.length} already applied`,
  );
} catch (error) {
  console.error(`migrate: ${error instanceof Error ? error.message : String(error)}`);
  process.exitCode = 1;
} finally {
  await database.close();
}
