import { createApp, createHttpServer } from './app.js';
import { loadConfigOrExit } from './config.js';
import { migrate } from './db/migrator.js';
import { openConfiguredDatabase } from './db/setup.js';
import { seedDemoIfEmpty } from './demo.js';
import { createLogger } from './logger.js';

const config = loadConfigOrExit();
const database = await openConfiguredDatabase(config);
if (config.migrateOnStart) {
  const report = await migrate(database.sql);
  if (report.applied.length > 0) console.log(`migrations applied: ${report.applied.join(', ')}`);
}
const demo = config.seedDemoOnStart ? await seedDemoIfEmpty(database, config) : undefined;

const logger = createLogger(config.logLevel);
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
    console.log(`  curl -H "Authorization: Bearer <token>" -H "Content-Type: application/json" -d '{"query":"{ me { userID username } }"}' ${base}/graphql`);
    console.log('  more tokens: npm run token -- <userID|email>');
  }
});

let stopping = false;
async function shutdown(signal: string): Promise<void> {
  if (stopping) return;
  stopping = true;
  console.log(`${signal}: shutting down`);
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await app.close();
  await database.close();
  process.exit(0);
}
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
