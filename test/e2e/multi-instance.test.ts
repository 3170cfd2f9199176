import path from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { SIGN_IN_SQL, createChild, createOrganization, tokenFor } from '../helpers/builders.js';
import { createEmptyDatabase, createTestDatabase, testMode, type TestDatabase } from '../helpers/database.js';
import { postgresBinDir } from '../helpers/postgres-cluster.js';
import { baseEnv, listening, root, run, type Run } from '../helpers/processes.js';
import { redisBinary, startRedis, type RedisServer } from '../helpers/redis-server.js';
import { startReplica, type Replica } from '../helpers/replica.js';

/*
 * Several instances of the built server (`node dist/main.js`, as production runs it) on one
 * PostgreSQL primary with a streaming replica and a Redis-protocol server for the rate limits:
 * what holds across instances, through replication lag and through a rolling restart.
 */
const binDir = postgresBinDir();
const redis = redisBinary();
const inCi = process.env.CI === 'true' || process.env.CI === '1';
const runnable = testMode === 'postgres' && Boolean(binDir) && (Boolean(redis) || inCi);
if (testMode === 'postgres' && !redis && !inCi)
  console.warn(
    'multi-instance: no redis-server or valkey-server on this machine; skipped (apt-get install redis-server)',
  );

type Instance = { run: Run; base: string };

