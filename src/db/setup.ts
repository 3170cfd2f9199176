import type { Config } from '../config.js';
import { openDatabase, type Database } from './database.js';

/** The database the configuration names: PostgreSQL with DATABASE_URL, PGlite in DATA_DIR without. */
export function openConfiguredDatabase(
  config: Config,
  owner = 'another process',
  onLost?: (error: Error) => void,
): Promise<Database> {
  if (config.databaseUrl) {
    return openDatabase({
      url: config.databaseUrl,
      poolSize: config.database.poolSize,
      connectTimeoutMs: config.database.connectTimeoutMs,
      statementTimeoutMs: config.database.statementTimeoutMs,
    });
  }
  return openDatabase({
    dataDir: config.dataDir,
    owner,
    onLost,
    connectTimeoutMs: config.database.connectTimeoutMs,
    statementTimeoutMs: config.database.statementTimeoutMs,
  });
}

/** For commands: the database, or one line saying why not (the folder is in use, …) and exit 1. */
export async function openConfiguredDatabaseOrExit(config: Config, command: string): Promise<Database> {
  try {
    return await openConfiguredDatabase(config, command);
  } catch (error) {
    console.error(`${command}: ${error instanceof Error ? error.message.split('\n')[0] : String(error)}`);
    process.exit(1);
  }
}
