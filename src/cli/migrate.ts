import { loadConfigOrExit } from '../config.js';
import { migrate } from '../db/migrator.js';
import { openConfiguredDatabaseOrExit } from '../db/setup.js';

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
