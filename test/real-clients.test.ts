import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { ApolloClient, HttpLink, InMemoryCache, gql } from '@apollo/client';
import { PersistedQueryLink } from '@apollo/client/link/persisted-queries';
import { Client as UrqlClient, fetchExchange, gql as urqlGql } from '@urql/core';
import { cacheExchange as graphcache } from '@urql/exchange-graphcache';
import { relayPagination } from '@urql/exchange-graphcache/extras';
import { describe, expect, it, vi } from 'vitest';
import { STORED_OPERATIONS } from '../src/graphql/operations.js';
import { createChild, createOrganization, tokenFor } from './helpers/builders.js';
import { useServer, type TestServer } from './helpers/app.js';
import { testMode, useTestDatabase } from './helpers/database.js';

/*
 * Apollo Client and urql (with its normalised cache, graphcache) against the server, configured
 * only as src/graphql/README.md's "Using Apollo Client, urql and codegen" says: the published interface map,
 * and nothing else.
 */
const possibleTypes = JSON.parse(
  readFileSync(new URL('../src/graphql/possible-types.json', import.meta.url), 'utf8'),
) as Record<string, string[]>;
const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/** fetch, recording what each request sent (its method, and whether it carried the document). */
function recordingFetch(log: { method: string; withDocument: boolean }[]): typeof fetch {
  return async (input, init) => {
    const url = new URL(String(input instanceof Request ? input.url : input));
    const method = init?.method ?? 'GET';
    const body = typeof init?.body === 'string' ? (JSON.parse(init.body) as { query?: string }) : {};
    log.push({ method, withDocument: Boolean(body.query ?? url.searchParams.get('query')) });
    return fetch(input, init);
  };
}

const ME = gql`
  query Mine {
    me {
      id
      userID
      ...ParentFields
      ... on ChildAccount {
        parentAccount
      }
    }
  }
  fragment ParentFields on ParentAccount {
    creditBalance
    totalChildAccounts
  }
`;

