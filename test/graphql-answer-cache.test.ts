import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { projectedMonthlyUsage, projectionHoldsUntil } from '../src/domain/credit-analysis.js';
import { AnswerCache, AskedKeys, answerOf, type Answer, type ServingContext } from '../src/db/answer-cache.js';
import { cacheTags } from '../src/db/cache-tags.js';
import { EntityCache } from '../src/db/entity-cache.js';
import { ReadSet, type TagRead } from '../src/db/read-set.js';
import { ManualFeed } from './helpers/manual-feed.js';
import { SIGN_IN_SQL, createChild, createOrganization, tokenFor, type BuiltOrganization } from './helpers/builders.js';
import { rest, startServer, useServer, type TestServer } from './helpers/app.js';
import { useOutsideWriter, useTestDatabase } from './helpers/database.js';

/**
 * Answers kept whole (src/db/answer-cache.ts), GraphQL's and REST's: served again only to the viewer they were
 * computed for, only while nothing they read changed, with the credentials verified and the
 * retrievals counted on every request.
 */
describe('GraphQL answers kept whole', () => {
  const database = useTestDatabase();
  /** The server's clock: real time, moved by the tests. */
  let offset = 0;
  const server = useServer(database, {
    now: () => new Date(Date.now() + offset),
    env: { JWT_MAX_LIFETIME_SECONDS: String(40 * 86_400) },
  });
  const outside = useOutsideWriter(database);

  const stats = () => server().app.answers.stats;
  const executions = () => executed(server());

  /** Makes a change outside the server and waits until its announcement has reached the cache. */
  async function announced(change: () => Promise<void>): Promise<void> {
    const cacheStats = server().app.deps.cache.stats;
    const before = cacheStats.announcements;
    await change();
    await server().app.deps.cache.caughtUp();
    expect(cacheStats.announcements).toBeGreaterThan(before);
  }

  let org: BuiltOrganization;
  beforeAll(async () => {
    org = await createOrganization(database());
  });

  it('serves a kept answer to the viewer it was computed for, and to no other', async () => {
    const [a, b] = [
      await createChild(database(), org.parent, { username: 'kept-a' }),
      await createChild(database(), org.parent, { username: 'kept-b' }),
    ];
    const [tokenA, tokenB, parentToken] = [
      await tokenFor(a, org),
      await tokenFor(b, org),
      await tokenFor(org.parent, org),
    ];
    const query = '{ me { userID username accountType } }';
    await server().graphql(query, { token: tokenA });
    const hits = stats().hits;
    const ran = executions();
    for (let i = 0; i < 3; i++) {
      for (const [token, id, username] of [
        [tokenA, a.id, 'kept-a'],
        [tokenB, b.id, 'kept-b'],
        [parentToken, org.parent.id, org.parent.username],
      ] as const) {
        const answer = await server().graphql<{ me: { userID: string; username: string } }>(query, { token });
        expect(answer.data?.me).toMatchObject({ userID: id, username });
      }
    }
    // Nine requests: an answer is kept when its viewer asks for it a second time (a's first was
    // before), so the first two of b and of the parent and the first here of a ran the pipeline.
    expect(stats().hits - hits).toBe(4);
    expect(executions() - ran).toBe(5);
    // The same viewer with another token of its own shares the answer; the public key is another viewer.
    const other = await tokenFor(a, org, { ttlSeconds: 1800 });
    expect((await server().graphql<{ me: { username: string } }>(query, { token: other })).data?.me.username).toBe(
      'kept-a',
    );
    expect(stats().hits - hits).toBe(5);
    const secret = '{ organization { credentials { jwtSecret } } }';
    const byKey = await server().graphql(secret, { publicKey: org.parent.publicKey });
    await server().graphql(secret, { publicKey: org.parent.publicKey });
    const byJwt = await server().graphql(secret, { token: parentToken });
    await server().graphql(secret, { token: parentToken });
    const again = await server().graphql(secret, { publicKey: org.parent.publicKey });
    expect((await server().graphql(secret, { token: parentToken })).data).toEqual(byJwt.data);
    expect(byKey.data).toEqual({ organization: { credentials: { jwtSecret: '********' } } });
    expect(again.data).toEqual(byKey.data);
    expect(byJwt.data).toEqual({ organization: { credentials: { jwtSecret: org.organization.jwtSecret } } });
  });

  it("shares an answer that shows the organization alone among its readers, not with its parent by JWT nor with another organization's", async () => {
    const own = await createOrganization(database());
    const other = await createOrganization(database());
    const children = await Promise.all(
      ['shared-a', 'shared-b', 'shared-c'].map((username) => createChild(database(), own.parent, { username })),
    );
    const [a, b, c] = (await Promise.all(children.map((child) => tokenFor(child, own)))) as [string, string, string];
    const stranger = await tokenFor(
      await createChild(database(), other.parent, { username: 'shared-elsewhere' }),
      other,
    );
    const parentToken = await tokenFor(own.parent, own);
    const query = '{ organization { organizationName credentials { publicKey jwtSecret } } }';
    type Details = {
      organization: { organizationName: string; credentials: { publicKey: string; jwtSecret: string } };
    };
    const masked = {
      organizationName: own.organization.name,
      credentials: { publicKey: own.parent.publicKey, jwtSecret: '********' },
    };
    // Known as the organization's alone once run; kept once its readers' key is asked for twice.
    for (const token of [a, a, b])
      expect((await server().graphql<Details>(query, { token })).data?.organization).toEqual(masked);
    const [hits, ran] = [stats().hits, executions()];
    for (const token of [c, b, a])
      expect((await server().graphql<Details>(query, { token })).data?.organization).toEqual(masked);
    expect((await server().graphql<Details>(query, { publicKey: own.parent.publicKey })).data?.organization).toEqual(
      masked,
    );
    expect(stats().hits - hits).toBe(4);
    expect(executions() - ran).toBe(0);
    // The parent by JWT is shown the secret: never the readers' answer, nor they its.
    for (let i = 0; i < 3; i++)
      expect(
        (await server().graphql<Details>(query, { token: parentToken })).data?.organization.credentials.jwtSecret,
      ).toBe(own.organization.jwtSecret);
    expect((await server().graphql<Details>(query, { token: c })).data?.organization).toEqual(masked);
    // Another organization's reader: its own organization.
    for (let i = 0; i < 3; i++)
      expect((await server().graphql<Details>(query, { token: stranger })).data?.organization.organizationName).toBe(
        other.organization.name,
      );
    // Asking for anything else beside it keeps the answer per viewer.
    const both = '{ organization { organizationName } me { username } }';
    for (let i = 0; i < 3; i++) {
      for (const [token, username] of [
        [a, 'shared-a'],
        [b, 'shared-b'],
        [c, 'shared-c'],
      ] as const) {
        expect((await server().graphql<{ me: { username: string } }>(both, { token })).data?.me.username).toBe(
          username,
        );
      }
    }
    // A change to the organization reaches every reader.
    await announced(() =>
      outside(`UPDATE "Organization" SET name = 'Shared Renamed' WHERE "parentId" = $1`, [own.parent.id]),
    );
    for (const token of [a, b, c])
      expect((await server().graphql<Details>(query, { token })).data?.organization.organizationName).toBe(
        'Shared Renamed',
      );
    // REST's organization details are shared the same way.
    const details = (token: string) => rest(server(), '/auth/organization-details', { token });
    for (const token of [a, a]) expect((await details(token)).body.data.organizationName).toBe('Shared Renamed');
    const restHits = stats().hits;
    for (const token of [b, c]) expect((await details(token)).body.data.credentials.jwtSecret).toBe('********');
    expect(stats().hits - restHits).toBe(2);
    expect((await details(parentToken)).body.data.credentials.jwtSecret).toBe(own.organization.jwtSecret);
    expect((await details(stranger)).body.data.organizationName).toBe(other.organization.name);
  });

  it('serves the same bytes and headers as the answer first computed, by POST and by GET', async () => {
    const token = await tokenFor(org.parent, org);
    const query =
      'query Profile($n: Int) { me { userID ... on ParentAccount { creditBalance packagesHistory { transactionId } } } childAccounts(first: $n) { edges { node { username } } } }';
    const post = () =>
      fetch(`${server().url}/graphql`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${token}`,
          'content-type': 'application/json',
          accept: 'application/graphql-response+json',
        },
        body: JSON.stringify({ query, variables: { n: 2 } }),
      });
    const first = await post();
    const firstText = await first.text();
    expect(await (await post()).text()).toBe(firstText);
    const hits = stats().hits;
    const second = await post();
    expect(stats().hits).toBe(hits + 1);
    expect(await second.text()).toBe(firstText);
    for (const name of ['content-type', 'cache-control', 'content-length'])
      expect(second.headers.get(name), name).toBe(first.headers.get(name));
    const get = () =>
      fetch(`${server().url}/graphql?query=${encodeURIComponent(query)}&variables=${encodeURIComponent('{"n":2}')}`, {
        headers: { authorization: `Bearer ${token}` },
      });
    const [x, , y] = [await (await get()).text(), await (await get()).text(), await (await get()).text()];
    expect(y).toBe(x);
    expect(JSON.parse(x)).toEqual(JSON.parse(firstText));
  });

  it('reads each body by its own bytes: one as long as a body sent before, with other bytes or variables, is its own request', async () => {
    const own = await createOrganization(database());
    await createChild(database(), own.parent, { username: 'bytes-1' });
    await createChild(database(), own.parent, { username: 'bytes-2' });
    const token = await tokenFor(own.parent, own);
    const post = async (body: string) =>
      (await (
        await fetch(`${server().url}/graphql`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body,
        })
      ).json()) as { data?: Record<string, any>; errors?: unknown };
    const [id, email] = [
      JSON.stringify({ query: '{ me { userID } }' }),
      JSON.stringify({ query: '{ me { email  } }' }),
    ];
    const page = (n: number) =>
      JSON.stringify({
        query: 'query Page($n: Int) { childAccounts(first: $n) { edges { node { username } } } }',
        variables: { n },
      });
    expect(email.length).toBe(id.length);
    expect(page(1).length).toBe(page(2).length);
    for (let i = 0; i < 3; i++) {
      expect(await post(id)).toEqual({ data: { me: { userID: own.parent.id } } });
      expect(await post(email)).toEqual({ data: { me: { email: own.parent.email } } });
      expect((await post(page(1))).data?.childAccounts.edges).toHaveLength(1);
      expect((await post(page(2))).data?.childAccounts.edges).toHaveLength(2);
    }
  });

  it('each change the database announces to what an answer read shows on the next request', async () => {
    const own = await createOrganization(database());
    const child = await createChild(database(), own.parent);
    const [childToken, parentToken] = [await tokenFor(child, own), await tokenFor(own.parent, own)];
    const childMe = () =>
      server().graphql<{ me: { username: string; organizationName: string; signInCount: number } }>(
        '{ me { username organizationName signInCount } }',
        { token: childToken },
      );
    const parentMe = () =>
      server().graphql<{ me: { creditBalance: number; signInCount: number; packagesHistory: unknown[] } }>(
        '{ me { signInCount ... on ParentAccount { creditBalance packagesHistory { transactionId } } } }',
        { token: parentToken },
      );
    const analysis = () =>
      server().graphql<{ creditAnalysis: { operationUsage: { signIns: number } } }>(
        '{ creditAnalysis { operationUsage { signIns } } }',
        { token: parentToken },
      );
    const [c0, p0, u0] = [
      (await childMe()).data!.me,
      (await parentMe()).data!.me,
      (await analysis()).data!.creditAnalysis,
    ];
    await childMe();
    await parentMe();
    await analysis();
    // Kept: asked a third time, nothing ran.
    const ran = executions();
    await childMe();
    await parentMe();
    await analysis();
    expect(executions()).toBe(ran);

    await announced(() => outside(`UPDATE "Account" SET username = 'renamed-by-support' WHERE id = $1`, [child.id]));
    expect((await childMe()).data!.me.username).toBe('renamed-by-support');
    await announced(() =>
      outside(`UPDATE "Organization" SET name = 'Renamed Org' WHERE "parentId" = $1`, [own.parent.id]),
    );
    expect((await childMe()).data!.me.organizationName).toBe('Renamed Org');
    // A sign-in: the child's and the parent's counters, the balance and this month's usage.
    await announced(() => outside(SIGN_IN_SQL, [child.id]));
    await expect
      .poll(async () => (await childMe()).data!.me.signInCount, { timeout: 3000, interval: 0 })
      .toBe(c0.signInCount + 1);
    await expect
      .poll(async () => (await parentMe()).data!.me, { timeout: 3000, interval: 0 })
      .toMatchObject({ signInCount: p0.signInCount + 1, creditBalance: p0.creditBalance - 1 });
    await expect
      .poll(async () => (await analysis()).data!.creditAnalysis.operationUsage.signIns, { timeout: 3000, interval: 0 })
      .toBe(u0.operationUsage.signIns + 1);
    await announced(() =>
      outside(
        `INSERT INTO "PackagePurchase" ("organizationId", "packageType", "purchasedAt", "creditsAdded", "freeUsersAdded", price, "transactionId") VALUES ($1, 'STARTER', now(), 55000, 5000, 50, 'txn_kept_answers')`,
        [own.parent.id],
      ),
    );
    await expect
      .poll(async () => (await parentMe()).data!.me.packagesHistory.length, { timeout: 3000, interval: 0 })
      .toBe(p0.packagesHistory.length + 1);
    // Once shown, it stays: no kept answer from before comes back.
    for (let i = 0; i < 10; i++) expect((await childMe()).data!.me.username).toBe('renamed-by-support');
  });

  it('verifies the credentials of every request: an expired token, a locked account, a depleted organization are refused', async () => {
    const own = await createOrganization(database());
    const child = await createChild(database(), own.parent);
    const token = await tokenFor(child, own, { ttlSeconds: 60 });
    const me = () => server().graphql('{ me { username } }', { token });
    expect((await me()).errors).toBeUndefined();
    expect((await me()).errors).toBeUndefined();
    offset = 120_000;
    try {
      expect((await me()).errors?.[0]?.extensions?.code).toBe('UNAUTHORIZED');
    } finally {
      offset = 0;
    }
    expect((await me()).errors).toBeUndefined();
    await announced(() =>
      outside(`UPDATE "Account" SET status = 'locked', "lockedUntil" = now() + interval '1 hour' WHERE id = $1`, [
        child.id,
      ]),
    );
    await expect
      .poll(async () => (await me()).errors?.[0]?.extensions?.code, { timeout: 3000, interval: 0 })
      .toBe('ACCOUNT_INACTIVE');
    await announced(() =>
      outside(`UPDATE "Account" SET status = 'active', "lockedUntil" = NULL WHERE id = $1`, [child.id]),
    );
    await expect.poll(async () => (await me()).errors, { timeout: 3000, interval: 0 }).toBeUndefined();
    await announced(() =>
      outside(`UPDATE "Organization" SET "creditBalance" = 0 WHERE "parentId" = $1`, [own.parent.id]),
    );
    await expect
      .poll(async () => (await me()).errors?.[0]?.extensions?.code, { timeout: 3000, interval: 0 })
      .toBe('CREDITS_DEPLETED');
    // Without credentials a kept answer is never found.
    expect((await server().graphql('{ me { username } }')).errors?.[0]?.extensions?.code).toBe('UNAUTHORIZED');
  });

  it('counts a retrieval for every organization answer served, kept or not', async () => {
    const own = await createOrganization(database());
    const token = await tokenFor(own.parent, own);
    const before = stats().hits;
    for (let i = 0; i < 5; i++)
      expect(
        (await server().graphql('{ organization { organizationName } }', { token })).errors,
        `request ${i}`,
      ).toBeUndefined();
    // The second request's answer was kept: three served from it.
    expect(stats().hits - before).toBe(3);
    await server().app.deps.retrievals.flush();
    const row = await database().prisma.organization.findUniqueOrThrow({ where: { parentId: own.parent.id } });
    expect(row.detailsRetrievalCount).toBe(5n);
  });

  it('keeps an answer computed from the clock only as long as it holds, and none that reads around the cache', async () => {
    const own = await createOrganization(database());
    const child = await createChild(database(), own.parent);
    const token = await tokenFor(own.parent, own, { ttlSeconds: 40 * 86_400 });
    await announced(() => outside(SIGN_IN_SQL, [child.id]));
    const analysis = async () =>
      (
        await server().graphql<{ creditAnalysis: { projectedMonthlyUsage: number; totalCreditsUsed: number } }>(
          '{ creditAnalysis { projectedMonthlyUsage totalCreditsUsed } }',
          { token },
        )
      ).data!.creditAnalysis;
    const first = await analysis();
    expect(await analysis()).toEqual(first);
    const hits = stats().hits;
    expect(await analysis()).toEqual(first);
    expect(stats().hits).toBe(hits + 1);
    // Past the moment the projection changes, the answer is computed again, as the clock has it.
    const now = Date.now();
    try {
      offset = projectionHoldsUntil(first.totalCreditsUsed, new Date(now)) + 2 - now;
      const later = await analysis();
      expect(stats().hits).toBe(hits + 1);
      expect(later.projectedMonthlyUsage).toBe(
        projectedMonthlyUsage(later.totalCreditsUsed, 0, new Date(Date.now() + offset)),
      );
      expect(
        later.projectedMonthlyUsage === first.projectedMonthlyUsage &&
          later.totalCreditsUsed === first.totalCreditsUsed,
      ).toBe(false);
    } finally {
      offset = 0;
    }
    // The forecast is dated from the instant itself; a search reads around the cache: never kept.
    for (const query of [
      '{ creditAnalysis { forecast { dailyBurn } } }',
      '{ childAccounts(search: "a") { stats { total } } }',
    ]) {
      await server().graphql(query, { token });
      const kept = stats().stored;
      await server().graphql(query, { token });
      await server().graphql(query, { token });
      expect(stats().stored, query).toBe(kept);
    }
  });

  it('requests missing the same answer at once share one computation', async () => {
    const own = await createOrganization(database());
    for (let i = 0; i < 3; i++) await createChild(database(), own.parent);
    const token = await tokenFor(own.parent, own);
    const dashboard =
      '{ me { username } organization { organizationName } creditAnalysis { creditBalance } childAccounts(limit: 5) { stats { total } } }';
    // The document is known (an answer to it was kept for another viewer).
    await server().graphql(dashboard, { token: await tokenFor(own.parent, own, { ttlSeconds: 600 }) });
    await announced(() =>
      outside(`UPDATE "Organization" SET name = 'Busy Org' WHERE "parentId" = $1`, [own.parent.id]),
    );
    const ran = executions();
    const answers = await Promise.all(
      Array.from({ length: 20 }, () =>
        server().graphql<{ organization: { organizationName: string } }>(dashboard, { token }),
      ),
    );
    expect(answers.every((a) => a.data?.organization.organizationName === 'Busy Org')).toBe(true);
    expect(executions() - ran).toBeLessThan(20);
  });

  it('keeps REST answers the same way: per viewer and path, with their ETag, dropped by a change', async () => {
    const own = await createOrganization(database());
    const child = await createChild(database(), own.parent, { username: 'rest-kept' });
    const token = await tokenFor(child, own);
    const profile = () => rest(server(), '/auth/user-profile', { token });
    const first = await profile();
    await profile();
    const hits = stats().hits;
    const third = await profile();
    expect(stats().hits).toBe(hits + 1);
    expect(third.text).toBe(first.text);
    expect(third.headers.get('etag')).toBe(first.headers.get('etag'));
    const revalidated = await rest(server(), '/auth/user-profile', {
      token,
      headers: { 'if-none-match': first.headers.get('etag')! },
    });
    expect(revalidated.status).toBe(304);
    // Another path, another viewer: their own answers.
    expect((await rest(server(), '/auth/organization-details', { token })).body.data.organizationName).toBe(
      own.organization.name,
    );
    const parent = await rest(server(), '/auth/user-profile', { token: await tokenFor(own.parent, own) });
    expect(parent.body.data.user.userID).toBe(own.parent.id);
    await announced(() => outside(`UPDATE "Account" SET username = 'rest-renamed' WHERE id = $1`, [child.id]));
    const renamed = await profile();
    expect(renamed.body.data.user.username).toBe('rest-renamed');
    expect(renamed.headers.get('etag')).not.toBe(first.headers.get('etag'));
  });

  it('stays within ANSWER_CACHE_MAX_BYTES, and keeps nothing at 0', async () => {
    const small = await startServer(database(), { env: { ANSWER_CACHE_MAX_BYTES: '20000' } });
    const off = await startServer(database(), { env: { ANSWER_CACHE_MAX_BYTES: '0' } });
    try {
      const children = await Promise.all(
        Array.from({ length: 40 }, (_, i) => createChild(database(), org.parent, { username: `bounded-${i}` })),
      );
      for (const child of children) {
        const token = await tokenFor(child, org);
        for (const target of [small, small, off])
          expect(
            (await target.graphql('{ me { username email publicKey parentAccount } }', { token })).errors,
          ).toBeUndefined();
        expect(small.app.answers.bytes).toBeLessThanOrEqual(20000);
      }
      // More answers were offered than fit: some were refused (or evicted others), and the bytes stayed
      // within the bound.
      expect(small.app.answers.stats.refused + small.app.answers.stats.evictions).toBeGreaterThan(0);
      expect(off.app.answers.size).toBe(0);
      const token = await tokenFor(children[0]!, org);
      const ran = executed(off);
      await off.graphql('{ me { username } }', { token });
      await off.graphql('{ me { username } }', { token });
      expect(executed(off) - ran).toBe(2);
    } finally {
      await small.close();
      await off.close();
    }
  });
});

describe('the projection holds until projectionHoldsUntil', () => {
  it('keeps its value up to that moment and changes (or the month ends) just after it', () => {
    const start = Date.UTC(2026, 0, 1);
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 5_000_000 }),
        fc.integer({ min: 0, max: 365 * 86_400_000 }),
        (used, offset) => {
          const now = new Date(start + offset);
          const until = projectionHoldsUntil(used, now);
          expect(until).toBeGreaterThanOrEqual(now.getTime());
          const value = projectedMonthlyUsage(used, 0, now);
          for (const at of [now.getTime(), Math.floor((now.getTime() + until) / 2), until - 1])
            if (at >= now.getTime()) expect(projectedMonthlyUsage(used, 0, new Date(at))).toBe(value);
          const nextMonth = Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1);
          // Changes within a few milliseconds after, unless the month ends first.
          if (until < nextMonth - 2) expect(projectedMonthlyUsage(used, 0, new Date(until + 2))).not.toBe(value);
        },
      ),
      { numRuns: 500 },
    );
  });
});

/** Executions the pipeline ran, on either engine. */
function executed(server: TestServer): number {
  const counts = server.app.executions();
  return counts.compiled + counts.reference;
}

describe('the keys asked for before an answer is kept', () => {
  it('counts a key as asked from its second request, and forgets it once as many other keys came after', () => {
    const asked = new AskedKeys(4096);
    expect(asked.ask('1\nMe\njwt:child:USR_a\n')).toBe(false);
    expect(asked.ask('1\nMe\njwt:child:USR_a\n')).toBe(true);
    // Another viewer's key is its own.
    expect(asked.ask('1\nMe\njwt:child:USR_b\n')).toBe(false);
    expect(asked.ask('1\nMe\njwt:child:USR_a\n')).toBe(true);
    // Bounded: after 100,000 other keys, the first one is asked for anew.
    for (let i = 0; i < 100_000; i++) asked.ask(`1\nMe\njwt:child:USR_${i}\n`);
    expect(asked.ask('1\nMe\njwt:child:USR_a\n')).toBe(false);
    asked.clear();
    expect(asked.ask('1\nMe\njwt:child:USR_a\n')).toBe(false);
  });
});

describe('callers missing the same answer', () => {
  const tag = cacheTags.organization('USR_p');
  const key = '1\nDashboard\njwt:parent:USR_p\n';
  const viewer = 'jwt:parent:USR_p';
  const now = () => Date.now();
  const made = (text: string) => () =>
    answerOf(text, { label: 'dashboard', retrievals: [], validUntil: Number.POSITIVE_INFINITY });

  async function setup() {
    const feed = new ManualFeed();
    const entities = new EntityCache(feed, { maxEntries: 100, maxBytes: 1 << 20, ttlMs: 60_000 });
    const answers = new AnswerCache(entities, { maxBytes: 1 << 20, ttlMs: 60_000 });
    // An entry no sign-in drops, for reads to be recorded as of now.
    await entities.through('held', { tags: ['unrelated'], read: async () => 1 });
    /** What a computation read: the organization's row, as of now (a hit recorded with its tag). */
    const readNow = (): ReadonlyMap<string, TagRead> => {
      const reads = new ReadSet();
      entities.recording(reads).hit({ namespace: '', tags: () => [tag] }, 'held');
      return reads.tags;
    };
    /** A sign-in's announcement: the organization's balance changed. */
    const signIn = () => feed.announce({ t: 'organization', id: 'USR_p', s: false });
    return { answers, readNow, signIn };
  }

  /**
   * A computation in progress: `finish` ends it, keeping its answer when given one; `readAgain`: its
   * credentials were verified again first.
   */
  type Computing = {
    finish(answer: (() => Answer) | undefined, reads: ReadonlyMap<string, TagRead>): Answer | undefined;
    readAgain: boolean;
  };

  /** One request through `serve`, having read `before` (its credentials); what it was given so far. */
  function request(answers: AnswerCache, before: ReadonlyMap<string, TagRead>) {
    const state: { answer?: string; computing?: Computing } = {};
    let readAgain = false;
    /** A request's context: what it read so far is `tags`, all of it through the cache. */
    type Context = ServingContext & { reads: { tags: ReadonlyMap<string, TagRead> } };
    const context = (): Context => ({ reads: { tags: before, reusable: () => true }, viewerKey: async () => viewer });
    const done = answers.serve(
      { key, viewer, context: context(), fresh: () => ((readAgain = true), context()), now },
      (answer) => void (state.answer = answer.body.toString()),
      (computing, keep) =>
        new Promise<void>((resolve) => {
          state.computing = {
            readAgain,
            finish: (answer, reads) => {
              // What the computation read, as of when it read it.
              computing.reads.tags = reads;
              const kept = answer && keep ? keep(answer) : undefined;
              resolve();
              return kept;
            },
          };
        }),
    );
    return { state, done };
  }

  /** A request that computes at once and keeps `text`: the key counts as asked from then on. */
  async function ask(answers: AnswerCache, text: string, reads: ReadonlyMap<string, TagRead>): Promise<void> {
    const first = request(answers, reads);
    await settle();
    first.state.computing!.finish(made(text), reads);
    await first.done;
  }

  /** `count` requests for the key, each having read its credentials just before. */
  function claimants(answers: AnswerCache, count: number, before: () => ReadonlyMap<string, TagRead>) {
    const requests = Array.from({ length: count }, () => request(answers, before()));
    const computing = () => requests.flatMap((r) => (r.state.computing ? [r.state.computing] : []));
    const waiting = () => requests.filter((r) => !r.state.computing && r.state.answer === undefined).length;
    const answered = (text: string) => requests.filter((r) => r.state.answer === text).length;
    return { settled: requests.map((r) => r.done), computing, waiting, answered };
  }

  const settle = () => new Promise((resolve) => setImmediate(resolve));

  it('hand the key on when an answer could not be kept: one of the waiters computes it, the others wait for that one', async () => {
    const { answers, readNow, signIn } = await setup();
    // The key was asked for before: answers to it are kept.
    await ask(answers, 'first', readNow());
    const first = request(answers, readNow());
    await settle();
    // Nothing to wait for: the first caller computes with what it read.
    expect(first.state.computing!.readAgain).toBe(false);
    const reads = readNow();
    const callers = claimants(answers, 20, readNow);
    await settle();
    expect(callers.waiting()).toBe(20);
    // A change to what the computation read was announced while it ran: its answer is not kept,
    // and no waiter may be served it.
    signIn();
    expect(first.state.computing!.finish(made('before the sign-in'), reads)).toBeUndefined();
    await settle();
    expect(callers.computing()).toHaveLength(1);
    expect(callers.waiting()).toBe(19);
    // What that caller read before it waited changed meanwhile: it reads it again before computing.
    expect(callers.computing()[0]!.readAgain).toBe(true);
    // The next computation began after the waiters came; its answer is theirs.
    expect(callers.computing()[0]!.finish(made('after the sign-in'), readNow())).toBeDefined();
    await Promise.all(callers.settled);
    expect(callers.answered('after the sign-in')).toBe(19);
    expect(answers.stats.shared).toBe(20 + 19);
  });

  it('wait for at most eight computations in turn, then compute their own', async () => {
    const { answers, readNow, signIn } = await setup();
    await ask(answers, 'first', readNow());
    const first = request(answers, readNow());
    await settle();
    let computing = first.state.computing!;
    const callers = claimants(answers, 10, readNow);
    for (let round = 1; round <= 8; round++) {
      const reads = readNow();
      await settle();
      signIn();
      expect(computing.finish(made(`round ${round}`), reads)).toBeUndefined();
      await settle();
      if (round < 8) {
        expect(callers.computing()).toHaveLength(round);
        computing = callers.computing().at(-1)!;
      }
    }
    // Each caller waited for eight computations that were not kept: all compute their own now.
    expect(callers.waiting()).toBe(0);
    expect(callers.computing()).toHaveLength(10);
  });

  it('tell a caller that waited to read again only when what it read before changed meanwhile', async () => {
    const { answers, readNow } = await setup();
    await ask(answers, 'first', readNow());
    const owner = request(answers, readNow());
    await settle();
    const callers = claimants(answers, 3, readNow);
    await settle();
    // Ended without an answer kept (it failed), with nothing the waiters read changed.
    owner.state.computing!.finish(undefined, new Map());
    await settle();
    expect(callers.computing()).toHaveLength(1);
    expect(callers.computing()[0]!.readAgain).toBe(false);
  });

  it("verify a caller handed an organization's readers' computation again as a reader: it keeps the answer for the same readers, nothing for another organization's", async () => {
    const readers = 'organization:USR_p:reader';
    const shared = `1\nOrganization\n${readers}\n`;
    for (const [freshReaders, keeps] of [
      [readers, true],
      ['organization:USR_q:reader', false],
    ] as const) {
      const { answers, readNow, signIn } = await setup();
      /** One request asking as `readers`, a child by its own key; verified again, it reads as `again`. */
      const asking = (again: string) => {
        let finish: ((text: string, reads: ReadonlyMap<string, TagRead>) => Answer | undefined) | undefined;
        let served: string | undefined;
        type Context = ServingContext & {
          reads: { tags: ReadonlyMap<string, TagRead> };
          readers: () => Promise<string | undefined>;
        };
        const context = (as: string): Context => ({
          reads: { tags: readNow(), reusable: () => true },
          viewerKey: async () => 'jwt:child:USR_c',
          readers: async () => as,
        });
        const done = answers.serve(
          {
            key: shared,
            viewer: readers,
            viewerOf: (fresh) => fresh.readers(),
            context: context(readers),
            fresh: () => context(again),
            now,
          },
          (answer) => void (served = answer.body.toString()),
          (computing, keep) =>
            new Promise<void>((resolve) => {
              finish = (text, reads) => {
                computing.reads.tags = reads;
                const kept = keep ? keep(made(text)) : undefined;
                resolve();
                return kept;
              };
            }),
        );
        return {
          done,
          finish: (text: string, reads: ReadonlyMap<string, TagRead>) => finish!(text, reads),
          computing: () => finish !== undefined,
          served: () => served,
        };
      };
      // The key asked for before: answers to it are kept.
      const first = asking(readers);
      await settle();
      first.finish('first', readNow());
      await first.done;
      const owner = asking(readers);
      await settle();
      const reads = readNow();
      const waiter = asking(freshReaders);
      await settle();
      // The owner's answer predates a sign-in: not kept, and the waiter computes, verified again.
      signIn();
      expect(owner.finish('before', reads)).toBeUndefined();
      await owner.done;
      await settle();
      expect(waiter.computing()).toBe(true);
      expect(waiter.finish('after', readNow()) !== undefined, freshReaders).toBe(keeps);
      await waiter.done;
      const next = asking(readers);
      await settle();
      expect(next.served(), freshReaders).toBe(keeps ? 'after' : undefined);
    }
  });

  it('a computation that throws ends, and the next caller computes instead of waiting for it forever', async () => {
    const { answers, readNow } = await setup();
    const failing = answers.serve(
      {
        key,
        viewer,
        context: { reads: { tags: readNow(), reusable: () => true }, viewerKey: async () => viewer },
        fresh: () => {
          throw new Error('not asked');
        },
        now,
      },
      () => 'served',
      async () => {
        await settle();
        throw new Error('the database went away');
      },
    );
    const next = request(answers, readNow());
    await expect(failing).rejects.toThrow('the database went away');
    await settle();
    expect(next.state.computing).toBeDefined();
  });
});

describe('answers kept once the cache is full', () => {
  const now = () => Date.now();
  const body = 'x'.repeat(600);

  /** A cache with room for about nine answers of 600 bytes, and what its computations read. */
  async function setup() {
    const feed = new ManualFeed();
    const entities = new EntityCache(feed, { maxEntries: 100, maxBytes: 1 << 20, ttlMs: 60_000 });
    const answers = new AnswerCache(entities, { maxBytes: 4096 + 10_000, ttlMs: 60_000 });
    await entities.through('held', { tags: ['unrelated'], read: async () => 1 });
    const reads = new ReadSet();
    entities.recording(reads).hit({ namespace: '', tags: () => ['unrelated'] }, 'held');
    return { answers, reads: reads.tags };
  }

  /** One request of viewer `who` for its own answer: whether it was served a kept one. */
  async function ask(
    answers: AnswerCache,
    who: string,
    reads: ReadonlyMap<string, TagRead>,
  ): Promise<'kept' | 'computed'> {
    let outcome: 'kept' | 'computed' = 'computed';
    await answers.serve(
      {
        key: `1\nMe\n${who}\n`,
        viewer: who,
        context: { reads: { tags: reads, reusable: () => true }, viewerKey: async () => who },
        fresh: () => {
          throw new Error('not asked');
        },
        now,
      },
      () => void (outcome = 'kept'),
      async (_context, keep) =>
        void keep?.(() => answerOf(body, { label: 'me', retrievals: [], validUntil: Number.POSITIVE_INFINITY })),
    );
    return outcome;
  }

  it('keep the answers held against viewers asking no more often, and let one asked more often take the place of the least recently used', async () => {
    const { answers, reads } = await setup();
    const viewers = Array.from({ length: 20 }, (_, i) => `jwt:child:USR_${i}`);
    // Each viewer asks twice: the first nine answers fill the cache, the others are not kept.
    for (const who of viewers) {
      await ask(answers, who, reads);
      await ask(answers, who, reads);
    }
    const held = answers.size;
    expect(held).toBeGreaterThanOrEqual(5);
    expect(held).toBeLessThan(viewers.length);
    expect(answers.bytes).toBeLessThanOrEqual(4096 + 10_000);
    expect(answers.stats.refused).toBe(viewers.length - held);
    expect(answers.stats.evictions).toBe(0);
    // The answers kept first are still served: viewers asking as rarely did not evict them.
    for (const who of viewers.slice(0, held)) expect(await ask(answers, who, reads)).toBe('kept');
    // A viewer asking more often than the least recently used one is kept in its place.
    const frequent = viewers[viewers.length - 1]!;
    const outcomes: string[] = [];
    for (let i = 0; i < 4; i++) outcomes.push(await ask(answers, frequent, reads));
    expect(outcomes).toContain('kept');
    expect(answers.stats.evictions).toBe(1);
    expect(answers.size).toBe(held);
    expect(await ask(answers, viewers[0]!, reads)).toBe('computed');
  });
});

describe('answers borrowing what the entity cache leaves unused', () => {
  const now = () => Date.now();
  const body = 'x'.repeat(600);
  const OWN = 4096 + 10_000;

  async function setup(borrowSpareEntries: boolean) {
    const feed = new ManualFeed();
    // No records: every entry is on the heap, and the entity cache's bytes are its entries'.
    const entities = new EntityCache(feed, { maxEntries: 1000, maxBytes: 96 * 1024, recordBytes: 0, ttlMs: 60_000 });
    const answers = new AnswerCache(entities, { maxBytes: OWN, ttlMs: 60_000, borrowSpareEntries });
    await entities.through('held', { tags: ['unrelated'], read: async () => 1 });
    const reads = new ReadSet();
    entities.recording(reads).hit({ namespace: '', tags: () => ['unrelated'] }, 'held');
    const ask = async (who: string) =>
      answers.serve(
        {
          key: `1\nMe\n${who}\n`,
          viewer: who,
          context: { reads: { tags: reads.tags, reusable: () => true }, viewerKey: async () => who },
          fresh: () => {
            throw new Error('not asked');
          },
          now,
        },
        () => 'kept' as const,
        async (_context, keep) => (
          keep?.(() => answerOf(body, { label: 'me', retrievals: [], validUntil: Number.POSITIVE_INFINITY })),
          'computed' as const
        ),
      );
    return { entities, answers, ask };
  }

  it('hold more answers while the entries leave room, and give it back as the entries grow: the two never hold more than both bounds', async () => {
    const lone = await setup(false);
    const { entities, answers, ask } = await setup(true);
    const viewers = Array.from({ length: 60 }, (_, i) => `jwt:child:USR_${i}`);
    for (const who of viewers) {
      for (const cache of [lone, { ask }]) {
        await cache.ask(who);
        await cache.ask(who);
      }
    }
    const bound = OWN + entities.entryBytesBound;
    // Without borrowing, the answers stay within their own bound; borrowing, they hold every viewer's.
    expect(lone.answers.bytes).toBeLessThanOrEqual(OWN);
    expect(answers.bytes).toBeGreaterThan(OWN);
    expect(answers.size).toBe(viewers.length);
    expect(answers.size).toBeGreaterThan(lone.answers.size);
    for (const who of viewers) expect(await ask(who)).toBe('kept');
    // The entries fill their bound: at every step the answers make room, the least recently used first.
    for (let i = 0; entities.spareEntryBytes > 2_000 && i < 500; i++) {
      await entities.through(`row-${i}`, { tags: [`row-${i}`], read: async () => 'y'.repeat(1_500) });
      expect(answers.bytes + entities.bytes).toBeLessThanOrEqual(bound);
    }
    expect(entities.spareEntryBytes).toBeLessThanOrEqual(2_000);
    expect(answers.bytes).toBeLessThanOrEqual(OWN + 2_000);
    expect(answers.stats.evictions).toBeGreaterThan(0);
    expect(await ask(viewers[viewers.length - 1]!)).toBe('kept');
    expect(await ask(viewers[0]!)).toBe('computed');
  });
});
