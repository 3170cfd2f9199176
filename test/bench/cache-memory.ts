import v8 from 'node:v8';
import vm from 'node:vm';
import type { AddressInfo } from 'node:net';
import { mintAccessToken } from '../../src/auth/tokens.js';
import { loadConfig } from '../../src/config.js';
import { openDatabase } from '../../src/db/database.js';
import { migrate } from '../../src/db/migrator.js';
import { seed } from '../../src/dev/demo-data.js';
import { createApp } from '../../src/http/app.js';
import { buildDependencies } from '../../src/dependencies.js';
import { createHttpServer } from '../../src/http/server.js';
import { createLogger } from '../../src/logger.js';

/*
 * `npm run bench:cache-memory [-- <users>]`: the heap the entity cache really holds for each
 * signed-in user (a verified token and an account row), against what its byte bound
 * (CACHE_MAX_BYTES) counts for them. Every user of one organization asks for their profile once;
 * the heap is measured, after forced collections, with the cache full and again once it is
 * emptied. A figure, printed, not asserted: the heap of a shared machine moves. A user's token and
 * account are records of the cache's ring, whose buffer is outside the heap and allocated whole:
 * emptying frees only its index, and the estimate counts the records' bytes exactly.
 */
v8.setFlagsFromString('--expose-gc');
const collect = vm.runInNewContext('gc') as () => void;
const heapUsed = () => {
  for (let i = 0; i < 3; i++) collect();
  return process.memoryUsage().heapUsed;
};

const users = Number(process.argv[2] ?? 3000);
const database = await openDatabase({ memory: true });
await migrate(database.sql);
const [organization] = await seed(database, {
  organizations: 1,
  childrenPerOrganization: users,
  seed: 5,
  now: new Date(),
});
const parentId = organization!.parent.userID;
const { jwtSecret } = await database.prisma.organization.findUniqueOrThrow({ where: { parentId } });
await database.sql.query('UPDATE "Organization" SET "creditBalance" = 1000000 WHERE "parentId" = $1', [parentId]);
const children = await database.sql.query<{ id: string }>(
  `SELECT id FROM "Account" WHERE "parentId" = $1 AND status = 'active'`,
  [parentId],
);
const tokens = await Promise.all(
  children.map((child) =>
    mintAccessToken({ secret: jwtSecret, kid: organization!.parent.publicKey, subject: child.id, ttlSeconds: 3600 }),
  ),
);

const config = loadConfig({
  NODE_ENV: 'test',
  LOG_LEVEL: 'silent',
  MEMORY_BUDGET_MB: '8192',
  RATE_LIMIT_PER_ADDRESS: '0',
  RATE_LIMIT_PER_CREDENTIAL: '0',
  CACHE_MAX_ENTRIES: '1000000',
  CACHE_MAX_BYTES: String(256 * 1024 * 1024),
});
const app = createApp(buildDependencies({ config, database, logger: createLogger('silent') }));
const server = createHttpServer(config.limits, (request, response) => app.handle(request, response));
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/auth/user-profile`;
for (let from = 0; from < tokens.length; from += 50) {
  const statuses = await Promise.all(
    tokens
      .slice(from, from + 50)
      .map(async (token) => (await fetch(url, { headers: { authorization: `Bearer ${token}` } })).status),
  );
  if (statuses.some((status) => status !== 200)) throw new Error(`a profile was refused: ${statuses.join(',')}`);
}
const { cache } = app.deps;
const estimated = cache.bytes;
const entries = cache.size;
const held = heapUsed();
cache.clear();
const freed = held - heapUsed();
console.log(`users: ${children.length}, cache entries: ${entries}`);
console.log(`heap freed by emptying the cache: ${Math.round(freed / children.length)} bytes a user`);
console.log(
  `the byte bound's estimate:        ${Math.round(estimated / children.length)} bytes a user (heap and ring records)`,
);
await new Promise<void>((resolve) => server.close(() => resolve()));
await app.close();
await database.close();
