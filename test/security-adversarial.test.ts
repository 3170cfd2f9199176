import { beforeAll, describe, expect, it } from 'vitest';
import { hostileTokens } from './helpers/hostile-tokens.js';
import type { Account } from '../src/generated/prisma/client.js';
import { createChild, createOrganization, tokenFor, type BuiltOrganization } from './helpers/builders.js';
import { rest, useServer } from './helpers/app.js';
import { testMode, useTestDatabase } from './helpers/database.js';

/*
 * Hostile requests, each with the status and code it must get. None may answer 5xx, and every
 * REST error body must be the envelope; GraphQL refusals carry their code in extensions.
 */

type Case = {
  name: string;
  run: () => Promise<{ status: number; code: string | undefined; envelope: boolean }>;
  status: number;
  code: string;
};

const REST_PATHS = [
  '/auth/user-profile',
  '/auth/organization-details',
  '/auth/child-accounts',
  '/parent/credit-analysis',
];

function isEnvelope(body: any): boolean {
  return (
    body &&
    body.success === false &&
    typeof body.error?.code === 'string' &&
    typeof body.error?.message === 'string' &&
    Object.keys(body).length === 2
  );
}

describe(`adversarial requests (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database, { env: { NODE_ENV: 'production' } });
  let org: BuiltOrganization;
  let child: Account;
  const cases: Case[] = [];
  const now = () => Math.floor(Date.now() / 1000);

  const restCase = (
    name: string,
    path: string,
    options: Parameters<typeof rest>[2],
    status: number,
    code: string,
  ): Case => ({
    name,
    status,
    code,
    run: async () => {
      const r = await rest(server(), path, options);
      return { status: r.status, code: r.body?.error?.code, envelope: r.status === 200 || isEnvelope(r.body) };
    },
  });
  const gqlCase = (
    name: string,
    body: string,
    headers: Record<string, string>,
    status: number,
    code: string,
  ): Case => ({
    name,
    status,
    code,
    run: async () => {
      const response = await fetch(`${server().url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body,
      });
      const text = await response.text();
      let parsed: any;
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = undefined;
      }
      const gqlCode = parsed?.errors?.[0]?.extensions?.code ?? parsed?.error?.code;
      const shaped =
        Array.isArray(parsed?.errors) || isEnvelope(parsed) || (response.status === 200 && parsed?.data != null);
      return { status: response.status, code: gqlCode, envelope: shaped };
    },
  });

  beforeAll(async () => {
    org = await createOrganization(database());
    child = await createChild(database(), org.parent);
    const secret = org.organization.jwtSecret;
    const kid = org.parent.publicKey;
    const good = await tokenFor(org.parent, org);
    const [h, , s] = good.split('.') as [string, string, string];
    const hostile = await hostileTokens({
      secret,
      kid,
      subject: org.parent.id,
      otherSubject: child.id,
      good,
      now: now(),
    });
    for (const [name, token] of hostile) {
      // A correctly signed token for an account that does not exist is 404 (decisions §2).
      const [status, code] = name.startsWith('sub with SQL') ? [404, 'USER_NOT_FOUND'] : [401, 'UNAUTHORIZED'];
      for (const path of REST_PATHS) {
        cases.push(
          restCase(`REST ${path} token ${name}`, path, { headers: { authorization: `Bearer ${token}` } }, status, code),
        );
      }
      cases.push(
        gqlCase(
          `GraphQL me token ${name}`,
          '{"query":"{ me { userID } }"}',
          { authorization: `Bearer ${token}` },
          200,
          code,
        ),
      );
    }
    for (const scheme of ['Basic', 'Token', 'Bearer:', 'JWT', '', 'Bearer  ']) {
      cases.push(
        restCase(
          `scheme "${scheme}"`,
          '/auth/user-profile',
          {
            headers: {
              authorization:
                `${scheme} ${good}`.trim() === good ? `x ${good}` : `${scheme}${scheme ? ' ' : ''}x${good}`,
            },
          },
          401,
          'UNAUTHORIZED',
        ),
      );
    }
    cases.push(
      restCase(
        'token in the query string is ignored',
        `/auth/user-profile?token=${good}&access_token=${good}`,
        {},
        401,
        'UNAUTHORIZED',
      ),
    );
    const keys: [string, number, string][] = [
      ['APK_', 400, 'INVALID_PARENT_ACCOUNT'],
      ['APK_x', 400, 'INVALID_PARENT_ACCOUNT'],
      ['APK_x_', 400, 'INVALID_PARENT_ACCOUNT'],
      ['apk_x_1', 400, 'INVALID_PARENT_ACCOUNT'],
      ["APK_x_1' OR '1'='1", 400, 'INVALID_PARENT_ACCOUNT'],
      ['APK_x_1;DROP TABLE', 400, 'INVALID_PARENT_ACCOUNT'],
      [`APK_${'a'.repeat(200)}_1`, 400, 'INVALID_PARENT_ACCOUNT'],
      ['APK_x_1 APK_y_2', 400, 'INVALID_PARENT_ACCOUNT'],
      ['APK_%00_1', 400, 'INVALID_PARENT_ACCOUNT'],
      ['APK_unknown_1', 404, 'USER_NOT_FOUND'],
      ['APK_AAAAAAAAAAAAAAAAAAAAAAA_999', 404, 'USER_NOT_FOUND'],
      [child.publicKey, 400, 'INVALID_PARENT_ACCOUNT'],
      ['USR_abc', 400, 'INVALID_PARENT_ACCOUNT'],
      ['null', 400, 'INVALID_PARENT_ACCOUNT'],
      ['{}', 400, 'INVALID_PARENT_ACCOUNT'],
    ];
    for (const [key, status, code] of keys) {
      cases.push(
        restCase(
          `X-Public-Key ${key.slice(0, 30)}`,
          '/auth/organization-details',
          { headers: { 'x-public-key': key } },
          status,
          code,
        ),
      );
      cases.push(
        gqlCase(
          `GraphQL organization X-Public-Key ${key.slice(0, 30)}`,
          '{"query":"{ organization { organizationName } }"}',
          { 'x-public-key': key },
          200,
          code,
        ),
      );
    }
    cases.push(
      restCase(
        'oversized X-Public-Key header',
        '/auth/organization-details',
        { headers: { 'x-public-key': 'A'.repeat(20_000) } },
        431,
        'REQUEST_HEADER_FIELDS_TOO_LARGE',
      ),
    );
    // Past MAX_HEAD_BYTES Node's parser refuses the request; the answer is still the envelope.
    cases.push(
      restCase(
        '1 MB Authorization header',
        '/auth/user-profile',
        { headers: { authorization: `Bearer ${h}.${'A'.repeat(1_000_000)}.${s}` } },
        431,
        'REQUEST_HEADER_FIELDS_TOO_LARGE',
      ),
    );
    cases.push(
      restCase(
        'oversized other header',
        '/auth/user-profile',
        { headers: { 'x-anything': 'A'.repeat(20_000) } },
        431,
        'REQUEST_HEADER_FIELDS_TOO_LARGE',
      ),
    );
    const params: [string, string][] = [
      ['limit=0', 'INVALID_LIMIT'],
      ['limit=101', 'INVALID_LIMIT'],
      ['limit=99999999999999999999', 'INVALID_LIMIT'],
      ['limit=1%00', 'INVALID_LIMIT'],
      ['limit=%FF', 'INVALID_LIMIT'],
      ['limit=NaN', 'INVALID_LIMIT'],
      ['limit=Infinity', 'INVALID_LIMIT'],
      ['limit=[1]', 'INVALID_LIMIT'],
      ['limit[]=1', 'OK'],
      ['limit=1&limit=1', 'INVALID_LIMIT'],
      ['limit=%20', 'INVALID_LIMIT'],
      ['limit=0001', 'INVALID_LIMIT'],
      ['search=%00', 'INVALID_SEARCH'],
      ['search=a%00b', 'INVALID_SEARCH'],
      ['search=%FF%FE', 'INVALID_SEARCH'],
      ['search=%C3%28', 'INVALID_SEARCH'],
      [`search=${'%25'.repeat(201)}`, 'INVALID_SEARCH'],
      ['search=%25%25%25', 'OK'],
      ['search=%5C', 'OK'],
      ["search='%20OR%201=1--", 'OK'],
      ['search=%E2%80%AE', 'OK'],
      ['search=_', 'OK'],
      ['search=%F0%9F%98%80', 'OK'],
      ['startDate=%00', 'INVALID_DATE_FORMAT'],
      ['startDate=%FF', 'INVALID_DATE_FORMAT'],
      ['startDate=2024-02-30', 'INVALID_DATE_FORMAT'],
      ['startDate=9999999999999999999', 'INVALID_DATE_FORMAT'],
      ['startDate=2024-01-01T25:00:00', 'INVALID_DATE_FORMAT'],
      ['endDate=2024-01-01T10:00:00+25:00', 'INVALID_DATE_FORMAT'],
      ["endDate=2024-01-01'", 'INVALID_DATE_FORMAT'],
      ['endDate=-1', 'INVALID_DATE_FORMAT'],
      ['startDate=1e10', 'INVALID_DATE_FORMAT'],
      ['lastKey=%00', 'INVALID_PAGINATION_TOKEN'],
      ['lastKey=%FF', 'INVALID_PAGINATION_TOKEN'],
      [`lastKey=${'a'.repeat(5000)}`, 'INVALID_PAGINATION_TOKEN'],
      ['lastKey=eyJhIjoxfQ.AAAA', 'INVALID_PAGINATION_TOKEN'],
      ['lastKey=..', 'INVALID_PAGINATION_TOKEN'],
      ['lastKey=null', 'INVALID_PAGINATION_TOKEN'],
      ['unknown=%FF', 'OK'],
      ['%FF=1', 'OK'],
    ];
    for (const [query, code] of params) {
      cases.push(
        restCase(
          `child-accounts ?${query.slice(0, 40)}`,
          `/auth/child-accounts?${query}`,
          { headers: { authorization: `Bearer ${good}` } },
          code === 'OK' ? 200 : 400,
          code === 'OK' ? '' : code,
        ),
      );
    }
    const deep = `{ me { ${'... on ParentAccount { packagesHistory { packageType } } '.repeat(1)} } }`;
    const nested = 'query { childAccounts { edges { node { username } } pageInfo { hasNextPage } stats { total } } }';
    const gqlDocs: [string, string, number, string][] = [
      ['syntax error', JSON.stringify({ query: '{ me { ' }), 200, 'GRAPHQL_PARSE_FAILED'],
      ['unknown field', JSON.stringify({ query: '{ nope }' }), 200, 'GRAPHQL_VALIDATION_FAILED'],
      [
        'wrong variable type',
        JSON.stringify({
          query: 'query($l: Int) { childAccounts(limit: $l) { edges { cursor } } }',
          variables: { l: 'ten' },
        }),
        400,
        'GRAPHQL_VALIDATION_FAILED',
      ],
      [
        'variable of the wrong declared type',
        JSON.stringify({
          query: 'query($l: String) { childAccounts(limit: $l) { edges { cursor } } }',
          variables: { l: '1' },
        }),
        200,
        'GRAPHQL_VALIDATION_FAILED',
      ],
      [
        'too many aliases',
        JSON.stringify({ query: `{ ${Array.from({ length: 40 }, (_, i) => `a${i}: me { userID }`).join(' ')} }` }),
        200,
        'GRAPHQL_VALIDATION_FAILED',
      ],
      [
        'too deep',
        JSON.stringify({
          query: `{ __schema { types { fields { type { ofType { ofType { ofType { ofType { name } } } } } } } } }`,
        }),
        200,
        'GRAPHQL_VALIDATION_FAILED',
      ],
      [
        'too many directives',
        JSON.stringify({ query: `{ __typename ${'@include(if: true) '.repeat(60)} }` }),
        200,
        'GRAPHQL_VALIDATION_FAILED',
      ],
      ['too many tokens', JSON.stringify({ query: `{ ${'__typename '.repeat(1200)} }` }), 200, 'GRAPHQL_PARSE_FAILED'],
      [
        'too many directives on a field',
        JSON.stringify({ query: `{ me { userID ${'@skip(if: false) '.repeat(60)} } }` }),
        200,
        'GRAPHQL_VALIDATION_FAILED',
      ],
      [
        'introspection in production',
        JSON.stringify({ query: '{ __schema { queryType { name } } }' }),
        200,
        'GRAPHQL_VALIDATION_FAILED',
      ],
      ['batched array', JSON.stringify([{ query: '{ __typename }' }, { query: '{ __typename }' }]), 400, 'BAD_REQUEST'],
      ['not JSON', '{"query": ', 400, 'BAD_REQUEST'],
      ['query not a string', JSON.stringify({ query: 42 }), 400, 'BAD_REQUEST'],
      ['empty body', '', 400, 'BAD_REQUEST'],
      ['mutation', JSON.stringify({ query: 'mutation { x }' }), 200, 'GRAPHQL_VALIDATION_FAILED'],
      ['subscription', JSON.stringify({ query: 'subscription { x }' }), 200, 'GRAPHQL_VALIDATION_FAILED'],
      ['field suggestion probe', JSON.stringify({ query: '{ mee { userID } }' }), 200, 'GRAPHQL_VALIDATION_FAILED'],
      [
        'NUL in search variable',
        JSON.stringify({
          query: 'query($s: String) { childAccounts(search: $s) { edges { cursor } } }',
          variables: { s: 'a\u0000b' },
        }),
        200,
        'INVALID_SEARCH',
      ],
      [
        'huge limit literal',
        JSON.stringify({ query: '{ childAccounts(limit: 99999999999) { edges { cursor } } }' }),
        200,
        'GRAPHQL_VALIDATION_FAILED',
      ],
      [
        'negative limit',
        JSON.stringify({ query: '{ childAccounts(limit: -5) { edges { cursor } } }' }),
        200,
        'INVALID_LIMIT',
      ],
      [
        'forged after',
        JSON.stringify({ query: '{ childAccounts(after: "abc.def") { edges { cursor } } }' }),
        200,
        'INVALID_PAGINATION_TOKEN',
      ],
      [
        'bad date',
        JSON.stringify({ query: '{ childAccounts(startDate: "2024-02-31") { edges { cursor } } }' }),
        200,
        'INVALID_DATE_FORMAT',
      ],
      [
        'operationName unknown',
        JSON.stringify({ query: 'query A { __typename }', operationName: 'B' }),
        400,
        'OPERATION_RESOLUTION_FAILURE',
      ],
      [
        'two operations, no name',
        JSON.stringify({ query: 'query A { __typename } query B { __typename }' }),
        400,
        'OPERATION_RESOLUTION_FAILURE',
      ],
      [
        'fragment cycle',
        JSON.stringify({ query: '{ ...A } fragment A on Query { ...B } fragment B on Query { ...A }' }),
        200,
        'GRAPHQL_VALIDATION_FAILED',
      ],
      [
        'oversized body',
        JSON.stringify({ query: `{ __typename } # ${'x'.repeat(200_000)}` }),
        413,
        'PAYLOAD_TOO_LARGE',
      ],
      ['deep but allowed', JSON.stringify({ query: deep }), 200, 'OK'],
      ['nested allowed', JSON.stringify({ query: nested }), 200, 'OK'],
    ];
    for (const [name, body, status, code] of gqlDocs) {
      cases.push(gqlCase(`GraphQL ${name}`, body, { authorization: `Bearer ${good}` }, status, code));
    }
  });

  it('at least 300 hostile requests: expected status and code, never 5xx, always the envelope', async () => {
    expect(cases.length).toBeGreaterThanOrEqual(300);
    const failures: string[] = [];
    for (const c of cases) {
      const result = await c.run().catch((error: unknown) => {
        throw new Error(`${c.name}: ${String(error)}`);
      });
      const codeOk = c.code === 'OK' || c.code === '' ? result.status === 200 : result.code === c.code;
      if (result.status >= 500 || result.status !== c.status || !codeOk || !result.envelope) {
        failures.push(`${c.name}: got ${result.status} ${result.code}, want ${c.status} ${c.code}`);
      }
    }
    expect(failures).toEqual([]);
  });
});
