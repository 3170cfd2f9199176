import { describe, expect, it } from 'vitest';
import { seed } from '../src/dev/demo-data.js';
import { useCapturedLog, useServer, type TestServer } from './helpers/app.js';
import { createChild, createOrganization, tokenFor } from './helpers/builders.js';
import { testMode, useTestDatabase } from './helpers/database.js';
import { STORED_OPERATIONS } from '../src/graphql/operations.js';

const now = new Date('2026-06-11T06:00:00.000Z');
/** More than the executions after which a document is compiled (20, graphql/pipeline.ts). */
const REPEATS = 25;

const PROFILE = `userID username email publicKey accountType parentAccount accountStatus emailVerified createdAt updatedAt
  lastLogin organizationName authProvider lastLoginProvider providerAId signInCount loginAttempts lastLoginAttempt lockedUntil`;
const DOCUMENTS: Record<string, string> = {
  me: `query Me { me { ${PROFILE} ... on ParentAccount { organizationUrl authUrls { signin signup } creditBalance totalFreeUsers
    billableChildAccounts totalChildAccounts accountBalance availableBalance providerASsoConfig { enabled clientId }
    packagesHistory { packageType purchaseDate creditsAdded freeUsersAdded price transactionId } lastLowCreditNotificationAt } } }`,
  organization: `query Org { organization { organizationName organizationUrl authUrls { signin signup verify reset update resend successful }
    domainRestrictionEnabled emailVerificationRequired providerASsoConfig { enabled clientId } credentials { publicKey jwtSecret } } }`,
  children: `query Children($search: String, $limit: Int) { childAccounts(search: $search, limit: $limit) {
    edges { cursor node { username email lastSeen registered } } pageInfo { hasNextPage endCursor } stats { total active } } }`,
  credits: `query Credits { creditAnalysis { creditBalance totalFreeUsers totalChildAccounts billableUsers monthlyRetentionCredits
    operationUsage { childSignups signIns emailVerifications socialSignIns { providerA providerB providerC providerD total } }
    totalCreditsUsed projectedMonthlyUsage alerts { low critical depleted }
    packageHistory { packageType purchaseDate creditsAdded freeUsersAdded price transactionId } } }`,
  aliasesAndTypename: `query A { __typename first: me { __typename userID } again: me { ... on ChildAccount { accountType } ... on ParentAccount { accountType creditBalance } } }`,
};

/**
 * A document sent again and again is compiled (graphql-jit) after a number of executions. Its
 * answers must not change when it is: the same data, the same nulls, the same errors with the
 * same codes and paths, the same status.
 */
