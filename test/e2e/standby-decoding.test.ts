import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SENDER_TIMEOUT_MS } from '../../src/db/capture/logical.js';
import { openDatabase, type Database } from '../../src/db/database.js';
import { migrate } from '../../src/db/migrator.js';
import { rest, startServer, type TestServer } from '../helpers/app.js';
import { createChild, createOrganization, SIGN_IN_SQL, tokenFor, type BuiltOrganization } from '../helpers/builders.js';
import { testMode } from '../helpers/database.js';
import {
  embeddedPostgresBinDir,
  installedPostgresBinDir,
  postgresMajor,
  startCluster,
  type Cluster,
} from '../helpers/postgres-cluster.js';
import { baseEnv, listening, run } from '../helpers/processes.js';
import { startReplica, type Replica } from '../helpers/replica.js';
import { shown } from '../helpers/shown.js';
import { apiSlots } from '../helpers/slots.js';
import { startStallingProxy } from '../helpers/stalling-proxy.js';

/*
 * CHANGE_DECODE_URL: the stream decoded on a standby of the primary (PostgreSQL 16+), so that the
 * primary runs no walsender for the API however many instances read it. The heartbeats are
 * written on the primary, so every bound is from the COMMIT on the primary, the standby's replay
 * included. On an older standby, one line says why and the instance decodes on the primary.
 * Servers of its own: a primary and a standby made from it.
 */

/**
 * Every server version at hand, each with a primary and a standby of its own: the machine's (15
 * here, too old to decode on a standby) and the dev dependency's 18.
 */
const binDirs = [
  ...new Set([installedPostgresBinDir(), embeddedPostgresBinDir()].filter((dir): dir is string => dir !== undefined)),
];

async function query<T extends pg.QueryResultRow>(url: string, sql: string, params: unknown[] = []): Promise<T[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<T>(sql, params)).rows;
  } finally {
    await client.end();
  }
}

/** The walsenders a server runs for logical streams (the standby's physical one is not counted). */
const logicalSenders = async (url: string) =>
  (
    await query<{ n: number }>(
      url,
      `SELECT count(*)::int AS n FROM pg_stat_replication r JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'api-cache-stream'`,
    )
  )[0]!.n;

