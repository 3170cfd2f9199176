import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { expectError, rest, startServer, type TestServer } from '../helpers/app.js';
import { createChild, createOrganization, tokenFor } from '../helpers/builders.js';
import { testMode, useTestDatabase } from '../helpers/database.js';
import { postgresBinDir } from '../helpers/postgres-cluster.js';
import { startReplica, type Replica } from '../helpers/replica.js';

/*
 * DATABASE_REPLICA_URL against a real streaming replica of the test cluster (pg_basebackup -R),
 * its replay paused to make the lag as long as a test needs: which reads go where, what is never
 * stale, and what happens when the replica lags past its bound or stops.
 */
const binDir = postgresBinDir();
// A replica needs PostgreSQL's binaries and a primary that accepts replication connections from
// loopback (the test command's throwaway cluster does, as initdb sets it up).
const ownCluster = testMode === 'postgres' && Boolean(binDir);

describe.skipIf(!ownCluster)(`read replica (${testMode})`, () => {
  const database = useTestDatabase();
  let replica: Replica;
  let replicaUrl: string;
  beforeAll(async () => {
    replica = await startReplica(binDir!, inject('postgresUrl'), process.env.TEST_DATABASE_DATA_DIR);
    const url = new URL(replica.url);
    url.pathname = new URL(database().url!).pathname;
    replicaUrl = url.toString();
  }, 120_000);
  afterAll(() => replica?.remove());

  /** What the replica has replayed of a search on the primary's data. */
  const onReplica = async (sql: string, params: unknown[]) => {
    const client = new pg.Client({ connectionString: replicaUrl });
    await client.connect();
    try {
      return (await client.query(sql, params)).rows;
    } finally {
      await client.end();
    }
  };
  const readyz = async (server: TestServer) =>
    (await rest(server, '/readyz')).body as { status: string; replicas: { usable: boolean; lagMs?: number }[] };

  async function serverWith(maxLagMs: number, env: Record<string, string> = {}) {
    const server = await startServer(database(), {
      env: {
        DATABASE_URL: database().url!,
        DATABASE_REPLICA_URL: replicaUrl,
        REPLICA_MAX_LAG_MS: String(maxLagMs),
        ...env,
      },
    });
    await expect.poll(async () => (await readyz(server)).replicas?.[0]?.usable, { timeout: 15_000 }).toBe(true);
    return server;
  }

  it('searches and later pages read the replica; authentication and the first page never wait for it', async () => {
    const server = await serverWith(600_000);
    try {
      const org = await createOrganization(database());
      await createChild(database(), org.parent, { username: 'early-bird' });
      const token = await tokenFor(org.parent, org);
      await expect
        .poll(
          async () =>
            (await onReplica('SELECT count(*)::int AS n FROM "Account" WHERE username = $1', ['early-bird']))[0].n,
          { timeout: 10_000 },
        )
        .toBe(1);
      await replica.pauseReplay();
      try {
        await createChild(database(), org.parent, { username: 'late-arrival' });
        const search = await rest(server, '/auth/child-accounts?search=late-arrival', { token });
        expect(search.status).toBe(200);
        // The replica has not replayed it: the search, read there, does not list it yet.
        expect(search.body.data.data.accounts).toEqual([]);
        // The first page is the primary's (through the cache): it lists it at once.
        await expect
          .poll(
            async () =>
              (await rest(server, '/auth/child-accounts', { token })).body.data.data.accounts.map(
                (a: { username: string }) => a.username,
              ),
            { timeout: 5000 },
          )
          .toContain('late-arrival');
        // A status change is never served stale, whatever the replica's lag.
        await database().prisma.account.update({ where: { id: org.parent.id }, data: { status: 'inactive' } });
        await expect
          .poll(async () => (await rest(server, '/auth/child-accounts?search=late', { token })).status, {
            timeout: 5000,
          })
          .toBe(403);
        expectError(await rest(server, '/auth/user-profile', { token }), 403, 'ACCOUNT_INACTIVE');
        const metrics = (await server.app.metricsText()).text;
        expect(
          Number(/^api_db_stale_tolerant_reads_total\{target="replica"\} (\d+)$/m.exec(metrics)?.[1]),
        ).toBeGreaterThan(0);
      } finally {
        await replica.resumeReplay();
      }
    } finally {
      await server.close();
    }
  });

  it('a replica past REPLICA_MAX_LAG_MS is skipped: the primary answers, /readyz and /metrics say so, and it comes back', async () => {
    const server = await serverWith(400);
    try {
      const org = await createOrganization(database());
      const token = await tokenFor(org.parent, org);
      await replica.pauseReplay();
      try {
        await createChild(database(), org.parent, { username: 'while-lagging' });
        await expect.poll(async () => (await readyz(server)).replicas[0]!.usable, { timeout: 10_000 }).toBe(false);
        const ready = await rest(server, '/readyz');
        expect(ready.status).toBe(200);
        expect((await server.app.metricsText()).text).toMatch(/^api_db_replica_usable\{replica="1"\} 0$/m);
        // Read on the primary: listed although the replica has not replayed it.
        const search = await rest(server, '/auth/child-accounts?search=while-lagging', { token });
        expect(search.body.data.data.accounts.map((a: { username: string }) => a.username)).toEqual(['while-lagging']);
      } finally {
        await replica.resumeReplay();
      }
      await expect.poll(async () => (await readyz(server)).replicas[0]!.usable, { timeout: 10_000 }).toBe(true);
    } finally {
      await server.close();
    }
  });

  it('the replica stopped: the child list keeps answering from the primary, and readiness says the replica is not usable', async () => {
    const server = await serverWith(600_000);
    try {
      const org = await createOrganization(database());
      await createChild(database(), org.parent, { username: 'still-here' });
      const token = await tokenFor(org.parent, org);
      replica.stop();
      try {
        for (let i = 0; i < 3; i++) {
          const search = await rest(server, '/auth/child-accounts?search=still-here', { token });
          expect(search.status).toBe(200);
          expect(search.body.data.data.accounts.map((a: { username: string }) => a.username)).toEqual(['still-here']);
        }
        await expect.poll(async () => (await readyz(server)).replicas[0]!.usable, { timeout: 10_000 }).toBe(false);
        expect((await rest(server, '/readyz')).status).toBe(200);
      } finally {
        replica.start();
      }
    } finally {
      await server.close();
    }
  });

  it('a search past SEARCH_TIMEOUT_MS on the replica is answered 503, not read again on the primary, and the replica stays in use', async () => {
    const org = await createOrganization(database());
    await database().sql.query(
      `INSERT INTO "Account" (id, type, "parentId", username, email, "publicKey")
       SELECT 'USR_rs' || i, 'child', $1, 'walker' || i, 'w' || i || '@replica.example', 'APK_rs' || i FROM generate_series(1, 20000) i`,
      [org.parent.id],
    );
    const token = await tokenFor(org.parent, org);
    await expect
      .poll(
        async () =>
          (await onReplica('SELECT count(*)::int AS n FROM "Account" WHERE "parentId" = $1', [org.parent.id]))[0].n,
        { timeout: 10_000 },
      )
      .toBe(20000);
    const server = await serverWith(600_000, { SEARCH_TIMEOUT_MS: '5' });
    try {
      const primaryReads = async () =>
        Number(
          /^api_db_stale_tolerant_reads_total\{target="primary"\} (\d+)$/m.exec(
            (await server.app.metricsText()).text,
          )?.[1] ?? 0,
        );
      const before = await primaryReads();
      const refused = await rest(server, '/auth/child-accounts?search=qz', { token });
      expectError(refused, 503, 'SERVICE_UNAVAILABLE');
      expect(refused.headers.get('retry-after')).toBe('1');
      expect(await primaryReads()).toBe(before);
      expect((await readyz(server)).replicas[0]!.usable).toBe(true);
    } finally {
      await server.close();
    }
  });
});
