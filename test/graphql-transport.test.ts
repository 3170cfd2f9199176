import { describe, expect, it, vi } from 'vitest';
import { createChild, createOrganization, tokenFor } from './helpers/builders.js';
import { useCapturedLog, useServer, type TestServer } from './helpers/app.js';
import { testMode, useTestDatabase } from './helpers/database.js';
import { operationId, STORED_OPERATIONS } from '../src/graphql/operations.js';

/*
 * Two servers that must answer alike, sent the same requests: status, headers and body bytes must
 * be equal, and so must the metrics and the request log line they leave. Twice over: the lean transport
 * against Yoga (every GraphQL request through Yoga), and compiled execution (graphql-jit, from the
 * first execution of a document) against the reference executor (graphql-js, never compiled).
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

type Sent = { method?: 'GET' | 'POST'; body?: string; query?: string; headers?: Record<string, string> };
type Answer = { status: number; headers: Record<string, string>; body: string };

/** Headers that differ between any two answers: the date, the connection, the request id. */
const PER_ANSWER = new Set(['date', 'connection', 'keep-alive', 'x-request-id']);

async function send(server: TestServer, sent: Sent, requestId: string): Promise<Answer> {
  const method = sent.method ?? 'POST';
  const response = await fetch(`${server.url}/graphql${sent.query === undefined ? '' : `?${sent.query}`}`, {
    method,
    headers: {
      ...(method === 'POST' ? { 'content-type': 'application/json' } : {}),
      'x-request-id': requestId,
      ...sent.headers,
    },
    body: method === 'POST' ? sent.body : undefined,
  });
  const headers: Record<string, string> = {};
  response.headers.forEach((value, name) => {
    if (!PER_ANSWER.has(name)) headers[name] = value;
  });
  expect(response.headers.get('x-request-id')).toBe(requestId);
  return { status: response.status, headers, body: await response.text() };
}

/** The GraphQL series of a server's metrics: requests by status and code, operations by label. */
async function graphqlSeries(server: TestServer): Promise<string[]> {
  const { text } = await server.app.metricsText();
  return text
    .split('\n')
    .filter(
      (line) =>
        (line.startsWith('api_http_requests_total{') && line.includes('route="/graphql"')) ||
        line.startsWith('api_graphql_operation_duration_seconds_count'),
    )
    .sort();
}

// Production: introspection off, suggestions off; the limits are on everywhere.
const env = { NODE_ENV: 'production', LOG_LEVEL: 'info', LOG_FORMAT: 'json', CORS_ORIGINS: 'https://app.example' };
type ServerOptions = Parameters<typeof useServer>[1];

parity('the lean transport and Yoga', { env }, { env, graphqlTransport: 'full' }, { transports: true });
parity(
  'compiled execution and the reference executor',
  { env, compileAfter: 0 },
  { env, compileAfter: Infinity },
  { transports: false },
);

