import { describe, expect, it } from 'vitest';
import { openDatabase } from '../src/db/database.js';
import { seed } from '../src/dev/demo-data.js';
import { isDatabaseUnavailable, toApiError } from '../src/errors.js';
import { rest, startServer, type TestServer } from './helpers/app.js';
import { createOrganization, tokenFor } from './helpers/builders.js';
import { testMode, useTestDatabase } from './helpers/database.js';

const CHILDREN = 20_000;
/** Concurrent callers of the expensive tenant. */
const FLOODERS = 3;
/** Searches each of them sends. */
const SEARCHES_EACH = 12;

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const quantile = (values: number[], q: number) => [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(values.length * q))]!;

/**
 * One tenant's expensive searches must not hold up the others. Each search below is a new rare
 * term, so each one reads every child of a large organization; meanwhile another organization's
 * caller asks for its profile, which the server answers from its cache. The bound is relative
 * to the work, measured in the same run: the bystander's typical wait is a small part of one
 * search's own time. Where the database runs on the server's event loop, each waiting request
 * sits behind the statement under way, and the bystander's wait becomes of the order of a search.
 */
describe(`a tenant's expensive searches and another tenant's cached answers (${testMode})`, () => {
  const database = useTestDatabase();

  it("the bystander's cached answers stay fast while another organization floods the database with searches", async () => {
    const [heavy] = await seed(database(), { organizations: 1, childrenPerOrganization: CHILDREN, seed: 11, now: new Date() });
    const heavyParent = await database().prisma.account.findUniqueOrThrow({ where: { id: heavy!.parent.userID } });
    const heavyOrganization = await database().prisma.organization.findUniqueOrThrow({ where: { parentId: heavyParent.id } });
    const heavyToken = await tokenFor(heavyParent, { parent: heavyParent, organization: heavyOrganization });
    const bystander = await createOrganization(database());
    const bystanderToken = await tokenFor(bystander.parent, bystander);

    // The flood is the point here, not the bounds on searches (test/search-bounds.test.ts).
    const server: TestServer = await startServer(database(), { env: { SEARCH_MAX_PER_ORGANIZATION: String(FLOODERS), SEARCH_MAX_CONCURRENT: String(FLOODERS), SEARCH_MAX_TIME_PERCENT: '100' } });
    try {
      let term = 0;
      // Letters that no generated name or address contains together: every child is read.
      const search = async () => {
        const started = performance.now();
        const result = await rest(server, `/auth/child-accounts?search=zq${term++}x`, { token: heavyToken });
        expect(result.status).toBe(200);
        expect(result.body.data.data.stats.total).toBe(0);
        return performance.now() - started;
      };
      const profile = async () => {
        const started = performance.now();
        const result = await rest(server, '/auth/user-profile', { token: bystanderToken });
        expect(result.status).toBe(200);
        return performance.now() - started;
      };

      // Alone: the time of one search, and of one cached profile.
      for (let i = 0; i < 3; i++) await search();
      const searchAlone = median(await sequence(7, search));
      for (let i = 0; i < 20; i++) await profile();
      const profileAlone = median(await sequence(30, profile));

      // Together: the flood, and the bystander asking again and again until the flood ends.
      let flooding = true;
      const flood = Promise.all(Array.from({ length: FLOODERS }, () => sequence(SEARCHES_EACH, search))).finally(() => {
        flooding = false;
      });
      const waits: number[] = [];
      while (flooding) waits.push(await profile());
      const searchesUnderLoad = (await flood).flat();

      const summary = {
        searchAlone: Math.round(searchAlone),
        searchUnderLoad: Math.round(median(searchesUnderLoad)),
        profileAlone: Math.round(profileAlone * 10) / 10,
        profileUnderLoad: Math.round(median(waits) * 10) / 10,
        profileP90UnderLoad: Math.round(quantile(waits, 0.9) * 10) / 10,
        profiles: waits.length,
      };
      if (process.env.TEST_VERBOSE) console.log(summary);
      // Compared within the flood, not against the search measured alone: that one ran at another
      // moment, beside whatever other test files the shared cores ran then (a search alone has
      // measured 38 ms beside 9 ms under the flood). The flood was real: the searches were under
      // way while the bystander asked.
      expect(searchesUnderLoad.length).toBe(FLOODERS * SEARCHES_EACH);
      expect(waits.length, JSON.stringify(summary)).toBeGreaterThan(FLOODERS);
      // The bystander was not queued behind them: answered from its cache, it waits for no
      // statement, so its typical wait is well under a search's own in the same window (queued,
      // it would wait about a search), and nearly all its waits are under a typical search.
      expect(median(waits), JSON.stringify(summary)).toBeLessThan(median(searchesUnderLoad) * 0.75);
      expect(quantile(waits, 0.9), JSON.stringify(summary)).toBeLessThan(quantile(searchesUnderLoad, 0.9));
    } finally {
      await server.close();
    }
  });
});

describe(`every statement has a time bound (${testMode})`, () => {
  const database = useTestDatabase();

  it('a statement past DATABASE_STATEMENT_TIMEOUT_MS fails as unavailable (503) within the bound and a margin; the next ones are answered', async () => {
    const bounded = await openDatabase({
      ...(testMode === 'postgres' ? { url: database().url! } : { memory: true as const }),
      statementTimeoutMs: 300,
    });
    try {
      const started = performance.now();
      // Some seconds of work for the embedded engine, which cannot be interrupted.
      const error = await bounded.sql.query('SELECT count(*) FROM generate_series(1, 30000000)').then(
        () => undefined,
        (e: unknown) => e,
      );
      const waited = performance.now() - started;
      expect(error).toBeDefined();
      expect(isDatabaseUnavailable(error)).toBe(true);
      expect(toApiError(error).status).toBe(503);
      // The bound, plus the client's margin of one second, plus scheduling.
      expect(waited).toBeLessThan(300 + 1000 + 700);
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

async function sequence(count: number, run: () => Promise<number>): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < count; i++) times.push(await run());
  return times;
}
