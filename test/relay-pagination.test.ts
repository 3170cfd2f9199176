import { ApolloClient, HttpLink, InMemoryCache, gql } from '@apollo/client';
import { relayStylePagination } from '@apollo/client/utilities';
import { describe, expect, it } from 'vitest';
import { createChild, createOrganization, tokenFor, type BuiltOrganization } from './helpers/builders.js';
import { useServer } from './helpers/app.js';
import { testMode, useTestDatabase } from './helpers/database.js';

const now = new Date('2026-06-11T06:00:00.000Z');

type Page = {
  childAccounts: {
    edges: { cursor: string; node: { username: string } }[];
    pageInfo: { hasNextPage: boolean; hasPreviousPage: boolean; startCursor: string | null; endCursor: string | null };
  };
};

const PAGE = `query Page($first: Int, $after: String, $last: Int, $before: String, $limit: Int, $search: String) {
  childAccounts(first: $first, after: $after, last: $last, before: $before, limit: $limit, search: $search) {
    edges { cursor node { username } }
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
  }
}`;

describe(`Relay paging of the child list (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database, { now: () => now });

  /** A parent with `count` children registered a minute apart: child names newest first. */
  async function organizationWith(
    count: number,
  ): Promise<{ built: BuiltOrganization; token: string; newestFirst: string[] }> {
    const built = await createOrganization(database());
    const names: string[] = [];
    for (let i = 0; i < count; i++) {
      const child = await createChild(database(), built.parent, {
        createdAt: new Date(Date.UTC(2026, 0, 1) + i * 60_000),
      });
      names.push(child.username);
    }
    return { built, token: await tokenFor(built.parent, built, { now }), newestFirst: names.reverse() };
  }

  const page = async (token: string, variables: Record<string, unknown>) => {
    const answer = await server().graphql<Page>(PAGE, { token, variables });
    return answer;
  };

  it('first/after and last/before walk the same keyset both ways, with Relay page info', async () => {
    const { token, newestFirst } = await organizationWith(7);
    const first = (await page(token, { first: 3 })).data!.childAccounts;
    expect(first.edges.map((e) => e.node.username)).toEqual(newestFirst.slice(0, 3));
    expect(first.pageInfo).toMatchObject({
      hasNextPage: true,
      hasPreviousPage: false,
      startCursor: first.edges[0]!.cursor,
      endCursor: first.edges[2]!.cursor,
    });
    const second = (await page(token, { first: 3, after: first.pageInfo.endCursor })).data!.childAccounts;
    expect(second.edges.map((e) => e.node.username)).toEqual(newestFirst.slice(3, 6));
    expect(second.pageInfo).toMatchObject({ hasNextPage: true, hasPreviousPage: true });
    // Back from the second page's start: the first page again.
    const back = (await page(token, { last: 3, before: second.pageInfo.startCursor })).data!.childAccounts;
    expect(back.edges.map((e) => e.node.username)).toEqual(newestFirst.slice(0, 3));
    expect(back.pageInfo).toMatchObject({ hasPreviousPage: false, hasNextPage: true });
    // `last` alone: the end of the list, still newest first.
    const tail = (await page(token, { last: 2 })).data!.childAccounts;
    expect(tail.edges.map((e) => e.node.username)).toEqual(newestFirst.slice(5));
    expect(tail.pageInfo).toMatchObject({ hasPreviousPage: true, hasNextPage: false });
    // Both cursors: the children strictly between them.
    const between = (await page(token, { first: 10, after: first.edges[0]!.cursor, before: second.edges[2]!.cursor }))
      .data!.childAccounts;
    expect(between.edges.map((e) => e.node.username)).toEqual(newestFirst.slice(1, 5));
    // `limit` keeps answering as before.
    const legacy = (await page(token, { limit: 4 })).data!.childAccounts;
    expect(legacy.edges.map((e) => e.node.username)).toEqual(newestFirst.slice(0, 4));
    expect((await page(token, {})).data!.childAccounts.edges).toHaveLength(7);
  });

  it('refuses a mix of sizes, a size out of range and a foreign cursor with the list errors', async () => {
    const { built, token } = await organizationWith(2);
    const code = async (variables: Record<string, unknown>) =>
      (await page(token, variables)).errors?.map((e) => e.extensions?.code);
    expect(await code({ first: 2, last: 2 })).toEqual(['INVALID_LIMIT']);
    expect(await code({ first: 2, limit: 2 })).toEqual(['INVALID_LIMIT']);
    expect(await code({ last: 0 })).toEqual(['INVALID_LIMIT']);
    expect(await code({ last: 101 })).toEqual(['INVALID_LIMIT']);
    expect(await code({ last: 1, before: 'forged' })).toEqual(['INVALID_PAGINATION_TOKEN']);
    const { endCursor } = (await page(token, { first: 1 })).data!.childAccounts.pageInfo;
    // A cursor of one list continues only that list.
    expect(await code({ last: 1, before: endCursor, search: 'child' })).toEqual(['INVALID_PAGINATION_TOKEN']);
    const other = await organizationWith(1);
    expect((await page(other.token, { last: 1, before: endCursor })).errors?.map((e) => e.extensions?.code)).toEqual([
      'INVALID_PAGINATION_TOKEN',
    ]);
    const child = await createChild(database(), built.parent);
    expect(
      (await page(await tokenFor(child, built, { now }), { last: 1 })).errors?.map((e) => e.extensions?.code),
    ).toEqual(['UNAUTHORIZED_ACCESS']);
  });

  it("Apollo Client's relayStylePagination pages to the end both ways, unmodified", async () => {
    const { token, newestFirst } = await organizationWith(23);
    const client = () =>
      new ApolloClient({
        link: new HttpLink({ uri: `${server().url}/graphql`, headers: { authorization: `Bearer ${token}` } }),
        cache: new InMemoryCache({
          typePolicies: {
            Query: { fields: { childAccounts: relayStylePagination(['search', 'startDate', 'endDate']) } },
          },
        }),
      });
    const query = gql(PAGE);

    /** Watches the query as a list view does, calling fetchMore with `more` until it says no more. */
    async function pageThrough(
      variables: Record<string, unknown>,
      more: (info: Page['childAccounts']['pageInfo']) => Record<string, unknown> | undefined,
    ) {
      const apollo = client();
      const watched = apollo.watchQuery<Page>({ query, variables });
      const subscription = watched.subscribe(() => {});
      // What the list view shows: the cache's merged pages.
      const shown = () => apollo.readQuery<Page>({ query, variables })?.childAccounts;
      try {
        await expect.poll(() => shown() !== undefined).toBe(true);
        let pages = 1;
        for (let next = more(shown()!.pageInfo); next; next = more(shown()!.pageInfo)) {
          await watched.fetchMore({ variables: next });
          pages += 1;
          expect(pages).toBeLessThan(10);
        }
        return { pages, names: shown()!.edges.map((e) => e.node.username) };
      } finally {
        subscription.unsubscribe();
      }
    }
    expect(
      await pageThrough({ first: 5 }, (info) => (info.hasNextPage ? { first: 5, after: info.endCursor } : undefined)),
    ).toEqual({ pages: 5, names: newestFirst });
    expect(
      await pageThrough({ last: 5 }, (info) =>
        info.hasPreviousPage ? { last: 5, before: info.startCursor } : undefined,
      ),
    ).toEqual({ pages: 5, names: newestFirst });
  });
});
