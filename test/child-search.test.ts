import { beforeAll, describe, expect, it } from 'vitest';
import { createOrganization, tokenFor, type BuiltOrganization } from './helpers/builders.js';
import { rest, useServer, type RestResult } from './helpers/app.js';
import { testMode, useTestDatabase } from './helpers/database.js';

/*
 * The child list's search reads Account through its trigram indexes, and its counts are kept
 * current from the change feed. Whatever another service does to Account rows with plain SQL, the
 * search and the counts answer as if they read Account at that moment.
 */

const now = new Date('2026-06-15T12:00:00.000Z');
const DAY = 86_400_000;

describe(`child search follows Account (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database, { now: () => now });
  let org: BuiltOrganization;
  let other: BuiltOrganization;
  let token: string;
  let otherToken: string;
  const sql = (text: string, params: unknown[] = []) => database().sql.query(text, params);

  beforeAll(async () => {
    org = await createOrganization(database());
    other = await createOrganization(database());
    token = await tokenFor(org.parent, org, { now });
    otherToken = await tokenFor(other.parent, other, { now });
    // One multi-row INSERT, as a bulk import would write them.
    await sql(
      `INSERT INTO "Account" (id, type, "parentId", username, email, "publicKey", "createdAt", "lastLogin")
       SELECT 'USR_cs' || i, 'child', $1, 'Zebra' || i, 'z' || i || '@Stripes.example', 'APK_cs' || i || '_' || i,
              $2::timestamptz + i * interval '1 day', CASE WHEN i % 2 = 0 THEN $3::timestamptz END
       FROM generate_series(1, 6) i`,
      [org.parent.id, new Date('2026-01-01T00:00:00.000Z'), new Date(now.getTime() - DAY)],
    );
  });

  /** Asks until the answer satisfies `expected` (the counts cache learns of changes by announcement). */
  async function search(query: string, expected: (inner: any) => boolean, who = token): Promise<any> {
    let last: RestResult | undefined;
    for (const started = performance.now(); performance.now() - started < 2000;) {
      last = await rest(server(), `/auth/child-accounts?${query}`, { token: who });
      expect(last.status).toBe(200);
      if (expected(last.body.data.data)) return last.body.data.data;
    }
    expect.fail(`never satisfied: ${query} -> ${last?.text}`);
  }
  const names = (inner: any) => inner.accounts.map((a: any) => a.username);

  it('finds inserted children case-insensitively, in any case of the term, with the names as stored', async () => {
    const inner = await search('search=zEbRa', (i) => i.accounts.length === 6);
    expect(names(inner)).toEqual(['Zebra6', 'Zebra5', 'Zebra4', 'Zebra3', 'Zebra2', 'Zebra1']);
    expect(inner.stats).toEqual({ total: 6, active: 3 });
    await search('search=STRIPES', (i) => i.stats.total === 6);
  });

  it('follows renames, logins, re-dating, moves to another parent and deletions', async () => {
    await sql(`UPDATE "Account" SET username = 'Okapi1' WHERE id = 'USR_cs1'`);
    await search('search=zebra', (i) => i.stats.total === 5 && !names(i).includes('Zebra1'));
    expect(names(await search('search=okapi', (i) => i.stats.total === 1))).toEqual(['Okapi1']);

    await sql(`UPDATE "Account" SET "lastLogin" = $1 WHERE id IN ('USR_cs3', 'USR_cs5')`, [
      new Date(now.getTime() - 2 * DAY),
    ]);
    await search('search=zebra', (i) => i.stats.total === 5 && i.stats.active === 5);

    await sql(`UPDATE "Account" SET "createdAt" = $1 WHERE id = 'USR_cs2'`, [new Date('2026-03-01T00:00:00.000Z')]);
    await search('search=zebra', (i) => names(i)[0] === 'Zebra2');
    await search(
      'search=zebra&startDate=2026-03-01&endDate=2026-03-01',
      (i) => i.stats.total === 1 && names(i)[0] === 'Zebra2',
    );

    await sql(`UPDATE "Account" SET "parentId" = $1 WHERE id = 'USR_cs4'`, [other.parent.id]);
    await search('search=zebra', (i) => i.stats.total === 4 && !names(i).includes('Zebra4'));
    await search('search=zebra', (i) => i.stats.total === 1 && names(i)[0] === 'Zebra4', otherToken);

    await sql(`DELETE FROM "Account" WHERE id = 'USR_cs6'`);
    await search('search=zebra', (i) => i.stats.total === 3 && !names(i).includes('Zebra6'));
  });

  it("keeps each parent's number of children exact through additions, removals and moves, counted once", async () => {
    const counted = async (parentId: string) =>
      (await sql(`SELECT count(*)::int AS n FROM "Account" WHERE "parentId" = $1`, [parentId]))[0]!.n as number;
    // Read once, so that the count is cached and then kept in place as children come and go.
    await search('limit=1', (i) => typeof i.stats.total === 'number');
    await sql(
      `INSERT INTO "Account" (id, type, "parentId", username, email, "publicKey") VALUES
         ('USR_cn1', 'child', $1, 'n1', 'n1@example.com', 'APK_cn1_1'), ('USR_cn2', 'child', $1, 'n2', 'n2@example.com', 'APK_cn2_2'),
         ('USR_cn3', 'child', $1, 'n3', 'n3@example.com', 'APK_cn3_3')`,
      [org.parent.id],
    );
    await sql(`DELETE FROM "Account" WHERE id = 'USR_cn1'`);
    await sql(`UPDATE "Account" SET "parentId" = $1 WHERE id = 'USR_cn2'`, [other.parent.id]);
    const mine = await counted(org.parent.id);
    const theirs = await counted(other.parent.id);
    await search('limit=1', (i) => i.stats.total === mine);
    await search('limit=1', (i) => i.stats.total === theirs, otherToken);
    // The profile's and the credit analysis's totals are the same count.
    const profile = await rest(server(), '/auth/user-profile', { token });
    expect(profile.body.data.user.totalChildAccounts).toBe(mine);
    const analysis = await rest(server(), '/parent/credit-analysis', { token });
    expect(analysis.status).toBe(200);
    expect(JSON.stringify(analysis.body)).toContain(`"totalChildAccounts":${mine}`);
  });

  it('matches non-ASCII letters in either case, and %, _ and \\ only as themselves', async () => {
    await sql(
      `INSERT INTO "Account" (id, type, "parentId", username, email, "publicKey") VALUES
         ('USR_csu1', 'child', $1, 'ÉLODIE_x', 'e1@example.com', 'APK_csu1_1'),
         ('USR_csu2', 'child', $1, 'elodie-y', '100%real@example.com', 'APK_csu2_2'),
         ('USR_csu3', 'child', $1, 'back\\slash', 'e3@example.com', 'APK_csu3_3')`,
      [org.parent.id],
    );
    expect(names(await search('search=élodie', (i) => i.stats.total === 1))).toEqual(['ÉLODIE_x']);
    expect(names(await search(`search=${encodeURIComponent('E_X')}`, (i) => i.stats.total === 1))).toEqual([
      'ÉLODIE_x',
    ]);
    expect(names(await search(`search=${encodeURIComponent('0%R')}`, (i) => i.stats.total === 1))).toEqual([
      'elodie-y',
    ]);
    expect(names(await search(`search=${encodeURIComponent('K\\S')}`, (i) => i.stats.total === 1))).toEqual([
      'back\\slash',
    ]);
    await search(`search=${encodeURIComponent('e_y')}`, (i) => i.stats.total === 0);
  });
  it("pages a large parent's search the same whether it walks the children or looks the matches up", async () => {
    // 1,200 children of one parent: "mid" in one name of 60, "rare" in five (most beyond the first
    // 500 the page walks before it looks matches up), "common" in one of three (in capitals in
    // every other one: counting a term this common scans the children, and a name matched as
    // stored must not be the only one found), "qz" (too short for the trigram indexes) in four,
    // "early" in the oldest 300 (once counted, a page walks 900 newer children to reach them),
    // one registration a minute, some at the same minute.
    const big = await createOrganization(database());
    const bigToken = await tokenFor(big.parent, big, { now });
    await sql(
      `INSERT INTO "Account" (id, type, "parentId", username, email, "publicKey", "createdAt")
       SELECT 'USR_sp' || i, 'child', $1,
              CASE WHEN i IN (3, 610, 777, 901, 1190) THEN 'Rare' || i WHEN i % 60 = 0 THEN 'Mid' || i ELSE 'u' || i END
                || CASE WHEN i % 6 = 0 THEN '-COMMON' WHEN i % 3 = 0 THEN '-common' ELSE '' END || CASE WHEN i IN (5, 400, 800, 1100) THEN '-qz' ELSE '' END || CASE WHEN i <= 300 THEN '-early' ELSE '' END,
              'p' || i || '@example.com', 'APK_sp' || i || '_' || i, $2::timestamptz + (i / 2) * interval '1 minute'
       FROM generate_series(1, 1200) i`,
      [big.parent.id, new Date('2025-01-01T00:00:00.000Z')],
    );
    for (const term of ['rare', 'MID', 'common', 'qz', 'early', '1', '@', 'absent']) {
      const expected = (
        await sql(
          `SELECT username FROM "Account" WHERE "parentId" = $1 AND (username ILIKE $2 OR email ILIKE $2) ORDER BY "createdAt" DESC, id DESC`,
          [big.parent.id, `%${term}%`],
        )
      ).map((row: any) => row.username);
      const seen: string[] = [];
      let query = `search=${encodeURIComponent(term)}&limit=7`;
      for (let page = 0; page < 200; page++) {
        const inner = await search(query, () => true, bigToken);
        expect(inner.stats.total).toBe(expected.length);
        seen.push(...names(inner));
        if (!inner.pagination.hasMore) break;
        query = `search=${encodeURIComponent(term)}&limit=7&lastKey=${encodeURIComponent(inner.pagination.nextPageToken)}`;
      }
      expect(seen, term).toEqual(expected);
      // Asked again, its counts known: the first page is the same, however it is read.
      const again = await search(`search=${encodeURIComponent(term)}&limit=7`, () => true, bigToken);
      expect(names(again), term).toEqual(expected.slice(0, 7));
      expect(again.stats.total).toBe(expected.length);
    }
  });
});
