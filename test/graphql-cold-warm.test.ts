import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { createChild, createOrganization, tokenFor } from './helpers/builders.js';
import { startServer, useServer, type TestServer } from './helpers/app.js';
import { useTestDatabase } from './helpers/database.js';

/*
 * What the server keeps (answers, plans of compiled operations, documents it knows) must never
 * change an answer: a request is answered the same by a server that has just started and by one
 * that has answered other requests before it. The requests differ where keys are easy to get
 * wrong: an operation name absent, null, empty or unknown; variables absent, null, of the wrong
 * type, or a number past the doubles (`1e400`, which JSON.parse reads as Infinity).
 */

const DOCUMENTS = [
  '{ me { userID } }',
  'query A($limit: Int) { childAccounts(limit: $limit) { edges { node { id } } } }',
  'query A { me { userID } } query B($limit: Int) { childAccounts(limit: $limit) { stats { total } } }',
];
/** Written into the body as is: JSON has no other way to say it. */
const TOO_LARGE = '1e400';

type Request = { document: number; operationName?: string | null; variables?: null | { limit: unknown } };

const request: fc.Arbitrary<Request> = fc.record(
  {
    document: fc.integer({ min: 0, max: DOCUMENTS.length - 1 }),
    operationName: fc.constantFrom(null, '', 'A', 'B', 'Nope'),
    variables: fc.constantFrom(null, { limit: 2 }, { limit: null }, { limit: TOO_LARGE }, { limit: 'two' }),
  },
  { requiredKeys: ['document'] },
);

describe('answers cold and warm', () => {
  const database = useTestDatabase();
  // Plans are made from the first execution, so that a warm server holds them at once.
  const options = { compileAfter: 0 };
  const warm = useServer(database, options);
  let token: string;

  beforeAll(async () => {
    const built = await createOrganization(database());
    for (let i = 0; i < 3; i++) await createChild(database(), built.parent);
    token = await tokenFor(built.parent, built);
  });

  async function ask(server: TestServer, { document, ...rest }: Request): Promise<{ status: number; body: unknown }> {
    const body = JSON.stringify({ query: DOCUMENTS[document], ...rest }).replace(`"${TOO_LARGE}"`, TOO_LARGE);
    const response = await fetch(`${server.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body,
    });
    return { status: response.status, body: await response.json() };
  }

  it('a request is answered the same by a server that just started and by one that answered others first', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(request, { maxLength: 4 }), request, async (before, target) => {
        for (const earlier of before) await ask(warm(), earlier);
        // Twice on the warm server: the second may be served what the first kept.
        await ask(warm(), target);
        const warmAnswer = await ask(warm(), target);
        const cold = await startServer(database(), options);
        try {
          expect(warmAnswer).toEqual(await ask(cold, target));
        } finally {
          await cold.close();
        }
      }),
      {
        numRuns: 40,
        examples: [
          // An empty name is not the absence of one: the document's only operation is not picked for it.
          [[{ document: 0 }], { document: 0, operationName: '' }],
          [[{ document: 1, variables: { limit: 2 } }], { document: 1, operationName: '' }],
          [[{ document: 2, operationName: 'A' }], { document: 2, operationName: '' }],
          // A number past the doubles is an error, not the null that JSON writes for it.
          [[{ document: 1, variables: { limit: null } }], { document: 1, variables: { limit: TOO_LARGE } }],
        ],
      },
    );
  }, 120_000);
});
