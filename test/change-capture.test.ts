import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LogicalChangeFeed, SENDER_TIMEOUT_MS } from '../src/db/capture/logical.js';
import { PostgresChangeFeed } from '../src/db/capture/select.js';
import { COUNT_TRIGGERS_SQL, installTriggers } from '../src/db/capture/triggers.js';
import { openDatabase, type Database } from '../src/db/database.js';
import { migrate } from '../src/db/migrator.js';
import { rest, startServer, useServer, type TestServer } from './helpers/app.js';
import { createChild, createOrganization, SIGN_IN_SQL, tokenFor, type BuiltOrganization } from './helpers/builders.js';
import { testMode, useOutsideWriter, useTestDatabase } from './helpers/database.js';
import { postgresBinDir, startCluster } from './helpers/postgres-cluster.js';
import { baseEnv, listening, run } from './helpers/processes.js';
import { shownWithin } from './helpers/shown.js';
import { apiSlots } from './helpers/slots.js';
import { startStallingProxy } from './helpers/stalling-proxy.js';

/*
 * The caches learn of committed changes from the database itself: on PostgreSQL from the logical
 * replication stream (nothing runs in the writers' transactions), on the embedded database and on
 * a server without logical replication from announcement triggers. Every change here is made by
 * another client, as the sign-in service or an operator at psql makes it, and timed from the
 * moment its COMMIT returned to the first answer that shows it.
 */

