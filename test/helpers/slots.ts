import pg from 'pg';

/**
 * The API's replication slots for the database `url` names, on that server (temporary ones are named
 * `api_cache_…`).
 */
export async function apiSlots(url: string): Promise<{ slot_name: string; temporary: boolean; active: boolean }[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (
      await client.query(
        `SELECT slot_name, temporary, active FROM pg_replication_slots WHERE slot_name LIKE 'api_cache_%' AND database = current_database()`,
      )
    ).rows;
  } finally {
    await client.end();
  }
}
