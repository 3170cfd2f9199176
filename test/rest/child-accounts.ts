import { beforeAll, describe, expect, it } from 'vitest';
import { createChild, createOrganization, tokenFor, type BuiltOrganization } from '../helpers/builders.js';
import { expectError, rest, useServer } from '../helpers/app.js';
import { testMode, useSharedDatabase } from '../helpers/database.js';

const PATH = '/auth/child-accounts';
const now = new Date('2026-06-15T12:00:00.000Z');
const DAY = 86_400_000;

describe(`GET ${PATH} (${testMode})`, () => {
  const database = useSharedDatabase();
  const server = useServer(database, { now: () => now });
  let org: BuiltOrganization;
  let token: string;

  beforeAll(async () => {
    org = await createOrganization(database());
    token = await tokenFor(org.parent, org, { now });
    await database().prisma.account.createMany({
      data: Array.from({ length: 23 }, (_, i) => ({
        id: `USR_rest${String(i).padStart(3, '0')}`,
        type: 'child' as const,
        parentId: org.parent.id,
        username: `member${i}`,
        email: `member${i}@${i % 2 ? 'odd' : 'even'}.example.com`,
        publicKey: `APK_rest${i}_${i}`,
        createdAt: new Date(Date.parse('2026-05-01T00:00:00.000Z') + i * DAY),
        lastLogin: i % 3 === 0 ? null : new Date(now.getTime() - i * 2 * DAY),
      })),
    });
  });

  it('the doubled data.data envelope with stats, accounts and pagination', async () => {
    const result = await rest(server(), `${PATH}?limit=5`, { token });
    expect(result.status).toBe(200);
    expect(result.headers.get('cache-control')).toBe('private, no-cache');
    expect(Object.keys(result.body)).toEqual(['success', 'data']);
    expect(Object.keys(result.body.data)).toEqual(['data']);
    const inner = result.body.data.data;
    expect(Object.keys(inner)).toEqual(['stats', 'accounts', 'pagination']);
    const active = Array.from({ length: 23 }, (_, i) => i).filter((i) => i % 3 !== 0 && i * 2 <= 30).length;
    expect(inner.stats).toEqual({ total: 23, active });
    expect(inner.accounts).toHaveLength(5);
    expect(inner.accounts[0]).toEqual({
      username: 'member22',
      email: 'member22@even.example.com',
      lastSeen: new Date(now.getTime() - 44 * DAY).toISOString(),
      registered: '2026-05-23T00:00:00.000Z',
    });
    expect(inner.accounts[1].lastSeen).toBe(null);
    expect(Object.keys(inner.pagination)).toEqual(['limit', 'hasMore', 'nextPageToken']);
    expect(inner.pagination).toMatchObject({ limit: 5, hasMore: true, nextPageToken: expect.any(String) });
  });

  it('lastKey walks every page; the last page has no nextPageToken', async () => {
    const names: string[] = [];
    let lastKey: string | undefined;
    for (;;) {
      const result = await rest(
        server(),
        `${PATH}?limit=10${lastKey ? `&lastKey=${encodeURIComponent(lastKey)}` : ''}`,
        { token },
      );
      const inner = result.body.data.data;
      names.push(...inner.accounts.map((a: { username: string }) => a.username));
      if (!inner.pagination.hasMore) {
        expect(Object.keys(inner.pagination)).toEqual(['limit', 'hasMore']);
        break;
      }
      lastKey = inner.pagination.nextPageToken;
    }
    expect(names).toEqual(Array.from({ length: 23 }, (_, i) => `member${22 - i}`));
  });

  it('filters: search and the date bounds, with stats over the matches', async () => {
    const result = await rest(server(), `${PATH}?search=ODD&startDate=2026-05-03&endDate=2026-05-10`, { token });
    const inner = result.body.data.data;
    expect(inner.accounts.map((a: { username: string }) => a.username)).toEqual([
      'member9',
      'member7',
      'member5',
      'member3',
    ]);
    expect(inner.stats.total).toBe(4);
    expect(inner.pagination).toEqual({ limit: 50, hasMore: false });
    const unknownIgnored = await rest(server(), `${PATH}?limit=2&page=7&foo=bar`, { token });
    expect(unknownIgnored.body.data.data.accounts).toHaveLength(2);
  });

  it.each([
    ['limit=0', 'INVALID_LIMIT'],
    ['limit=101', 'INVALID_LIMIT'],
    ['limit=1.5', 'INVALID_LIMIT'],
    ['limit=abc', 'INVALID_LIMIT'],
    ['limit=', 'INVALID_LIMIT'],
    ['limit=-1', 'INVALID_LIMIT'],
    ['limit=+5', 'INVALID_LIMIT'],
    ['limit=%205', 'INVALID_LIMIT'],
    ['limit=1e2', 'INVALID_LIMIT'],
    ['limit=0x10', 'INVALID_LIMIT'],
    ['limit=5&limit=6', 'INVALID_LIMIT'],
    ['startDate=2024-02-30', 'INVALID_DATE_FORMAT'],
    ['startDate=2023-02-29', 'INVALID_DATE_FORMAT'],
    ['endDate=31-05-2024', 'INVALID_DATE_FORMAT'],
    ['endDate=tomorrow', 'INVALID_DATE_FORMAT'],
    ['startDate=', 'INVALID_DATE_FORMAT'],
    ['startDate=2024-06-02&endDate=2024-06-01', 'INVALID_DATE_FORMAT'],
    ['startDate=2024-01-01&startDate=2024-01-02', 'INVALID_DATE_FORMAT'],
    ['endDate=12.5', 'INVALID_DATE_FORMAT'],
    [`search=${'a'.repeat(201)}`, 'INVALID_SEARCH'],
    ['search=a&search=b', 'INVALID_SEARCH'],
    ['search=%00', 'INVALID_SEARCH'],
    ['lastKey=garbage', 'INVALID_PAGINATION_TOKEN'],
    ['lastKey=', 'INVALID_PAGINATION_TOKEN'],
    ['lastKey=a.b', 'INVALID_PAGINATION_TOKEN'],
    ['lastKey=x&lastKey=y', 'INVALID_PAGINATION_TOKEN'],
  ])('?%s: 400 %s with a message', async (query, code) => {
    const result = await rest(server(), `${PATH}?${query}`, { token });
    expectError(result, 400, code);
    expect(result.body.error.message.length).toBeGreaterThan(10);
  });

  it('says which date is wrong', async () => {
    const result = await rest(server(), `${PATH}?endDate=2024-02-30`, { token });
    expect(result.body.error.message).toMatch(/^endDate/);
  });

  it("another parent's token is refused", async () => {
    const other = await createOrganization(database());
    await createChild(database(), other.parent);
    await createChild(database(), other.parent);
    const foreign = (await rest(server(), `${PATH}?limit=1`, { token: await tokenFor(other.parent, other, { now }) }))
      .body.data.data.pagination.nextPageToken;
    expectError(
      await rest(server(), `${PATH}?lastKey=${encodeURIComponent(foreign)}`, { token }),
      400,
      'INVALID_PAGINATION_TOKEN',
    );
  });

  it('auth: no token 401 UNAUTHORIZED, a child 401 UNAUTHORIZED_ACCESS', async () => {
    expectError(await rest(server(), PATH), 401, 'UNAUTHORIZED');
    const child = await createChild(database(), org.parent);
    expectError(await rest(server(), PATH, { token: await tokenFor(child, org, { now }) }), 401, 'UNAUTHORIZED_ACCESS');
    await database().prisma.account.delete({ where: { id: child.id } });
  });
});
