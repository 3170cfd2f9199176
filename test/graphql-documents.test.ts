import { GraphQLError } from 'graphql';
import { beforeAll, describe, expect, it } from 'vitest';
import { DOCUMENT_CACHE_BYTES, DocumentCache } from '../src/graphql/documents.js';
import { createOrganization, tokenFor } from './helpers/builders.js';
import { metricValue, useServer } from './helpers/app.js';
import { useTestDatabase } from './helpers/database.js';

/*
 * One cache holds what is known of each document text (its parse or parse error, its validation,
 * the lean transport's notes and plans), within one bound in bytes, whatever the callers send.
 */
describe('the GraphQL document cache', () => {
  const database = useTestDatabase();
  const server = useServer(database, { compileAfter: 0 });
  let token: string;

  beforeAll(async () => {
    const built = await createOrganization(database());
    token = await tokenFor(built.parent, built);
  });

  const post = (query: string) =>
    fetch(`${server().url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ query }),
    });

  it('one entry a document text, for its parse, its validation and its plan: asked again, nothing more is held', async () => {
    const { documents } = server().app;
    const before = documents.size;
    const texts = Array.from({ length: 5 }, (_, i) => `query Q${i} { me { userID } }`);
    for (let round = 0; round < 3; round++) {
      for (const text of texts) {
        const response = await post(text);
        expect(response.status).toBe(200);
        expect(((await response.json()) as { errors?: unknown }).errors).toBeUndefined();
      }
    }
    expect(documents.size - before).toBe(texts.length);
  });

  it('stays within its bound in bytes when callers send many large documents, parsable or not, and the server answers as ever', async () => {
    const { documents } = server().app;
    const literal = 'x'.repeat(30_000);
    // Parsable (their search too long for the service: an error, after parse and validation): a
    // parsed document holds about 63 bytes a character of its text, and is counted so.
    for (let i = 0; i < 60; i++) {
      const big = await post(`query Big${i} { childAccounts(search: "${literal}") { stats { total } } }`);
      expect(((await big.json()) as { errors?: unknown[] }).errors).toHaveLength(1);
    }
    expect(documents.size).toBeLessThanOrEqual(Math.ceil(DOCUMENT_CACHE_BYTES / (60 * literal.length)));
    // Texts that do not parse: their errors are kept, and they are bounded too.
    for (let i = 0; i < 200; i++) {
      const broken = await post(`query Broken${i} { me { userID ${literal}`);
      expect(
        ((await broken.json()) as { errors?: { extensions?: { code?: string } }[] }).errors?.[0]?.extensions?.code,
      ).toBe('GRAPHQL_PARSE_FAILED');
    }
    expect(documents.bytes).toBeGreaterThan(0);
    expect(documents.bytes).toBeLessThanOrEqual(DOCUMENT_CACHE_BYTES);
    const answer = await post('{ me { userID } }');
    expect(((await answer.json()) as { data?: { me?: unknown } }).data?.me).toBeDefined();
    // Operators see it.
    const metrics = await (await fetch(`${server().url}/metrics`)).text();
    expect(metricValue(metrics, 'api_graphql_documents_bytes')).toBe(documents.bytes);
    expect(metricValue(metrics, 'api_graphql_documents')).toBe(documents.size);
  });
});

describe('validation results in the document cache', () => {
  // Envelop's validation cache keys a result by `<schema hash>|<rule names>|<document text>`.
  it("are held in their document's entry, apart for each schema and set of rules", () => {
    const cache = new DocumentCache();
    const text = '{ me { userID } }';
    const refused = [new GraphQLError('refused')];
    cache.validations.set(`s1|rulesA|${text}`, refused);
    cache.validations.set(`s1|rulesB|${text}`, []);
    expect(cache.validations.get(`s1|rulesA|${text}`)).toBe(refused);
    expect(cache.validations.get(`s1|rulesB|${text}`)).toEqual([]);
    expect(cache.validations.get(`s2|rulesA|${text}`)).toBeUndefined();
    expect(cache.validations.get(`s1|rulesA|{ me { id } }`)).toBeUndefined();
    expect(cache.size).toBe(1);
    // A key of another shape is kept under itself.
    cache.validations.set('no separators', refused);
    expect(cache.validations.get('no separators')).toBe(refused);
    expect(cache.size).toBe(2);
  });
});
