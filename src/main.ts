import { Server as NetServer } from 'node:net';
import { buildDependencies } from './dependencies.js';
import { createApp, type App } from './http/app.js';
import { answerStarting, createHttpServer, createMetricsServer } from './http/server.js';
import { MIN_SECRET_BYTES } from './domain/signing-keys.js';
import { loadConfigOrExit } from './config.js';
import type { Database } from './db/database.js';
import { describeOrganizations, listOrganizations } from './db/accounts.js';
import { migrate } from './db/migrator.js';
import { openConfiguredDatabase } from './db/setup.js';
import type { DemoAccess } from './dev/demo.js';
import { createLogger } from './logger.js';
import { describeStartFailure, StartFailure } from './ops/start-failure.js';
import { startTracing, stopTracing } from './ops/tracing.js';

const config = loadConfigOrExit();
const logger = createLogger(config.logLevel, { format: config.logFormat });
/** How long the retrieval counter may take to flush when the shutdown deadline has passed. */
const FINAL_FLUSH_MS = 2000;

let app: App | undefined;
let database: Database | undefined;
let stopping = false;

/** A failed start: one readable line (the stack only with LOG_LEVEL=debug), exit status 1. */
function failStart(error: unknown): never {
  console.error(`start failed: ${describeStartFailure(error, config)}`);
  if (config.logLevel === 'debug') console.error(error);
  process.exit(1);
}

// Unhandled rejections are logged and survived: each one belongs to a single request or a
// background write that retries by itself (the retrieval counter, the change listener).
process.on('unhandledRejection', (reason) => logger.error('unhandled rejection', { error: reason }));
// An uncaught exception leaves the process in an unknown state: drain, flush, exit 1 (logging cannot throw).
process.on('uncaughtException', (error) => {
  if (!app) failStart(error);
  logger.error(stopping ? 'uncaught exception while shutting down' : 'uncaught exception; shutting down', { error });
  void shutdown('uncaught exception', 1);
});

// Traces (OTEL_* variables): on before the database opens, so that its statements are traced.
await startTracing(config.tracing, { warn: (message, fields) => logger.warn(message, fields) }).catch(failStart);

// The port first: a port in use is known at once, not after migrating. Until the app is ready,
// requests are answered 503.
const server = createHttpServer(config.limits, (request, response) =>
  app ? app.handle(request, response) : answerStarting(request, response),
);
await new Promise<void>((resolve) => {
  server.once('error', failStart);
  server.listen(config.port, config.host, () => {
    server.off('error', failStart);
    resolve();
  });
});
// METRICS_PORT: the metrics on a port of their own, not exposed with the API.
const metricsServer = config.metricsPort === undefined ? undefined : createMetricsServer(() => app?.metricsText());
if (metricsServer) {
  await new Promise<void>((resolve) => {
    metricsServer.once('error', failStart);
    metricsServer.listen(config.metricsPort, config.host, () => {
      metricsServer.off('error', failStart);
      resolve();
    });
  });
}

try {
  database = await openConfiguredDatabase(config, 'the server', (error) => {
    // The embedded database's thread ended by itself: nothing can be answered any more.
    if (!app) failStart(error);
    logger.error('the embedded database stopped; shutting down', { error });
    void shutdown('embedded database lost', 1);
  });
  if (config.migrateOnStart) {
    const report = await migrate(database.sql, undefined, { lockTimeoutMs: config.migrationLockTimeoutMs });
    if (report.applied.length > 0) console.log(`migrations applied: ${report.applied.join(', ')}`);
  }
} catch (error) {
  failStart(error);
}
let demo: DemoAccess | undefined;
try {
  demo = config.seedDemoOnStart ? await seedDemo(database) : undefined;
  const weak = await database.sql.query<{ parentId: string }>(
    `SELECT "parentId" FROM "Organization" WHERE octet_length("jwtSecret") < $1 ORDER BY "parentId" LIMIT 20`,
    [MIN_SECRET_BYTES],
  );
  if (weak.length > 0) {
    logger.warn(
      `organizations with a signing secret shorter than ${MIN_SECRET_BYTES} bytes: their tokens are refused until the secret is rotated`,
      {
        organizations: weak.map((row) => row.parentId),
      },
    );
  }
} catch (error) {
  failStart(error);
}

// Development only: GraphiQL opens with the demo parent's token in its headers tab.
const graphiqlHeaders =
  demo && config.env === 'development'
    ? JSON.stringify({ Authorization: `Bearer ${demo.parent.token}` }, null, 2)
    : undefined;
