import type { AddressInfo } from 'node:net';
import { request } from 'node:http';
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
 * `npm run bench:export [-- --children 1000000] [-- --database-url postgres://…]`: the child-list
 * export of one organization with that many children, while the sign-in service writes 100
 * sign-ins a second to the same organization. Prints the time to the first byte, the total time,
 * the rows and bytes, and the process's resident memory before and at its peak (sampled every
 * 20 ms): once read as fast as possible, once by a reader taking 2 MB a second for 5 seconds.
 * Figures, printed, not asserted.
 */
const argument = (name: string) => {
  const at = process.argv.indexOf(`--${name}`);
  return at === -1 ? undefined : process.argv[at + 1];
};
const childCount = Number(argument('children') ?? 1_000_000);
const databaseUrl = argument('database-url');

const database = databaseUrl ? await openDatabase({ url: databaseUrl }) : await openDatabase({ memory: true });
await migrate(database.sql);
const [organization] = await seed(database, {
  organizations: 1,
  childrenPerOrganization: 10,
  seed: 7,
  now: new Date(),
});
const parentId = organization!.parent.userID;
const { jwtSecret } = await database.prisma.organization.findUniqueOrThrow({ where: { parentId } });
let started = performance.now();
for (let from = 0; from < childCount; from += 10_000) {
  await database.sql.query(
    `INSERT INTO "Account" (id, type, "parentId", username, email, "publicKey", "createdAt", "updatedAt", "lastLogin")
     SELECT 'USR_exp' || i, 'child', $1, 'user' || i, 'user' || i || '@example.com', 'APK_exp' || i || '_1',
            now() - i * interval '1 second', now() - i * interval '1 second', CASE WHEN i % 3 = 0 THEN now() - i * interval '1 minute' END
     FROM generate_series($2::int, $3::int - 1) AS i`,
    [parentId, from, Math.min(childCount, from + 10_000)],
  );
}
await database.sql.query('ANALYZE');
console.log(
  `seeded ${childCount.toLocaleString('en')} children in ${((performance.now() - started) / 1000).toFixed(1)} s (${database.kind})`,
);
const token = await mintAccessToken({
  secret: jwtSecret,
  kid: organization!.parent.publicKey,
  subject: parentId,
  ttlSeconds: 3600,
});

const config = loadConfig({
  NODE_ENV: 'test',
  LOG_LEVEL: 'silent',
  MEMORY_BUDGET_MB: '8192',
  RATE_LIMIT_PER_ADDRESS: '0',
  RATE_LIMIT_PER_CREDENTIAL: '0',
});
const app = createApp(buildDependencies({ config, database, logger: createLogger('silent') }));
const server = createHttpServer(config.limits, (req, res) => app.handle(req, res));
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const port = (server.address() as AddressInfo).port;

// The neighbouring service: 100 sign-ins a second to this organization's children.
let writing = true;
const writer = (async () => {
  let i = 0;
  while (writing) {
    const tick = performance.now();
    await database.sql.query(
      `UPDATE "Account" SET "lastLogin" = now(), "signInCount" = "signInCount" + 1, "updatedAt" = now() WHERE id = $1`,
      [`USR_exp${(i++ * 7919) % childCount}`],
    );
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, 10 - (performance.now() - tick))));
  }
})();

async function run(label: string, bytesPerSecond: number | undefined, seconds?: number): Promise<void> {
  global.gc?.();
  const before = process.memoryUsage().rss;
  let peak = before;
  const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 20);
  started = performance.now();
  let firstByte = 0;
  let bytes = 0;
  let lines = 0;
  await new Promise<void>((resolve, reject) => {
    const req = request(
      {
        port,
        path: '/auth/parent/child-accounts/export?format=csv',
        headers: { authorization: `Bearer ${token}`, 'user-agent': 'curl/8.5.0', accept: '*/*' },
      },
      (res) => {
        res.once('data', () => (firstByte = performance.now() - started));
        res.on('data', (chunk: Buffer) => {
          bytes += chunk.length;
          for (let at = chunk.indexOf(10); at !== -1; at = chunk.indexOf(10, at + 1)) lines += 1;
          if (bytesPerSecond !== undefined) {
            res.pause();
            setTimeout(() => res.resume(), (chunk.length / bytesPerSecond) * 1000);
          }
          if (seconds !== undefined && performance.now() - started > seconds * 1000) {
            req.destroy();
            resolve();
          }
        });
        res.on('end', resolve);
        res.on('error', reject);
      },
    );
    req.on('error', (error) => (seconds !== undefined ? resolve() : reject(error)));
    req.end();
  });
  clearInterval(sampler);
  const mb = (n: number) => `${(n / 1024 / 1024).toFixed(0)} MB`;
  console.log(
    `${label}: first byte ${firstByte.toFixed(1)} ms, ${seconds === undefined ? 'total' : 'stopped after'} ${((performance.now() - started) / 1000).toFixed(2)} s, ` +
      `${(lines - 1).toLocaleString('en')} rows, ${mb(bytes)}; resident ${mb(before)} before, ${mb(peak)} at the peak (+${mb(peak - before)})`,
  );
}

// A warm server, as in production: one answered request first.
await fetch(`http://127.0.0.1:${port}/auth/user-profile`, { headers: { authorization: `Bearer ${token}` } });
await run('as fast as it is read', undefined);
await run('a reader taking 2 MB/s', 2 * 1024 * 1024, 5);
await new Promise((resolve) => setTimeout(resolve, 200));
await run('as fast as it is read, again', undefined);
writing = false;
await writer;
await new Promise<void>((resolve) => server.close(() => resolve()));
await app.close();
await database.close();