function parity(title: string, first: ServerOptions, second: ServerOptions, { transports }: { transports: boolean }) {
  describe(`GraphQL: ${title} answer alike (${testMode})`, () => {
    const database = useTestDatabase();
    const lean = useServer(database, first);
    const full = useServer(database, second);
    const log = useCapturedLog();
    let sequence = 0;

    /** Sends one request to both servers and expects the same answer and the same log line. */
    async function both(sent: Sent, name: string): Promise<Answer> {
      const id = ++sequence;
      const [a, b] = [await send(lean(), sent, `lean-${id}`), await send(full(), sent, `full-${id}`)];
      expect(a, name).toEqual(b);
      expect(a.status, name).toBeLessThan(500);
      const lines = (await log.lines()).filter((line) => line.message === 'request');
      const line = (requestId: string) => {
        const found = lines.find((l) => l.requestId === requestId);
        expect(found, `${name}: log line of ${requestId}`).toBeDefined();
        const { time: _t, durationMs: _d, requestId: _r, pid: _p, hostname: _h, ...rest } = found!;
        return rest;
      };
      expect(line(`lean-${id}`), name).toEqual(line(`full-${id}`));
      return a;
    }

    it('answers the stored operations, by document and by id, by POST and by GET, for every caller', async () => {
      const org = await createOrganization(database());
      for (let i = 0; i < 3; i += 1) await createChild(database(), org.parent);
      const child = await createChild(database(), org.parent);
      const callers: Record<string, Record<string, string>> = {
        parent: { authorization: `Bearer ${await tokenFor(org.parent, org)}` },
        child: { authorization: `Bearer ${await tokenFor(child, org)}` },
        'public key': { 'x-public-key': org.parent.publicKey },
        'signed out': {},
        'bad token': { authorization: 'Bearer not.a.token' },
      };
      // Queries here; the stored subscription streams (test/live-updates.test.ts).
      for (const operation of STORED_OPERATIONS.filter((o) => !o.document.startsWith('subscription'))) {
        const byId = { extensions: { persistedQuery: { version: 1, sha256Hash: operationId(operation.document) } } };
        for (const [caller, headers] of Object.entries(callers)) {
          const name = `${operation.name}, ${caller}`;
          const answer = await both({ body: JSON.stringify({ query: operation.document }), headers }, name);
          await both({ body: JSON.stringify(byId), headers }, `${name}, by id`);
          await both(
            {
              method: 'GET',
              query: `extensions=${encodeURIComponent(JSON.stringify(byId.extensions))}`,
              headers: { ...headers, accept: 'application/json' },
            },
            `${name}, GET by id`,
          );
          await both(
            {
              method: 'GET',
              query: `query=${encodeURIComponent(operation.document)}`,
              headers: { ...headers, accept: 'application/graphql-response+json' },
            },
            `${name}, GET`,
          );
          if (caller === 'parent') expect(JSON.parse(answer.body).errors, name).toBeUndefined();
        }
      }
      expect(await graphqlSeries(lean())).toEqual(await graphqlSeries(full()));
    });

    it.runIf(transports)('takes API requests through the lean transport and leaves the rest to Yoga', async () => {
      const viaYoga = vi.spyOn(lean().app.graphql, 'serve');
      const viaFull = vi.spyOn(full().app.graphql, 'serve');
      await both({ body: JSON.stringify({ query: '{ __typename }' }) }, 'POST');
      await both(
        { method: 'GET', query: 'query=%7B__typename%7D', headers: { accept: 'application/graphql-response+json' } },
        'GET',
      );
      expect(viaYoga).not.toHaveBeenCalled();
      expect(viaFull).toHaveBeenCalledTimes(2);
      await both({ body: '[{"query": "{ __typename }"}]' }, 'a batch');
      await both(
        { body: JSON.stringify({ query: '{ __typename }' }), headers: { accept: 'text/event-stream' } },
        'an event stream',
      );
      expect(viaYoga).toHaveBeenCalledTimes(2);
    });

    it('answers every kind of error alike, for every Accept list clients send', async () => {
      const org = await createOrganization(database());
      const child = await createChild(database(), org.parent);
      const depleted = await createOrganization(database(), { organization: { creditBalance: 0 } });
      const depletedChild = await createChild(database(), depleted.parent);
      const tokens = {
        parent: await tokenFor(org.parent, org),
        child: await tokenFor(child, org),
        depletedChild: await tokenFor(depletedChild, depleted),
      };
      const cases: [string, Record<string, unknown>, string?][] = [
        [
          'profile',
          { query: '{ me { userID username accountType ... on ParentAccount { creditBalance } } }' },
          tokens.parent,
        ],
        [
          'variables',
          {
            query:
              'query Org($n: Int) { organization { organizationName } childAccounts(limit: $n) { pageInfo { hasNextPage } } }',
            variables: { n: 1 },
          },
          tokens.parent,
        ],
        [
          'operation chosen by name',
          { query: 'query A { me { userID } } query B { organization { organizationName } }', operationName: 'B' },
          tokens.parent,
        ],
        ['syntax error', { query: '{ me { userID ' }],
        ['unknown field', { query: '{ me { nope } }' }],
        ['introspection in production', { query: '{ __schema { queryType { name } } }' }],
        [
          'too deep',
          { query: '{ __schema { types { fields { type { ofType { ofType { ofType { ofType { name } } } } } } } } }' },
        ],
        ['too many aliases', { query: `{ ${Array.from({ length: 20 }, (_, i) => `a${i}: __typename`).join(' ')} }` }],
        ['too many tokens', { query: `{ ${'__typename '.repeat(1200)}}` }],
        [
          'variable of the wrong type',
          {
            query: 'query($n: Int) { childAccounts(limit: $n) { pageInfo { hasNextPage } } }',
            variables: { n: 'ten' },
          },
          tokens.parent,
        ],
        [
          'missing variable',
          { query: 'query($n: Int!) { childAccounts(limit: $n) { pageInfo { hasNextPage } } }' },
          tokens.parent,
        ],
        [
          'resolver refusal (limit out of range)',
          { query: '{ childAccounts(limit: 1000) { pageInfo { hasNextPage } } }' },
          tokens.parent,
        ],
        ['bad page token', { query: '{ childAccounts(after: "nope") { pageInfo { hasNextPage } } }' }, tokens.parent],
        ['unknown operation name', { query: 'query A { me { userID } }', operationName: 'Z' }],
        ['two operations, no name', { query: 'query A { me { userID } } query B { me { userID } }' }],
        [
          'null members',
          { query: '{ me { userID } }', variables: null, operationName: null, extensions: null },
          tokens.parent,
        ],
        ['a child asks for the parent-only list', { query: '{ childAccounts { stats { total } } }' }, tokens.child],
        ["a depleted organization's child", { query: '{ me { userID } }' }, tokens.depletedChild],
        ['signed out', { query: '{ me { userID } creditAnalysis { creditBalance } }' }],
        ['unknown stored id', { extensions: { persistedQuery: { version: 1, sha256Hash: 'f'.repeat(64) } } }],
        ['neither a document nor an id', { variables: {} }],
      ];
      for (const [name, params, token] of cases) {
        for (const accept of ACCEPTS) {
          const headers = { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(accept ? { accept } : {}) };
          await both({ body: JSON.stringify(params), headers }, `${name}, Accept: ${accept}`);
        }
      }
      expect(await graphqlSeries(lean())).toEqual(await graphqlSeries(full()));
    });

    it('answers a few hundred generated selections alike', async () => {
      const org = await createOrganization(database());
      for (let i = 0; i < 4; i += 1) await createChild(database(), org.parent);
      const child = await createChild(database(), org.parent);
      const tokens = [await tokenFor(org.parent, org), await tokenFor(child, org), undefined];
      // A seeded generator: the same selections every run.
      let seed = 20261124;
      const random = (n: number) => {
        seed = (seed * 1103515245 + 12345) % 2 ** 31;
        return seed % n;
      };
      const pick = <T>(items: readonly T[], count: number): T[] =>
        Array.from({ length: count }, () => items[random(items.length)]!);
      const meFields = [
        'userID',
        'username',
        'email',
        'accountType',
        'accountStatus',
        'organizationName',
        'lastLogin',
        'createdAt',
        'signInCount',
        'parentAccount',
        '__typename',
        '... on ParentAccount { creditBalance totalChildAccounts billableChildAccounts packagesHistory { packageType price } }',
        '... on ChildAccount { parentAccount }',
        'nope',
      ];
      const roots = [
        () => `me { ${pick(meFields, 1 + random(5)).join(' ')} }`,
        () =>
          `organization { ${pick(['organizationName', 'organizationUrl', 'authUrls { signin reset }', 'credentials { publicKey jwtSecret }', 'providerASsoConfig { enabled }', 'domainRestrictionEnabled'], 1 + random(3)).join(' ')} }`,
        () =>
          `childAccounts(limit: ${random(3) === 0 ? 0 : 1 + random(5)}${random(4) === 0 ? ', search: "a"' : ''}) { ${pick(['edges { cursor node { username lastSeen } }', 'pageInfo { hasNextPage endCursor }', 'stats { total active }'], 1 + random(2)).join(' ')} }`,
        () =>
          `creditAnalysis { ${pick(['creditBalance', 'billableUsers', 'alerts { low critical depleted }', 'operationUsage { signIns socialSignIns { total } }', 'projectedMonthlyUsage', 'packageHistory { transactionId }'], 1 + random(3)).join(' ')} }`,
      ];
      for (let i = 0; i < 240; i += 1) {
        const selections = Array.from(
          { length: 1 + random(3) },
          (_, j) => `${random(3) === 0 ? `a${j}: ` : ''}${roots[random(roots.length)]!()}`,
        );
        const token = tokens[random(tokens.length)];
        const accept = ACCEPTS[random(ACCEPTS.length)];
        const query = `{ ${selections.join(' ')} }`;
        const headers = { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(accept ? { accept } : {}) };
        if (random(4) === 0)
          await both({ method: 'GET', query: `query=${encodeURIComponent(query)}`, headers }, `GET ${query}`);
        else await both({ body: JSON.stringify({ query }), headers }, query);
      }
      expect(await graphqlSeries(lean())).toEqual(await graphqlSeries(full()));
    });

    it('leaves malformed requests to Yoga, which refuses them the same way through either server', async () => {
      for (const body of [
        '{"query": 5}',
        '{"query": "{ __typename }", "variables": [1]}',
        '{"query": "{ __typename }", "extra": 1}',
        '[{"query": "{ __typename }"}]',
        '{"query": "{ __typename }"',
        '"text"',
        '',
      ]) {
        const answer = await both({ body }, body);
        expect(answer.status, body).toBe(400);
        expect(JSON.parse(answer.body).errors?.length, body).toBeGreaterThan(0);
      }
      await both(
        { method: 'GET', query: 'query=%7B__typename%7D&variables=%5B', headers: { accept: 'application/json' } },
        'GET with unparsable variables',
      );
      await both({ method: 'GET', query: '', headers: { accept: 'application/json' } }, 'GET without a query');
    });

    it('gives every answer the one CORS policy and no-store, before the pipeline and after it', async () => {
      const origin = { origin: 'https://app.example' };
      const ok = await both({ body: JSON.stringify({ query: '{ __typename }' }), headers: origin }, 'allowed origin');
      expect(ok.headers['access-control-allow-origin']).toBe('https://app.example');
      expect(ok.headers['access-control-expose-headers']).toContain('X-Request-Id');
      expect(ok.headers['vary']).toBe('Origin');
      expect(ok.headers['cache-control']).toBe('no-store');
      const other = await both(
        { body: JSON.stringify({ query: '{ __typename }' }), headers: { origin: 'https://evil.example' } },
        'another origin',
      );
      expect(other.headers['access-control-allow-origin']).toBeUndefined();
      const tooLarge = await both(
        {
          body: JSON.stringify({ query: `{ __typename } # ${'x'.repeat(200_000)}` }),
          headers: { ...origin, accept: 'application/graphql-response+json' },
        },
        'too large',
      );
      expect(tooLarge.status).toBe(413);
      expect(tooLarge.headers['content-type']).toBe('application/graphql-response+json; charset=utf-8');
      expect(tooLarge.headers['access-control-allow-origin']).toBe('https://app.example');
      expect(JSON.parse(tooLarge.body).errors[0].extensions.code).toBe('PAYLOAD_TOO_LARGE');
      // The preflight is the edge's, for Apollo Client's headers too, and browsers may keep it.
      const preflight = await fetch(`${lean().url}/graphql`, {
        method: 'OPTIONS',
        headers: {
          ...origin,
          'access-control-request-method': 'POST',
          'access-control-request-headers': 'content-type, apollographql-client-name',
        },
      });
      expect(preflight.status).toBe(204);
      expect(preflight.headers.get('access-control-allow-origin')).toBe('https://app.example');
      expect(preflight.headers.get('access-control-allow-methods')).toBe('GET, POST');
      expect(preflight.headers.get('access-control-allow-headers')).toContain('apollographql-client-name');
      expect(Number(preflight.headers.get('access-control-max-age'))).toBeGreaterThan(0);
      const refused = await fetch(`${lean().url}/graphql`, {
        method: 'OPTIONS',
        headers: { origin: 'https://evil.example', 'access-control-request-method': 'POST' },
      });
      expect(refused.headers.get('access-control-allow-origin')).toBeNull();
      expect(refused.headers.get('vary')).toBe('Origin');
    });

    it('records a refused stored operation with its code and the caller that sent it', async () => {
      const org = await createOrganization(database());
      const token = await tokenFor(org.parent, org);
      const body = JSON.stringify({ extensions: { persistedQuery: { version: 1, sha256Hash: 'e'.repeat(64) } } });
      await both({ body, headers: { authorization: `Bearer ${token}` } }, 'unknown id');
      const line = (await log.lines()).find((l) => l.message === 'request' && l.requestId === `lean-${sequence}`);
      expect(line).toMatchObject({ status: 400, code: 'PERSISTED_QUERY_NOT_FOUND', caller: 'unverified' });
      const { text } = await lean().app.metricsText();
      expect(text).toMatch(
        /api_http_requests_total\{route="\/graphql",method="POST",status="400",code="PERSISTED_QUERY_NOT_FOUND"\} [1-9]/,
      );
    });
  });
}

