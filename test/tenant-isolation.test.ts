import { describe, expect, it } from 'vitest';
import { openDatabase } from '../src/db/database.js';
import { isDatabaseUnavailable, toApiError } from '../src/errors.js';
import { rest, startServer, type TestServer } from './helpers/app.js';
import { createOrganization, manyChildren, tokenFor } from './helpers/builders.js';
import { seedSql, testMode, useTestDatabase } from './helpers/database.js';

const CHILDREN = 20_000;
/** Concurrent callers of the expensive tenant. */
const FLOODERS = 3;
/** Searches each of them sends. */
const SEARCHES_EACH = 12;

/**
 * One tenant's expensive searches must not hold up the others. Each search below is a new rare
 * term, so each one reads every child of a large organization; meanwhile another organization's
 * caller asks for its profile, which the server answers from its cache: while the flood runs,
 * the bystander is answered more often than the searches are. Where the database runs on the
 * server's event loop, or a cached answer waited on a statement, it would be answered about once
 * a search instead.
 */
describe(`a tenant's expensive searches and another tenant's cached answers (${testMode})`, () => {
  const database = useTestDatabase();

  it('the bystander is answered from its cache, more often than the searches, while another organization floods the database', async () => {
    const heavy = await createOrganization(database());
    const heavyToken = await tokenFor(heavy.parent, heavy);
    await seedSql(
      database(),
      `INSERT INTO "Account" (id, type, "parentId", username, email, "publicKey", "createdAt")
       SELECT 'USR_ti' || i, 'child', $1, 'member' || i, 'm' || i || '@tenants.example', 'APK_ti' || i, now() - i * interval '1 minute'
       FROM generate_series(1, ${CHILDREN}) i`,
      [heavy.parent.id],
    );
    const bystander = await createOrganization(database());
    const bystanderToken = await tokenFor(bystander.parent, bystander);

    // The flood is the point here, not the bounds on searches (test/search-bounds.test.ts).
    const server: TestServer = await startServer(database(), {
      env: {
        SEARCH_MAX_PER_ORGANIZATION: String(FLOODERS),
        SEARCH_MAX_CONCURRENT: String(FLOODERS),
        SEARCH_MAX_TIME_PERCENT: '100',
      },
    });
    try {
      let term = 0;
      // Letters that no child's name or address contains together: every child is read.
      const search = async () => {
        const result = await rest(server, `/auth/child-accounts?search=zq${term++}x`, { token: heavyToken });
        expect(result.status).toBe(200);
        expect(result.body.data.data.stats.total).toBe(0);
      };
      const profile = async () => {
        const result = await rest(server, '/auth/user-profile', { token: bystanderToken });
        expect(result.status).toBe(200);
      };

      // Both callers known to the cache before the flood.
      await search();
      await profile();

      // Together: the flood, and the bystander asking again and again until the flood ends.
      let flooding = true;
      let searched = 0;
      const flood = Promise.all(
        Array.from({ length: FLOODERS }, async () => {
          for (let i = 0; i < SEARCHES_EACH; i++) {
            await search();
            searched += 1;
          }
        }),
      ).finally(() => {
        flooding = false;
      });
      let profiles = 0;
      while (flooding) {
        await profile();
        profiles += 1;
      }
      await flood;
      expect(searched).toBe(FLOODERS * SEARCHES_EACH);
      // Answered more often than the searches were (queued behind them, it would be answered
      // about once a search): a count in the same run, not a time.
      expect(profiles).toBeGreaterThan(FLOODERS * SEARCHES_EACH);
    } finally {
      await server.close();
    }
  });
});