const ms = (since: number) => performance.now() - since;

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
    expect((await rest(server(), '/health')).body).toMatchObject({ cache: 'live', changes: testMode === 'postgres' ? 'logical' : 'triggers' });
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
    const client = url ? new pg.Client({ connectionString: url }) : new pg.Client({ host: socket!.host, port: socket!.port, user: 'postgres', database: 'postgres' });
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

  it('under sign-ins, a change shows within 100 ms of its COMMIT; a lock and a depleted balance within 200 ms', async () => {
    // The neighbours write meanwhile: a sign-in every few milliseconds.
    let signingIn = true;
    const signIns = (async () => {
      while (signingIn) {
        await outside(SIGN_IN_SQL, [childId]);
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    })();
    try {
      // The first change the server hears may run code not yet compiled; timed from the second on
      // (on a loaded machine the first alone took 121 ms, the nine after it 16-27 ms).
      await outside(`UPDATE "Organization" SET name = $2 WHERE "parentId" = $1`, [org.parent.id, 'Renamed before']);
      await shownWithin(details, (r) => JSON.stringify(r.body).includes('"Renamed before"'), 1000);
      const renames: number[] = [];
      for (let i = 0; i < 10; i++) {
        expect((await details()).status).toBe(200);
        await outside(`UPDATE "Organization" SET name = $2 WHERE "parentId" = $1`, [org.parent.id, `Renamed ${i}`]);
        renames.push(await shownWithin(details, (r) => JSON.stringify(r.body).includes(`"Renamed ${i}"`), 100));
      }
      const locked = (async () => {
        expect((await profile(childToken)).status).toBe(200);
        await outside(`UPDATE "Account" SET status = 'locked', "lockedUntil" = now() + interval '1 hour' WHERE id = $1`, [childId]);
        const took = await shownWithin(() => profile(childToken), (r) => r.status !== 200, 200);
        await outside(`UPDATE "Account" SET status = 'active', "lockedUntil" = NULL WHERE id = $1`, [childId]);
        return took;
      })();
      const lockTook = await locked;
      await shownWithin(() => profile(childToken), (r) => r.status === 200, 200);
      await outside(`UPDATE "Organization" SET "creditBalance" = 0 WHERE "parentId" = $1`, [org.parent.id]);
      const depletedTook = await shownWithin(() => profile(childToken), (r) => r.status !== 200, 200);
      await outside(`UPDATE "Organization" SET "creditBalance" = 1000000 WHERE "parentId" = $1`, [org.parent.id]);
      await shownWithin(() => profile(childToken), (r) => r.status === 200, 200);
      expect(Math.max(...renames), `renames shown after ${renames.map(Math.round).join(', ')} ms`).toBeLessThanOrEqual(100);
      expect(lockTook).toBeLessThanOrEqual(200);
      expect(depletedTook).toBeLessThanOrEqual(200);
    } finally {
      signingIn = false;
      await signIns;
    }
  });

  it.runIf(testMode === 'postgres')('every connection of the database killed: a change shows within 1 s of its COMMIT, and the stream comes back', async () => {
    expect((await details()).status).toBe(200);
    await outside(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`);
    await outside(`UPDATE "Organization" SET name = 'After the kill' WHERE "parentId" = $1`, [org.parent.id]);
    const took = await shownWithin(details, (r) => JSON.stringify(r.body).includes('After the kill'), 1000);
    expect(took).toBeLessThanOrEqual(1000);
    await expect.poll(async () => (await rest(server(), '/health')).body.cache, { timeout: 10_000, interval: 50 }).toBe('live');
  });

  it.runIf(testMode === 'postgres')('a stream that goes silent (a half-open connection): a change shows within 3.5 s of its COMMIT', async () => {
    const url = new URL(database().url!);
    const proxy = await startStallingProxy({ host: url.hostname, port: Number(url.port) });
    const connection = { host: url.hostname, port: proxy.port, user: decodeURIComponent(url.username), database: url.pathname.slice(1) };
    // The pool reads directly; only the changes come through the proxy.
    const db = database();
    const through: Database = { ...db, changeFeed: (options = {}) => new PostgresChangeFeed({ connection, sql: db.sql, ...options }) };
    const own = await startServer(through);
    try {
      await expect.poll(async () => (await rest(own, '/health')).body.cache, { timeout: 10_000, interval: 20 }).toBe('live');
      const ask = () => rest(own, '/auth/organization-details', { token: parentToken });
      expect((await ask()).status).toBe(200);
      expect((await ask()).status).toBe(200);
      proxy.stall();
      await outside(`UPDATE "Organization" SET name = 'While silent' WHERE "parentId" = $1`, [org.parent.id]);
      const took = await shownWithin(ask, (r) => JSON.stringify(r.body).includes('While silent'), 3500);
      expect(took).toBeLessThanOrEqual(3500);
    } finally {
      proxy.resume();
      await own.close();
      await proxy.close();
    }
  });

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
    await expect.poll(async () => (await apiSlots(database().url!)).length, { timeout: 5000, interval: 50 }).toBe(held.length);
  });

  it.runIf(testMode === 'postgres')('a server killed with SIGKILL leaves no slot behind', async () => {
    const before = (await apiSlots(database().url!)).length;
    const killed = run('src/main.ts', baseEnv({ DATABASE_URL: database().url!, MIGRATE_ON_START: 'false' }));
    try {
      await listening(killed);
      await expect.poll(async () => (await apiSlots(database().url!)).length, { timeout: 15_000, interval: 100 }).toBe(before + 1);
      killed.child.kill('SIGKILL');
      await killed.exited;
      await expect.poll(async () => (await apiSlots(database().url!)).length, { timeout: 5000, interval: 50 }).toBe(before);
    } finally {
      killed.child.kill('SIGKILL');
    }
  });

  it.runIf(testMode === 'postgres')(`a reader cut off by the network: its slot is gone within wal_sender_timeout (${SENDER_TIMEOUT_MS / 1000} s)`, async () => {
    const url = new URL(database().url!);
    const proxy = await startStallingProxy({ host: url.hostname, port: Number(url.port) });
    const before = (await apiSlots(database().url!)).length;
    const feed = new LogicalChangeFeed({ connection: { host: url.hostname, port: proxy.port, user: decodeURIComponent(url.username), database: url.pathname.slice(1) }, heartbeatTimeoutMs: 60_000, staleAfterMs: 60_000 });
    try {
      await feed.started();
      expect(feed.live).toBe(true);
      expect((await apiSlots(database().url!)).length).toBe(before + 1);
      // Nothing passes either way from now on, and the reader's end closing is not passed on.
      proxy.cut();
      await feed.close();
      const cutAt = performance.now();
      await expect.poll(async () => (await apiSlots(database().url!)).length, { timeout: SENDER_TIMEOUT_MS + 10_000, interval: 250 }).toBe(before);
      expect(ms(cutAt)).toBeLessThanOrEqual(SENDER_TIMEOUT_MS + 5000);
    } finally {
      await feed.close();
      await proxy.close();
    }
  }, 40_000);

  it.runIf(testMode === 'postgres')('a server reading the stream removes the announcement triggers a fallback left', async () => {
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
  });
});

/** Servers of their own, restarted or without logical replication. */
describe.runIf(testMode === 'postgres' && postgresBinDir() !== undefined)('change capture on servers of its own (postgres)', () => {
  const started: { stop(): void }[] = [];
  afterAll(() => {
    for (const cluster of started) cluster.stop();
  });

  async function serve(logical: boolean): Promise<{ url: string; restart(): Promise<void>; database: Database }> {
    const cluster = await startCluster(postgresBinDir()!, { logical });
    started.push(cluster);
    const database = await openDatabase({ url: cluster.url, poolSize: 3 });
    await migrate(database.sql);
    return { url: cluster.url, restart: cluster.restart, database };
  }

  it('a primary restart drops the slot; the reader comes back with a new one, and changes show again', async () => {
    const { url, restart, database } = await serve(true);
    let server: TestServer | undefined;
    try {
      server = await startServer(database);
      const built = await createOrganization(database);
      const token = await tokenFor(built.parent, built);
      await server.app.deps.cache.caughtUp();
      const [slot] = await apiSlots(url);
      expect(slot).toBeDefined();
      await restart();
      await expect.poll(async () => (await rest(server!, '/health')).body.cache, { timeout: 20_000, interval: 100 }).toBe('live');
      const after = await apiSlots(url);
      expect(after).toHaveLength(1);
      expect(after[0]!.slot_name).not.toBe(slot!.slot_name);
      const ask = () => rest(server!, '/auth/organization-details', { token });
      expect((await ask()).status).toBe(200);
      expect((await ask()).status).toBe(200);
      await database.sql.query(`UPDATE "Organization" SET name = 'After the restart' WHERE "parentId" = $1`, [built.parent.id]);
      expect(await shownWithin(ask, (r) => JSON.stringify(r.body).includes('After the restart'), 100)).toBeLessThanOrEqual(1000);
    } finally {
      await server?.close();
      await database.close();
    }
  }, 90_000);

  it('without logical replication: one line says how to enable it, the triggers announce, and changes show', async () => {
    const { database } = await serve(false);
    const notices: { message: string; fallback: boolean }[] = [];
    const feed = database.changeFeed({ onNotice: (message, fallback) => notices.push({ message, fallback }) });
    await feed.started();
    await feed.close();
    expect(feed.source).toBe('triggers');
    expect(notices).toHaveLength(1);
    expect(notices[0]!.fallback).toBe(true);
    expect(notices[0]!.message).toMatch(/wal_level is replica, not logical.*set wal_level = logical/);
    expect((await database.sql.query<{ installed: number }>(COUNT_TRIGGERS_SQL))[0]!.installed).toBe(16);
    const server = await startServer(database);
    try {
      const built = await createOrganization(database);
      const child = await createChild(database, built.parent);
      const token = await tokenFor(child, built);
      const parentToken = await tokenFor(built.parent, built);
      await server.app.deps.cache.caughtUp();
      expect((await rest(server, '/auth/user-profile', { token })).status).toBe(200);
      await database.sql.query(`UPDATE "Account" SET status = 'locked', "lockedUntil" = now() + interval '1 hour' WHERE id = $1`, [child.id]);
      expect(await shownWithin(() => rest(server, '/auth/user-profile', { token }), (r) => r.status !== 200, 200)).toBeLessThanOrEqual(200);
      // A sign-up amends the parent's number of children through the triggers' announcements too.
      const count = async () => (await rest(server, '/auth/child-accounts?limit=1', { token: parentToken })).body.data.data.stats.total as number;
      expect(await count()).toBe(1);
      await createChild(database, built.parent);
      await server.app.deps.cache.caughtUp();
      expect(await count()).toBe(2);
    } finally {
      await server.close();
      await database.close();
    }
  }, 90_000);
});
