import type { Config } from '../config.js';
import { openDatabase, type Database } from './database.js';

/** The database the configuration names: PostgreSQL with DATABASE_URL, PGlite in DATA_DIR without. */
export function openConfiguredDatabase(config: Config): Promise<Database> {
  if (config.databaseUrl) {
    return openDatabase({
      url: config.databaseUrl,
      poolSize: config.database.poolSize,
      connectTimeoutMs: config.database.connectTimeoutMs,
      statementTimeoutMs: config.database.statementTimeoutMs,
    });
  }
  return openDatabase({ dataDir: config.dataDir });
}
