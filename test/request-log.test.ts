import { afterEach, describe, expect, it, vi } from 'vitest';
import { createChild, createOrganization, tokenFor } from './helpers/builders.js';
import { rest, useCapturedLog, useServer } from './helpers/app.js';
import { testMode, useTestDatabase } from './helpers/database.js';
import { GRAPHIQL_DEFAULT_DOCUMENT } from '../src/graphql/operations.js';
import { SECRET_MARKER } from '../src/dev/demo-data.js';

/** The request log: one line per answer, saying who asked and how it went, and never a credential. */
describe(`the request log line (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database, { env: { LOG_LEVEL: 'debug', LOG_FORMAT: 'json' } });
  const log = useCapturedLog();
  afterEach(() => vi.restoreAllMocks());

  const requests = async () => (await log.lines()).filter((line) => line.message === 'request');

  it('names the route, status, duration, caller kind and organization, the code and the GraphQL operation', async () => {
    const org = await createOrganization(database());
    const child = await createChild(database(), org.parent);
    const [parentToken, childToken] = [await tokenFor(org.parent, org), await tokenFor(child, org)];
    expect((await rest(server(), '/auth/user-profile?secret=1', { token: parentToken })).status).toBe(200);
    expect((await rest(server(), '/auth/organization-details', { publicKey: org.parent.publicKey })).status).toBe(200);
    expect((await rest(server(), '/auth/user-profile')).status).toBe(401);
    expect((await server().graphql('query Screen { me { userID } }', { token: childToken })).status).toBe(200);
    const [profile, details, anonymous, graphql] = await requests();
    expect(profile).toMatchObject({
      level: 'info',
      method: 'GET',
      route: '/auth/user-profile',
      status: 200,
      caller: 'parent',
      organizationId: org.parent.id,
    });
    expect(typeof profile!.durationMs).toBe('number');
    expect(profile!.requestId).toEqual(expect.any(String));
    expect(Date.parse(profile!.time as string)).not.toBeNaN();
    expect(details).toMatchObject({
      route: '/auth/organization-details',
      status: 200,
      caller: 'publicKey',
      organizationId: org.parent.id,
    });
    expect(anonymous).toMatchObject({
      route: '/auth/user-profile',
      status: 401,
      caller: 'anonymous',
      code: 'UNAUTHORIZED',
    });
    expect(anonymous!.organizationId).toBeUndefined();
    expect(graphql).toMatchObject({
      method: 'POST',
      route: '/graphql',
      status: 200,
      caller: 'child',
      organizationId: org.parent.id,
      operation: 'me',
    });
    // Never a credential, and not the raw target with its query.
    for (const secret of [parentToken, childToken, org.parent.publicKey, 'secret=1'])
      expect(log.text()).not.toContain(secret);
  });

  it('holds no secret of the data and no credential, at debug level, across every path, caller and failure', async () => {
    const org = await createOrganization(database());
    const child = await createChild(database(), org.parent);
    const [parentToken, childToken] = [await tokenFor(org.parent, org), await tokenFor(child, org)];
    const paths = [
      '/auth/user-profile',
      '/auth/organization-details',
      '/auth/child-accounts?limit=2&search=a',
      '/parent/credit-analysis',
    ];
    for (const path of paths) {
      for (const token of [parentToken, childToken, `${parentToken}x`]) await rest(server(), path, { token });
      await rest(server(), path, { publicKey: org.parent.publicKey });
    }
    await rest(server(), '/auth/child-accounts?limit=0', { token: parentToken });
    await rest(server(), '/auth/child-accounts?lastKey=forged', { token: parentToken });
    for (const operationName of ['Me', 'Organization', 'ChildAccounts', 'CreditAnalysis']) {
      for (const token of [parentToken, childToken]) {
        await fetch(`${server().url}/graphql`, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            authorization: `Bearer ${token}`,
            'x-public-key': org.parent.publicKey,
          },
          body: JSON.stringify({ query: GRAPHIQL_DEFAULT_DOCUMENT, operationName }),
        });
      }
    }
    // A database fault whose error carries the rows it touched, as drivers' errors can: logged,
    // with the request id, and the secrets in it redacted.
    const rows = await database().prisma.organization.findMany({ where: { parentId: org.parent.id } });
    const other = await createOrganization(database());
    const fault = Object.assign(new Error('connection reset while reading purchases'), {
      meta: { jwtSecret: rows[0]!.jwtSecret, providerASsoClientSecret: rows[0]!.providerASsoClientSecret },
      passwordHash: other.parent.passwordHash,
    });
    vi.spyOn(server().app.deps.database.prisma.packagePurchase, 'findMany').mockRejectedValue(fault);
    const failedRest = await rest(server(), '/parent/credit-analysis', {
      token: await tokenFor(other.parent, other),
      headers: { 'x-request-id': 'fault-rest' },
    });
    expect(failedRest.status).toBe(500);
    const failedGraphQL = await server().graphql('{ creditAnalysis { packageHistory { price } } }', {
      token: await tokenFor(other.parent, other),
      headers: { 'x-request-id': 'fault-graphql' },
    });
    expect(failedGraphQL.errors?.[0]?.extensions?.code).toBe('INTERNAL_ERROR');

    const lines = await log.lines();
    const errors = lines.filter((line) => line.level === 'error');
    for (const requestId of ['fault-rest', 'fault-graphql']) {
      const logged = errors.find((line) => line.requestId === requestId);
      expect(logged, requestId).toMatchObject({
        error: {
          message: 'connection reset while reading purchases',
          meta: { jwtSecret: '[redacted]' },
          passwordHash: '[redacted]',
        },
      });
    }
    expect(lines.filter((line) => line.message === 'request').length).toBeGreaterThanOrEqual(paths.length * 4 + 12);
    const text = log.text();
    expect(text).not.toContain(SECRET_MARKER);
    for (const secret of [parentToken, childToken, org.parent.publicKey, other.parent.publicKey])
      expect(text).not.toContain(secret);
  });
});
