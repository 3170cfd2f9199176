import { beforeAll, describe, expect, it } from 'vitest';
import { createOrganization, tokenFor, type BuiltOrganization } from './helpers/builders.js';
import { rest, useServer, type RestResult } from './helpers/app.js';
import { testMode, useTestDatabase } from './helpers/database.js';

/*
 * The child list's search reads ChildSearch, a copy of the children's names and times that the
 * database keeps from Account. Whatever another service does to Account rows with plain SQL, the
 * search answers as if it read Account itself.
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
    for (const started = performance.now(); performance.now() - started < 2000; ) {
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

    await sql(`UPDATE "Account" SET "lastLogin" = $1 WHERE id IN ('USR_cs3', 'USR_cs5')`, [new Date(now.getTime() - 2 * DAY)]);
    await search('search=zebra', (i) => i.stats.total === 5 && i.stats.active === 5);

    await sql(`UPDATE "Account" SET "createdAt" = $1 WHERE id = 'USR_cs2'`, [new Date('2026-03-01T00:00:00.000Z')]);
    await search('search=zebra', (i) => names(i)[0] === 'Zebra2');
    await search('search=zebra&startDate=2026-03-01&endDate=2026-03-01', (i) => i.stats.total === 1 && names(i)[0] === 'Zebra2');

    await sql(`UPDATE "Account" SET "parentId" = $1 WHERE id = 'USR_cs4'`, [other.parent.id]);
    await search('search=zebra', (i) => i.stats.total === 4 && !names(i).includes('Zebra4'));
    await search('search=zebra', (i) => i.stats.total === 1 && names(i)[0] === 'Zebra4', otherToken);

    await sql(`DELETE FROM "Account" WHERE id = 'USR_cs6'`);
    await search('search=zebra', (i) => i.stats.total === 3 && !names(i).includes('Zebra6'));
  });

  it('holds exactly one lower-cased copy of every child and nothing else, after all of that', async () => {
    const diff = await sql(
      `(SELECT id, "parentId", "createdAt", "lastLogin", lower(username) AS username, lower(email) AS email FROM "Account" WHERE "parentId" IS NOT NULL
        EXCEPT SELECT id, "parentId", "createdAt", "lastLogin", username, email FROM "ChildSearch")
       UNION ALL
       (SELECT id, "parentId", "createdAt", "lastLogin", username, email FROM "ChildSearch"
        EXCEPT SELECT id, "parentId", "createdAt", "lastLogin", lower(username), lower(email) FROM "Account" WHERE "parentId" IS NOT NULL)`,
    );
    expect(diff).toEqual([]);
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
    expect(names(await search(`search=${encodeURIComponent('E_X')}`, (i) => i.stats.total === 1))).toEqual(['ÉLODIE_x']);
    expect(names(await search(`search=${encodeURIComponent('0%R')}`, (i) => i.stats.total === 1))).toEqual(['elodie-y']);
    expect(names(await search(`search=${encodeURIComponent('K\\S')}`, (i) => i.stats.total === 1))).toEqual(['back\\slash']);
    await search(`search=${encodeURIComponent('e_y')}`, (i) => i.stats.total === 0);
  });
});
