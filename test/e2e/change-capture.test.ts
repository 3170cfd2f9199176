import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LogicalChangeFeed, SENDER_TIMEOUT_MS } from '../../src/db/capture/logical.js';
import { PostgresChangeFeed } from '../../src/db/capture/select.js';
import { COUNT_TRIGGERS_SQL } from '../../src/db/capture/triggers.js';
import { openDatabase, type Database } from '../../src/db/database.js';
import { migrate } from '../../src/db/migrator.js';
import { rest, startServer, useServer, type TestServer } from '../helpers/app.js';
import { createChild, createOrganization, tokenFor, type BuiltOrganization } from '../helpers/builders.js';
import { testMode, useOutsideWriter, useTestDatabase } from '../helpers/database.js';
import { postgresBinDir, startCluster } from '../helpers/postgres-cluster.js';
import { baseEnv, listening, run } from '../helpers/processes.js';
import { shown } from '../helpers/shown.js';
import { apiSlots } from '../helpers/slots.js';
import { startStallingProxy } from '../helpers/stalling-proxy.js';

/*
 * The caches learn of committed changes from the database itself: on PostgreSQL from the logical
 * replication stream (nothing runs in the writers' transactions), on the embedded database and on
 * a server without logical replication from announcement triggers. Every change here is made by
 * another client, as the sign-in service or an operator at psql makes it, and timed from the
 * moment its COMMIT returned to the first answer that shows it.
 */

describe.runIf(testMode === 'postgres')(
  `change capture behind a stalling proxy and beside a killed server (${testMode})`,
  () => {
    const database = useTestDatabase();
    const server = useServer(database);
    const outside = useOutsideWriter(database);
    let org: BuiltOrganization;
    let parentToken: string;

    beforeAll(async () => {
      org = await createOrganization(database());
      parentToken = await tokenFor(org.parent, org);
      await server().app.deps.cache.caughtUp();
    });

    it('a stream that goes silent (a half-open connection): the change still shows, from a stream opened again', async () => {
      const url = new URL(database().url!);
      const proxy = await startStallingProxy({ host: url.hostname, port: Number(url.port) });
      const connection = {
        host: url.hostname,
        port: proxy.port,
        user: decodeURIComponent(url.username),
        database: url.pathname.slice(1),
      };
      // The pool reads directly; only the changes come through the proxy.
      const db = database();
      const through: Database = {
        ...db,
        changeFeed: (options = {}) => new PostgresChangeFeed({ connection, sql: db.sql, ...options }),
      };
      const own = await startServer(through);
      try {
        await expect
          .poll(async () => (await rest(own, '/health')).body.cache, { timeout: 10_000, interval: 20 })
          .toBe('live');
        const ask = () => rest(own, '/auth/organization-details', { token: parentToken });
        expect((await ask()).status).toBe(200);
        expect((await ask()).status).toBe(200);
        proxy.stall();
        await outside(`UPDATE "Organization" SET name = 'While silent' WHERE "parentId" = $1`, [org.parent.id]);
        // The silence is noticed (a few seconds on an idle machine) and the stream reopened.
        await shown(ask, (r) => JSON.stringify(r.body).includes('While silent'), 60_000);
      } finally {
        proxy.resume();
        await own.close();
        await proxy.close();
      }
    });

    it('a server killed with SIGKILL leaves no slot behind', async () => {
      const before = (await apiSlots(database().url!)).length;
      const killed = run('dist/main.js', baseEnv({ DATABASE_URL: database().url!, MIGRATE_ON_START: 'false' }));
      try {
        await listening(killed);
        await expect
          .poll(async () => (await apiSlots(database().url!)).length, { timeout: 15_000, interval: 100 })
          .toBe(before + 1);
        killed.child.kill('SIGKILL');
        await killed.exited;
        await expect
          .poll(async () => (await apiSlots(database().url!)).length, { timeout: 5000, interval: 50 })
          .toBe(before);
      } finally {
        killed.child.kill('SIGKILL');
      }
    });

    it(
      `a reader cut off by the network: its slot goes once wal_sender_timeout (${SENDER_TIMEOUT_MS / 1000} s) ends its session`,
      async () => {
        const url = new URL(database().url!);
        const proxy = await startStallingProxy({ host: url.hostname, port: Number(url.port) });
        const before = (await apiSlots(database().url!)).length;
        const feed = new LogicalChangeFeed({
          connection: {
            host: url.hostname,
            port: proxy.port,
            user: decodeURIComponent(url.username),
            database: url.pathname.slice(1),
          },
          heartbeatTimeoutMs: 60_000,
          staleAfterMs: 60_000,
        });
        try {
          await feed.started();
          expect(feed.live).toBe(true);
          expect((await apiSlots(database().url!)).length).toBe(before + 1);
          // Nothing passes either way from now on, and the reader's end closing is not passed on.
          proxy.cut();
          await feed.close();
          // The server ends the silent session after wal_sender_timeout, which the feed sets to
          // SENDER_TIMEOUT_MS: the wait's bound only proves it ends (10x that).
          await expect
            .poll(async () => (await apiSlots(database().url!)).length, {
              timeout: SENDER_TIMEOUT_MS * 10,
              interval: 250,
            })
            .toBe(before);
        } finally {
          await feed.close();
          await proxy.close();
        }
      },
      SENDER_TIMEOUT_MS * 12,
    );
  },
);

/** Servers of their own, restarted or without logical replication. */
describe.runIf(testMode === 'postgres' && postgresBinDir() !== undefined)(
  'change capture on servers of its own (postgres)',
  () => {
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
        await expect
          .poll(async () => (await rest(server!, '/health')).body.cache, { timeout: 20_000, interval: 100 })
          .toBe('live');
        const after = await apiSlots(url);
        expect(after).toHaveLength(1);
        expect(after[0]!.slot_name).not.toBe(slot!.slot_name);
        const ask = () => rest(server!, '/auth/organization-details', { token });
        expect((await ask()).status).toBe(200);
        expect((await ask()).status).toBe(200);
        await database.sql.query(`UPDATE "Organization" SET name = 'After the restart' WHERE "parentId" = $1`, [
          built.parent.id,
        ]);
        await shown(ask, (r) => JSON.stringify(r.body).includes('After the restart'));
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
        await database.sql.query(
          `UPDATE "Account" SET status = 'locked', "lockedUntil" = now() + interval '1 hour' WHERE id = $1`,
          [child.id],
        );
        await shown(
          () => rest(server, '/auth/user-profile', { token }),
          (r) => r.status !== 200,
        );
        // A sign-up amends the parent's number of children through the triggers' announcements too.
        const count = async () =>
          (await rest(server, '/auth/child-accounts?limit=1', { token: parentToken })).body.data.data.stats
            .total as number;
        expect(await count()).toBe(1);
        await createChild(database, built.parent);
        await server.app.deps.cache.caughtUp();
        expect(await count()).toBe(2);
      } finally {
        await server.close();
        await database.close();
      }
    }, 90_000);
  },
);
