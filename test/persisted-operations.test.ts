import { readFileSync } from 'node:fs';
import { buildSchema, parse, validate } from 'graphql';
import { describe, expect, it } from 'vitest';
import { operationId, persistedOperationsManifest, STORED_OPERATIONS } from '../src/graphql/operations.js';
import { DEFAULT_REGISTRATION_BUDGET } from '../src/graphql/persisted.js';
import { possibleTypes } from '../src/graphql/schema.js';
import { createChild, createOrganization, tokenFor } from './helpers/builders.js';
import { useServer, type TestServer } from './helpers/app.js';
import { testMode, useTestDatabase } from './helpers/database.js';

type Answer = {
  status: number;
  body: { data?: Record<string, any>; errors?: { message: string; extensions?: { code?: string } }[] };
};

/** A POST /graphql with any body, as a first-party client sends a stored operation's id. */
async function post(server: TestServer, body: Record<string, unknown>, token: string): Promise<Answer> {
  const response = await fetch(`${server.url}/graphql`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/graphql-response+json',
      authorization: `Bearer ${token}`,
    },
    body: JSON.stringify(body),
  });
  return { status: response.status, body: (await response.json()) as Answer['body'] };
}

const stored = (name: string) => STORED_OPERATIONS.find((o) => o.name === name)!;
const byId = (name: string, variables: Record<string, unknown> = {}) => ({
  operationName: name,
  variables,
  extensions: { persistedQuery: { version: 1, sha256Hash: operationId(stored(name).document) } },
});

describe('stored operations in the repository', () => {
  it("possible-types.json is the schema's interface map, as npm run schema:print writes it", () => {
    const written = JSON.parse(readFileSync(new URL('../src/graphql/possible-types.json', import.meta.url), 'utf8'));
    expect(written).toEqual(possibleTypes());
    expect(written.Account).toEqual(['ChildAccount', 'ParentAccount']);
    expect(written.Node).toEqual(['ChildAccount', 'Organization', 'ParentAccount']);
  });

  it('are each valid against the schema, and persisted-operations.json lists exactly them', () => {
    const schema = buildSchema(readFileSync(new URL('../schema.graphql', import.meta.url), 'utf8'));
    for (const operation of STORED_OPERATIONS)
      expect(validate(schema, parse(operation.document)), operation.name).toEqual([]);
    const manifest = JSON.parse(
      readFileSync(new URL('../src/graphql/persisted-operations.json', import.meta.url), 'utf8'),
    );
    expect(manifest, 'run npm run schema:print').toEqual(persistedOperationsManifest());
    expect(new Set(manifest.map((m: { id: string }) => m.id)).size).toBe(STORED_OPERATIONS.length);
  });
});

