import { beforeAll, describe, expect, it } from 'vitest';
import { filterSql } from '../src/db/child-list.js';
import { createOrganization, tokenFor, type BuiltOrganization } from './helpers/builders.js';
import { rest, useServer } from './helpers/app.js';
import { seedSql, testMode, useTestDatabase } from './helpers/database.js';

/*
 * Search terms of one and two characters, which the trigram indexes cannot serve: a rare one is
 * looked up in the grams index (migration short_search_terms), a common one is read in order.
 * Either way the page and the exact counts are those of ILIKE on the names (decisions §4).
 */

const CHILDREN = 10_000;
const DAY = 86_400_000;
const now = new Date('2026-06-15T12:00:00.000Z');

describe(`short search terms (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database, { now: () => now });
  let org: BuiltOrganization;
  let token: string;
  const sql = <T extends Record<string, unknown>>(text: string, params: unknown[] = []) =>
    database().sql.query<T>(text, params);

  beforeAll(async () => {
    org = await createOrganization(database());
    token = await tokenFor(org.parent, org, { now });
    await seedSql(
      database(),
      `INSERT INTO "Account" (id, type, "parentId", username, email, "publicKey", "createdAt", "lastLogin")
       SELECT 'USR_ss' || i, 'child', $1, 'member' || i, 'm' || i || '@bounds.example', 'APK_ss' || i,
              $2::timestamptz - i * interval '1 hour', CASE WHEN i % 3 = 0 THEN $2::timestamptz - interval '1 day' END
       FROM generate_series(1, ${CHILDREN}) i`,
      [org.parent.id, now],
    );
    // The rare ones: letters and signs no generated child has.
    const rare: [string, string, string, number][] = [
      ['USR_ssx1', 'Xq_one', 'xq1@odd.example', 5],
      ['USR_ssx2', 'zz-two', 'zz2@odd.example', 50],
      ['USR_ssx3', 'ÄÖ-three', 'zz3@odd.example', 500],
      ['USR_ssx4', 'plain', 'x%y@odd.example', 5000],
      ['USR_ssx5', 'zzfive', 'z5@odd.example', 9000],
    ];
    for (const [id, username, email, hours] of rare) {
      await sql(
        `INSERT INTO "Account" (id, type, "parentId", username, email, "publicKey", "createdAt") VALUES ($1, 'child', $2, $3, $4, $5, $6)`,
        [id, org.parent.id, username, email, `APK_${id}`, new Date(now.getTime() - hours * 3_600_000 - 1000)],
      );
    }
    await database().sql.exec('ANALYZE "Account"');
  }, 120_000);

  /** What ILIKE on the names counts, read directly. */
  const expected = async (term: string) => {
    const pattern = `%${term.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
    const [row] = await sql<{ n: number }>(
      `SELECT count(*)::int AS n FROM "Account" WHERE "parentId" = $1 AND (username ILIKE $2 OR email ILIKE $2)`,
      [org.parent.id, pattern],
    );
    return row!.n;
  };
  const page = async (query: string) => {
    const answer = await rest(server(), `/auth/child-accounts?${query}`, { token });
    expect(answer.status).toBe(200);
    return answer.body.data.data as {
      accounts: { username: string; email: string }[];
      stats: { total: number; active: number };
      pagination: { hasMore: boolean; nextPageToken?: string };
    };
  };

  it('counts and lists exactly what ILIKE matches, rare and common, letters and signs, in any case', async () => {
    // Also the character that joins a child's names in the grams index, after a username's last
    // letter and before an e-mail's first: no name holds it, so nothing matches.
    for (const term of [
      'xq',
      'XQ',
      'q',
      'zz',
      'Z',
      '_',
      '%',
      '@',
      '.',
      'm',
      'me',
      '99',
      '7',
      '1',
      '3',
      'äö',
      'Ä',
      'ö-',
      'é',
      'n\u0001',
      '\u0001x',
    ]) {
      const inner = await page(`search=${encodeURIComponent(term)}&limit=20`);
      const total = await expected(term);
      expect(inner.stats.total, term).toBe(total);
      expect(inner.accounts.length, term).toBe(Math.min(total, 20));
      for (const account of inner.accounts)
        expect(`${account.username}\n${account.email}`.toLowerCase(), term).toContain(term.toLowerCase());
    }
    expect((await page('search=xq')).accounts.map((a) => a.username)).toEqual(['Xq_one']);
    expect((await page('search=%25')).accounts.map((a) => a.email)).toEqual(['x%y@odd.example']);
    expect((await page('search=%C3%A4%C3%B6')).accounts.map((a) => a.username)).toEqual(['ÄÖ-three']);
  });

  it('pages a rare short term by keyset to its end, newest first, with Relay page info and a date range', async () => {
    const seen: string[] = [];
    let after: string | undefined;
    do {
      const inner = await page(`search=zz&limit=1${after ? `&lastKey=${encodeURIComponent(after)}` : ''}`);
      expect(inner.stats.total).toBe(3);
      seen.push(...inner.accounts.map((a) => a.username));
      after = inner.pagination.hasMore ? inner.pagination.nextPageToken : undefined;
    } while (after);
    expect(seen).toEqual(['zz-two', 'ÄÖ-three', 'zzfive']);

    const first = await server().graphql<any>(
      '{ childAccounts(search: "zz", first: 1) { edges { cursor node { username } } pageInfo { hasNextPage hasPreviousPage } } }',
      { token },
    );
    const cursor = first.data.childAccounts.edges[0].cursor;
    const second = await server().graphql<any>(
      `{ childAccounts(search: "zz", first: 1, after: "${cursor}") { edges { node { username } } pageInfo { hasNextPage hasPreviousPage } } }`,
      { token },
    );
    expect(second.data.childAccounts).toEqual({
      edges: [{ node: { username: 'ÄÖ-three' } }],
      pageInfo: { hasNextPage: true, hasPreviousPage: true },
    });

    const from = new Date(now.getTime() - 30 * DAY).toISOString().slice(0, 10);
    const ranged = await page(`search=zz&startDate=${from}`);
    expect(ranged.accounts.map((a) => a.username)).toEqual(['zz-two', 'ÄÖ-three']);
    expect(ranged.stats.total).toBe(2);
  });

  it.runIf(testMode === 'postgres')(
    'PostgreSQL looks a rare short term up in the grams index at this size, as at a million children',
    async () => {
      const filters = filterSql(org.parent.id, 'xq', {});
      const params = [...filters.params];
      const where = filters.lookupWhere(params);
      const [plan] = await sql<{ 'QUERY PLAN': unknown }>(
        `EXPLAIN (FORMAT JSON) SELECT id FROM "Account" WHERE ${where}`,
        params,
      );
      expect(JSON.stringify(plan!['QUERY PLAN'])).toContain('Account_parentId_search_grams_idx');
    },
  );
});
