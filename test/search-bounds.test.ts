import pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { createOrganization, tokenFor, type BuiltOrganization } from './helpers/builders.js';
import { expectError, metricValue, rest, startServer, type TestServer } from './helpers/app.js';
import { seedSql, testMode, useTestDatabase } from './helpers/database.js';
import { SearchBusyError, Searches, SearchesFullError } from '../src/db/search-reads.js';
import type { ApiError } from '../src/errors.js';

/*
 * No organization's searches hold the database for the others: a search statement stops at
 * SEARCH_TIMEOUT_MS (503), no more than SEARCH_MAX_PER_ORGANIZATION of one organization's run at
 * once, and each organization has its part of the search time (429 SEARCH_BUSY past either, with
 * Retry-After). One search at a time is delayed for its part, never refused.
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

      const graphql = await server.graphql<{ childAccounts: unknown }>(
        '{ childAccounts(search: "e") { stats { total } } }',
        { token: largeToken },
      );
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

  it.runIf(testMode === 'postgres')(
    'PostgreSQL stops the statement at the bound: nothing of it still runs when the 503 is sent',
    async () => {
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
    },
    60_000,
  );

  it('no more than SEARCH_MAX_PER_ORGANIZATION of one organization run at once: the rest are refused 429 at once, and another organization still searches', async () => {
    const server = await start({
      SEARCH_MAX_PER_ORGANIZATION: '1',
      SEARCH_MAX_CONCURRENT: '2',
      SEARCH_TIMEOUT_MS: '30000',
      SEARCH_MAX_TIME_PERCENT: '100',
    });
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
      for (const token of [largeToken, smallToken])
        expect((await rest(server, `${CHILD_LIST}?limit=1`, { token })).status).toBe(200);
      let answered: ReturnType<typeof all> | undefined;
      await holdingAccounts(async () => {
        answered = all();
        const refusedSoFar = async () =>
          metricValue(await (await fetch(`${server.url}/metrics`)).text(), 'api_search_refused_total');
        await expect.poll(refusedSoFar, { timeout: 30_000, interval: 20 }).toBe(terms.length - 1);
      });
      [answers, other] = await answered!;
    } else {
      [answers, other] = await all();
    }
    const refused = answers.filter((answer) => answer.status === 429);
    expect(refused.length).toBeGreaterThan(0);
    expect(answers.filter((answer) => answer.status === 200).length).toBeGreaterThan(0);
    for (const answer of refused) {
      expectError(answer, 429, 'SEARCH_BUSY');
      expect(answer.body.error.message).toMatch(/as many searches as it may at once/);
      expect(answer.headers.get('retry-after')).toBe('1');
    }
    expect(answers.every((answer) => answer.status === 200 || answer.status === 429)).toBe(true);
    expect(other.status).toBe(200);
    // Once they are over, the organization searches again.
    expect((await rest(server, `${CHILD_LIST}?search=zq`, { token: largeToken })).status).toBe(200);
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metricValue(metrics, 'api_search_refused_total')).toBe(refused.length);
    expect(metricValue(metrics, 'api_search_statements_in_flight')).toBe(0);
  }, 60_000);

  it('an organization over its part of the search time is refused 429 with Retry-After, over REST and GraphQL, while another is answered; one search at a time waits for its part and is answered', async () => {
    const server = await start({
      SEARCH_MAX_TIME_PERCENT: '3',
      SEARCH_MAX_CONCURRENT: '4',
      SEARCH_MAX_PER_ORGANIZATION: '4',
      SEARCH_TIMEOUT_MS: '30000',
    });
    // Terms not searched before that every child has, each counted over all 30,000: pieces of
    // 'member' (every username) and of 'bounds.example' (every email). Sent two at a time until
    // the organization's part (3 % of a 10 s window, 300 ms: less than the terms take on an idle
    // machine, where 1 s was not always spent) is spent: then the first of a pair waits for the
    // part to be back, and the second is refused.
    const terms = [
      ...new Set(
        ['member', 'bounds.example'].flatMap((word) =>
          [1, 2, 3, 4, 5].flatMap((n) =>
            Array.from({ length: word.length - n + 1 }, (_, at) => word.slice(at, at + n)),
          ),
        ),
      ),
    ];
    const search = (term: string) =>
      rest(server, `${CHILD_LIST}?search=${encodeURIComponent(term)}`, { token: largeToken });
    let refused: Awaited<ReturnType<typeof search>> | undefined;
    for (let at = 0; at + 1 < terms.length && !refused; at += 2) {
      const pair = await Promise.all([search(terms[at]!), search(terms[at + 1]!)]);
      expect(pair.map((answer) => answer.status).every((status) => status === 200 || status === 429)).toBe(true);
      refused = pair.find((answer) => answer.status === 429);
    }
    expect(refused, 'the part was never spent').toBeDefined();
    expectError(refused!, 429, 'SEARCH_BUSY');
    expect(refused!.body.error.message).toMatch(/share of this server's database time; try again in \d+ s/);
    const retryAfter = Number(refused!.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(30);
    // Another organization has a part of its own; lists without a search are not held to it.
    expect((await rest(server, `${CHILD_LIST}?search=zz`, { token: smallToken })).status).toBe(200);
    expect((await rest(server, `${CHILD_LIST}?limit=5`, { token: largeToken })).status).toBe(200);
    // GraphQL's childAccounts is the same search: with one of the organization's searches waiting
    // for its part, the next is refused, its wait in the error's extensions.
    const delayed = async () =>
      metricValue(await (await fetch(`${server.url}/metrics`)).text(), 'api_search_delayed_total');
    const delayedBefore = await delayed();
    const [waited, graphql] = await Promise.all([
      search('mbe'),
      (async () => {
        await expect.poll(delayed, { timeout: 30_000, interval: 20 }).toBeGreaterThan(delayedBefore);
        return server.graphql<{ childAccounts: unknown }>('{ childAccounts(search: "zy") { stats { total } } }', {
          token: largeToken,
        });
      })(),
    ]);
    expect(waited.status).toBe(200);
    expect(graphql.data?.childAccounts ?? null).toBeNull();
    const { code, retryAfterSeconds } = graphql.errors?.[0]?.extensions as {
      code?: string;
      retryAfterSeconds?: number;
    };
    expect(code).toBe('SEARCH_BUSY');
    expect(retryAfterSeconds).toBeGreaterThanOrEqual(1);
    expect(retryAfterSeconds).toBeLessThanOrEqual(30);
    // One at a time, the organization's searches are all answered: each waits for its part.
    for (const term of ['xa', 'xb']) expect((await search(term)).status).toBe(200);
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metricValue(metrics, 'api_search_statements_in_flight')).toBe(0);
  }, 120_000);

  it.skipIf(testMode !== 'postgres')(
    "a search's pages are read without parallel workers, which only its counts gain from; both without sequential scans or JIT",
    async () => {
      const pages = database().boundedReads({ timeoutMs: 5000, poolSize: 1, serial: true });
      const counts = database().boundedReads({ timeoutMs: 5000, poolSize: 1 });
      try {
        const settings = async (reads: typeof pages) =>
          (
            await reads.query<{ workers: string; seqscan: string; jit: string; setup: string }>(
              `SELECT current_setting('max_parallel_workers_per_gather') AS workers, current_setting('enable_seqscan') AS seqscan, current_setting('jit') AS jit,
                  current_setting('parallel_setup_cost') AS setup`,
            )
          )[0];
        expect(await settings(pages)).toEqual({ workers: '0', seqscan: 'off', jit: 'off', setup: '20000' });
        const counted = await settings(counts);
        expect(counted).toMatchObject({ seqscan: 'off', jit: 'off', setup: '20000' });
        expect(Number(counted?.workers)).toBeGreaterThan(0);
      } finally {
        await Promise.all([pages.close(), counts.close()]);
      }
    },
  );
});

describe("the searches' share, on a clock of its own", () => {
  /*
   * SEARCH_MAX_TIME_PERCENT 10: an organization's part holds 10 % of a 10 s window, 1,000 ms, and
   * fills at 10 % of the clock, split equally among the organizations that search. Each
   * statement "takes" `cost` ms of the clock; a gate holds one running until the test opens it.
   */
  let clock = 0;
  let cost = 600;
  const gates: (() => void)[] = [];
  const statement = {
    query: async (text: string) => {
      if (text === 'held') await new Promise<void>((open) => gates.push(open));
      clock += cost;
      return [];
    },
  };
  const make = (bounds: Partial<ConstructorParameters<typeof Searches>[0]> = {}) =>
    new Searches(
      { timeoutMs: 1000, maxConcurrent: 4, maxPerOrganization: 4, maxTimePercent: 10, ...bounds },
      statement,
      statement,
      [],
      () => clock,
    );
  const refusal = (promise: Promise<unknown>) =>
    promise.then(
      () => undefined,
      (error: unknown) => error as ApiError,
    );
  const later = async (ms: number) => {
    clock += ms;
    await vi.advanceTimersByTimeAsync(ms);
  };
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    clock = 0;
    cost = 600;
    gates.length = 0;
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('one search at a time is never refused: past its part it waits for it, and is answered', async () => {
    const searches = make();
    // 1,000 - 600 + 60 - 600 (what it filled during the second): overdrawn by 140 ms, back in 1.4 s at 10 %.
    for (let i = 0; i < 2; i++) await searches.of('org-a').primary.query('SELECT 1');
    let answered = false;
    const third = searches
      .of('org-a')
      .primary.query('SELECT 1')
      .then(() => (answered = true));
    await vi.advanceTimersByTimeAsync(0);
    expect(searches.stats.delayed).toBe(1);
    // Meanwhile one more of the same organization is over its share: refused, with the wait.
    const over = await refusal(searches.of('org-a').primary.query('SELECT 1'));
    expect(over).toBeInstanceOf(SearchBusyError);
    expect(over).toMatchObject({ code: 'SEARCH_BUSY', status: 429, retryAfterSeconds: 2 });
    expect(over?.message).toMatch(/share of this server's database time; try again in 2 s/);
    await later(1399);
    expect(answered).toBe(false);
    await later(1);
    await third;
    expect(searches.stats.refused).toBe(1);
  });

  it('an organization that spent its part is refused while another is still admitted, and each then fills at half the rate', async () => {
    const searches = make();
    for (let i = 0; i < 2; i++) await searches.of('org-a').primary.query('SELECT 1');
    // org-a over its part with one search waiting for it; org-b has its own part, whole.
    const waiting = searches.of('org-a').primary.query('SELECT 1');
    await vi.advanceTimersByTimeAsync(0);
    await expect(searches.of('org-b').primary.query('SELECT 1')).resolves.toEqual([]);
    // Two organizations search: org-a's -140 ms filled 600 ms at 5 % (to -110), and the rest fills at 5 %: 2.2 s.
    expect(await refusal(searches.of('org-a').primary.query('SELECT 1'))).toMatchObject({
      code: 'SEARCH_BUSY',
      retryAfterSeconds: 3,
    });
    await later(2000);
    await waiting;
    // Once admitted, a search's further statements finish it, whatever its part says.
    cost = 2000;
    const search = searches.of('org-b');
    await search.primary.query('SELECT 1');
    for (let i = 0; i < 3; i++) await search.stale.query('SELECT 1');
    // An organization whose part is whole again, with nothing running, is forgotten: the two
    // before, and the one that searched now, which spent nothing of it.
    cost = 0;
    await later(600_000);
    await searches.of('org-c').primary.query('SELECT 1');
    expect((searches as unknown as { tenants: Map<string, unknown> }).tenants.size).toBe(0);
    // One that spent is followed until its part is whole again.
    cost = 100;
    await searches.of('org-c').primary.query('SELECT 1');
    expect((searches as unknown as { tenants: Map<string, unknown> }).tenants.size).toBe(1);
  });

  it('no more than SEARCH_MAX_PER_ORGANIZATION of one organization at once: 429, while another organization is admitted', async () => {
    const searches = make({ maxPerOrganization: 2 });
    const held = [searches.of('org-a').primary.query('held'), searches.of('org-a').primary.query('held')];
    await vi.advanceTimersByTimeAsync(0);
    const busy = await refusal(searches.of('org-a').primary.query('SELECT 1'));
    expect(busy).toMatchObject({ code: 'SEARCH_BUSY', status: 429, retryAfterSeconds: 1 });
    expect(busy?.message).toMatch(/as many searches as it may at once/);
    await expect(searches.of('org-b').primary.query('SELECT 1')).resolves.toEqual([]);
    for (const open of gates) open();
    await Promise.all(held);
    expect(searches.inFlight).toBe(0);
  });

  it('a free slot goes to a search already begun, then to the organization that spent least; a statement that waits too long finds the instance full (503)', async () => {
    const searches = make({ maxConcurrent: 1, maxTimePercent: 100 });
    const order: string[] = [];
    const run = (search: ReturnType<typeof searches.of>, name: string, text = 'SELECT 1') =>
      search.primary.query(text).then(() => order.push(name));
    const first = searches.of('org-a');
    const running = run(first, 'a1', 'held');
    await vi.advanceTimersByTimeAsync(0);
    const queued = [run(searches.of('org-a'), 'a2'), run(searches.of('org-b'), 'b1'), run(first, 'a1 again')];
    await vi.advanceTimersByTimeAsync(0);
    gates.shift()!();
    await Promise.all([running, ...queued]);
    expect(order).toEqual(['a1', 'a1 again', 'a2', 'b1']);

    // At 100 % no organization spends: the order among new searches is the order they came in. A
    // statement waits for a slot at most twice SEARCH_TIMEOUT_MS.
    const holding = searches.of('org-a').primary.query('held');
    await vi.advanceTimersByTimeAsync(0);
    const full = refusal(searches.of('org-b').primary.query('SELECT 1'));
    await vi.advanceTimersByTimeAsync(2000);
    expect(await full).toBeInstanceOf(SearchesFullError);
    expect(await full).toMatchObject({ code: 'SERVICE_UNAVAILABLE', status: 503, retryAfterSeconds: 1 });
    gates.shift()!();
    await holding;
  });

  it('the organization that spent least goes first among new searches', async () => {
    const searches = make({ maxConcurrent: 1 });
    await searches.of('org-a').primary.query('SELECT 1');
    const order: string[] = [];
    const running = searches.of('org-c').primary.query('held');
    await vi.advanceTimersByTimeAsync(0);
    const queued = ['org-a', 'org-b'].map((id) =>
      searches
        .of(id)
        .primary.query('SELECT 1')
        .then(() => order.push(id)),
    );
    await vi.advanceTimersByTimeAsync(0);
    gates.shift()!();
    await Promise.all([running, ...queued]);
    expect(order).toEqual(['org-b', 'org-a']);
  });

  it('closing refuses the searches that wait, 503', async () => {
    const searches = make({ maxConcurrent: 1 });
    const running = searches.of('org-a').primary.query('held');
    await vi.advanceTimersByTimeAsync(0);
    const waiting = refusal(searches.of('org-b').primary.query('SELECT 1'));
    await vi.advanceTimersByTimeAsync(0);
    await searches.close();
    expect(await waiting).toMatchObject({ code: 'SERVICE_UNAVAILABLE', status: 503 });
    gates.shift()!();
    await running;
  });
});
