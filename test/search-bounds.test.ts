import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOrganization, tokenFor, type BuiltOrganization } from './helpers/builders.js';
import { expectError, metricValue, rest, startServer, type TestServer } from './helpers/app.js';
import { seedSql, testMode, useTestDatabase } from './helpers/database.js';
import { Searches, SearchShareSpentError } from '../src/db/search-reads.js';

/*
 * No organization's searches hold the database for the others: a search statement stops at
 * SEARCH_TIMEOUT_MS, and no more than SEARCH_MAX_PER_ORGANIZATION of one organization's (and
 * SEARCH_MAX_CONCURRENT of the instance's) run at once. Past either, the caller is answered 503
 * SERVICE_UNAVAILABLE with Retry-After at once, in the error envelope; nothing waits.
 */

const CHILDREN = 30_000;
const CHILD_LIST = '/auth/child-accounts';

describe(`searches are bounded in time and in number (${testMode})`, () => {
  const database = useTestDatabase();
  let large: BuiltOrganization;
  let small: BuiltOrganization;
  let largeToken: string;
  let smallToken: string;
  const servers: TestServer[] = [];
  const start = async (env: Record<string, string>) => {
    const server = await startServer(database(), { env });
    servers.push(server);
    return server;
  };

  beforeAll(async () => {
    large = await createOrganization(database());
    small = await createOrganization(database());
    largeToken = await tokenFor(large.parent, large);
    smallToken = await tokenFor(small.parent, small);
    // A term every child has is counted over all of them: the slow statement these tests need.
    // A seed statement (`seedSql`): in the requests' pool it ran past the client's read timeout on PGlite.
    await seedSql(
      database(),
      `INSERT INTO "Account" (id, type, "parentId", username, email, "publicKey", "createdAt")
       SELECT 'USR_sb' || i, 'child', $1, 'member' || i, 'm' || i || '@bounds.example', 'APK_sb' || i, now() - i * interval '1 minute'
       FROM generate_series(1, ${CHILDREN}) i`,
      [large.parent.id],
    );
    await seedSql(database(), 'ANALYZE "Account"');
  }, 120_000);
  afterAll(async () => {
    for (const server of servers) await server.close();
  });
  /**
   * On PostgreSQL, runs `work` while another session holds the children's table exclusively:
   * every statement reading it waits, until its bound stops it. On PGlite (one session) it just
   * runs `work`.
   */
  const holdingAccounts = async (work: () => Promise<void>) => {
    if (testMode !== 'postgres') return work();
    const holder = new pg.Client({ connectionString: database().url });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('LOCK TABLE "Account" IN ACCESS EXCLUSIVE MODE');
      await work();
    } finally {
      await holder.query('ROLLBACK').catch(() => {});
      await holder.end();
    }
  };

  it('a search past SEARCH_TIMEOUT_MS is answered 503 with Retry-After, over REST and GraphQL; lists without a search are not held to it', async () => {
    // On PostgreSQL the searches wait on a lock another session holds, so they pass the bound
    // however fast the machine; the embedded database's bound is the client's, 1 ms, shorter
    // than any statement's round trip to its thread.
    const server = await start({ SEARCH_TIMEOUT_MS: testMode === 'postgres' ? '200' : '1' });
    // The caller known to the cache first: under the lock only the searches read the table.
    expect((await rest(server, `${CHILD_LIST}?limit=5`, { token: largeToken })).status).toBe(200);
    expect((await server.graphql('{ me { userID } }', { token: largeToken })).errors).toBeUndefined();
    await holdingAccounts(async () => {
      const refused = await rest(server, `${CHILD_LIST}?search=m`, { token: largeToken });
      expectError(refused, 503, 'SERVICE_UNAVAILABLE');
      expect(refused.headers.get('retry-after')).toBe('1');
      expect(refused.body.error.message).toMatch(/longer search term or a date range/);
      expect(refused.text).not.toMatch(/ILIKE|SELECT|statement/i);

      const graphql = await server.graphql<{ childAccounts: unknown }>('{ childAccounts(search: "e") { stats { total } } }', { token: largeToken });
      expect(graphql.errors?.[0]?.extensions).toEqual({ code: 'SERVICE_UNAVAILABLE', retryAfterSeconds: 1 });
    });

    // The unsearched list and the caller's profile are other statements, on other connections.
    const unsearched = await rest(server, `${CHILD_LIST}?limit=5`, { token: largeToken });
    expect(unsearched.status).toBe(200);
    expect(unsearched.body.data.data.stats.total).toBe(CHILDREN);
    expect((await rest(server, '/auth/user-profile', { token: largeToken })).status).toBe(200);
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metricValue(metrics, 'api_search_timeouts_total')).toBeGreaterThanOrEqual(2);
  }, 60_000);

  it.runIf(testMode === 'postgres')('PostgreSQL stops the statement at the bound: nothing of it still runs when the 503 is sent', async () => {
    const server = await start({ SEARCH_TIMEOUT_MS: '200' });
    expect((await rest(server, `${CHILD_LIST}?limit=5`, { token: largeToken })).status).toBe(200);
    await holdingAccounts(async () => {
      for (const term of ['m', 'e', 'b']) {
        const refused = await rest(server, `${CHILD_LIST}?search=${term}`, { token: largeToken });
        expectError(refused, 503, 'SERVICE_UNAVAILABLE');
        // This file's database only: other files search their own on the same cluster at the same time.
        // The backend flushes the error before it reports itself idle, so the count is polled; a
        // statement PostgreSQL had not stopped would wait on the lock, still active, for good.
        const running = async () =>
          (
            await database().sql.query<{ n: number }>(
              `SELECT count(*)::int AS n FROM pg_stat_activity
                WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid() AND query LIKE '%ILIKE%'`,
            )
          )[0]!.n;
        await expect.poll(running, { timeout: 10_000, interval: 20 }).toBe(0);
      }
    });
  }, 60_000);

  it('no more than SEARCH_MAX_PER_ORGANIZATION of one organization run at once: the rest are refused at once, and another organization still searches', async () => {
    const server = await start({ SEARCH_MAX_PER_ORGANIZATION: '1', SEARCH_MAX_CONCURRENT: '2', SEARCH_TIMEOUT_MS: '30000', SEARCH_MAX_TIME_PERCENT: '100' });
    // Distinct terms every child has, each counted over all of them: no two share a read in flight.
    const terms = ['m', 'e', 'b', 'r', 'mb', 'em', 'be', 'er'];
    const all = () =>
      Promise.all([
        Promise.all(terms.map((term) => rest(server, `${CHILD_LIST}?search=${term}`, { token: largeToken }))),
        rest(server, `${CHILD_LIST}?search=zz`, { token: smallToken }),
      ]);
    let answers: Awaited<ReturnType<typeof all>>[0];
    let other: Awaited<ReturnType<typeof all>>[1];
    if (testMode === 'postgres') {
      // Both callers known to the cache; then, under the lock, the first search admitted waits on
      // it, and every other one of the organization is refused at once, whatever the machine's speed.
      for (const token of [largeToken, smallToken]) expect((await rest(server, `${CHILD_LIST}?limit=1`, { token })).status).toBe(200);
      let answered: ReturnType<typeof all> | undefined;
      await holdingAccounts(async () => {
        answered = all();
        const refusedSoFar = async () => metricValue(await (await fetch(`${server.url}/metrics`)).text(), 'api_search_refused_total');
        await expect.poll(refusedSoFar, { timeout: 30_000, interval: 20 }).toBe(terms.length - 1);
      });
      [answers, other] = await answered!;
    } else {
      [answers, other] = await all();
    }
    const refused = answers.filter((answer) => answer.status === 503);
    expect(refused.length).toBeGreaterThan(0);
    expect(answers.filter((answer) => answer.status === 200).length).toBeGreaterThan(0);
    for (const answer of refused) {
      expectError(answer, 503, 'SERVICE_UNAVAILABLE');
      expect(answer.headers.get('retry-after')).toBe('1');
    }
    expect(answers.every((answer) => answer.status === 200 || answer.status === 503)).toBe(true);
    expect(other.status).toBe(200);
    // Once they are over, the organization searches again.
    expect((await rest(server, `${CHILD_LIST}?search=zq`, { token: largeToken })).status).toBe(200);
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metricValue(metrics, 'api_search_refused_total')).toBe(refused.length);
    expect(metricValue(metrics, 'api_search_statements_in_flight')).toBe(0);
  }, 60_000);

  it('searches take at most SEARCH_MAX_TIME_PERCENT of the wall clock: past it, the next is refused 503 with Retry-After until the share is back', async () => {
    const server = await start({ SEARCH_MAX_TIME_PERCENT: '1', SEARCH_MAX_CONCURRENT: '4', SEARCH_MAX_PER_ORGANIZATION: '4', SEARCH_TIMEOUT_MS: '30000' });
    // Terms every child has, each counted over all 30,000: their time soon passes 1 % of a second.
    // As many as it takes (about a dozen here), each a term not searched before that every child
    // has: a piece of 'member' (every username) or of 'bounds.example' (every email).
    const terms = [...new Set(['member', 'bounds.example'].flatMap((word) => [1, 2, 3, 4].flatMap((n) => Array.from({ length: word.length - n + 1 }, (_, at) => word.slice(at, at + n)))))];
    const answers = [];
    for (const term of terms) {
      const answer = await rest(server, `${CHILD_LIST}?search=${encodeURIComponent(term)}`, { token: largeToken });
      answers.push(answer);
      if (answer.status !== 200) break;
    }
    const refused = answers.at(-1)!;
    expectError(refused, 503, 'SERVICE_UNAVAILABLE');
    expect(refused.body.error.message).toMatch(/share of this server's database time/);
    const retryAfter = Number(refused.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(30);
    // Not the organization's searches alone: the instance's. Lists without a search are not held to it.
    expectError(await rest(server, `${CHILD_LIST}?search=zz`, { token: smallToken }), 503, 'SERVICE_UNAVAILABLE');
    // GraphQL's childAccounts is the same search: refused too, its wait in the error's extensions.
    const graphql = await server.graphql<{ childAccounts: unknown }>('{ childAccounts(search: "zy") { stats { total } } }', { token: smallToken });
    expect(graphql.data?.childAccounts ?? null).toBeNull();
    const { code, retryAfterSeconds } = graphql.errors?.[0]?.extensions as { code?: string; retryAfterSeconds?: number };
    expect(code).toBe('SERVICE_UNAVAILABLE');
    expect(retryAfterSeconds).toBeGreaterThanOrEqual(1);
    expect(retryAfterSeconds).toBeLessThanOrEqual(30);
    expect((await rest(server, `${CHILD_LIST}?limit=5`, { token: largeToken })).status).toBe(200);
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metricValue(metrics, 'api_search_refused_total')).toBe(3);
    expect(metricValue(metrics, 'api_search_statements_in_flight')).toBe(0);
    // Once the share is back, searches are answered again (a bound of 10x the Retry-After only
    // proves that the wait ends).
    await expect.poll(async () => (await rest(server, `${CHILD_LIST}?search=zz`, { token: smallToken })).status, { timeout: retryAfter * 10_000, interval: 100 }).toBe(200);
  }, 90_000);

  it.skipIf(testMode !== 'postgres')('a search\'s pages are read without parallel workers, which only its counts gain from; both without sequential scans or JIT', async () => {
    const pages = database().boundedReads({ timeoutMs: 5000, poolSize: 1, serial: true });
    const counts = database().boundedReads({ timeoutMs: 5000, poolSize: 1 });
    try {
      const settings = async (reads: typeof pages) =>
        (await reads.query<{ workers: string; seqscan: string; jit: string; setup: string }>(
          `SELECT current_setting('max_parallel_workers_per_gather') AS workers, current_setting('enable_seqscan') AS seqscan, current_setting('jit') AS jit,
                  current_setting('parallel_setup_cost') AS setup`,
        ))[0];
      expect(await settings(pages)).toEqual({ workers: '0', seqscan: 'off', jit: 'off', setup: '20000' });
      const counted = await settings(counts);
      expect(counted).toMatchObject({ seqscan: 'off', jit: 'off', setup: '20000' });
      expect(Number(counted?.workers)).toBeGreaterThan(0);
    } finally {
      await Promise.all([pages.close(), counts.close()]);
    }
  });
});

