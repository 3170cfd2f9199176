import { describe, expect, it } from 'vitest';
import { createChild, createOrganization, tokenFor } from '../helpers/builders.js';
import { useServer } from '../helpers/app.js';
import { testMode, useSharedDatabase } from '../helpers/database.js';

const ACCOUNT_FIELDS = `userID username email publicKey accountType parentAccount accountStatus emailVerified
  createdAt updatedAt lastLogin organizationName domainRestrictionEnabled emailVerificationRequired
  authProvider lastLoginProvider providerAId childSignupCount signInCount emailConfirmationCount
  providerAAuthCount providerBAuthCount providerCAuthCount providerDAuthCount lastPasswordChanged
  loginAttempts lastLoginAttempt lockedUntil lastResetPasswordRequestAt`;
const PARENT_FIELDS = `organizationUrl authUrls { signin signup } creditBalance totalFreeUsers billableChildAccounts
  totalChildAccounts packagesHistory { packageType purchaseDate creditsAdded freeUsersAdded price transactionId }
  accountBalance availableBalance providerASsoConfig { enabled clientId } lastLowCreditNotificationAt
  lastCriticalCreditNotificationAt lastDepletedCreditNotificationAt`;
const ME = `{ me { __typename ${ACCOUNT_FIELDS} ... on ParentAccount { ${PARENT_FIELDS} } } }`;

