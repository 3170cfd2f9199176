import type { Config } from '../config.js';
import { openDatabase, type Database } from './database.js';

/** The database the configuration names: PostgreSQL with DATABASE_URL, PGlite in DATA_DIR without. */
export function openConfiguredDatabase(
  config: Config,
  owner = 'another process',
  onLost?: (error: Error) => void,
  options: { alongside?: boolean } = {},
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
    alongside: options.alongside,
    connectTimeoutMs: config.database.connectTimeoutMs,
    statementTimeoutMs: config.database.statementTimeoutMs,
  });
}

/**
 * For commands: the database, or one line saying why not (the folder is in use, …) and exit 1.
 * `alongside`: a read-only command uses the embedded database of a server running on the folder.
 */
export async function openConfiguredDatabaseOrExit(
  config: Config,
  command: string,
  options: { alongside?: boolean } = {},
): Promise<Database> {
  try {
    return await openConfiguredDatabase(config, command, undefined, options);
  } catch (error) {
    console.error(`${command}: ${error instanceof Error ? error.message.split('\n')[0] : String(error)}`);
    process.exit(1);
  }
}