describe(`real GraphQL clients, unmodified (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database);
  const storedOnly = useServer(database, { env: { GRAPHQL_PERSISTED_ONLY: 'true' } });

  const apollo = (
    target: TestServer,
    token: string,
    log: { method: string; withDocument: boolean }[] = [],
    persisted = false,
  ) => {
    const http = new HttpLink({
      uri: `${target.url}/graphql`,
      headers: { authorization: `Bearer ${token}` },
      fetch: recordingFetch(log),
    });
    return new ApolloClient({
      link: persisted ? new PersistedQueryLink({ sha256 }).concat(http) : http,
      cache: new InMemoryCache({ possibleTypes }),
    });
  };

  it('Apollo Client: fragments on the interface keep their fields; accounts normalise by id, refetched by node(id)', async () => {
    const built = await createOrganization(database());
    await createChild(database(), built.parent);
    const client = apollo(server(), await tokenFor(built.parent, built));
    const { data } = await client.query<{ me: Record<string, unknown> }>({ query: ME });
    expect(data!.me).toMatchObject({
      __typename: 'ParentAccount',
      userID: built.parent.id,
      creditBalance: built.organization.creditBalance,
      totalChildAccounts: 1,
    });
    const id = data!.me['id'] as string;
    // The same account by node(id): one normalised entry, so the first query's fields are there too.
    const again = await client.query<{ node: Record<string, unknown> }>({
      query: gql`
        query Again($id: ID!) {
          node(id: $id) {
            id
            ... on Account {
              username
            }
          }
        }
      `,
      variables: { id },
    });
    expect(again.data!.node).toMatchObject({ __typename: 'ParentAccount', id, username: built.parent.username });
    const cached = client.cache.extract() as Record<string, Record<string, unknown>>;
    expect(cached[`ParentAccount:${id}`]).toMatchObject({
      userID: built.parent.id,
      username: built.parent.username,
      creditBalance: built.organization.creditBalance,
    });
    // Someone else's id: null, not an error and not their data.
    const other = await createOrganization(database());
    const foreign = await client.query<{ node: unknown }>({
      query: gql`
        query Other($id: ID!) {
          node(id: $id) {
            id
          }
        }
      `,
      variables: { id: Buffer.from(`Account:${other.parent.id}`).toString('base64') },
      fetchPolicy: 'network-only',
    });
    expect(foreign.data!.node).toBeNull();
  });

  it('Apollo Client: automatic persisted queries register once, then travel by hash alone', async () => {
    const built = await createOrganization(database());
    const token = await tokenFor(built.parent, built);
    const log: { method: string; withDocument: boolean }[] = [];
    const first = apollo(server(), token, log, true);
    expect((await first.query<{ me: { userID: string } }>({ query: ME })).data!.me.userID).toBe(built.parent.id);
    // Unknown hash, then the document with it: registered.
    expect(log.map((l) => l.withDocument)).toEqual([false, true]);
    const second = apollo(server(), token, log, true);
    await second.query({ query: ME });
    expect(log.slice(2).map((l) => l.withDocument)).toEqual([false]);
  });

  it('Apollo Client: the stored operations, as Apollo sends them, run by hash on a stored-only server with no resend', async () => {
    const built = await createOrganization(database());
    const log: { method: string; withDocument: boolean }[] = [];
    const client = apollo(storedOnly(), await tokenFor(built.parent, built), log, true);
    for (const name of ['Me', 'Organization', 'CreditAnalysis']) {
      const stored = STORED_OPERATIONS.find((o) => o.name === name)!;
      const result = await client.query({ query: gql(stored.document) });
      expect(result.error, name).toBeUndefined();
    }
    expect(log.every((l) => !l.withDocument)).toBe(true);
    expect(log).toHaveLength(3);
  });

  it('urql with graphcache: fragments on the interface, normalised by id, and relayPagination to the end', async () => {
    const built = await createOrganization(database());
    for (let i = 0; i < 12; i++)
      await createChild(database(), built.parent, { createdAt: new Date(Date.UTC(2026, 0, 1, 0, i)) });
    const client = new UrqlClient({
      url: `${server().url}/graphql`,
      fetchOptions: { headers: { authorization: `Bearer ${await tokenFor(built.parent, built)}` } },
      exchanges: [
        graphcache({ possibleTypes, resolvers: { Query: { childAccounts: relayPagination() } } }),
        fetchExchange,
      ],
    });
    const me = await client.query(ME, {}).toPromise();
    expect(me.error).toBeUndefined();
    // The parent's fragment applied, the child's did not.
    expect(me.data.me).toEqual({
      id: expect.any(String),
      userID: built.parent.id,
      creditBalance: built.organization.creditBalance,
      totalChildAccounts: 12,
    });
    const PAGE = urqlGql`query Page($after: String) { childAccounts(first: 5, after: $after) { edges { cursor node { id username } } pageInfo { hasNextPage endCursor } } }`;
    // graphcache warns (console.warn) of every object it cannot key: a listed child must have its id.
    const warnings: string[] = [];
    const spy = vi
      .spyOn(console, 'warn')
      .mockImplementation((...args: unknown[]) => void warnings.push(args.map(String).join(' ')));
    try {
      let page = await client.query(PAGE, {}).toPromise();
      let after: string | undefined;
      for (let pages = 1; page.data.childAccounts.pageInfo.hasNextPage; pages++) {
        expect(pages).toBeLessThan(5);
        after = page.data.childAccounts.pageInfo.endCursor;
        page = await client.query(PAGE, { after }).toPromise();
      }
      // relayPagination merges the pages it has seen into one list, each child once.
      const listed = page.data.childAccounts.edges.map((edge: { node: { id: string } }) => edge.node.id);
      expect(listed).toHaveLength(12);
      expect(new Set(listed).size).toBe(12);
      // The listed child's id is the one its own token's me { id } answers.
      const child = await createChild(database(), built.parent, { createdAt: new Date(Date.UTC(2025, 0, 1)) });
      const own = await server().graphql<{ me: { id: string } }>('{ me { id } }', {
        token: await tokenFor(child, built),
      });
      const all = await client
        .query(
          urqlGql`{ childAccounts(first: 20) { edges { node { id username } } } }`,
          {},
          { requestPolicy: 'network-only' },
        )
        .toPromise();
      expect(
        all.data.childAccounts.edges.find(
          (edge: { node: { username: string } }) => edge.node.username === child.username,
        ).node.id,
      ).toBe(own.data!.me.id);
    } finally {
      spy.mockRestore();
    }
    expect(warnings.filter((w) => w.includes('Invalid key'))).toEqual([]);
  });
});