describe(`GraphQL answers are the same before and after a document is compiled (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database, { now: () => now });

  async function repeated(s: TestServer, query: string, options: Parameters<TestServer['graphql']>[1]) {
    const answers = [];
    for (let i = 0; i < REPEATS; i++) answers.push(await s.graphql(query, options));
    return answers;
  }

  /** One seeded organization (purchases, usage, children) for the documents below. */
  let tokens: Promise<string[]> | undefined;
  const seededTokens = () =>
    (tokens ??= (async () => {
      const [organization] = await seed(database(), { organizations: 1, childrenPerOrganization: 12, seed: 31, now });
      const parent = await database().prisma.account.findUniqueOrThrow({ where: { id: organization!.parent.userID } });
      const built = {
        parent,
        organization: await database().prisma.organization.findUniqueOrThrow({ where: { parentId: parent.id } }),
      };
      const child = await createChild(database(), parent);
      return [await tokenFor(parent, built, { now }), await tokenFor(child, built, { now })];
    })());

  it.each(Object.keys(DOCUMENTS))('%s, for a parent and for a child', async (name) => {
    for (const token of await seededTokens()) {
      const answers = await repeated(server(), DOCUMENTS[name]!, { token, variables: { search: 'a', limit: 5 } });
      for (const answer of answers.slice(1)) expect(answer).toEqual(answers[0]);
      // Each document gives data for someone; the child's refusals are errors with a code.
      expect(
        answers[0]!.data !== undefined || answers[0]!.errors?.every((e) => typeof e.extensions?.code === 'string'),
      ).toBe(true);
    }
  });

  it('requests the reference executor refuses keep their answers: variables of the wrong type, a mutation', async () => {
    const built = await createOrganization(database());
    const token = await tokenFor(built.parent, built, { now });
    for (const [query, variables] of [
      [DOCUMENTS.children!, { limit: 'five' }],
      ['mutation M { me { userID } }', {}],
    ] as const) {
      const answers = [];
      for (let i = 0; i < REPEATS; i++) {
        const response = await fetch(`${server().url}/graphql`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
          body: JSON.stringify({ query, variables }),
        });
        answers.push({ status: response.status, body: await response.json() });
      }
      for (const answer of answers) expect(answer).toEqual(answers[0]);
      expect(answers[0]!.body.errors[0].extensions.code).toBe('GRAPHQL_VALIDATION_FAILED');
    }
  });

  it('compilation engages: every stored operation runs compiled once repeated, none fails to compile', async () => {
    const [parentToken] = await seededTokens();
    const metric = async (pattern: RegExp) => Number(pattern.exec((await server().app.metricsText()).text)?.[1] ?? NaN);
    const compiled = /^api_graphql_executions_total\{engine="compiled"\} (\d+)$/m;
    // Subscriptions stream, and run on the reference executor (test/live-updates.test.ts).
    for (const operation of STORED_OPERATIONS.filter((o) => !o.document.startsWith('subscription'))) {
      const variables = Object.fromEntries(
        (operation.document.match(/\$\w+/g) ?? []).map((name) => [name.slice(1), undefined]),
      );
      const before = await metric(compiled);
      const answers = await repeated(server(), operation.document, { token: parentToken, variables });
      // Past the threshold every execution of the operation ran compiled, with the same answer;
      // but `Me`, whose `__typename` (added as Apollo adds it) follows its fragments, which
      // graphql-jit would answer in another order: the reference executor answers it. `Organization`
      // shows the organization alone: from its second request on, its readers' shared answer.
      const ranCompiled = operation.name === 'Me' || operation.name === 'Organization' ? 0 : REPEATS - 20;
      expect(await metric(compiled), operation.name).toBe(before + ranCompiled);
      for (const answer of answers.slice(1)) expect(answer, operation.name).toEqual(answers[0]);
    }
    expect(await metric(/^api_graphql_compile_failures_total (\d+)$/m)).toBe(0);
  });

  it('errors keep their codes and paths: a child asking for the credit analysis, a token gone stale mid-way', async () => {
    const built = await createOrganization(database());
    const child = await createChild(database(), built.parent);
    const answers = await repeated(server(), DOCUMENTS.credits!, { token: await tokenFor(child, built, { now }) });
    for (const answer of answers) {
      expect(answer).toEqual(answers[0]);
      expect(answer.data).toBeNull();
      expect(answer.errors?.map((e) => [e.extensions?.code, e.path])).toEqual([
        ['UNAUTHORIZED_ACCESS', ['creditAnalysis']],
      ]);
    }
    // After compilation, a status change still shows at once, as an error in the same shape.
    await database().prisma.account.update({ where: { id: child.id }, data: { status: 'inactive' } });
    // Once the cache has heard the change (a no-hang bound of 30 s; milliseconds idle).
    let answer = await server().graphql(DOCUMENTS.me!, { token: await tokenFor(child, built, { now }) });
    for (const until = performance.now() + 30_000; answer.errors === undefined && performance.now() < until;) {
      answer = await server().graphql(DOCUMENTS.me!, { token: await tokenFor(child, built, { now }) });
    }
    expect(answer.data).toBeNull();
    expect(answer.errors?.map((e) => [e.extensions?.code, e.path])).toEqual([['ACCOUNT_INACTIVE', ['me']]]);
  });
});

/**
 * A query that runs compiled runs, from then on, without the pipeline's hooks for parsing and
 * validating it again (lean transport, `GraphQLPipeline.runPlanned`): what the hooks record must not
 * change with it.
 */
describe(`a compiled query's request log line and metrics are those of its first executions (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database, {
    now: () => now,
    env: { LOG_LEVEL: 'info', LOG_FORMAT: 'json' },
  });
  const log = useCapturedLog();

  it('names the same operation, caller and error code on every repeat, and counts each execution', async () => {
    const built = await createOrganization(database());
    const child = await createChild(database(), built.parent);
    const [parentToken, childToken] = [
      await tokenFor(built.parent, built, { now }),
      await tokenFor(child, built, { now }),
    ];
    const executions = async () =>
      Number(
        /^api_graphql_executions_total\{engine="compiled"\} (\d+)$/m.exec(
          (await server().app.metricsText()).text,
        )?.[1] ?? 0,
      );
    const before = await executions();
    for (let i = 0; i < REPEATS; i++) {
      // The parent reads it; the child is refused the credit analysis, field by field.
      expect((await server().graphql(DOCUMENTS.credits!, { token: parentToken })).errors).toBeUndefined();
      expect((await server().graphql(DOCUMENTS.credits!, { token: childToken })).errors?.[0]?.extensions?.code).toBe(
        'UNAUTHORIZED_ACCESS',
      );
    }
    expect(await executions()).toBe(before + 2 * REPEATS - 20);
    const lines = (await log.lines())
      .filter((line) => line['message'] === 'request')
      .map(({ caller, operation, code, status }) => ({ caller, operation, code, status }));
    expect(lines).toHaveLength(2 * REPEATS);
    for (let i = 0; i < REPEATS; i++) {
      expect(lines[2 * i]).toEqual({ caller: 'parent', operation: 'creditAnalysis', code: undefined, status: 200 });
      expect(lines[2 * i + 1]).toEqual({
        caller: 'child',
        operation: 'creditAnalysis',
        code: 'UNAUTHORIZED_ACCESS',
        status: 200,
      });
    }
  });
});