describe('the searches\' time share, on a clock of its own', () => {
  it('a statement\'s time is taken from the share; spent, the next search is refused with the wait until it fills, and admitted once that has passed', async () => {
    let clock = 0;
    // Each statement "takes" 100 ms of the clock.
    const statement = { query: async () => ((clock += 100), []) };
    const searches = new Searches({ timeoutMs: 1000, maxConcurrent: 4, maxPerOrganization: 4, maxTimePercent: 10 }, statement, statement, [], () => clock);
    // The share holds 10 % of a 2 s window, 200 ms, and fills at 10 % of the clock: three
    // statements of 100 ms overdraw it to -80 ms.
    for (let i = 0; i < 3; i++) await searches.of('org-a').primary.query('SELECT 1');
    const refused = await searches.of('org-b').primary.query('SELECT 1').catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(SearchShareSpentError);
    // 80 ms to fill at 10 %: back above zero in 0.8 s, said as 1 s.
    expect((refused as SearchShareSpentError).retryAfterSeconds).toBe(1);
    clock += 700;
    await expect(searches.of('org-b').primary.query('SELECT 1')).rejects.toBeInstanceOf(SearchShareSpentError);
    clock += 200;
    await expect(searches.of('org-b').primary.query('SELECT 1')).resolves.toEqual([]);
    // Once admitted, a search's further statements finish it, whatever the share says; the next
    // search is refused.
    clock += 2000;
    const search = searches.of('org-c');
    await search.primary.query('SELECT 1');
    for (let i = 0; i < 3; i++) await search.stale.query('SELECT 1');
    await expect(searches.of('org-d').primary.query('SELECT 1')).rejects.toBeInstanceOf(SearchShareSpentError);
    expect(searches.stats.refused).toBe(3);
  });
});
