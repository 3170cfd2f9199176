import { describe, expect, it } from 'vitest';
import { createOrganization, tokenFor } from './helpers/builders.js';
import { useServer } from './helpers/app.js';
import { testMode, useTestDatabase } from './helpers/database.js';

/*
 * Over HTTP, the app reads the body itself, hands the request to Yoga's Node entry and writes
 * Yoga's answer with its own framing and headers. A client must not be able to tell that apart
 * from Yoga alone: the same operations, sent over HTTP and to Yoga's own fetch entry, get the
 * same status, media type and body, for the Accept headers clients send.
 */

/** No Accept (curl, fetch), the lists of graphql-request, urql and Apollo Client, and more. */
const ACCEPTS = [
  undefined,
  'application/json',
  'application/graphql-response+json, application/json;q=0.9',
  'application/graphql-response+json, application/graphql+json, application/json, text/event-stream, multipart/mixed',
  'application/json, text/plain;q=0.1',
  '*/*',
  'text/html, application/*;q=0.8',
  'application/json;charset=latin1, application/graphql-response+json',
];

describe(`GraphQL over HTTP, both paths (${testMode})`, () => {
  const database = useTestDatabase();
  // Production: introspection off, suggestions off; the limits are on everywhere.
  const server = useServer(database, { env: { NODE_ENV: 'production' } });

  async function post(body: string, headers: Record<string, string>) {
    const response = await fetch(`${server().url}/graphql`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
    return { status: response.status, type: response.headers.get('content-type'), body: await response.text() };
  }
  /** The same request through Yoga's whole path (its fetch entry), with the context the server gives. */
  async function viaYoga(body: string, headers: Record<string, string>) {
    const response = await server().app.graphql.fetch(
      'http://localhost/graphql',
      { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body },
      { requestId: 'compare' },
    );
    return { status: response.status, type: response.headers.get('content-type'), body: await response.text() };
  }

  it('answers every kind of operation, good and bad, the same way on both paths', async () => {
    const built = await createOrganization(database());
    const token = await tokenFor(built.parent, built);
    const operations: [string, Record<string, unknown>][] = [
      ['profile', { query: '{ me { userID username accountType ... on ParentAccount { creditBalance } } }' }],
      ['organization with variables', { query: 'query Org($n: Int) { organization { organizationName } childAccounts(limit: $n) { pageInfo { hasNextPage } } }', variables: { n: 1 } }],
      ['operation chosen by name', { query: 'query A { me { userID } } query B { organization { organizationName } }', operationName: 'B' }],
      ['nested selection', { query: '{ me { ... on ParentAccount { packagesHistory { packageType } authUrls { signin } } } }' }],
      ['syntax error', { query: '{ me { userID ' }],
      ['unknown field', { query: '{ me { nope } }' }],
      ['introspection in production', { query: '{ __schema { queryType { name } } }' }],
      ['too deep', { query: '{ __schema { types { fields { type { ofType { ofType { ofType { ofType { name } } } } } } } } }' }],
      ['too many aliases', { query: `{ ${Array.from({ length: 20 }, (_, i) => `a${i}: __typename`).join(' ')} }` }],
      ['variable of the wrong type', { query: 'query($n: Int) { childAccounts(limit: $n) { pageInfo { hasNextPage } } }', variables: { n: 'ten' } }],
      ['resolver refusal (limit out of range)', { query: '{ childAccounts(limit: 1000) { pageInfo { hasNextPage } } }' }],
      ['unknown operation name', { query: 'query A { me { userID } }', operationName: 'Z' }],
      ['null members', { query: '{ me { userID } }', variables: null, operationName: null, extensions: null }],
    ];
    for (const [name, params] of operations) {
      for (const auth of [{ authorization: `Bearer ${token}` }, {}] as Record<string, string>[]) {
        for (const accept of ACCEPTS) {
          const headers = { ...auth, ...(accept ? { accept } : {}) };
          const body = JSON.stringify(params);
          const direct = await post(body, headers);
          const whole = await viaYoga(body, headers);
          expect(direct, `${name}${'authorization' in auth ? '' : ', signed out'}, Accept: ${accept}`).toEqual(whole);
          expect(direct.status, name).toBeLessThan(500);
        }
      }
    }
  });

  it('answers application/graphql-response+json with its own status rules on both paths', async () => {
    for (const query of ['{ me { userID ', '{ me { nope } }', '{ __typename }']) {
      const body = JSON.stringify({ query });
      const direct = await post(body, { accept: 'application/graphql-response+json' });
      const whole = await viaYoga(body, { accept: 'application/graphql-response+json' });
      expect(direct).toEqual(whole);
      expect(direct.type).toBe('application/graphql-response+json; charset=utf-8');
    }
    // Request errors are 400 in this media type (GraphQL over HTTP), 200 in application/json.
    expect((await post(JSON.stringify({ query: '{ me { nope } }' }), { accept: 'application/graphql-response+json' })).status).toBe(400);
    expect((await post(JSON.stringify({ query: '{ me { nope } }' }), {})).status).toBe(200);
  });

  it('gives browsers the same CORS answer on both paths', async () => {
    const body = JSON.stringify({ query: '{ __typename }' });
    const send = (accept?: string) =>
      fetch(`${server().url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', origin: 'https://app.example', ...(accept ? { accept } : {}) },
        body,
      });
    // A GET takes Yoga's whole path.
    const [direct, whole] = [await send(), await fetch(`${server().url}/graphql?query=${encodeURIComponent('{ __typename }')}`, { headers: { origin: 'https://app.example', accept: 'application/json' } })];
    for (const name of ['access-control-allow-origin', 'access-control-expose-headers', 'access-control-allow-credentials']) {
      expect(direct.headers.get(name), name).toBe(whole.headers.get(name));
    }
    expect(direct.headers.get('access-control-allow-origin')).toBe('*');
    expect(direct.headers.get('access-control-expose-headers')).toContain('X-Request-Id');
  });

  it('leaves malformed parameters to Yoga, which refuses them with 400', async () => {
    for (const body of ['{"query": 5}', '{"query": "{ __typename }", "variables": [1]}', '{"query": "{ __typename }", "extra": 1}', '[{"query": "{ __typename }"}]', '{"query": "{ __typename }"', '"text"']) {
      const answer = await post(body, {});
      expect(answer.status, body).toBe(400);
      expect(JSON.parse(answer.body).errors?.length, body).toBeGreaterThan(0);
    }
  });
});
