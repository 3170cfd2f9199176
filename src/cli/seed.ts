import { parseArgs } from 'node:util';
import { loadConfigOrExit } from '../config.js';
import { migrate } from '../db/migrator.js';
import { resetData, SeedConflictError } from '../db/bulk-insert.js';
import { seed } from '../dev/demo-data.js';
import { openConfiguredDatabaseOrExit } from '../db/setup.js';

const usage = `usage: npm run db:seed -- [--orgs N] [--children N] [--seed S] [--now ISO] [--reset] [--json]
  --orgs N       organizations to create (default 4: one healthy, low, critical and depleted)
  --children N   children of each organization (default 50)
  --seed S       PRNG seed; the same seed and --now give the same rows (default 1)
  --now ISO      reference time for registrations, logins and usage (default: now)
  --reset        delete all accounts, organizations, purchases and usage first
  --json         print the summary as JSON`;

function fail(message: string): never {
  console.error(`db:seed: ${message}\n${usage}`);
  process.exit(2);
}

function wholeNumber(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!/^\d+$/.test(value)) fail(`--${name} must be a whole number`);
  return Number(value);
}

let args;
try {
  args = parseArgs({
    options: {
      orgs: { type: 'string' },
      children: { type: 'string' },
      seed: { type: 'string' },
      now: { type: 'string' },
      reset: { type: 'boolean', default: false },
      json: { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
  }).values;
} catch (error) {
  fail(error instanceof Error ? error.message : String(error));
}
if (args.help) {
  console.log(usage);
  process.exit(0);
}
const now = args.now === undefined ? new Date() : new Date(args.now);
if (Number.isNaN(now.getTime())) fail('--now must be an ISO 8601 date-time');
const options = {
  organizations: wholeNumber('orgs', args.orgs, 4),
  childrenPerOrganization: wholeNumber('children', args.children, 50),
  seed: wholeNumber('seed', args.seed, 1),
  now,
};

const config = loadConfigOrExit();
const database = await openConfiguredDatabaseOrExit(config, 'npm run db:seed');
try {
  await migrate(database.sql, undefined, { lockTimeoutMs: config.migrationLockTimeoutMs });
  if (args.reset) await resetData(database.prisma);
  const started = performance.now();
  const organizations = await seed(database, options);
  const seconds = (performance.now() - started) / 1000;
  if (args.json) {
    console.log(JSON.stringify({ seed: options.seed, now: now.toISOString(), organizations }, null, 2));
  } else {
    console.log(
      `seeded ${database.location} in ${seconds.toFixed(1)} s (seed ${options.seed}, now ${now.toISOString()})`,
    );
    for (const org of organizations) {
      console.log(
        `  ${org.name.padEnd(36)} ${org.alertLevel.padEnd(9)} ${String(org.children).padStart(8)} children  parent ${org.parent.userID} ${org.parent.email}  key ${org.parent.publicKey}`,
      );
    }
    console.log('mint a token with: npm run token -- <userID|email>');
  }
} catch (error) {
  if (error instanceof SeedConflictError) {
    console.error(`db:seed: ${error.message}`);
    process.exitCode = 1;
  } else {
    throw error;
  }
} finally {
  await database.close();
}