for (const binDir of binDirs) {
  const major = postgresMajor(binDir);
  describe.runIf(testMode === 'postgres')(`decoding on a standby (postgres ${major})`, () => {
    let primary: Cluster;
    let standby: Replica;
    let database: Database;
    let org: BuiltOrganization;
    let childId: string;
    let childToken: string;
    let parentToken: string;

    beforeAll(async () => {
      primary = await startCluster(binDir);
      database = await openDatabase({ url: primary.url, poolSize: 4 });
      await migrate(database.sql);
      standby = await startReplica(binDir, primary.url, primary.dataDir);
      org = await createOrganization(database, { organization: { creditBalance: 1_000_000 } });
      const child = await createChild(database, org.parent);
      childId = child.id;
      childToken = await tokenFor(child, org);
      parentToken = await tokenFor(org.parent, org);
      // The standby has replayed the schema and the rows.
      for (const until = Date.now() + 30_000; ;) {
        const [row] = await query<{ n: number }>(
          standby.url,
          `SELECT count(*)::int AS n FROM "Account" WHERE id = $1`,
          [childId],
        ).catch(() => [{ n: 0 }]);
        if (row!.n === 1) break;
        if (Date.now() > until) throw new Error('the standby did not replay the primary within 30 s');
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }, 120_000);
    afterAll(async () => {
      await database?.close();
      standby?.remove();
      primary?.stop();
    });

    const env = () => ({ DATABASE_URL: primary.url, CHANGE_DECODE_URL: standby.url });
    /** The standby reached through a proxy that can stall or cut the stream: only the changes pass through it. */
    const throughProxy = async () => {
      const url = new URL(standby.url);
      const proxy = await startStallingProxy({ host: url.hostname, port: Number(url.port) });
      url.port = String(proxy.port);
      return { proxy, env: { ...env(), CHANGE_DECODE_URL: url.toString() } };
    };

    it.runIf(major >= 16)(
      'the slot is on the standby and the primary sends no logical stream; under sign-ins a change on the primary shows, and a lock',
      async () => {
        const server = await startServer(database, { env: env() });
        let signingIn = true;
        const signIns = (async () => {
          while (signingIn) {
            await database.sql.query(SIGN_IN_SQL, [childId]);
            await new Promise((resolve) => setTimeout(resolve, 5));
          }
        })();
        try {
          await server.app.deps.cache.caughtUp(10_000);
          expect((await rest(server, '/health')).body).toMatchObject({ cache: 'live', changes: 'logical' });
          expect(await apiSlots(standby.url)).toEqual([expect.objectContaining({ temporary: true, active: true })]);
          expect(await apiSlots(primary.url)).toEqual([]);
          expect(await logicalSenders(primary.url)).toBe(0);
          expect(await logicalSenders(standby.url)).toBe(1);
          const details = () => rest(server, '/auth/organization-details', { token: parentToken });
          for (let i = 0; i < 10; i++) {
            expect((await details()).status).toBe(200);
            await database.sql.query(`UPDATE "Organization" SET name = $2 WHERE "parentId" = $1`, [
              org.parent.id,
              `On the primary ${i}`,
            ]);
            await shown(details, (r) => JSON.stringify(r.body).includes(`"On the primary ${i}"`));
          }
          const profile = () => rest(server, '/auth/user-profile', { token: childToken });
          expect((await profile()).status).toBe(200);
          await database.sql.query(
            `UPDATE "Account" SET status = 'locked', "lockedUntil" = now() + interval '1 hour' WHERE id = $1`,
            [childId],
          );
          await shown(profile, (r) => r.status !== 200);
          await database.sql.query(`UPDATE "Account" SET status = 'active', "lockedUntil" = NULL WHERE id = $1`, [
            childId,
          ]);
          await shown(profile, (r) => r.status === 200);
        } finally {
          signingIn = false;
          await signIns;
          await server.close();
        }
        await expect.poll(() => apiSlots(standby.url), { timeout: 5000, interval: 50 }).toEqual([]);
      },
    );

    it.runIf(major >= 16)(
      'every connection to the standby killed: a change still shows, and the stream comes back',
      async () => {
        const server = await startServer(database, { env: env() });
        try {
          await server.app.deps.cache.caughtUp(10_000);
          const details = () => rest(server, '/auth/organization-details', { token: parentToken });
          expect((await details()).status).toBe(200);
          await query(
            standby.url,
            `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type IN ('client backend', 'walsender') AND pid <> pg_backend_pid() AND application_name <> 'walreceiver'`,
          );
          await database.sql.query(`UPDATE "Organization" SET name = 'After the kill' WHERE "parentId" = $1`, [
            org.parent.id,
          ]);
          await shown(details, (r) => JSON.stringify(r.body).includes('After the kill'));
          await expect
            .poll(async () => (await rest(server, '/health')).body.cache, { timeout: 15_000, interval: 50 })
            .toBe('live');
          expect(await apiSlots(standby.url)).toHaveLength(1);
        } finally {
          await server.close();
        }
      },
    );

    it.runIf(major >= 16)(
      "the standby's stream goes silent (a half-open connection): the change still shows, from a stream opened again",
      async () => {
        const { proxy, env: proxied } = await throughProxy();
        const server = await startServer(database, { env: proxied });
        try {
          await server.app.deps.cache.caughtUp(10_000);
          const details = () => rest(server, '/auth/organization-details', { token: parentToken });
          expect((await details()).status).toBe(200);
          expect((await details()).status).toBe(200);
          proxy.stall();
          await database.sql.query(`UPDATE "Organization" SET name = 'While silent' WHERE "parentId" = $1`, [
            org.parent.id,
          ]);
          await shown(details, (r) => JSON.stringify(r.body).includes('While silent'), 60_000);
        } finally {
          proxy.resume();
          await server.close();
          await proxy.close();
        }
      },
    );

    it.runIf(major >= 16)(
      `no slot survives its reader on the standby: SIGKILL, a cut connection (once wal_sender_timeout, ${SENDER_TIMEOUT_MS / 1000} s, ends its session), a standby restart`,
      async () => {
        // SIGKILL.
        const killed = run('dist/main.js', baseEnv({ ...env(), MIGRATE_ON_START: 'false' }));
        try {
          await listening(killed);
          await expect
            .poll(async () => (await apiSlots(standby.url)).length, { timeout: 20_000, interval: 100 })
            .toBe(1);
          killed.child.kill('SIGKILL');
          await killed.exited;
          await expect.poll(async () => (await apiSlots(standby.url)).length, { timeout: 5000, interval: 50 }).toBe(0);
        } finally {
          killed.child.kill('SIGKILL');
        }
        // A cut connection: nothing passes either way, and the reader's end closing is not passed on.
        const { proxy, env: proxied } = await throughProxy();
        const cut = await startServer(database, { env: proxied });
        try {
          await cut.app.deps.cache.caughtUp(10_000);
          expect(await apiSlots(standby.url)).toHaveLength(1);
          proxy.cut();
          await cut.close();
          // Ended by the standby after wal_sender_timeout: the wait's bound only proves it ends (10x that).
          await expect
            .poll(async () => (await apiSlots(standby.url)).length, { timeout: SENDER_TIMEOUT_MS * 10, interval: 250 })
            .toBe(0);
        } finally {
          await cut.close();
          await proxy.close();
        }
        // A standby restart drops its temporary slots; the reader comes back with a new one.
        const server: TestServer = await startServer(database, { env: env() });
        try {
          await server.app.deps.cache.caughtUp(10_000);
          const [before] = await apiSlots(standby.url);
          standby.stop();
          standby.start();
          await expect
            .poll(async () => (await rest(server, '/health')).body.cache, { timeout: 30_000, interval: 100 })
            .toBe('live');
          const after = await apiSlots(standby.url);
          expect(after).toHaveLength(1);
          expect(after[0]!.slot_name).not.toBe(before!.slot_name);
          const details = () => rest(server, '/auth/organization-details', { token: parentToken });
          expect((await details()).status).toBe(200);
          await database.sql.query(
            `UPDATE "Organization" SET name = 'After the standby restart' WHERE "parentId" = $1`,
            [org.parent.id],
          );
          await shown(details, (r) => JSON.stringify(r.body).includes('After the standby restart'));
        } finally {
          await server.close();
        }
      },
      SENDER_TIMEOUT_MS * 15,
    );

    it.runIf(major < 16)(
      'a standby older than 16: one line at start says so, and the instance decodes on the primary',
      async () => {
        const notices: { message: string; fallback: boolean }[] = [];
        const feed = database.changeFeed({
          decodeUrl: standby.url,
          onNotice: (message, fallback) => notices.push({ message, fallback }),
        });
        try {
          await feed.started();
          await feed.caughtUp(10_000);
          expect(feed.live).toBe(true);
          expect(notices).toEqual([
            {
              fallback: true,
              message: expect.stringMatching(
                new RegExp(
                  `^CHANGE_DECODE_URL cannot decode the stream: it runs PostgreSQL ${major}: decoding on a standby needs 16 or later; decoding on the primary instead`,
                ),
              ),
            },
          ]);
          expect(await apiSlots(primary.url)).toHaveLength(1);
          expect(await apiSlots(standby.url)).toEqual([]);
        } finally {
          await feed.close();
        }
      },
    );

    it('a server that is not a standby of the primary, or one without hot_standby_feedback: one line names it, and the instance decodes on the primary', async () => {
      const other = await startCluster(binDir);
      try {
        const notices: string[] = [];
        const feed = database.changeFeed({ decodeUrl: other.url, onNotice: (message) => notices.push(message) });
        try {
          await feed.caughtUp(10_000);
          expect(notices.join('\n')).toMatch(
            /^CHANGE_DECODE_URL cannot decode the stream: it (is not a standby|runs PostgreSQL \d+)/,
          );
          expect(await apiSlots(primary.url)).toHaveLength(1);
        } finally {
          await feed.close();
        }
      } finally {
        other.stop();
      }
      if (major < 16) return;
      standby.stop();
      standby.start('-c hot_standby_feedback=off');
      try {
        const notices: string[] = [];
        const feed = database.changeFeed({ decodeUrl: standby.url, onNotice: (message) => notices.push(message) });
        try {
          await feed.caughtUp(10_000);
          expect(notices.join('\n')).toMatch(
            /^CHANGE_DECODE_URL cannot decode the stream: hot_standby_feedback is off; decoding on the primary instead/,
          );
        } finally {
          await feed.close();
        }
      } finally {
        standby.stop();
        standby.start();
      }
    }, 90_000);
  });
}