describe(`persisted operations (${testMode})`, () => {
  const database = useTestDatabase();
  const open = useServer(database);
  const strict = useServer(database, { env: { GRAPHQL_PERSISTED_ONLY: 'true' } });
  const yoga = useServer(database, { graphqlTransport: 'full' });

  it('by default, a stored id and an arbitrary document both run, with the same answer', async () => {
    const org = await createOrganization(database());
    const token = await tokenFor(org.parent, org);
    const viaId = await post(open(), byId('CreditAnalysis'), token);
    expect(viaId.status).toBe(200);
    expect(viaId.body.errors).toBeUndefined();
    const viaDocument = await post(open(), { query: stored('CreditAnalysis').document }, token);
    expect(viaDocument.body).toEqual(viaId.body);
    expect(viaId.body.data!.creditAnalysis.creditBalance).toBe(org.organization.creditBalance);
  });

  it('GRAPHQL_PERSISTED_ONLY refuses an arbitrary document, even one equal to a stored one, and runs stored ones', async () => {
    const org = await createOrganization(database());
    const child = await createChild(database(), org.parent);
    const token = await tokenFor(org.parent, org);
    for (const query of ['{ me { userID } }', stored('Me').document]) {
      const refused = await post(strict(), { query }, token);
      expect(refused.status).toBe(400);
      expect(refused.body.data).toBeUndefined();
      expect(refused.body.errors?.[0]?.extensions?.code).toBe('PERSISTED_QUERY_ONLY');
    }
    const me = await post(strict(), byId('Me'), token);
    expect(me.status).toBe(200);
    expect(me.body.data!.me).toMatchObject({ userID: org.parent.id, accountType: 'parent' });
    const page = await post(strict(), byId('ChildAccounts', { search: child.username }), token);
    expect(page.body.data!.childAccounts.edges).toEqual([
      expect.objectContaining({ node: expect.objectContaining({ username: child.username }) }),
    ]);
    // Authorization still applies to stored operations.
    const childToken = await tokenFor(child, org);
    const denied = await post(strict(), byId('CreditAnalysis'), childToken);
    expect(denied.body.errors?.[0]?.extensions?.code).toBe('UNAUTHORIZED_ACCESS');
  });

  it("a client's own hash is registered only when it is its document's, and never in the stored-only mode", async () => {
    const org = await createOrganization(database());
    const token = await tokenFor(org.parent, org);
    const query = `{ me { userID } }`;
    const hash = operationId(query);
    const ask = (target: TestServer, body: Record<string, unknown>) =>
      post(
        target,
        { ...body, extensions: { persistedQuery: { version: 1, sha256Hash: body['hash'] ?? hash } }, hash: undefined },
        token,
      );
    expect((await ask(open(), {})).body.errors?.[0]?.extensions?.code).toBe('PERSISTED_QUERY_NOT_FOUND');
    const wrong = await ask(open(), { query, hash: operationId('{ me { email } }') });
    expect([wrong.status, wrong.body.errors?.[0]?.extensions?.code]).toEqual([400, 'PERSISTED_QUERY_HASH_MISMATCH']);
    expect((await ask(open(), {})).body.errors?.[0]?.extensions?.code).toBe('PERSISTED_QUERY_NOT_FOUND');
    expect((await ask(open(), { query })).body.data?.me.userID).toBe(org.parent.id);
    expect((await ask(open(), {})).body.data?.me.userID).toBe(org.parent.id);
    expect((await ask(strict(), { query })).body.errors?.[0]?.extensions?.code).toBe('PERSISTED_QUERY_ONLY');
    expect((await ask(strict(), {})).body.errors?.[0]?.extensions?.code).toBe('PERSISTED_QUERY_NOT_FOUND');
  });

  for (const [transport, server] of [
    ['lean', open],
    ['Yoga', yoga],
  ] as const) {
    it(`(${transport} transport) registers a document only for a caller whose credential verified, within its budget, counted in /metrics`, async () => {
      const org = await createOrganization(database());
      const [parentToken, childToken] = [
        await tokenFor(org.parent, org),
        await tokenFor(await createChild(database(), org.parent), org),
      ];
      const registrations = async () =>
        Object.fromEntries(
          [
            ...(await server().app.metricsText()).text.matchAll(
              /^api_graphql_registrations_total\{outcome="(\w+)"\} (\d+)$/gm,
            ),
          ].map((m) => [m[1], Number(m[2])]),
        );
      const before = await registrations();
      const offer = (query: string, token?: string) =>
        fetch(`${server().url}/graphql`, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            accept: 'application/json',
            ...(token ? { authorization: `Bearer ${token}` } : {}),
          },
          body: JSON.stringify({
            query,
            extensions: { persistedQuery: { version: 1, sha256Hash: operationId(query) } },
          }),
        });
      const known = async (query: string, token: string) =>
        (
          await post(
            server(),
            { extensions: { persistedQuery: { version: 1, sha256Hash: operationId(query) } } },
            token,
          )
        ).body.errors?.[0]?.extensions?.code !== 'PERSISTED_QUERY_NOT_FOUND';
      // No credential, a forged one, and a document that asks for nothing a credential guards.
      const anonymous = [
        `{ me { userID } } # ${transport} anonymous`,
        `{ me { email } } # ${transport} forged`,
        `{ __typename } # ${transport} typename`,
      ];
      expect((await offer(anonymous[0]!)).status).toBeLessThan(500);
      await offer(anonymous[1]!, 'forged.token.value');
      expect((await offer(anonymous[2]!)).status).toBe(200);
      for (const query of anonymous) expect(await known(query, parentToken), query).toBe(false);
      // A verified caller registers, up to its budget a window; another credential has its own.
      const { perCredential } = DEFAULT_REGISTRATION_BUDGET;
      const documents = Array.from(
        { length: perCredential + 1 },
        (_, i) => `query Q${i} { me { userID } } # ${transport}`,
      );
      for (const query of documents) expect((await offer(query, parentToken)).status).toBe(200);
      expect(await known(documents[0]!, parentToken)).toBe(true);
      expect(await known(documents[perCredential - 1]!, parentToken)).toBe(true);
      expect(await known(documents[perCredential]!, parentToken)).toBe(false);
      // Offering a document already registered spends nothing.
      const childQuery = `{ me { userID } } # ${transport} child`;
      expect((await offer(childQuery, childToken)).status).toBe(200);
      expect(await known(childQuery, childToken)).toBe(true);
      const after = await registrations();
      expect((after['registered'] ?? 0) - (before['registered'] ?? 0)).toBe(perCredential + 1);
      expect((after['unverified'] ?? 0) - (before['unverified'] ?? 0)).toBe(3);
      expect((after['over_budget'] ?? 0) - (before['over_budget'] ?? 0)).toBe(1);
    });
  }

  it('an unknown or malformed id is a 400 with a code, not a 500', async () => {
    const org = await createOrganization(database());
    const token = await tokenFor(org.parent, org);
    for (const sha256Hash of ['0'.repeat(64), 'x'.repeat(10_000)]) {
      const answer = await post(strict(), { extensions: { persistedQuery: { version: 1, sha256Hash } } }, token);
      expect(answer.status).toBe(400);
      expect(answer.body.errors?.[0]?.extensions?.code).toBe('PERSISTED_QUERY_NOT_FOUND');
    }
    const nothing = await post(strict(), {}, token);
    expect(nothing.status).toBe(400);
    expect(nothing.body.errors?.[0]?.extensions?.code).toBe('BAD_REQUEST');
  });
});