describe(`every statement has a time bound (${testMode})`, () => {
  const database = useTestDatabase();

  it('a statement past DATABASE_STATEMENT_TIMEOUT_MS fails as unavailable (503); the next ones are answered', async () => {
    const bounded = await openDatabase({
      ...(testMode === 'postgres' ? { url: database().url! } : { memory: true as const }),
      statementTimeoutMs: 300,
    });
    try {
      // Longer than the bound and its client's margin (1.3 s) on any machine: an error can only
      // be the bound's. The embedded engine cannot be interrupted: it sleeps the 2 s out.
      const error = await bounded.sql.query('SELECT pg_sleep(2)').then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeDefined();
      expect(isDatabaseUnavailable(error)).toBe(true);
      expect(toApiError(error).status).toBe(503);
      // Afterwards the database answers again by itself (on PGlite once the statement has run out).
      let answer: unknown;
      for (let attempt = 0; attempt < 40 && answer === undefined; attempt++) {
        answer = await bounded.sql.query<{ one: number }>('SELECT 1 AS one').then(
          (rows) => rows[0]?.one,
          () => new Promise((resolve) => setTimeout(() => resolve(undefined), 500)),
        );
      }
      expect(answer).toBe(1);
    } finally {
      await bounded.close();
    }
  });
});

/**
 * Search time is shared among the organizations that search (`src/db/search-reads.ts`): one that
 * hammers the search from many connections is told 429 past its share, while another searching
 * one term at a time is answered, and a third's profiles are untouched. At the defaults but the
 * test servers' rate limits (off). Counts in one run, not times: the latencies are
 * `npm run bench:search -- --fair`'s.
 */
describe(`one organization's searches leave the others theirs (${testMode})`, () => {
  const database = useTestDatabase();
  const FAIR_CHILDREN = 30_000;
  const HAMMERS = 16;
  const TERMS = 40;

  it.runIf(testMode === 'postgres')(
    'a parent hammering the search gets only 200 and 429; a parent searching one term at a time has at least 90 % answered; nothing answers 5xx',
    async () => {
      const [hammer, searcher, bystander] = await Promise.all([0, 1, 2].map(() => createOrganization(database())));
      for (const org of [hammer!, searcher!, bystander!]) await manyChildren(database(), org, FAIR_CHILDREN, 'member');
      await seedSql(database(), 'ANALYZE "Account"');
      const [hammerToken, searcherToken, bystanderToken] = await Promise.all(
        [hammer!, searcher!, bystander!].map((org) => tokenFor(org.parent, org)),
      );
      const server = await startServer(database(), { env: { SEARCH_MAX_TIME_PERCENT: '20' } });
      try {
        const statuses = {
          hammer: new Map<number, number>(),
          searcher: new Map<number, number>(),
          bystander: new Map<number, number>(),
        };
        const count = (who: keyof typeof statuses, status: number) =>
          statuses[who].set(status, (statuses[who].get(status) ?? 0) + 1);
        let done = false;
        let term = 0;
        const hammering = Promise.all(
          Array.from({ length: HAMMERS }, async () => {
            while (!done) {
              // Letters no child's name holds together: every child is read.
              const answer = await rest(server, `/auth/child-accounts?search=zq${term++}x`, { token: hammerToken });
              count('hammer', answer.status);
              if (answer.status === 429) {
                expect(answer.body.error.code).toBe('SEARCH_BUSY');
                expect(Number(answer.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
              }
            }
          }),
        );
        const profiles = (async () => {
          while (!done)
            count('bystander', (await rest(server, '/auth/user-profile', { token: bystanderToken })).status);
        })();
        try {
          for (let i = 0; i < TERMS; i++)
            count(
              'searcher',
              (await rest(server, `/auth/child-accounts?search=${100 + i}`, { token: searcherToken })).status,
            );
        } finally {
          done = true;
          await Promise.all([hammering, profiles]);
        }
        const seen = JSON.stringify(
          Object.fromEntries(Object.entries(statuses).map(([who, map]) => [who, Object.fromEntries(map)])),
        );
        expect([...statuses.hammer.keys()].sort(), seen).toEqual([200, 429]);
        expect(statuses.searcher.get(200) ?? 0, seen).toBeGreaterThanOrEqual(0.9 * TERMS);
        expect([...statuses.bystander.keys()], seen).toEqual([200]);
        for (const map of Object.values(statuses))
          for (const status of map.keys()) expect(status, seen).toBeLessThan(500);
      } finally {
        await server.close();
      }
    },
    180_000,
  );
});
