import { SignJWT, base64url } from 'jose';
import { beforeAll, describe, expect, it } from 'vitest';
import { secretKey } from '../../src/domain/signing-keys.js';
import { MASKED_SECRET } from '../../src/services/get-organization-details.js';
import type { Account } from '../../src/generated/prisma/client.js';
import { createChild, createOrganization, tokenFor, type BuiltOrganization } from '../helpers/builders.js';
import { useServer } from '../helpers/app.js';
import { testMode, useSharedDatabase } from '../helpers/database.js';

const now = () => Math.floor(Date.now() / 1000);

describe(`GraphQL authentication and authorization (${testMode})`, () => {
  const database = useSharedDatabase();
  const server = useServer(database);
  let org: BuiltOrganization;
  let other: BuiltOrganization;
  let depleted: BuiltOrganization;
  let child: Account;
  let otherChild: Account;
  let depletedChild: Account;

  beforeAll(async () => {
    org = await createOrganization(database());
    other = await createOrganization(database());
    depleted = await createOrganization(database(), { organization: { creditBalance: 0 } });
    child = await createChild(database(), org.parent);
    otherChild = await createChild(database(), other.parent);
    depletedChild = await createChild(database(), depleted.parent);
  });

  const sign = (
    claims: Record<string, unknown>,
    header: Record<string, unknown> = {},
    secret = org.organization.jwtSecret,
  ) =>
    new SignJWT(claims)
      .setProtectedHeader({ alg: 'HS256', kid: org.parent.publicKey, ...header } as { alg: string })
      .sign(secretKey(secret));

  async function code(
    query: string,
    options: { token?: string; publicKey?: string; headers?: Record<string, string> },
  ) {
    const result = await server().graphql(query, options);
    return result.errors?.[0]?.extensions?.code ?? 'OK';
  }

  const hostileTokens: [string, () => Promise<string>][] = [
    ['expired', () => sign({ sub: org.parent.id, iat: now() - 7200, exp: now() - 3600 })],
    [
      'not yet valid (nbf in the future)',
      () => sign({ sub: org.parent.id, iat: now(), exp: now() + 3600, nbf: now() + 600 }),
    ],
    [
      'signed with another secret',
      () => sign({ sub: org.parent.id, iat: now(), exp: now() + 3600 }, {}, other.organization.jwtSecret),
    ],
    [
      'alg none',
      async () => {
        const header = base64url.encode(JSON.stringify({ alg: 'none', kid: org.parent.publicKey }));
        const payload = base64url.encode(JSON.stringify({ sub: org.parent.id, iat: now(), exp: now() + 3600 }));
        return `${header}.${payload}.`;
      },
    ],
    [
      'HS512',
      () =>
        new SignJWT({ sub: org.parent.id })
          .setProtectedHeader({ alg: 'HS512', kid: org.parent.publicKey })
          .setIssuedAt()
          .setExpirationTime('1h')
          .sign(secretKey(org.organization.jwtSecret)),
    ],
    ['unknown kid', () => sign({ sub: org.parent.id, iat: now(), exp: now() + 3600 }, { kid: 'APK_unknown_123' })],
    [
      'no kid',
      () =>
        new SignJWT({ sub: org.parent.id })
          .setProtectedHeader({ alg: 'HS256' })
          .setIssuedAt()
          .setExpirationTime('1h')
          .sign(secretKey(org.organization.jwtSecret)),
    ],
    [
      'kid of a child (not an organization key)',
      () => sign({ sub: child.id, iat: now(), exp: now() + 3600 }, { kid: child.publicKey }),
    ],
    ['no exp', () => sign({ sub: org.parent.id, iat: now() })],
    ['no iat', () => sign({ sub: org.parent.id, exp: now() + 3600 })],
    ['no sub', () => sign({ iat: now(), exp: now() + 3600 })],
    ["sub of another organization's account", () => sign({ sub: otherChild.id, iat: now(), exp: now() + 3600 })],
    ['garbage', async () => 'not.a.jwt'],
  ];

  it.each(hostileTokens)('refuses a token that is %s with UNAUTHORIZED', async (_name, make) => {
    expect(await code('{ me { userID } }', { token: await make() })).toBe('UNAUTHORIZED');
    expect(
      await code('{ organization { organizationName } }', { token: await make(), publicKey: org.parent.publicKey }),
    ).toBe('UNAUTHORIZED');
  });

  it('accepts a token within the clock tolerance and any case of "Bearer"', async () => {
    const token = await sign({ sub: org.parent.id, iat: now(), exp: now() - 2 });
    expect(await code('{ me { userID } }', { token })).toBe('OK');
    const fresh = await tokenFor(org.parent, org);
    expect(await code('{ me { userID } }', { headers: { authorization: `bearer ${fresh}` } })).toBe('OK');
    expect(await code('{ me { userID } }', { headers: { authorization: `Basic ${fresh}` } })).toBe('UNAUTHORIZED');
  });

  it('no credentials: UNAUTHORIZED for me and the parent-only fields, MISSING_PARENT_PUBLIC_KEY for organization', async () => {
    expect(await code('{ me { userID } }', {})).toBe('UNAUTHORIZED');
    expect(await code('{ childAccounts { edges { cursor } } }', {})).toBe('UNAUTHORIZED');
    expect(await code('{ creditAnalysis { creditBalance } }', {})).toBe('UNAUTHORIZED');
    expect(await code('{ organization { organizationName } }', {})).toBe('MISSING_PARENT_PUBLIC_KEY');
  });

  it('a deleted account: USER_NOT_FOUND', async () => {
    const gone = await createChild(database(), org.parent);
    const token = await tokenFor(gone, org);
    await database().prisma.account.delete({ where: { id: gone.id } });
    expect(await code('{ me { userID } }', { token })).toBe('USER_NOT_FOUND');
  });

  it('inactive and locked accounts are refused; an expired lock is usable again', async () => {
    const inactive = await createChild(database(), org.parent, { status: 'inactive' });
    const locked = await createChild(database(), org.parent, {
      status: 'locked',
      lockedUntil: new Date(Date.now() + 3600_000),
    });
    const lockedForever = await createChild(database(), org.parent, { status: 'locked', lockedUntil: null });
    const unlocked = await createChild(database(), org.parent, {
      status: 'locked',
      lockedUntil: new Date(Date.now() - 1000),
    });
    expect(await code('{ me { userID } }', { token: await tokenFor(inactive, org) })).toBe('ACCOUNT_INACTIVE');
    expect(await code('{ me { userID } }', { token: await tokenFor(locked, org) })).toBe('ACCOUNT_INACTIVE');
    expect(await code('{ me { userID } }', { token: await tokenFor(lockedForever, org) })).toBe('ACCOUNT_INACTIVE');
    expect(await code('{ me { userID } }', { token: await tokenFor(unlocked, org) })).toBe('OK');
    expect(await code('{ organization { organizationName } }', { token: await tokenFor(inactive, org) })).toBe(
      'ACCOUNT_INACTIVE',
    );

    const inactiveParentOrg = await createOrganization(database(), { parent: { status: 'inactive' } });
    const token = await tokenFor(inactiveParentOrg.parent, inactiveParentOrg);
    expect(await code('{ creditAnalysis { creditBalance } }', { token })).toBe('ACCOUNT_INACTIVE');
    expect(await code('{ childAccounts { edges { cursor } } }', { token })).toBe('ACCOUNT_INACTIVE');
    expect(await code('{ organization { organizationName } }', { publicKey: inactiveParentOrg.parent.publicKey })).toBe(
      'INVALID_PARENT_ACCOUNT',
    );
  });

  it("a depleted organization's child is refused; its parent keeps access", async () => {
    const token = await tokenFor(depletedChild, depleted);
    expect(await code('{ me { userID } }', { token })).toBe('CREDITS_DEPLETED');
    expect(await code('{ organization { organizationName } }', { token })).toBe('CREDITS_DEPLETED');
    const parentToken = await tokenFor(depleted.parent, depleted);
    expect(await code('{ me { userID } creditAnalysis { alerts { depleted } } }', { token: parentToken })).toBe('OK');
  });

  it('a child on parent-only fields: UNAUTHORIZED_ACCESS', async () => {
    const token = await tokenFor(child, org);
    expect(await code('{ childAccounts { edges { cursor } } }', { token })).toBe('UNAUTHORIZED_ACCESS');
    expect(await code('{ creditAnalysis { creditBalance } }', { token })).toBe('UNAUTHORIZED_ACCESS');
    const mixed = await server().graphql<{ me: { userID: string } | null }>(
      '{ me { userID } creditAnalysis { creditBalance } }',
      { token },
    );
    // Both root fields are non-null, so one refused field nulls the whole answer.
    expect(mixed.data).toBeNull();
    expect(mixed.errors?.map((e) => [e.path?.[0], e.extensions?.code])).toEqual([
      ['creditAnalysis', 'UNAUTHORIZED_ACCESS'],
    ]);
  });

  it('a public-key caller reads organization (secret masked) but not me', async () => {
    expect(await code('{ me { userID } }', { publicKey: org.parent.publicKey })).toBe('UNAUTHORIZED');
    const result = await server().graphql<{ organization: { credentials: { publicKey: string; jwtSecret: string } } }>(
      '{ organization { credentials { publicKey jwtSecret } } }',
      { publicKey: org.parent.publicKey },
    );
    expect(result.data!.organization.credentials).toEqual({
      publicKey: org.parent.publicKey,
      jwtSecret: MASKED_SECRET,
    });
  });

  it("organization: the real secret only for the parent by JWT; a child gets its parent's organization, masked", async () => {
    const query = '{ organization { organizationName credentials { publicKey jwtSecret } } }';
    const asParent = await server().graphql<{ organization: { credentials: { jwtSecret: string } } }>(query, {
      token: await tokenFor(org.parent, org),
    });
    expect(asParent.data!.organization.credentials.jwtSecret).toBe(org.organization.jwtSecret);
    const asChild = await server().graphql<{
      organization: { organizationName: string; credentials: { publicKey: string; jwtSecret: string } };
    }>(query, { token: await tokenFor(child, org) });
    expect(asChild.data!.organization).toEqual({
      organizationName: org.organization.name,
      credentials: { publicKey: org.parent.publicKey, jwtSecret: MASKED_SECRET },
    });
  });

  it.each([
    ['not of the public-key shape', 'not-a-key', 'INVALID_PARENT_ACCOUNT'],
    ['well-formed but unknown', 'APK_nobody_1234', 'USER_NOT_FOUND'],
  ])('X-Public-Key %s: %s', async (_name, key, expected) => {
    expect(await code('{ organization { organizationName } }', { publicKey: key })).toBe(expected);
  });

  it('X-Public-Key of a child: INVALID_PARENT_ACCOUNT', async () => {
    expect(await code('{ organization { organizationName } }', { publicKey: child.publicKey })).toBe(
      'INVALID_PARENT_ACCOUNT',
    );
  });

  it('the account type comes from the database, not from token claims', async () => {
    const token = await sign({ sub: child.id, iat: now(), exp: now() + 3600, accountType: 'parent', role: 'parent' });
    expect(await code('{ creditAnalysis { creditBalance } }', { token })).toBe('UNAUTHORIZED_ACCESS');
  });
});