describe(`GraphQL me (${testMode})`, () => {
  const database = useSharedDatabase();
  const server = useServer(database);

  it('GraphiQL is served from the package (no CDN) outside production', async () => {
    const response = await fetch(`${server().url}/graphql`, { headers: { accept: 'text/html' } });
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/text\/html/);
    const page = await response.text();
    expect(page).toMatch(/graphiql/i);
    expect(page).not.toMatch(/unpkg\.com|cdn\.jsdelivr|esm\.sh/);
  });

  it('a parent sees every account field and the parent-only fields, as stored', async () => {
    const built = await createOrganization(database(), {
      parent: {
        lastLogin: new Date('2026-01-02T03:04:05.678Z'),
        signInCount: 42,
        childSignupCount: 3,
        providerBAuthCount: 7,
        authProvider: 'email',
        lastLoginProvider: 'email',
        lastPasswordChanged: new Date('2025-05-05T05:05:05.000Z'),
      },
      organization: {
        accountBalance: '123.45',
        availableBalance: '67.89',
        providerASsoEnabled: true,
        providerASsoClientId: 'client-123',
        domainRestrictionEnabled: false,
        emailVerificationRequired: true,
        lastLowCreditNotificationAt: new Date('2026-02-01T00:00:00.000Z'),
      },
      purchases: [
        { type: 'STARTER', at: new Date('2024-02-01T00:00:00.000Z') },
        { type: 'SCALE', at: new Date('2025-02-01T00:00:00.000Z') },
      ],
    });
    await createChild(database(), built.parent);
    await createChild(database(), built.parent, { status: 'inactive' });
    const { data, errors } = await server().graphql<{ me: Record<string, unknown> }>(ME, {
      token: await tokenFor(built.parent, built),
    });
    expect(errors).toBeUndefined();
    const p = built.parent;
    const o = built.organization;
    expect(data!.me).toEqual({
      __typename: 'ParentAccount',
      userID: p.id,
      username: p.username,
      email: p.email,
      publicKey: p.publicKey,
      accountType: 'parent',
      parentAccount: 'ROOT',
      accountStatus: 'active',
      emailVerified: true,
      createdAt: p.createdAt.toISOString(),
      updatedAt: p.updatedAt.toISOString(),
      lastLogin: '2026-01-02T03:04:05.678Z',
      organizationName: o.name,
      domainRestrictionEnabled: false,
      emailVerificationRequired: true,
      authProvider: 'email',
      lastLoginProvider: 'email',
      providerAId: null,
      childSignupCount: 3,
      signInCount: 42,
      emailConfirmationCount: 0,
      providerAAuthCount: 0,
      providerBAuthCount: 7,
      providerCAuthCount: 0,
      providerDAuthCount: 0,
      lastPasswordChanged: '2025-05-05T05:05:05.000Z',
      loginAttempts: 0,
      lastLoginAttempt: null,
      lockedUntil: null,
      lastResetPasswordRequestAt: null,
      organizationUrl: o.url,
      authUrls: { signin: o.signinUrl, signup: o.signupUrl },
      creditBalance: 130_000,
      totalFreeUsers: 16_000,
      billableChildAccounts: 0,
      totalChildAccounts: 2,
      packagesHistory: [
        expect.objectContaining({
          packageType: 'SCALE',
          purchaseDate: '2025-02-01T00:00:00.000Z',
          creditsAdded: 120000,
          freeUsersAdded: 15000,
          price: 100,
        }),
        expect.objectContaining({
          packageType: 'STARTER',
          purchaseDate: '2024-02-01T00:00:00.000Z',
          creditsAdded: 10000,
          freeUsersAdded: 1000,
          price: 10,
        }),
      ],
      accountBalance: 123.45,
      availableBalance: 67.89,
      providerASsoConfig: { enabled: true, clientId: 'client-123' },
      lastLowCreditNotificationAt: '2026-02-01T00:00:00.000Z',
      lastCriticalCreditNotificationAt: null,
      lastDepletedCreditNotificationAt: null,
    });
    const history = data!.me.packagesHistory as { transactionId: string }[];
    expect(history.every((h) => h.transactionId.startsWith('TXN_'))).toBe(true);
  });

  it('billableChildAccounts counts the children above the free-user quota', async () => {
    const built = await createOrganization(database(), { organization: { totalFreeUsers: 2 } });
    for (let i = 0; i < 5; i++) await createChild(database(), built.parent);
    const { data } = await server().graphql<{ me: { totalChildAccounts: number; billableChildAccounts: number } }>(
      '{ me { ... on ParentAccount { totalChildAccounts billableChildAccounts } } }',
      { token: await tokenFor(built.parent, built) },
    );
    expect(data!.me).toEqual({ totalChildAccounts: 5, billableChildAccounts: 3 });
  });

  it('totalChildAccounts follows inserts, deletes and moves made directly in the database', async () => {
    const a = await createOrganization(database());
    const b = await createOrganization(database());
    const total = async (built: typeof a) =>
      (
        await server().graphql<{ me: { totalChildAccounts: number } }>(
          '{ me { ... on ParentAccount { totalChildAccounts } } }',
          {
            token: await tokenFor(built.parent, built),
          },
        )
      ).data!.me.totalChildAccounts;
    await database().prisma.account.createMany({
      data: Array.from({ length: 30 }, (_, i) => ({
        id: `USR_move${i}`,
        type: 'child' as const,
        parentId: a.parent.id,
        username: `m${i}`,
        email: `m${i}@x.example`,
        publicKey: `APK_move${i}_1`,
      })),
    });
    expect(await total(a)).toBe(30);
    await database().sql.query(`DELETE FROM "Account" WHERE id IN ('USR_move0', 'USR_move1')`);
    await database().sql.query(
      `UPDATE "Account" SET "parentId" = $1 WHERE id IN ('USR_move2', 'USR_move3', 'USR_move4')`,
      [b.parent.id],
    );
    await database().sql.query(`UPDATE "Account" SET "lastLogin" = now() WHERE "parentId" = $1`, [a.parent.id]);
    expect([await total(a), await total(b)]).toEqual([25, 3]);
    const counted = await database().prisma.account.count({ where: { parentId: a.parent.id } });
    expect(counted).toBe(25);
  });

  it("a child sees its own fields, its parent's key as parentAccount, and no parent-only field", async () => {
    const built = await createOrganization(database());
    const child = await createChild(database(), built.parent, {
      lastLogin: new Date('2026-03-03T03:03:03.000Z'),
      authProvider: 'providerA',
      lastLoginProvider: 'providerA',
      providerAId: '1234567890',
      signInCount: 5,
      providerAAuthCount: 5,
      childSignupCount: 1,
      emailVerified: true,
      emailConfirmationCount: 1,
      status: 'locked',
      lockedUntil: new Date('2026-01-01T00:00:00.000Z'),
      loginAttempts: 5,
    });
    const { data, errors } = await server().graphql<{ me: Record<string, unknown> }>(ME, {
      token: await tokenFor(child, built),
    });
    expect(errors).toBeUndefined();
    expect(data!.me).toMatchObject({
      __typename: 'ChildAccount',
      userID: child.id,
      accountType: 'child',
      parentAccount: built.parent.publicKey,
      accountStatus: 'locked',
      lockedUntil: '2026-01-01T00:00:00.000Z',
      lastLogin: '2026-03-03T03:03:03.000Z',
      organizationName: built.organization.name,
      authProvider: 'providerA',
      providerAId: '1234567890',
      signInCount: 5,
      providerAAuthCount: 5,
      loginAttempts: 5,
    });
    expect(Object.keys(data!.me)).not.toContain('creditBalance');
    expect(Object.keys(data!.me)).toHaveLength(30);

    const parentOnly = await server().graphql('{ me { ... on ChildAccount { creditBalance } } }', {
      token: await tokenFor(child, built),
    });
    expect(parentOnly.errors?.[0]?.message).toMatch(/Cannot query field "creditBalance" on type "ChildAccount"/);
  });
});
