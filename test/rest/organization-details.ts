import { beforeAll, describe, expect, it } from 'vitest';
import type { Account } from '../../src/generated/prisma/client.js';
import { MASKED_SECRET } from '../../src/services/get-organization-details.js';
import { createChild, createOrganization, tokenFor, type BuiltOrganization } from '../helpers/builders.js';
import { expectError, rest, useServer } from '../helpers/app.js';
import { testMode, useSharedDatabase } from '../helpers/database.js';

const PATH = '/auth/organization-details';

describe(`GET ${PATH} (${testMode})`, () => {
  const database = useSharedDatabase();
  const server = useServer(database);
  let org: BuiltOrganization;
  let child: Account;

  beforeAll(async () => {
    org = await createOrganization(database(), {
      organization: { providerASsoEnabled: true, providerASsoClientId: 'abc' },
    });
    child = await createChild(database(), org.parent);
  });

  it('the parent by JWT: every field of the table, the real secret', async () => {
    const result = await rest(server(), PATH, { token: await tokenFor(org.parent, org) });
    expect(result.status).toBe(200);
    // The real secret: kept by no cache (see test/http-caching.test.ts).
    expect(result.headers.get('cache-control')).toBe('no-store');
    expect(result.headers.get('etag')).toBeNull();
    expect(Object.keys(result.body)).toEqual(['success', 'data']);
    const o = org.organization;
    expect(result.body.data).toEqual({
      message: expect.any(String),
      organizationName: o.name,
      organizationUrl: o.url,
      authUrls: {
        signin: o.signinUrl,
        signup: o.signupUrl,
        verify: o.verifyUrl,
        reset: o.resetUrl,
        update: o.updateUrl,
        resend: o.resendUrl,
        successful: o.successfulUrl,
      },
      domainRestrictionEnabled: true,
      emailVerificationRequired: false,
      providerASsoConfig: { enabled: true, clientId: 'abc' },
      credentials: { publicKey: org.parent.publicKey, jwtSecret: o.jwtSecret },
    });
    expect(Object.keys(result.body.data)).toEqual([
      'message',
      'organizationName',
      'organizationUrl',
      'authUrls',
      'domainRestrictionEnabled',
      'emailVerificationRequired',
      'providerASsoConfig',
      'credentials',
    ]);
  });

  it("a child by JWT gets its parent's organization with the secret masked", async () => {
    const result = await rest(server(), PATH, { token: await tokenFor(child, org) });
    expect(result.status).toBe(200);
    expect(result.body.data.organizationName).toBe(org.organization.name);
    expect(result.body.data.credentials).toEqual({ publicKey: org.parent.publicKey, jwtSecret: MASKED_SECRET });
  });

  it('a public-key caller gets the details with the secret masked', async () => {
    const result = await rest(server(), PATH, { publicKey: org.parent.publicKey });
    expect(result.status).toBe(200);
    expect(result.body.data.credentials).toEqual({ publicKey: org.parent.publicKey, jwtSecret: MASKED_SECRET });
  });

  it.each([
    ['neither header', {}, 400, 'MISSING_PARENT_PUBLIC_KEY'],
    ['an empty X-Public-Key', { headers: { 'x-public-key': ' ' } }, 400, 'MISSING_PARENT_PUBLIC_KEY'],
    ['a key not of the public-key shape', { publicKey: 'USR_abc' }, 400, 'INVALID_PARENT_ACCOUNT'],
    ['a well-formed unknown key', { publicKey: 'APK_unknown_42' }, 404, 'USER_NOT_FOUND'],
    ['an invalid JWT even with a valid key', { token: 'x.y.z', publicKey: 'PARENT' }, 401, 'UNAUTHORIZED'],
  ])(
    '%s: %i %s',
    async (_name, options: { token?: string; publicKey?: string; headers?: Record<string, string> }, status, code) => {
      const publicKey = options.publicKey === 'PARENT' ? org.parent.publicKey : options.publicKey;
      expectError(await rest(server(), PATH, { ...options, publicKey }), status, code);
    },
  );

  it("a child's key, or an unusable parent's key: 400 INVALID_PARENT_ACCOUNT", async () => {
    expectError(await rest(server(), PATH, { publicKey: child.publicKey }), 400, 'INVALID_PARENT_ACCOUNT');
    const locked = await createOrganization(database(), {
      parent: { status: 'locked', lockedUntil: new Date(Date.now() + 60_000) },
    });
    expectError(await rest(server(), PATH, { publicKey: locked.parent.publicKey }), 400, 'INVALID_PARENT_ACCOUNT');
  });

  it('an inactive account by JWT: 403 ACCOUNT_INACTIVE', async () => {
    const inactive = await createOrganization(database(), { parent: { status: 'inactive' } });
    expectError(
      await rest(server(), PATH, { token: await tokenFor(inactive.parent, inactive) }),
      403,
      'ACCOUNT_INACTIVE',
    );
  });

  it('each answer counts one retrieval; refusals do not', async () => {
    const fresh = await createOrganization(database());
    await Promise.all(Array.from({ length: 25 }, () => rest(server(), PATH, { publicKey: fresh.parent.publicKey })));
    await rest(server(), PATH, { token: 'bad', publicKey: fresh.parent.publicKey });
    await server().app.deps.retrievals.flush();
    const row = await database().prisma.organization.findUniqueOrThrow({ where: { parentId: fresh.parent.id } });
    expect(row.detailsRetrievalCount).toBe(25n);
  });
});
