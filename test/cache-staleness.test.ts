import { beforeAll, describe, expect, it } from 'vitest';
import { SIGN_IN_SQL, createChild, createOrganization, tokenFor, type BuiltOrganization } from './helpers/builders.js';
import { rest, useServer, type RestResult } from './helpers/app.js';
import { testMode, useOutsideWriter, useTestDatabase } from './helpers/database.js';

/**
 * The entity cache against changes made outside the server (another service writing the same
 * database): each change shows once its announcement has arrived, and once shown never reverts.
 * (How long after the commit is a figure for the benchmark, not a bound for a shared machine.)
 */
describe('changes made directly in the database reach the API', () => {
  const database = useTestDatabase();
  const server = useServer(database);
  /** Another service writing the same database. */
  const outside = useOutsideWriter(database);

  /** Until the announcements of earlier writes have arrived. */
  async function settled(): Promise<void> {
    await server().app.deps.cache.caughtUp();
  }

  /** Counts the server's statements whose text includes `fragment`, until `stop`. */
  function counting(fragment: string): { readonly count: number; stop(): void } {
    const sql = database().sql;
    const query = sql.query;
    let count = 0;
    sql.query = (text, params) => {
      if (text.includes(fragment)) count += 1;
      return query(text, params);
    };
    return {
      get count() {
        return count;
      },
      stop: () => void (sql.query = query),
    };
  }

  /**
   * Makes the change, waits for its announcement to reach the server's cache (the event the cache
   * acts on), then asks until the answer shows it: a few seconds at most, a bound on liveness
   * that a loaded machine meets, not a latency figure.
   */
  async function reflected(
    /** Undefined: the change was made (and announced) before. */
    change: (() => Promise<void>) | undefined,
    ask: () => Promise<RestResult>,
    shows: (r: RestResult) => boolean,
  ): Promise<void> {
    if (change) {
      const { stats } = server().app.deps.cache;
      const before = stats.announcements;
      await change();
      await server().app.deps.cache.caughtUp();
      expect(stats.announcements).toBeGreaterThan(before);
    }
    await expect.poll(async () => shows(await ask()), { timeout: 3000, interval: 0 }).toBe(true);
    // Once shown, it stays: no stale entry comes back.
    for (let i = 0; i < 20; i++) expect(shows(await ask())).toBe(true);
  }

  const profile = (token: string) => rest(server(), '/auth/user-profile', { token });
  let org: BuiltOrganization;
  let parentToken: string;

  beforeAll(async () => {
    org = await createOrganization(database());
    parentToken = await tokenFor(org.parent, org);
  });

  it('organization settings, balance and child count (profile, organization details)', async () => {
    expect((await profile(parentToken)).body.data.user.organizationName).toBe(org.organization.name);
    await reflected(
      () => outside(`UPDATE "Organization" SET name = 'Renamed Ltd' WHERE "parentId" = $1`, [org.parent.id]),
      () => profile(parentToken),
      (r) => r.body.data?.user?.organizationName === 'Renamed Ltd',
    );
    await reflected(
      () => outside(`UPDATE "Organization" SET "creditBalance" = 4321 WHERE "parentId" = $1`, [org.parent.id]),
      () => profile(parentToken),
      (r) => r.body.data?.user?.creditBalance === 4321,
    );
    const before = (await profile(parentToken)).body.data.user.totalChildAccounts as number;
    await reflected(
      async () => {
        await createChild(database(), org.parent);
      },
      () => profile(parentToken),
      (r) => r.body.data?.user?.totalChildAccounts === before + 1,
    );
    await rest(server(), '/auth/organization-details', { publicKey: org.parent.publicKey });
    await reflected(
      () =>
        outside(`UPDATE "Organization" SET "signinUrl" = 'https://moved.example.com/in' WHERE "parentId" = $1`, [
          org.parent.id,
        ]),
      () => rest(server(), '/auth/organization-details', { publicKey: org.parent.publicKey }),
      (r) => r.body.data?.authUrls?.signin === 'https://moved.example.com/in',
    );
  });

  it('child logins and sign-ups change the child list counts (stats are cached per parent)', async () => {
    const own = await createOrganization(database());
    const child = await createChild(database(), own.parent);
    const token = await tokenFor(own.parent, own);
    const list = () => rest(server(), '/auth/child-accounts', { token });
    const hits = server().app.deps.cache.stats.hits;
    expect((await list()).body.data.data.stats).toEqual({ total: 1, active: 0 });
    expect((await list()).body.data.data.stats).toEqual({ total: 1, active: 0 });
    expect(server().app.deps.cache.stats.hits).toBeGreaterThan(hits);
    await reflected(
      () => outside(`UPDATE "Account" SET "lastLogin" = now() WHERE id = $1`, [child.id]),
      list,
      (r) => r.body.data?.data?.stats?.active === 1,
    );
    await reflected(
      async () => {
        await createChild(database(), own.parent, { username: 'late-arrival' });
      },
      () => rest(server(), '/auth/child-accounts?search=late-arrival', { token }),
      (r) => r.body.data?.data?.stats?.total === 1 && r.body.data.data.accounts.length === 1,
    );
    await reflected(undefined, list, (r) => r.body.data?.data?.stats?.total === 2);
  });

  it("the list's first page is cached and shows every change to a child: a sign-in of an active child, a new child, a rename", async () => {
    const own = await createOrganization(database());
    const child = await createChild(database(), own.parent, { lastLogin: new Date(Date.now() - 86_400_000) });
    const token = await tokenFor(own.parent, own);
    const list = () => rest(server(), '/auth/child-accounts?limit=10', { token });
    // The inserts' announcements settle first: one arriving after the first read rightly drops it.
    await settled();
    const first = await list();
    const seenBefore = first.body.data.data.accounts[0].lastSeen as string;
    const queries = database().queries.count;
    expect((await list()).body.data.data.accounts[0].lastSeen).toBe(seenBefore);
    // Answered from memory: the page (and the counts) made no query.
    expect(database().queries.count).toBe(queries);
    // An active child signing in again changes no count, but its lastSeen moves.
    await reflected(
      () => outside(SIGN_IN_SQL, [child.id]),
      list,
      (r) => r.body.data?.data?.accounts?.[0]?.lastSeen !== seenBefore,
    );
    await reflected(
      async () => {
        await createChild(database(), own.parent, { username: 'newest-child', createdAt: new Date(Date.now() + 1000) });
      },
      list,
      (r) => r.body.data?.data?.accounts?.[0]?.username === 'newest-child',
    );
    await reflected(
      () => outside(`UPDATE "Account" SET username = 'renamed-child' WHERE id = $1`, [child.id]),
      list,
      (r) => r.body.data?.data?.accounts?.some((a: { username: string }) => a.username === 'renamed-child'),
    );
  });

  it('a sign-in keeps the cached first page unless the page shows that child; a new child drops it', async () => {
    const own = await createOrganization(database());
    const dayAgo = new Date(Date.now() - 86_400_000);
    // Newest first: the page of two shows `shown` and `newest`; `older` is read past it (whether more
    // follow), not shown.
    const older = await createChild(database(), own.parent, {
      username: 'older-child',
      lastLogin: dayAgo,
      createdAt: new Date(Date.now() - 3000),
    });
    const shown = await createChild(database(), own.parent, {
      username: 'shown-child',
      lastLogin: dayAgo,
      createdAt: new Date(Date.now() - 2000),
    });
    await createChild(database(), own.parent, {
      username: 'newest-child',
      lastLogin: dayAgo,
      createdAt: new Date(Date.now() - 1000),
    });
    const token = await tokenFor(own.parent, own);
    const list = () => rest(server(), '/auth/child-accounts?limit=2', { token });
    const names = (r: RestResult) => (r.body.data.data.accounts as { username: string }[]).map((a) => a.username);
    // The inserts' announcements settle first (each drops the parent's pages, as it should).
    await settled();
    expect(names(await list())).toEqual(['newest-child', 'shown-child']);
    // Only the page's own statement is counted.
    const pageReads = counting('ORDER BY "createdAt"');
    try {
      // A child off the page signs in: its row, its parent's counters and the balance change; the page does not.
      const seenBefore = (await list()).body.data.data.accounts[1].lastSeen as string;
      await reflected(
        () => outside(SIGN_IN_SQL, [older.id]),
        list,
        (r) => r.status === 200,
      );
      expect(pageReads.count).toBe(0);
      // A child on the page signs in: the page is read again and shows it.
      await reflected(
        () => outside(SIGN_IN_SQL, [shown.id]),
        list,
        (r) => r.body.data?.data?.accounts?.[1]?.lastSeen !== seenBefore,
      );
      expect(pageReads.count).toBeGreaterThan(0);
      const afterShown = pageReads.count;
      // A new child is a stable change: every page of the parent is read again.
      await reflected(
        async () => {
          await createChild(database(), own.parent, {
            username: 'newer-still',
            createdAt: new Date(Date.now() + 1000),
          });
        },
        list,
        (r) => r.body.data?.data?.accounts?.[0]?.username === 'newer-still',
      );
      expect(pageReads.count).toBeGreaterThan(afterShown);
    } finally {
      pageReads.stop();
    }
  });

  it('concurrent requests missing the same counts share one count query', async () => {
    const own = await createOrganization(database());
    for (let i = 0; i < 5; i++) await createChild(database(), own.parent);
    const token = await tokenFor(own.parent, own);
    expect((await profile(token)).status).toBe(200);
    // The inserts' announcements settle first: one arriving during the count would rightly start
    // a second one (the first may have read the old rows).
    await settled();
    // Only the count queries are counted.
    const counts = counting('count(*)');
    try {
      const pages = await Promise.all(
        Array.from({ length: 30 }, () => rest(server(), '/auth/child-accounts', { token })),
      );
      expect(pages.every((r) => r.body.data.data.stats.total === 5)).toBe(true);
      expect(counts.count).toBe(1);
    } finally {
      counts.stop();
    }
  });

  it('account status (decisions §2): locked, unlocked, inactive, deleted', async () => {
    const own = await createOrganization(database());
    const child = await createChild(database(), own.parent);
    const token = await tokenFor(child, own);
    expect((await profile(token)).status).toBe(200);
    await reflected(
      () =>
        outside(`UPDATE "Account" SET status = 'locked', "lockedUntil" = now() + interval '1 hour' WHERE id = $1`, [
          child.id,
        ]),
      () => profile(token),
      (r) => r.status === 403 && r.body.error.code === 'ACCOUNT_INACTIVE',
    );
    await reflected(
      () => outside(`UPDATE "Account" SET status = 'active', "lockedUntil" = NULL WHERE id = $1`, [child.id]),
      () => profile(token),
      (r) => r.status === 200,
    );
    await reflected(
      () => outside(`UPDATE "Account" SET status = 'inactive' WHERE id = $1`, [child.id]),
      () => profile(token),
      (r) => r.status === 403 && r.body.error.code === 'ACCOUNT_INACTIVE',
    );
    await reflected(
      () => outside(`DELETE FROM "Account" WHERE id = $1`, [child.id]),
      () => profile(token),
      (r) => r.status === 404 && r.body.error.code === 'USER_NOT_FOUND',
    );
    // The parent locked: its public key no longer opens the organization details.
    await rest(server(), '/auth/organization-details', { publicKey: own.parent.publicKey });
    await reflected(
      () => outside(`UPDATE "Account" SET status = 'inactive' WHERE id = $1`, [own.parent.id]),
      () => rest(server(), '/auth/organization-details', { publicKey: own.parent.publicKey }),
      (r) => r.status === 400 && r.body.error.code === 'INVALID_PARENT_ACCOUNT',
    );
  });

  it('credits spent: a child of a depleted organization is refused, and admitted again after a purchase', async () => {
    const own = await createOrganization(database());
    const child = await createChild(database(), own.parent);
    const token = await tokenFor(child, own);
    expect((await profile(token)).status).toBe(200);
    await reflected(
      () => outside(`UPDATE "Organization" SET "creditBalance" = 0 WHERE "parentId" = $1`, [own.parent.id]),
      () => profile(token),
      (r) => r.status === 403 && r.body.error.code === 'CREDITS_DEPLETED',
    );
    await reflected(
      () => outside(`UPDATE "Organization" SET "creditBalance" = 10 WHERE "parentId" = $1`, [own.parent.id]),
      () => profile(token),
      (r) => r.status === 200,
    );
  });

  it("a sign-in (counters, last login, balance, usage) shows at once and keeps the organization's verified tokens and signing key", async () => {
    const own = await createOrganization(database());
    const [signingIn, other] = [await createChild(database(), own.parent), await createChild(database(), own.parent)];
    const [signingInToken, otherToken] = [await tokenFor(signingIn, own), await tokenFor(other, own)];
    for (const token of [signingInToken, otherToken, signingInToken, otherToken])
      expect((await profile(token)).status).toBe(200);
    const balance = (await profile(parentToken)).status;
    expect(balance).toBe(200);
    // As the sign-in service writes one: the child, its parent's organization-wide counters, the
    // balance, this month's usage, in one transaction.
    const before = (await profile(signingInToken)).body.data.user.signInCount as number;
    await outside(SIGN_IN_SQL, [signingIn.id]);
    await settled();
    // The other child's token is still known: its next answer needs at most the organization's
    // row again (its balance changed), not the signing key or a new verification.
    const queries = database().queries.count;
    expect((await profile(otherToken)).status).toBe(200);
    expect(database().queries.count - queries).toBeLessThanOrEqual(1);
    // And the sign-in itself shows.
    await reflected(
      undefined,
      () => profile(signingInToken),
      (r) => r.body.data?.user?.signInCount === before + 1,
    );
  });

  it('a rotated signing secret: old tokens refused, new ones accepted', async () => {
    const own = await createOrganization(database());
    const old = await tokenFor(own.parent, own);
    expect((await profile(old)).status).toBe(200);
    const rotated = `rotated-secret-${own.parent.id}-0123456789abcdef0123456789`;
    await reflected(
      () => outside(`UPDATE "Organization" SET "jwtSecret" = $2 WHERE "parentId" = $1`, [own.parent.id, rotated]),
      () => profile(old),
      (r) => r.status === 401,
    );
    expect((await profile(await tokenFor(own.parent, own, { secret: rotated }))).status).toBe(200);
  });

  it('a new public key, and an account created under a key that was looked up before', async () => {
    const own = await createOrganization(database());
    const fresh = `APK_${own.parent.id.slice(4)}new_42`;
    expect((await rest(server(), '/auth/organization-details', { publicKey: fresh })).status).toBe(404);
    await reflected(
      () => outside(`UPDATE "Account" SET "publicKey" = $2 WHERE id = $1`, [own.parent.id, fresh]),
      () => rest(server(), '/auth/organization-details', { publicKey: fresh }),
      (r) => r.status === 200,
    );
    expect((await rest(server(), '/auth/organization-details', { publicKey: own.parent.publicKey })).status).toBe(404);
    // Tokens name the key in `kid`: the old key is gone, the new one verifies.
    expect((await profile(await tokenFor(own.parent, own))).status).toBe(401);
    expect((await profile(await tokenFor(own.parent, own, { kid: fresh }))).status).toBe(200);
  });

  it('purchases and monthly usage (credit analysis)', async () => {
    const own = await createOrganization(database());
    const token = await tokenFor(own.parent, own);
    const analysis = () => rest(server(), '/parent/credit-analysis', { token });
    expect((await analysis()).body.packageHistory).toHaveLength(1);
    await reflected(
      () =>
        outside(
          `INSERT INTO "PackagePurchase" ("transactionId", "organizationId", "packageType", "purchasedAt", "creditsAdded", "freeUsersAdded", price)
           VALUES ($1, $2, 'GROWTH', now(), 55000, 5000, 50)`,
          [`TXN_${own.parent.id}`, own.parent.id],
        ),
      analysis,
      (r) => r.body.packageHistory?.length === 2,
    );
    const used = (await analysis()).body.totalCreditsUsed as number;
    await reflected(
      () =>
        outside(
          `INSERT INTO "MonthlyUsage" ("organizationId", month, "childSignups", "signIns", "emailVerifications", "providerAAuths", "providerBAuths", "providerCAuths", "providerDAuths")
           VALUES ($1, date_trunc('month', now() AT TIME ZONE 'UTC'), 0, 7, 0, 0, 0, 0, 0)`,
          [own.parent.id],
        ),
      analysis,
      (r) => r.body.totalCreditsUsed === used + 7,
    );
  });

  it('the retrieval counter’s own writes do not empty the cache', async () => {
    const own = await createOrganization(database());
    const token = await tokenFor(own.parent, own);
    await rest(server(), '/auth/organization-details', { token });
    await server().app.deps.retrievals.flush();
    const stats = server().app.deps.cache.stats;
    const before = stats.invalidations;
    for (let i = 0; i < 5; i++) await rest(server(), '/auth/organization-details', { token });
    await server().app.deps.retrievals.flush();
    // Once the cache has heard everything written so far, the counter's writes among it.
    await server().app.deps.cache.caughtUp();
    expect(stats.invalidations).toBe(before);
  });

  it.runIf(testMode === 'postgres')(
    'while the listener is down the cache is bypassed; back, it serves again',
    async () => {
      const own = await createOrganization(database());
      const token = await tokenFor(own.parent, own);
      const health = async () => (await rest(server(), '/health')).body.cache as string;
      await expect.poll(health, { timeout: 5000 }).toBe('live');
      expect((await profile(token)).status).toBe(200);
      await outside(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
       WHERE application_name LIKE 'api-cache-%' AND datname = current_database()`,
      );
      await expect.poll(health, { timeout: 2000, interval: 5 }).toBe('bypassed');
      // Bypassed: the very next request sees a change, with no announcement to wait for.
      await outside(`UPDATE "Account" SET status = 'inactive' WHERE id = $1`, [own.parent.id]);
      expect((await profile(token)).status).toBe(403);
      await outside(`UPDATE "Account" SET status = 'active' WHERE id = $1`, [own.parent.id]);
      expect((await profile(token)).status).toBe(200);
      // The listener reconnects by itself and the cache is used again, still invalidated.
      await expect.poll(health, { timeout: 10_000, interval: 20 }).toBe('live');
      const hits = server().app.deps.cache.stats.hits;
      expect((await profile(token)).status).toBe(200);
      expect((await profile(token)).status).toBe(200);
      expect(server().app.deps.cache.stats.hits).toBeGreaterThan(hits);
      await reflected(
        () => outside(`UPDATE "Account" SET status = 'inactive' WHERE id = $1`, [own.parent.id]),
        () => profile(token),
        (r) => r.status === 403,
      );
    },
  );
});
