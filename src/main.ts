import { Server as NetServer } from 'node:net';
import { createApp, createHttpServer } from './app.js';
import { MIN_SECRET_BYTES } from './auth/tokens.js';
import { loadConfigOrExit } from './config.js';
import { migrate } from './db/migrator.js';
import { openConfiguredDatabase } from './db/setup.js';
import { seedDemoIfEmpty } from './demo.js';
import { createLogger } from './logger.js';

const config = loadConfigOrExit();
const logger = createLogger(config.logLevel);
// One failed request must never end the process.
process.on('unhandledRejection', (reason) => logger.error('unhandled rejection', { error: reason }));
process.on('uncaughtException', (error) => logger.error('uncaught exception', { error }));

const database = await openConfiguredDatabase(config);
if (config.migrateOnStart) {
  const report = await migrate(database.sql, undefined, { lockTimeoutMs: config.migrationLockTimeoutMs });
  if (report.applied.length > 0) console.log(`migrations applied: ${report.applied.join(', ')}`);
}
const demo = config.seedDemoOnStart ? await seedDemoIfEmpty(database, config) : undefined;
const weak = await database.sql.query<{ parentId: string }>(
  `SELECT "parentId" FROM "Organization" WHERE octet_length("jwtSecret") < $1 ORDER BY "parentId" LIMIT 20`,
  [MIN_SECRET_BYTES],
);
if (weak.length > 0) {
  logger.warn(`organizations with a signing secret shorter than ${MIN_SECRET_BYTES} bytes: their tokens are refused until the secret is rotated`, {
    organizations: weak.map((row) => row.parentId),
  });
}

const app = createApp({ config, database, logger });
const server = createHttpServer(app);
server.listen(config.port, config.host, () => {
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : config.port;
  const base = `http://${config.host === '0.0.0.0' ? 'localhost' : config.host}:${port}`;
  console.log(`listening on ${base} (database: ${database.kind}, ${database.location})`);
  if (demo) {
    console.log('\nDemo data seeded (one organization at each credit alert level).');
    console.log(`  parent ${demo.parent.userID}, public key ${demo.parent.publicKey}`);
    console.log(`  parent token (24 h): ${demo.parent.token}`);
    if (demo.child) console.log(`  child ${demo.child.userID} token (24 h): ${demo.child.token}`);
    console.log(`\n  GraphiQL: ${base}/graphql`);
    console.log(`  curl -H "Authorization: Bearer <token>" ${base}/auth/user-profile`);
    console.log('  more tokens: npm run token -- <userID|email>');
  }
});

let stopping = false;
/** Stop accepting, let in-flight requests finish, flush the retrieval counter, close the pool. */
async function shutdown(signal: string): Promise<void> {
  if (stopping) return;
  stopping = true;
  logger.info(`${signal}: shutting down`);
  const deadline = setTimeout(() => {
    logger.error('shutdown took too long; exiting');
    process.exit(1);
  }, config.shutdownTimeoutMs);
  deadline.unref();
  app.drain();
  // Stop accepting, but unlike http.Server#close do not drop connections at once: one accepted a
  // moment ago may be about to send its request. Connections still idle a second later are closed;
  // the others close after their answer (draining answers carry Connection: close).
  const closed = new Promise<void>((resolve) => NetServer.prototype.close.call(server, () => resolve()));
  const sweep = setInterval(() => server.closeIdleConnections(), 1000);
  await closed;
  clearInterval(sweep);
  await app.close();
  await database.close();
  clearTimeout(deadline);
  process.exit(0);
}
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
