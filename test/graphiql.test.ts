import { get, type IncomingHttpHeaders } from 'node:http';
import { gunzipSync } from 'node:zlib';
import {
  buildSchema,
  isEnumType,
  isInputObjectType,
  isInterfaceType,
  isIntrospectionType,
  isObjectType,
  isSpecifiedScalarType,
  parse,
  validate,
  type OperationDefinitionNode,
} from 'graphql';
import { schema as liveSchema } from '../src/graphql/schema.js';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { mintAccessToken } from '../src/auth/tokens.js';
import { seed } from '../src/dev/demo-data.js';
import { GRAPHIQL_DEFAULT_DOCUMENT } from '../src/graphql/operations.js';
import { startServer, useServer } from './helpers/app.js';
import { testMode, useTestDatabase } from './helpers/database.js';

/** GET /graphql as a browser asks for a page, with exactly this Accept-Encoding (fetch adds its own). */
function page(url: string, encoding?: string): Promise<{ status: number; headers: IncomingHttpHeaders; body: Buffer }> {
  return new Promise((resolve, reject) => {
    get(
      `${url}/graphql`,
      { headers: { accept: 'text/html', ...(encoding ? { 'accept-encoding': encoding } : {}) } },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () =>
          resolve({ status: response.statusCode!, headers: response.headers, body: Buffer.concat(chunks) }),
        );
        response.on('error', reject);
      },
    ).on('error', reject);
  });
}

describe(`GraphiQL teaches this API (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database);

  it('describes every type, field, argument and enum value of the schema (the docs pane shows them)', () => {
    const missing: string[] = [];
    for (const type of Object.values(liveSchema.getTypeMap())) {
      if (isIntrospectionType(type) || isSpecifiedScalarType(type)) continue;
      if (!type.description?.trim()) missing.push(type.name);
      if (isObjectType(type) || isInterfaceType(type) || isInputObjectType(type)) {
        for (const field of Object.values(type.getFields())) {
          if (!field.description?.trim()) missing.push(`${type.name}.${field.name}`);
          for (const argument of 'args' in field ? field.args : [])
            if (!argument.description?.trim()) missing.push(`${type.name}.${field.name}(${argument.name})`);
        }
      }
      if (isEnumType(type))
        for (const value of type.getValues())
          if (!value.description?.trim()) missing.push(`${type.name}.${value.name}`);
    }
    expect(missing).toEqual([]);
  });

  it('opens with one named operation per root field, each valid against the schema', () => {
    const schema = buildSchema(readFileSync(new URL('../schema.graphql', import.meta.url), 'utf8'));
    const document = parse(GRAPHIQL_DEFAULT_DOCUMENT);
    expect(validate(schema, document)).toEqual([]);
    const operations = document.definitions.filter(
      (d): d is OperationDefinitionNode => d.kind === 'OperationDefinition',
    );
    expect(operations.map((o) => o.name?.value)).toEqual([
      'Me',
      'Organization',
      'ChildAccounts',
      'CreditAnalysis',
      'CreditTrends',
      'CreditAnalysisLive',
    ]);
  });

  it('each default operation runs without errors against the demo data, for a parent (and Me and Organization for a child)', async () => {
    const [org] = await seed(database(), { organizations: 1, childrenPerOrganization: 12, seed: 7, now: new Date() });
    const secret = (await database().prisma.organization.findUniqueOrThrow({ where: { parentId: org!.parent.userID } }))
      .jwtSecret;
    const child = await database().prisma.account.findFirstOrThrow({
      where: { parentId: org!.parent.userID, status: 'active' },
    });
    const token = (subject: string) =>
      mintAccessToken({ secret, kid: org!.parent.publicKey, subject, ttlSeconds: 300 });
    const run = async (operationName: string, bearer: string, variables: Record<string, unknown> = {}) => {
      const response = await fetch(`${server().url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${bearer}` },
        body: JSON.stringify({ query: GRAPHIQL_DEFAULT_DOCUMENT, operationName, variables }),
      });
      return (await response.json()) as { data?: Record<string, unknown>; errors?: unknown[] };
    };
    const parentToken = await token(org!.parent.userID);
    for (const name of ['Me', 'Organization', 'ChildAccounts', 'CreditAnalysis', 'CreditTrends']) {
      const result = await run(name, parentToken);
      expect(result.errors, name).toBeUndefined();
      expect(result.data, name).toBeDefined();
    }
    const page1 = await run('ChildAccounts', parentToken);
    const after = (page1.data!.childAccounts as { pageInfo: { endCursor: string } }).pageInfo.endCursor;
    expect((await run('ChildAccounts', parentToken, { after, search: '' })).errors).toBeUndefined();
    const childToken = await token(child.id);
    for (const name of ['Me', 'Organization']) expect((await run(name, childToken)).errors, name).toBeUndefined();
  });

  it('is sent gzipped to clients that accept it, and whole to those that do not', async () => {
    const plain = await page(server().url);
    expect(plain.status).toBe(200);
    expect(plain.headers['content-encoding']).toBeUndefined();
    const html = plain.body;
    expect(html.toString()).toContain('query ChildAccounts');
    const zipped = await page(server().url, 'br, gzip;q=0.8');
    expect(zipped.headers['content-encoding']).toBe('gzip');
    expect(zipped.headers.vary).toMatch(/accept-encoding/i);
    expect(Number(zipped.headers['content-length'])).toBe(zipped.body.length);
    expect(zipped.body.length).toBeLessThan(html.length / 3);
    expect(gunzipSync(zipped.body).equals(html)).toBe(true);
    expect((await page(server().url, 'gzip;q=0')).headers['content-encoding']).toBeUndefined();
  });

  it('prefills a demo token in its headers tab in development only', async () => {
    const headers = JSON.stringify({ Authorization: 'Bearer demo-token-for-graphiql' });
    for (const [env, shown] of [
      ['development', true],
      ['production', false],
    ] as const) {
      const s = await startServer(database(), { env: { NODE_ENV: env, GRAPHIQL: 'true' }, graphiqlHeaders: headers });
      try {
        const text = (await page(s.url)).body.toString();
        expect(text.includes('demo-token-for-graphiql'), env).toBe(shown);
      } finally {
        await s.close();
      }
    }
  });
});