describe.skipIf(!runnable)(`several instances behind a balancer (${testMode})`, () => {
  let primary: TestDatabase;
  let replica: Replica;
  let store: RedisServer;
  let replicaUrl: string;
  beforeAll(async () => {
    if (!redis) throw new Error('CI=true and no redis-server or valkey-server: .ci/run installs redis-server');
    primary = await createTestDatabase();
    replica = await startReplica(binDir!, inject('postgresUrl'), process.env.TEST_DATABASE_DATA_DIR);
    const url = new URL(replica.url);
    url.pathname = new URL(primary.url!).pathname;
    replicaUrl = url.toString();
    store = await startRedis(redis);
  }, 120_000);
  afterAll(async () => {
    replica?.remove();
    await store?.stop();
    await primary?.close();
  });

  const envFor = (databaseUrl: string, extra: Record<string, string> = {}) =>
    baseEnv({
      NODE_ENV: 'production',
      DATABASE_URL: databaseUrl,
      DATABASE_REPLICA_URL: replicaUrl,
      RATE_LIMIT_STORE: 'redis',
      REDIS_URL: store.url,
      SHUTDOWN_DELAY_MS: '1500',
      ...extra,
    });

  async function start(env: NodeJS.ProcessEnv): Promise<Instance> {
    const server = run(path.join(root, 'dist', 'main.js'), env);
    return { run: server, base: await listening(server) };
  }

  async function stop(instance: Instance): Promise<number | null> {
    instance.run.child.kill('SIGTERM');
    return (await instance.run.exited).code;
  }

  it('three instances starting at once on an empty database: the migrations are applied once, and all come up', async () => {
    const empty = await createEmptyDatabase();
    try {
      const instances = await Promise.all([0, 1, 2].map(() => start(envFor(empty.url!, { DATABASE_REPLICA_URL: '' }))));
      for (const instance of instances)
        await expect.poll(async () => (await fetch(`${instance.base}/readyz`)).status, { timeout: 30_000 }).toBe(200);
      const rows = await empty.sql.query<{ migration_name: string }>(
        'SELECT migration_name FROM "_prisma_migrations" WHERE finished_at IS NOT NULL',
      );
      expect(new Set(rows.map((r) => r.migration_name)).size).toBe(rows.length);
      for (const instance of instances) expect(await stop(instance)).toBe(0);
    } finally {
      await empty.close();
    }
  }, 120_000);

  it("a sign-in shows on every instance; a status change, a lock, a depleted balance, a rotated secret are never stale whatever the replica's lag; one credential is limited in total", async () => {
    const org = await createOrganization(primary);
    const [signingIn, locked, depleted] = [
      await createChild(primary, org.parent),
      await createChild(primary, org.parent),
      await createChild(primary, org.parent),
    ];
    const tokens = {
      signingIn: await tokenFor(signingIn, org),
      locked: await tokenFor(locked, org),
      depleted: await tokenFor(depleted, org),
      parent: await tokenFor(org.parent, org),
    };
    const instances = await Promise.all(
      [0, 1, 2].map(() =>
        start(envFor(primary.url!, { RATE_LIMIT_PER_CREDENTIAL: '1000', RATE_LIMIT_PER_ADDRESS: '0' })),
      ),
    );
    try {
      const profile = async (instance: Instance, token: string) =>
        (
          await fetch(`${instance.base}/auth/user-profile`, { headers: { authorization: `Bearer ${token}` } })
        ).json() as Promise<any>;
      const me = async (instance: Instance, token: string) =>
        (await (
          await fetch(`${instance.base}/graphql`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
            body: JSON.stringify({ query: '{ me { signInCount } }' }),
          })
        ).json()) as any;
      // Every instance has them all cached first: what follows must replace cached answers.
      for (const instance of instances)
        for (const token of Object.values(tokens)) expect((await profile(instance, token)).success).toBe(true);
      await replica.pauseReplay();
      try {
        await primary.sql.query(SIGN_IN_SQL, [signingIn.id]);
        for (const instance of instances) {
          await expect
            .poll(async () => (await profile(instance, tokens.signingIn)).data.user.signInCount, { timeout: 5000 })
            .toBe(1);
          await expect
            .poll(async () => (await me(instance, tokens.signingIn)).data?.me?.signInCount, { timeout: 5000 })
            .toBe(1);
        }
        await primary.sql.query(`UPDATE "Account" SET status = 'inactive' WHERE id = $1`, [signingIn.id]);
        await primary.sql.query(
          `UPDATE "Account" SET status = 'locked', "lockedUntil" = now() + interval '1 hour' WHERE id = $1`,
          [locked.id],
        );
        for (const instance of instances) {
          await expect
            .poll(async () => (await profile(instance, tokens.signingIn)).error?.code, { timeout: 5000 })
            .toBe('ACCOUNT_INACTIVE');
          await expect
            .poll(async () => (await profile(instance, tokens.locked)).error?.code, { timeout: 5000 })
            .toBe('ACCOUNT_INACTIVE');
        }
        await primary.sql.query(`UPDATE "Organization" SET "creditBalance" = 0 WHERE "parentId" = $1`, [org.parent.id]);
        for (const instance of instances)
          await expect
            .poll(async () => (await profile(instance, tokens.depleted)).error?.code, { timeout: 5000 })
            .toBe('CREDITS_DEPLETED');
        await primary.sql.query(`UPDATE "Organization" SET "jwtSecret" = $2 WHERE "parentId" = $1`, [
          org.parent.id,
          `rotated-${'s'.repeat(40)}`,
        ]);
        for (const instance of instances)
          await expect
            .poll(async () => (await profile(instance, tokens.parent)).error?.code, { timeout: 5000 })
            .toBe('UNAUTHORIZED');
      } finally {
        await replica.resumeReplay();
      }
    } finally {
      for (const instance of instances) await stop(instance);
    }
    // The limit in total: 9 allowed for one credential, its requests spread over three instances.
    const limited = await Promise.all(
      [0, 1, 2].map(() => start(envFor(primary.url!, { RATE_LIMIT_PER_CREDENTIAL: '9', RATE_LIMIT_PER_ADDRESS: '0' }))),
    );
    try {
      // Until its store is connected an instance limits in memory, on its own: wait for all three.
      const storeUp = async (instance: Instance) =>
        (await (await fetch(`${instance.base}/metrics`)).text()).includes('\napi_rate_limit_store_up 1');
      for (const instance of limited) await expect.poll(() => storeUp(instance), { timeout: 10_000 }).toBe(true);
      const fresh = await createOrganization(primary);
      const other = await tokenFor(fresh.parent, fresh);
      const statuses: number[] = [];
      for (let i = 0; i < 12; i++)
        statuses.push(
          (await fetch(`${limited[i % 3]!.base}/auth/user-profile`, { headers: { authorization: `Bearer ${other}` } }))
            .status,
        );
      expect(statuses).toEqual([...Array(9).fill(200), 429, 429, 429]);
    } finally {
      for (const instance of limited) await stop(instance);
    }
  }, 180_000);

  it('a rolling restart under load, behind a balancer that checks /readyz: no request fails, and the retrieval counter sums exactly', async () => {
    const org = await createOrganization(primary);
    const instances = await Promise.all([0, 1, 2].map(() => start(envFor(primary.url!))));
    const healthy = new Set<Instance>();
    let running = true;
    // The balancer's health checks: each backend on its own, every 100 ms, a check unanswered
    // within 250 ms counting as failed (one slow backend must not delay the others' checks). A
    // backend leaves the rotation on its first failed check and its checks end when its process has.
    const checks: Promise<void>[] = [];
    const watch = (instance: Instance) => {
      let exited = false;
      void instance.run.exited.then(() => (exited = true));
      checks.push(
        (async () => {
          while (running && !exited) {
            const ok = await fetch(`${instance.base}/readyz`, { signal: AbortSignal.timeout(250) }).then(
              async (r) => (await r.arrayBuffer(), r.status === 200),
              () => false,
            );
            if (ok && !exited) healthy.add(instance);
            else healthy.delete(instance);
            await new Promise((resolve) => setTimeout(resolve, 100));
          }
          healthy.delete(instance);
        })(),
      );
    };
    instances.forEach(watch);
    const outcomes = { answered: 0, failed: [] as string[] };
    let turn = 0;
    const client = async () => {
      while (running) {
        const pool = [...healthy];
        if (pool.length === 0) {
          await new Promise((resolve) => setTimeout(resolve, 20));
          continue;
        }
        const instance = pool[turn++ % pool.length]!;
        try {
          const response = await fetch(`${instance.base}/auth/organization-details`, {
            headers: { 'x-public-key': org.parent.publicKey },
          });
          await response.arrayBuffer();
          if (response.status === 200) outcomes.answered += 1;
          else outcomes.failed.push(`status ${response.status}`);
        } catch (error) {
          outcomes.failed.push(String((error as Error).cause ?? error));
        }
      }
    };
    const clients = Array.from({ length: 8 }, client);
    try {
      await new Promise((resolve) => setTimeout(resolve, 1000));
      // One instance at a time: SIGTERM, wait for it to end, start it again, wait until ready.
      for (let i = 0; i < instances.length; i++) {
        expect(await stop(instances[i]!)).toBe(0);
        instances[i] = await start(envFor(primary.url!));
        watch(instances[i]!);
        await expect
          .poll(async () => (await fetch(`${instances[i]!.base}/readyz`)).status, { timeout: 30_000 })
          .toBe(200);
        await new Promise((resolve) => setTimeout(resolve, 300));
      }
    } finally {
      running = false;
      await Promise.all(clients);
      await Promise.all(checks);
      for (const instance of instances) await stop(instance);
    }
    expect(outcomes.failed).toEqual([]);
    expect(outcomes.answered).toBeGreaterThan(100);
    // Every answered retrieval was counted once, across the instances and their restarts.
    const [row] = await primary.sql.query<{ n: string }>(
      `SELECT "detailsRetrievalCount"::text AS n FROM "Organization" WHERE "parentId" = $1`,
      [org.parent.id],
    );
    expect(Number(row!.n)).toBe(outcomes.answered);
  }, 180_000);
});
