import { beforeAll, describe, expect, it } from 'vitest';
import { createChild, createOrganization, tokenFor, type BuiltOrganization } from '../helpers/builders.js';
import { useServer } from '../helpers/app.js';
import { testMode, useSharedDatabase } from '../helpers/database.js';

const DAY = 86_400_000;
const now = new Date('2026-06-15T12:00:00.000Z');

type Page = {
  childAccounts: {
    edges: { cursor: string; node: { username: string; email: string; lastSeen: string | null; registered: string } }[];
    pageInfo: { hasNextPage: boolean; endCursor: string | null };
    stats?: { total: number; active: number };
  };
};

const QUERY = `query($search: String, $startDate: String, $endDate: String, $limit: Int, $after: String) {
  childAccounts(search: $search, startDate: $startDate, endDate: $endDate, limit: $limit, after: $after) {
    edges { cursor node { username email lastSeen registered } }
    pageInfo { hasNextPage endCursor }
    stats { total active }
  }
}`;

describe(`GraphQL childAccounts (${testMode})`, () => {
  const database = useSharedDatabase();
  const server = useServer(database, { now: () => now });
  let org: BuiltOrganization;
  let token: string;
  let children: { id: string; username: string; email: string; createdAt: Date; lastLogin: Date | null }[];

  beforeAll(async () => {
    org = await createOrganization(database());
    token = await tokenFor(org.parent, org, { now });
    children = Array.from({ length: 1000 }, (_, i) => ({
      id: `USR_page${String(i).padStart(4, '0')}`,
      username: i % 50 === 0 ? `Special_User%${i}` : `user${i}`,
      email: i % 3 === 0 ? `person${i}@Mail.example.com` : `person${i}@other.example.org`,
      // Every fifth pair shares a registration time, so ties must be broken by id.
      createdAt: new Date(now.getTime() - Math.floor(i / 2) * 3 * 60 * 60 * 1000),
      lastLogin: i % 4 === 0 ? null : new Date(now.getTime() - (i % 60) * DAY),
    }));
    await database().prisma.account.createMany({
      data: children.map((c) => ({
        ...c,
        type: 'child' as const,
        parentId: org.parent.id,
        publicKey: `APK_${c.id.slice(4)}_${c.createdAt.getTime()}`,
        updatedAt: c.createdAt,
      })),
    });
    const otherOrg = await createOrganization(database());
    await createChild(database(), otherOrg.parent, { username: 'user1-elsewhere' });
  });

  const ordered = () =>
    [...children].sort(
      (a, b) => b.createdAt.getTime() - a.createdAt.getTime() || (b.id < a.id ? -1 : b.id > a.id ? 1 : 0),
    );

  async function page(variables: Record<string, unknown>) {
    const result = await server().graphql<Page>(QUERY, { token, variables });
    if (result.errors)
      throw Object.assign(new Error(result.errors[0]!.message), { code: result.errors[0]!.extensions?.code });
    return result.data!.childAccounts;
  }

  async function walk(variables: Record<string, unknown>) {
    const seen: string[] = [];
    let after: string | undefined;
    for (let guard = 0; guard < 1000; guard++) {
      const p = await page({ ...variables, after });
      seen.push(...p.edges.map((e) => e.node.username));
      if (!p.pageInfo.hasNextPage) {
        // The last page: within the limit, and its end cursor there exactly when it has edges.
        expect(p.edges.length).toBeLessThanOrEqual(Number(variables.limit ?? variables.first ?? 50));
        expect(p.pageInfo.endCursor == null).toBe(p.edges.length === 0);
        return seen;
      }
      after = p.pageInfo.endCursor!;
    }
    throw new Error('no last page');
  }

  it('walking all pages with limit 7 returns each child exactly once, newest first, ties by id', async () => {
    const seen = await walk({ limit: 7 });
    expect(seen).toEqual(ordered().map((c) => c.username));
  });

  it('a page carries the list fields and stats over all matches', async () => {
    const first = await page({ limit: 3 });
    const expected = ordered().slice(0, 3);
    expect(first.edges.map((e) => e.node)).toEqual(
      expected.map((c) => ({
        username: c.username,
        email: c.email,
        lastSeen: c.lastLogin?.toISOString() ?? null,
        registered: c.createdAt.toISOString(),
      })),
    );
    const active = children.filter((c) => c.lastLogin && c.lastLogin.getTime() >= now.getTime() - 30 * DAY).length;
    expect(first.stats).toEqual({ total: 1000, active });
    expect(first.pageInfo.hasNextPage).toBe(true);
    expect(first.pageInfo.endCursor).toBe(first.edges[2]!.cursor);
  });

  it('default limit is 50', async () => {
    expect((await page({})).edges).toHaveLength(50);
  });

  it('search is a case-insensitive substring of username or email, trimmed; % and _ match themselves', async () => {
    const expectSearch = async (search: string, predicate: (c: (typeof children)[number]) => boolean) => {
      const expected = ordered()
        .filter(predicate)
        .map((c) => c.username);
      expect(await walk({ search, limit: 100 })).toEqual(expected);
      expect((await page({ search, limit: 1 })).stats!.total).toBe(expected.length);
    };
    await expectSearch('  MAIL.EXAMPLE ', (c) => c.email.toLowerCase().includes('mail.example'));
    await expectSearch('special_user%', (c) => c.username.toLowerCase().includes('special_user%'));
    await expectSearch('r%1', (c) => c.username.includes('r%1'));
    await expectSearch('_', (c) => c.username.includes('_') || c.email.includes('_'));
    await expectSearch('\\', () => false);
    expect((await page({ search: '', limit: 5 })).stats!.total).toBe(1000);
  });

  it('date bounds are inclusive, YYYY-MM-DD covers the whole UTC day, and combine with search', async () => {
    const start = '2026-05-01';
    const end = '2026-05-31';
    const from = Date.parse('2026-05-01T00:00:00.000Z');
    const to = Date.parse('2026-05-31T23:59:59.999Z');
    const inRange = (c: (typeof children)[number]) => c.createdAt.getTime() >= from && c.createdAt.getTime() <= to;
    expect(await walk({ startDate: start, endDate: end, limit: 100 })).toEqual(
      ordered()
        .filter(inRange)
        .map((c) => c.username),
    );
    const combined = await walk({
      startDate: String(from),
      endDate: '2026-05-31T23:59:59.999Z',
      search: 'mail',
      limit: 9,
    });
    expect(combined).toEqual(
      ordered()
        .filter((c) => inRange(c) && c.email.toLowerCase().includes('mail'))
        .map((c) => c.username),
    );
    const exact = ordered()[10]!;
    const single = await page({ startDate: exact.createdAt.toISOString(), endDate: String(exact.createdAt.getTime()) });
    expect(single.edges.map((e) => e.node.registered)).toEqual(
      ordered()
        .filter((c) => c.createdAt.getTime() === exact.createdAt.getTime())
        .map((c) => c.createdAt.toISOString()),
    );
  });

  it('rows inserted or deleted between pages neither repeat nor skip the rows that existed throughout', async () => {
    // An organization of its own: the rows this test deletes and adds are nobody else's.
    const own = await createOrganization(database());
    const ownToken = await tokenFor(own.parent, own, { now });
    const mine = Array.from({ length: 40 }, (_, i) => ({
      id: `USR_gap${String(i).padStart(2, '0')}`,
      username: `gap${i}`,
      email: `gap${i}@example.com`,
      createdAt: new Date(now.getTime() - (i + 1) * 60 * 60 * 1000),
    }));
    await database().prisma.account.createMany({
      data: mine.map((c) => ({
        ...c,
        type: 'child' as const,
        parentId: own.parent.id,
        publicKey: `APK_${c.id.slice(4)}_x`,
        updatedAt: c.createdAt,
      })),
    });
    const ownPage = async (variables: Record<string, unknown>) => {
      const result = await server().graphql<Page>(QUERY, { token: ownToken, variables });
      expect(result.errors).toBeUndefined();
      return result.data!.childAccounts;
    };
    const first = await ownPage({ limit: 10 });
    const victims = mine.slice(12, 15);
    await database().prisma.account.deleteMany({ where: { id: { in: victims.map((v) => v.id) } } });
    await createChild(database(), own.parent, { username: 'newcomer', createdAt: new Date(now.getTime() - 1000) });
    await createChild(database(), own.parent, { username: 'middle-newcomer', createdAt: mine[20]!.createdAt });
    const rest: string[] = first.edges.map((e) => e.node.username);
    let after: string | null = first.pageInfo.endCursor;
    while (after) {
      const p = await ownPage({ limit: 10, after });
      rest.push(...p.edges.map((e) => e.node.username));
      after = p.pageInfo.hasNextPage ? p.pageInfo.endCursor : null;
    }
    const survivors = mine.filter((c) => !victims.some((v) => v.id === c.id)).map((c) => c.username);
    expect(rest.filter((u) => u !== 'middle-newcomer')).toEqual(survivors);
    expect(new Set(rest).size).toBe(rest.length);
    expect(rest).not.toContain('newcomer');
  });

  it('tampered, malformed and foreign cursors: INVALID_PAGINATION_TOKEN', async () => {
    const { pageInfo } = await page({ limit: 2 });
    const cursor = pageInfo.endCursor!;
    const [body, mac] = cursor.split('.') as [string, string];
    const forged = Buffer.from(JSON.stringify([Date.now(), 'USR_x'])).toString('base64url');
    const other = await createOrganization(database());
    const foreignPage = await server().graphql<Page>(QUERY, {
      token: await tokenFor(other.parent, other, { now }),
      variables: { limit: 1 },
    });
    expect(foreignPage.errors).toBeUndefined();
    await createChild(database(), other.parent);
    await createChild(database(), other.parent);
    const foreign = (
      await server().graphql<Page>(QUERY, {
        token: await tokenFor(other.parent, other, { now }),
        variables: { limit: 1 },
      })
    ).data!.childAccounts.pageInfo.endCursor!;
    for (const bad of [
      `${forged}.${mac}`,
      `${body}.${mac.slice(0, -2)}AA`,
      `${body}`,
      'garbage',
      `${cursor}.x`,
      foreign,
      'x'.repeat(2000),
    ]) {
      await expect(page({ after: bad }), bad.slice(0, 30)).rejects.toMatchObject({ code: 'INVALID_PAGINATION_TOKEN' });
    }
  });

  it.each([
    [{ limit: 0 }, 'INVALID_LIMIT'],
    [{ limit: 101 }, 'INVALID_LIMIT'],
    [{ limit: -1 }, 'INVALID_LIMIT'],
    [{ search: 'x'.repeat(201) }, 'INVALID_SEARCH'],
    [{ startDate: '2024-02-30' }, 'INVALID_DATE_FORMAT'],
    [{ endDate: 'yesterday' }, 'INVALID_DATE_FORMAT'],
    [{ startDate: '2024-06-01', endDate: '2024-05-01' }, 'INVALID_DATE_FORMAT'],
  ])('refuses %o with %s', async (variables, code) => {
    await expect(page(variables)).rejects.toMatchObject({ code });
  });

  it('a search of exactly 200 characters and limits 1 and 100 are accepted', async () => {
    expect((await page({ search: 'y'.repeat(200) })).edges).toEqual([]);
    expect((await page({ limit: 1 })).edges).toHaveLength(1);
    expect((await page({ limit: 100 })).edges).toHaveLength(100);
  });
});
