import { parseArgs } from 'node:util';
import { mintAccessToken, parseTtl } from '../auth/tokens.js';
import type { PrismaClient } from '../generated/prisma/client.js';

const LIST_LIMIT = 100;
const usage = 'usage: npm run token -- <userID|email> [--ttl 1h]\n       npm run token -- --list';
const help = `${usage}

Mints an access token (HS256, signed with the organization's secret) for an account, found by
userID or by email (case-insensitive), valid for --ttl (30s, 15m, 1h, 2d; default 1h, at most
JWT_MAX_LIFETIME_SECONDS). --list prints the organizations (at most ${LIST_LIMIT}): each parent's email,
userID, public key and credit alert level, and one active child's email. Uses the database the
server uses (DATABASE_URL, or the embedded one in DATA_DIR, also while the server runs on it).`;
let parsed;
try {
  parsed = parseArgs({
    options: {
      ttl: { type: 'string', default: '1h' },
      list: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
    allowPositionals: true,
  });
} catch (error) {
  console.error(`token: ${error instanceof Error ? error.message : String(error)}\n${usage}`);
  process.exit(2);
}
if (parsed.values.help) {
  console.log(help);
  process.exit(0);
}
const who = parsed.positionals[0];
if (parsed.values.list ? parsed.positionals.length > 0 : !who || parsed.positionals.length > 1) {
  console.error(usage);
  process.exit(2);
}
let ttlSeconds: number;
try {
  ttlSeconds = parseTtl(parsed.values.ttl);
} catch (error) {
  console.error(`token: ${(error as Error).message}`);
  process.exit(2);
}

/** The organizations with what one needs to try the API as them. */
async function list(prisma: PrismaClient): Promise<void> {
  const organizations = await listOrganizations(prisma, LIST_LIMIT);
  if (organizations.length === 0) {
    console.log('no organizations yet (npm start seeds a demo in development; npm run db:seed adds more)');
    return;
  }
  for (const line of describeOrganizations(organizations)) console.log(line);
  console.log('\nnpm run token -- <email or userID> mints a token for one of them.');
}

// Loaded once the arguments are known to be usable: the database client and the embedded engine
// take most of a command's start, which `--help` and a usage error do not need.
const { loadConfigOrExit } = await import('../config.js');
const { describeOrganizations, findTokenSubject, listOrganizations } = await import('../db/accounts.js');
const { openConfiguredDatabaseOrExit } = await import('../db/setup.js');
const config = loadConfigOrExit();
if (ttlSeconds > config.jwtMaxLifetimeSeconds) {
  console.error(
    `token: the lifetime is longer than JWT_MAX_LIFETIME_SECONDS (${config.jwtMaxLifetimeSeconds} s): the API would refuse the token`,
  );
  process.exit(2);
}
// Only reads: beside a server running on the embedded database, it uses that server's database.
const database = await openConfiguredDatabaseOrExit(config, 'npm run token', { alongside: true });
try {
  if (parsed.values.list) {
    await list(database.prisma);
    process.exit(0);
  }
  const found = await findTokenSubject(database.prisma, who!);
  if (found.kind === 'none') {
    console.error(`token: no account with userID or email "${who}"`);
    process.exitCode = 1;
  } else if (found.kind === 'ambiguous') {
    console.error(`token: "${who}" names several accounts, use a userID: ${found.userIDs.join(', ')}`);
    process.exitCode = 1;
  } else {
    const token = await mintAccessToken({
      secret: found.secret,
      kid: found.kid,
      subject: found.userID,
      ttlSeconds,
      issuer: config.jwt.issuer,
      audience: config.jwt.audience,
    });
    console.log(token);
  }
} finally {
  await database.close();
}
