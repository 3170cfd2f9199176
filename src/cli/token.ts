import { parseArgs } from 'node:util';
import { mintAccessToken, parseTtl } from '../auth/tokens.js';
import { loadConfigOrExit } from '../config.js';
import { findTokenSubject } from '../db/accounts.js';
import { openConfiguredDatabaseOrExit } from '../db/setup.js';

const usage = 'usage: npm run token -- <userID|email> [--ttl 1h]';
let parsed;
try {
  parsed = parseArgs({ options: { ttl: { type: 'string', default: '1h' } }, allowPositionals: true });
} catch (error) {
  console.error(`token: ${error instanceof Error ? error.message : String(error)}\n${usage}`);
  process.exit(2);
}
const who = parsed.positionals[0];
if (!who || parsed.positionals.length > 1) {
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

const config = loadConfigOrExit();
if (ttlSeconds > config.jwtMaxLifetimeSeconds) {
  console.error(`token: the lifetime is longer than JWT_MAX_LIFETIME_SECONDS (${config.jwtMaxLifetimeSeconds} s): the API would refuse the token`);
  process.exit(2);
}
const database = await openConfiguredDatabaseOrExit(config, 'npm run token');
try {
  const found = await findTokenSubject(database.prisma, who);
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