// The process's objects, built in order; the app closes them in the order `dependencies.ts` states.
app = createApp(buildDependencies({ config, database, logger, graphiqlHeaders }));
// The signals drain from here on, before "listening on" is printed: whatever reads that line may signal at once.
process.on('SIGTERM', () => void shutdown('SIGTERM', 0));
process.on('SIGINT', () => void shutdown('SIGINT', 0));
const address = server.address();
const port = typeof address === 'object' && address ? address.port : config.port;
const base = `http://${config.host === '0.0.0.0' ? 'localhost' : config.host}:${port}`;
console.log(`listening on ${base} (database: ${database.kind}, ${database.location})`);
if (metricsServer) {
  const metricsAddress = metricsServer.address();
  console.log(
    `metrics on port ${typeof metricsAddress === 'object' && metricsAddress ? metricsAddress.port : config.metricsPort} (GET /metrics)`,
  );
}
if (demo) {
  console.log(
    demo.seeded
      ? '\nDemo data seeded (one organization at each credit alert level).'
      : '\nDemo access (the database already had data).',
  );
  console.log(`  parent ${demo.parent.userID}, public key ${demo.parent.publicKey}`);
  console.log(`  parent token (24 h): ${demo.parent.token}`);
  if (demo.child) console.log(`  child ${demo.child.userID} token (24 h): ${demo.child.token}`);
  // At most ten: a development database may hold many more (npm run token -- --list shows 100).
  const organizations = await listOrganizations(database.prisma, 10).catch((error: unknown) => {
    logger.warn('could not list the organizations for the start banner', { error });
    return [];
  });
  if (organizations.length > 0)
    console.log('\n  Organizations (npm run token -- <email> mints a token for any of these accounts):');
  for (const line of describeOrganizations(organizations, '  ')) console.log(line);
  console.log(`\n  GraphiQL: ${base}/graphql${graphiqlHeaders ? ' (the parent token is in its headers tab)' : ''}`);
  console.log(`  curl -H "Authorization: Bearer <token>" ${base}/auth/user-profile`);
  // On the embedded database too: token reads through this process's database.
  console.log('  more tokens: npm run token -- <userID|email>');
}

/** The demo generator is development tooling, loaded only when SEED_DEMO_ON_START is on. */
async function seedDemo(on: Database): Promise<DemoAccess | undefined> {
  let demoModule: typeof import('./dev/demo.js');
  try {
    demoModule = await import('./dev/demo.js');
  } catch (error) {
    const missing = (error as { code?: string }).code === 'ERR_MODULE_NOT_FOUND';
    if (!missing) throw error;
    throw new StartFailure(
      'SEED_DEMO_ON_START needs the development dependencies (the demo generator uses @faker-js/faker): install them, or set SEED_DEMO_ON_START=false',
      { cause: error },
    );
  }
  return demoModule.seedDemoIfEmpty(on, config);
}

/**
 * Readiness turns 503 and the listener serves for SHUTDOWN_DELAY_MS (load balancers stop sending);
 * then in-flight requests finish, the retrieval counter is flushed and the pool closed. Past
 * SHUTDOWN_TIMEOUT_MS the rest is cut and the process exits 1.
 */
async function shutdown(reason: string, exitCode: number): Promise<void> {
  if (stopping) return;
  stopping = true;
  logger.info(`${reason}: shutting down`);
  // Past the deadline: cut the remaining connections; the path below then flushes and closes,
  // within FINAL_FLUSH_MS, and the exit status is 1 whichever of the two ends the process.
  let cut = false;
  let finishing: Promise<void> | undefined;
  /** Flush the retrieval counter, close the pool: once, from whichever path gets there first. */
  const finish = () =>
    (finishing ??= (async () => {
      await app?.close();
      await database?.close();
      metricsServer?.closeAllConnections();
      metricsServer?.close();
      // The last spans, within a bound: a collector that does not answer does not hold the exit.
      await stopTracing();
    })());
  const deadline = setTimeout(() => {
    cut = true;
    logger.error('shutdown took too long; cutting the remaining connections');
    server.closeAllConnections();
    void Promise.race([finish(), new Promise((resolve) => setTimeout(resolve, FINAL_FLUSH_MS))]).finally(() =>
      process.exit(1),
    );
  }, config.shutdownTimeoutMs);
  deadline.unref();
  app?.drain();
  if (exitCode === 0 && config.shutdownDelayMs > 0)
    await new Promise((resolve) => setTimeout(resolve, config.shutdownDelayMs));
  // Stop accepting without dropping connections at once: every second, the ones with no request under
  // way are closed; the others close after their answer (Connection: close).
  const closed = new Promise<void>((resolve) => NetServer.prototype.close.call(server, () => resolve()));
  const sweep = setInterval(() => server.closeWaitingConnections(), 1000);
  await closed;
  clearInterval(sweep);
  await finish();
  clearTimeout(deadline);
  process.exit(cut ? 1 : exitCode);
}
