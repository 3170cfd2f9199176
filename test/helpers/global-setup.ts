import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { openDatabase } from '../../src/db/database.js';
import { migrate } from '../../src/db/migrator.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** PGlite mode: a migrated data directory, as a tarball each test file starts from. */
    pgliteSnapshot: string;
    /** PostgreSQL mode: the server URL and a migrated template database each test file copies. */
    postgresUrl: string;
    postgresTemplate: string;
    /** PostgreSQL mode: the name prefix of the per-file databases, for clean-up. */
    postgresPrefix: string;
  }
}

/*
 * Migrates once, then every test file gets its own copy: a PGlite loaded from the snapshot, or a
 * PostgreSQL database created from the template. No two files share a database.
 */
export default async function setup(project: TestProject) {
  const url = process.env.TEST_DATABASE_URL;
  if (url) {
    const template = `test_template_${process.pid}`;
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    await admin.query(`DROP DATABASE IF EXISTS ${template}`);
    await admin.query(`CREATE DATABASE ${template}`);
    const target = new URL(url);
    target.pathname = `/${template}`;
    const database = await openDatabase({ url: target.toString() });
    await migrate(database.sql);
    await database.close();
    project.provide('postgresUrl', url);
    project.provide('postgresTemplate', template);
    project.provide('postgresPrefix', `test_${process.pid}_`);
    project.provide('pgliteSnapshot', '');
    return async () => {
      const leftovers = await admin.query<{ datname: string }>(
        `SELECT datname FROM pg_database WHERE datname LIKE $1 OR datname = $2`,
        [`test_${process.pid}_%`, template],
      );
      for (const row of leftovers.rows) await admin.query(`DROP DATABASE IF EXISTS ${row.datname} WITH (FORCE)`);
      await admin.end();
    };
  }
  const database = await openDatabase({ memory: true });
  await migrate(database.sql);
  const dir = mkdtempSync(path.join(tmpdir(), 'pglite-snapshot-'));
  const file = path.join(dir, 'migrated.tar');
  await database.dump!(file);
  await database.close();
  project.provide('pgliteSnapshot', file);
  project.provide('postgresUrl', '');
  project.provide('postgresTemplate', '');
  project.provide('postgresPrefix', '');
  return () => rmSync(dir, { recursive: true, force: true });
}