describe('the lean transport', () => {
  const database = useTestDatabase();
  const server = useServer(database);

  it('reads each body by its own bytes: one as long as a body sent before, with other bytes or variables, is its own request', async () => {
    const own = await createOrganization(database());
    await createChild(database(), own.parent, { username: 'bytes-1' });
    await createChild(database(), own.parent, { username: 'bytes-2' });
    const token = await tokenFor(own.parent, own);
    const post = async (body: string) =>
      (await (
        await fetch(`${server().url}/graphql`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body,
        })
      ).json()) as { data?: Record<string, any>; errors?: unknown };
    const [id, email] = [
      JSON.stringify({ query: '{ me { userID } }' }),
      JSON.stringify({ query: '{ me { email  } }' }),
    ];
    const page = (n: number) =>
      JSON.stringify({
        query: 'query Page($n: Int) { childAccounts(first: $n) { edges { node { username } } } }',
        variables: { n },
      });
    expect(email.length).toBe(id.length);
    expect(page(1).length).toBe(page(2).length);
    for (let i = 0; i < 3; i++) {
      expect(await post(id)).toEqual({ data: { me: { userID: own.parent.id } } });
      expect(await post(email)).toEqual({ data: { me: { email: own.parent.email } } });
      expect((await post(page(1))).data?.childAccounts.edges).toHaveLength(1);
      expect((await post(page(2))).data?.childAccounts.edges).toHaveLength(2);
    }
  });
});
