import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { COUNT_TRIGGERS_SQL, installTriggers } from '../src/db/capture/triggers.js';
import { rest, startServer, useServer } from './helpers/app.js';
import { createChild, createOrganization, SIGN_IN_SQL, tokenFor, type BuiltOrganization } from './helpers/builders.js';
import { testMode, useOutsideWriter, useTestDatabase } from './helpers/database.js';
import { shown } from './helpers/shown.js';
import { apiSlots } from './helpers/slots.js';

/*
 * The caches learn of committed changes from the database itself: on PostgreSQL from the logical
 * replication stream (nothing runs in the writers' transactions), on the embedded database and on
 * a server without logical replication from announcement triggers. Every change here is made by
 * another client, as the sign-in service or an operator at psql makes it, and waited for until
 * an answer shows it (how soon is a figure of `npm run bench:writes`). The stream behind a
 * stalling proxy, a killed server and clusters of their own are in e2e/change-capture.test.ts.
 */

describe(`change capture (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database);
  const outside = useOutsideWriter(database);
  let org: BuiltOrganization;
  let childToken: string;
  let parentToken: string;
  let childId: string;
  const profile = (token: string) => rest(server(), '/auth/user-profile', { token });
  const details = () => rest(server(), '/auth/organization-details', { token: parentToken });

  beforeAll(async () => {
    org = await createOrganization(database(), { organization: { creditBalance: 1_000_000 } });
    const children = [];
    for (let i = 0; i < 5; i++) children.push(await createChild(database(), org.parent));
    childId = children[0]!.id;
    childToken = await tokenFor(children[0]!, org);
    parentToken = await tokenFor(org.parent, org);
    await server().app.deps.cache.caughtUp();
  });

  it('the source is the replication stream on PostgreSQL, and no trigger of the API is on any table there', async () => {
    await server().app.deps.cache.caughtUp();
    expect((await rest(server(), '/health')).body).toMatchObject({
      cache: 'live',
      changes: testMode === 'postgres' ? 'logical' : 'triggers',
    });
    const [row] = await database().sql.query<{ installed: number }>(COUNT_TRIGGERS_SQL);
    expect(row!.installed).toBe(testMode === 'postgres' ? 0 : 16);
    const others = await database().sql.query<{ tgname: string }>(
      `SELECT tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE NOT t.tgisinternal AND c.relname IN ('Account', 'Organization', 'PackagePurchase', 'MonthlyUsage') AND tgname NOT LIKE 'api_cache_%'`,
    );
    expect(others).toEqual([]);
  });

  it('a sign-in writes no index entry: its updates of Account and Organization stay in place (HOT)', async () => {
    // No index of the API holds a column a sign-in changes: a sign-in's row versions stay in
    // their page and no index is written (what the migration hot_sign_ins is for).
    const { url, socket } = database();
    const client = url
      ? new pg.Client({ connectionString: url })
      : new pg.Client({ host: socket!.host, port: socket!.port, user: 'postgres', database: 'postgres' });
    await client.connect();
    try {
      await client.query('BEGIN');
      await client.query(SIGN_IN_SQL, [childId]);
      const { rows } = await client.query(
        `SELECT relname, n_tup_upd::int AS updated, n_tup_hot_upd::int AS hot FROM pg_stat_xact_user_tables
         WHERE relname IN ('Account', 'Organization') ORDER BY relname`,
      );
      await client.query('COMMIT');
      expect(rows).toEqual([
        { relname: 'Account', updated: 2, hot: 2 },
        { relname: 'Organization', updated: 1, hot: 1 },
      ]);
    } finally {
      await client.end();
    }
  });

  it('under sign-ins, a rename, a lock and a depleted balance show once committed, and their undoing too', async () => {
    // The neighbours write meanwhile: a sign-in every few milliseconds.
    let signingIn = true;
    const signIns = (async () => {
      while (signingIn) {
        await outside(SIGN_IN_SQL, [childId]);
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    })();
    try {
      for (let i = 0; i < 10; i++) {
        expect((await details()).status).toBe(200);
        await outside(`UPDATE "Organization" SET name = $2 WHERE "parentId" = $1`, [org.parent.id, `Renamed ${i}`]);
        await shown(details, (r) => JSON.stringify(r.body).includes(`"Renamed ${i}"`));
      }
      expect((await profile(childToken)).status).toBe(200);
      await outside(`UPDATE "Account" SET status = 'locked', "lockedUntil" = now() + interval '1 hour' WHERE id = $1`, [
        childId,
      ]);
      await shown(
        () => profile(childToken),
        (r) => r.status !== 200,
      );
      await outside(`UPDATE "Account" SET status = 'active', "lockedUntil" = NULL WHERE id = $1`, [childId]);
      await shown(
        () => profile(childToken),
        (r) => r.status === 200,
      );
      await outside(`UPDATE "Organization" SET "creditBalance" = 0 WHERE "parentId" = $1`, [org.parent.id]);
      await shown(
        () => profile(childToken),
        (r) => r.status !== 200,
      );
      await outside(`UPDATE "Organization" SET "creditBalance" = 1000000 WHERE "parentId" = $1`, [org.parent.id]);
      await shown(
        () => profile(childToken),
        (r) => r.status === 200,
      );
    } finally {
      signingIn = false;
      await signIns;
    }
  });

  it.runIf(testMode === 'postgres')(
    'every connection of the database killed: a change still shows, and the stream comes back',
    async () => {
      expect((await details()).status).toBe(200);
      await outside(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`,
      );
      await outside(`UPDATE "Organization" SET name = 'After the kill' WHERE "parentId" = $1`, [org.parent.id]);
      await shown(details, (r) => JSON.stringify(r.body).includes('After the kill'));
      await expect
        .poll(async () => (await rest(server(), '/health')).body.cache, { timeout: 10_000, interval: 50 })
        .toBe('live');
    },
  );

  it.runIf(testMode === 'postgres')('one temporary slot per instance while it runs, none once it stops', async () => {
    await server().app.deps.cache.caughtUp();
    const held = await apiSlots(database().url!);
    expect(held.length).toBeGreaterThanOrEqual(1);
    expect(held.every((slot) => slot.temporary)).toBe(true);
    const second = await startServer(database());
    try {
      await second.app.deps.cache.caughtUp();
      expect((await apiSlots(database().url!)).length).toBe(held.length + 1);
    } finally {
      await second.close();
    }
    await expect
      .poll(async () => (await apiSlots(database().url!)).length, { timeout: 5000, interval: 50 })
      .toBe(held.length);
  });

  it.runIf(testMode === 'postgres')(
    'a server reading the stream removes the announcement triggers a fallback left',
    async () => {
      await installTriggers(database().sql);
      expect((await database().sql.query<{ installed: number }>(COUNT_TRIGGERS_SQL))[0]!.installed).toBe(16);
      const notices: string[] = [];
      const feed = database().changeFeed({ onNotice: (message) => notices.push(message) });
      try {
        await feed.started();
        expect(feed.source).toBe('logical');
        expect((await database().sql.query<{ installed: number }>(COUNT_TRIGGERS_SQL))[0]!.installed).toBe(0);
        expect(notices.join('\n')).toMatch(/removed the announcement triggers/);
      } finally {
        await feed.close();
      }
    },
  );
});
