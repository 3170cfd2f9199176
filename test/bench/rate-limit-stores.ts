import type { IncomingMessage } from 'node:http';
import pg from 'pg';
import { loadConfig } from '../../src/config.js';
import { openDatabase } from '../../src/db/database.js';
import { migrate } from '../../src/db/migrator.js';
import { RateLimiter } from '../../src/http/rate-limit.js';
import { postgresBinDir, startCluster } from '../helpers/postgres-cluster.js';
import { redisBinary, startRedis } from '../helpers/redis-server.js';

/*
 * `npm run bench:rate-limit [-- <checks>]`: what one rate-limit decision costs with each store.
 * 20,000 distinct callers (bearer tokens) and 2,000 client addresses, 50 decisions in flight, as
 * the edge makes them (both limits on). Prints, per store: decisions a second, the CPU of this
 * process per decision, and for PostgreSQL the transactions its database committed per decision
 * (the writes on the primary the shared store costs). One run, ratios between stores comparable.
 */
const checks = Number(process.argv[2] ?? 40_000);
const CALLERS = 20_000;
const ADDRESSES = 2_000;
const IN_FLIGHT = 50;

const requests: IncomingMessage[] = Array.from({ length: checks }, (_, i) => ({
  headers: { authorization: `Bearer caller-${i % CALLERS}.token.signature` },
  socket: { remoteAddress: `10.0.${(i % ADDRESSES) >> 8}.${(i % ADDRESSES) & 255}` },
})) as unknown as IncomingMessage[];

async function measure(name: string, limiter: RateLimiter, transactions?: () => Promise<number>): Promise<void> {
  // Connected (not measuring the insurance limiter), then a warm-up: scripts loaded.
  for (let waited = 0; limiter.storeUp === false && waited < 5000; waited += 50)
    await new Promise((resolve) => setTimeout(resolve, 50));
  if (limiter.storeUp === false) throw new Error(`${name}: the store did not connect`);
  for (let i = 0; i < 200; i++) await limiter.check(limiter.clientOf(requests[i]!));
  const txBefore = await transactions?.();
  const cpuBefore = process.cpuUsage();
  const started = performance.now();
  let next = 0;
  let limited = 0;
  await Promise.all(
    Array.from({ length: IN_FLIGHT }, async () => {
      while (next < requests.length) {
        const verdict = await limiter.check(limiter.clientOf(requests[next++]!));
        if (!verdict.allowed) limited += 1;
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  const cpu = process.cpuUsage(cpuBefore);
  const tx = txBefore === undefined ? undefined : ((await transactions!()) - txBefore) / checks;
  console.log(
    `${name.padEnd(10)} ${String(Math.round(checks / seconds)).padStart(8)} decisions/s  ${((cpu.user + cpu.system) / checks).toFixed(1).padStart(6)} µs CPU each (this process)` +
      `${tx === undefined ? '' : `  ${tx.toFixed(2)} db transactions each`}  (${limited} limited)`,
  );
  limiter.close();
}

const rateLimit = (store: string, extra: Record<string, string> = {}) =>
  loadConfig({
    RATE_LIMIT_STORE: store,
    RATE_LIMIT_PER_ADDRESS: '100000',
    RATE_LIMIT_PER_CREDENTIAL: '100000',
    ...extra,
  }).rateLimit;

console.log(`${checks} decisions, ${CALLERS} callers, ${ADDRESSES} addresses, ${IN_FLIGHT} in flight`);
await measure('memory', new RateLimiter(rateLimit('memory')));

const redisServer = redisBinary();
if (redisServer) {
  const redis = await startRedis(redisServer);
  try {
    await measure('redis', new RateLimiter(rateLimit('redis', { REDIS_URL: redis.url })));
  } finally {
    await redis.stop();
  }
} else {
  console.log('redis      skipped: no redis-server or valkey-server on this machine');
}

const binDir = postgresBinDir();
if (binDir) {
  const cluster = await startCluster(binDir);
  const database = await openDatabase({ url: cluster.url, poolSize: 10 });
  const admin = new pg.Client({ connectionString: cluster.url });
  await admin.connect();
  try {
    await migrate(database.sql);
    const committed = async () =>
      Number(
        (
          await admin.query<{ n: string }>(
            `SELECT xact_commit::text AS n FROM pg_stat_database WHERE datname = current_database()`,
          )
        ).rows[0]!.n,
      );
    await measure(
      'postgres',
      new RateLimiter(rateLimit('postgres', { DATABASE_URL: cluster.url }), database.pgPool),
      committed,
    );
  } finally {
    await admin.end();
    await database.close();
    cluster.stop();
  }
} else {
  console.log('postgres   skipped: no PostgreSQL server binaries');
}
